//! Output directories (a Parquet export of every record, a dataset of many logs) that
//! appear complete or not at all, and never take anything's place but an earlier export's.
//!
//! [`OutputDir`] writes into a new temporary directory created exclusively beside the
//! destination (`.NAME.XXXXXX.partial`), whose files it creates itself (`O_EXCL`), and
//! renames it into place only on [`OutputDir::commit`] — with `RENAME_NOREPLACE`, so a
//! directory or file that appeared at the destination meanwhile is never replaced. A failed
//! or interrupted export leaves the destination as it was (and a `.partial` directory only
//! if the process was killed).
//!
//! Replacing (`--force`) is narrower than for a file: the destination must be a directory
//! (not a link to one) holding nothing but regular files with the export's extension,
//! directly or one directory down — what an earlier export wrote. Anything else there (a
//! file of another kind, a link, deeper directories) is refused, so `--force` pointed at a
//! home directory by mistake deletes nothing. The old export is moved aside, the new one
//! renamed into place, and then only the files checked are removed, one by one (never a
//! recursive delete).
//!
//! Must never: write outside its temporary directory before the commit, follow a link at
//! the destination, or delete a file it did not check is an earlier export's.

use std::fs::{self, File, Permissions};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path, PathBuf};

use crate::file::OutputError;

/// An output directory being written: a temporary directory beside the destination until
/// [`commit`](OutputDir::commit). Dropping it without committing deletes what was written.
pub struct OutputDir {
    temp: tempfile::TempDir,
    dest: PathBuf,
    replace: bool,
    /// The extension of an earlier export's files (`parquet`): what `replace` may remove.
    extension: String,
}

impl OutputDir {
    /// Check `dest` and create the temporary directory. `replace`: an existing destination
    /// may be replaced if it holds only an earlier export — regular files ending in
    /// `.extension`, directly or in subdirectories one level down.
    pub fn create(dest: &Path, replace: bool, extension: &str) -> Result<Self, OutputError> {
        if dest.as_os_str() == "-" {
            return Err(OutputError::Dash);
        }
        if dest.file_name().is_none() {
            return Err(OutputError::NotAnExport {
                dest: dest.to_path_buf(),
                why: "names no new directory (it ends in . or ..)".into(),
            });
        }
        if exists(dest)? {
            if !replace {
                return Err(OutputError::Exists { dest: dest.to_path_buf() });
            }
            earlier_export(dest, extension)?;
        }
        let dir = match dest.parent() {
            Some(dir) if !dir.as_os_str().is_empty() => dir.to_path_buf(),
            _ => PathBuf::from("."),
        };
        if !fs::metadata(&dir).is_ok_and(|m| m.is_dir()) {
            return Err(OutputError::NoDirectory { dest: dest.to_path_buf(), dir });
        }
        let name = dest.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let temp = tempfile::Builder::new()
            .prefix(&format!(".{name}."))
            .suffix(".partial")
            // Like mkdir: 0777 less the umask (tempfile's default is 0700).
            .permissions(Permissions::from_mode(0o777))
            .tempdir_in(&dir)
            .map_err(|error| OutputError::Io { dest: dest.to_path_buf(), error })?;
        Ok(OutputDir { temp, dest: dest.to_path_buf(), replace, extension: extension.to_string() })
    }

    /// The destination path.
    pub fn dest(&self) -> &Path {
        &self.dest
    }

    /// Create a new file at `relative` inside the output (its directories made as needed);
    /// `relative` must be plain names (no `..`, no root), and the file must not exist yet.
    pub fn create_file(&self, relative: &Path) -> io::Result<File> {
        if relative.as_os_str().is_empty() || !relative.components().all(|c| matches!(c, Component::Normal(_))) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{} is not a plain relative path", relative.display()),
            ));
        }
        let path = self.temp.path().join(relative);
        if let Some(parent) = path.parent() {
            fs::create_dir_all(parent)?;
        }
        File::options().write(true).create_new(true).open(path)
    }

    /// Remove a file this output created (`relative`, as given to
    /// [`create_file`](Self::create_file)): a part that is not to be kept.
    pub fn remove_file(&self, relative: &Path) -> io::Result<()> {
        if !relative.components().all(|c| matches!(c, Component::Normal(_))) {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "not a plain relative path"));
        }
        fs::remove_file(self.temp.path().join(relative))
    }

    /// Put the finished directory in place: renamed onto the destination, never replacing
    /// one that appeared meanwhile unless replacing was asked for — and then only an earlier
    /// export, checked again.
    pub fn commit(self) -> Result<(), OutputError> {
        let OutputDir { temp, dest, replace, extension } = self;
        let io_error = |error: io::Error| OutputError::Io { dest: dest.clone(), error };
        let mut old_files = None;
        if exists(&dest)? {
            if !replace {
                return Err(OutputError::Exists { dest });
            }
            let files = earlier_export(&dest, &extension)?;
            // Move the earlier export aside (onto a fresh empty directory of our own).
            let aside = tempfile::Builder::new()
                .prefix(&format!(".{}.", dest.file_name().map(|n| n.to_string_lossy()).unwrap_or_default()))
                .suffix(".old")
                .tempdir_in(dest.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new(".")))
                .map_err(io_error)?
                .keep();
            fs::rename(&dest, &aside).map_err(io_error)?;
            old_files = Some((aside, files));
        }
        let from = temp.keep();
        if let Err(error) = rename_noreplace(&from, &dest) {
            // Put the earlier export back; leave ours for the user to find.
            if let Some((aside, _)) = &old_files {
                let _ = rename_noreplace(aside, &dest);
            }
            return Err(if error.kind() == io::ErrorKind::AlreadyExists {
                OutputError::Exists { dest }
            } else {
                OutputError::Io { dest, error }
            });
        }
        if let Some((aside, files)) = old_files {
            remove_checked(&aside, &files).map_err(|error| OutputError::Io { dest: aside.clone(), error })?;
        }
        Ok(())
    }
}

/// Whether anything (a dangling link included) is at `path`.
fn exists(path: &Path) -> Result<bool, OutputError> {
    match fs::symlink_metadata(path) {
        Ok(_) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(error) => Err(OutputError::Io { dest: path.to_path_buf(), error }),
    }
}

/// The files of an earlier export at `dest` (relative paths, then its subdirectories), or
/// why `dest` is not one.
fn earlier_export(dest: &Path, extension: &str) -> Result<(Vec<PathBuf>, Vec<PathBuf>), OutputError> {
    let not = |why: String| OutputError::NotAnExport { dest: dest.to_path_buf(), why };
    let io_error = |error: io::Error| OutputError::Io { dest: dest.to_path_buf(), error };
    let here = fs::symlink_metadata(dest).map_err(io_error)?;
    if here.file_type().is_symlink() {
        return Err(not("is a link".into()));
    }
    if !here.is_dir() {
        return Err(not("is not a directory".into()));
    }
    let mut files = Vec::new();
    let mut dirs = Vec::new();
    let wanted = |name: &std::ffi::OsStr| {
        Path::new(name).extension().is_some_and(|e| e.as_bytes() == extension.as_bytes())
            && !name.as_bytes().starts_with(b".")
    };
    for entry in fs::read_dir(dest).map_err(io_error)? {
        let entry = entry.map_err(io_error)?;
        let kind = entry.file_type().map_err(io_error)?;
        let name = entry.file_name();
        if kind.is_file() && wanted(&name) {
            files.push(PathBuf::from(&name));
        } else if kind.is_dir() {
            for inner in fs::read_dir(entry.path()).map_err(io_error)? {
                let inner = inner.map_err(io_error)?;
                let inner_name = inner.file_name();
                if inner.file_type().map_err(io_error)?.is_file() && wanted(&inner_name) {
                    files.push(Path::new(&name).join(&inner_name));
                } else {
                    return Err(not(format!(
                        "holds {}, which is not a .{extension} file of an earlier export",
                        Path::new(&name).join(&inner_name).display()
                    )));
                }
            }
            dirs.push(PathBuf::from(&name));
        } else {
            return Err(not(format!(
                "holds {}, which is not a .{extension} file of an earlier export",
                Path::new(&name).display()
            )));
        }
    }
    Ok((files, dirs))
}

/// Remove the checked files and subdirectories of a moved-aside export, then the directory.
fn remove_checked(dir: &Path, (files, dirs): &(Vec<PathBuf>, Vec<PathBuf>)) -> io::Result<()> {
    for file in files {
        fs::remove_file(dir.join(file))?;
    }
    for sub in dirs {
        fs::remove_dir(dir.join(sub))?;
    }
    fs::remove_dir(dir)
}

/// rename(2) that fails with `AlreadyExists` rather than replace anything at `to`.
fn rename_noreplace(from: &Path, to: &Path) -> io::Result<()> {
    use std::ffi::CString;
    let c =
        |p: &Path| CString::new(p.as_os_str().as_bytes()).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e));
    let (c_from, c_to) = (c(from)?, c(to)?);
    // SAFETY: both are valid NUL-terminated strings that outlive the call.
    let rc = unsafe {
        libc::renameat2(libc::AT_FDCWD, c_from.as_ptr(), libc::AT_FDCWD, c_to.as_ptr(), libc::RENAME_NOREPLACE)
    };
    if rc == 0 {
        return Ok(());
    }
    let error = io::Error::last_os_error();
    match error.raw_os_error() {
        // A file system without RENAME_NOREPLACE: check, then rename (a small window only).
        Some(libc::EINVAL | libc::ENOSYS) => {
            if fs::symlink_metadata(to).is_ok() {
                return Err(io::Error::from(io::ErrorKind::AlreadyExists));
            }
            fs::rename(from, to)
        }
        _ => Err(error),
    }
}
