//! Output files of the reading tools (CSV, MCAP, PNG) that cannot destroy anything.
//!
//! An export used to open its output with `File::create`: pointed at its own input (by the
//! same name, a symbolic link or a hard link) it truncated the log it was about to read, and a
//! failed export left a truncated file behind. [`OutputFile`] instead
//! * refuses a destination that is the input file (same device and inode, links followed),
//!   whatever the caller allows;
//! * refuses a destination that already exists (file, link or anything else) unless the
//!   caller asks to replace it;
//! * refuses, even when asked to replace, a destination that is not a regular file — a
//!   directory, a character or block device, a FIFO, a socket — or a link to one: renaming
//!   a file onto `/dev/null` replaces the device node with a plain file (an export with
//!   `--force` once did), and writing into a device or FIFO instead would break the promise
//!   that an output appears only complete. So `/dev/stdout` (a link to whatever fd 1 is) is
//!   refused, and so is `-`: there is no standard-output mode, and a file literally named
//!   `-` is written as `./-`;
//! * writes into a new temporary file created exclusively (`O_EXCL`, by the `tempfile`
//!   crate) in the destination's directory, and renames it into place only on
//!   [`OutputFile::commit`] — so a failed or interrupted export leaves the destination as it
//!   was, and a link at the destination (to a regular file, or dangling) is replaced, never
//!   followed. `commit` checks the destination again just before the rename, so something
//!   that appeared there while the output was written is not replaced either.
//!
//! Must never: open the destination itself for writing, follow a link at it, replace the
//! input, or replace anything but a regular file or a link.

use std::fmt;
use std::fs::{File, Permissions};
use std::io;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Which file a path or handle is: its device and inode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileIdentity {
    dev: u64,
    ino: u64,
}

impl FileIdentity {
    /// The identity of an open file.
    pub fn of_file(file: &File) -> io::Result<Self> {
        Ok(Self::of_metadata(&file.metadata()?))
    }

    fn of_metadata(metadata: &std::fs::Metadata) -> Self {
        FileIdentity { dev: metadata.dev(), ino: metadata.ino() }
    }
}

/// Why an output could not be created or put in place. `Display` is one sentence; the
/// operating system's error of [`OutputError::Io`] is its `source()`, not repeated in it.
#[derive(Debug)]
#[non_exhaustive]
pub enum OutputError {
    /// The destination is the input (by name, or through a symbolic or hard link).
    IsInput { dest: PathBuf },
    /// The destination exists and replacing it was not asked for.
    Exists { dest: PathBuf },
    /// The destination is a directory.
    IsDirectory { dest: PathBuf },
    /// The destination is (or is a link to) a device, FIFO or socket: something an output
    /// must not replace or write into. `kind` names it ("a character device").
    NotAFile { dest: PathBuf, kind: &'static str, through_link: bool },
    /// The destination is `-`, which would mean standard output elsewhere; outputs are files.
    Dash,
    /// The directory the destination would go in does not exist (or is not a directory).
    NoDirectory { dest: PathBuf, dir: PathBuf },
    /// The destination of an output directory exists and cannot be replaced: it is not a
    /// directory holding only an earlier export's files (`why` says what it is or holds).
    NotAnExport { dest: PathBuf, why: String },
    /// The file system refused (`error`, the source).
    Io { dest: PathBuf, error: io::Error },
}

impl fmt::Display for OutputError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OutputError::IsInput { dest } => write!(
                f,
                "{} is the log being read (the same file, by this name or through a link): writing there would \
                 destroy it; choose another output path",
                dest.display()
            ),
            OutputError::Exists { dest } => {
                write!(f, "{} already exists: choose another path, or ask for it to be replaced", dest.display())
            }
            OutputError::IsDirectory { dest } => {
                write!(f, "{} is a directory: give a file path for the output", dest.display())
            }
            OutputError::NotAFile { dest, kind, through_link } => write!(
                f,
                "{} is {}{kind}, which an output never replaces or writes into (outputs are regular files put in \
                 place when complete): give a file path",
                dest.display(),
                if *through_link { "a link to " } else { "" }
            ),
            OutputError::Dash => f.write_str(
                "- does not mean standard output here (outputs are regular files put in place when complete): give \
                 a file path, ./- for a file named -",
            ),
            OutputError::NoDirectory { dest, dir } => write!(
                f,
                "cannot create {}: the directory {} does not exist; create it or choose another path",
                dest.display(),
                dir.display()
            ),
            OutputError::NotAnExport { dest, why } => write!(
                f,
                "{} {why}: an export replaces only a directory of an earlier export's files (even with --force); give \
                 a new directory",
                dest.display()
            ),
            OutputError::Io { dest, .. } => write!(f, "cannot write {}", dest.display()),
        }
    }
}

impl std::error::Error for OutputError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            OutputError::Io { error, .. } => Some(error),
            _ => None,
        }
    }
}

/// An output being written: a temporary file beside the destination until [`commit`].
///
/// Dropping it without committing deletes the temporary file and leaves the destination as
/// it was.
///
/// [`commit`]: OutputFile::commit
pub struct OutputFile {
    temp: tempfile::NamedTempFile,
    dest: PathBuf,
    input: Option<FileIdentity>,
    replace: bool,
}

impl OutputFile {
    /// Check `dest` against `input` and create the temporary file. `replace`: an existing
    /// destination may be replaced (never the input, and never anything but a regular file
    /// or a link).
    pub fn create(dest: &Path, input: Option<FileIdentity>, replace: bool) -> Result<Self, OutputError> {
        let io_error = |error: io::Error| OutputError::Io { dest: dest.to_path_buf(), error };
        if dest.as_os_str() == "-" {
            return Err(OutputError::Dash);
        }
        if check_destination(dest, input)? && !replace {
            return Err(OutputError::Exists { dest: dest.to_path_buf() });
        }
        let dir = match dest.parent() {
            Some(dir) if !dir.as_os_str().is_empty() => dir.to_path_buf(),
            _ => PathBuf::from("."),
        };
        if !std::fs::metadata(&dir).is_ok_and(|m| m.is_dir()) {
            return Err(OutputError::NoDirectory { dest: dest.to_path_buf(), dir });
        }
        let name = dest.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let temp = tempfile::Builder::new()
            .prefix(&format!(".{name}."))
            .suffix(".partial")
            // Like File::create: 0666 less the umask (tempfile's default is 0600).
            .permissions(Permissions::from_mode(0o666))
            .tempfile_in(&dir)
            .map_err(io_error)?;
        Ok(OutputFile { temp, dest: dest.to_path_buf(), input, replace })
    }

    /// The temporary file to write the output into.
    pub fn file(&mut self) -> &mut File {
        self.temp.as_file_mut()
    }

    /// The destination path.
    pub fn dest(&self) -> &Path {
        &self.dest
    }

    /// Put the finished output in place: rename the temporary file onto the destination
    /// (atomically refusing one that appeared meanwhile, unless replacing was asked for;
    /// refusing the input or anything but a regular file or link that appeared meanwhile,
    /// as [`create`](Self::create) does).
    pub fn commit(self) -> Result<(), OutputError> {
        let OutputFile { temp, dest, input, replace } = self;
        check_destination(&dest, input)?;
        let persisted = if replace { temp.persist(&dest) } else { temp.persist_noclobber(&dest) };
        match persisted {
            Ok(_) => Ok(()),
            Err(e) if e.error.kind() == io::ErrorKind::AlreadyExists => Err(OutputError::Exists { dest }),
            Err(e) => Err(OutputError::Io { dest, error: e.error }),
        }
    }
}

/// Whether `dest` exists (as anything, a dangling link included), after refusing the input,
/// a directory, and a device, FIFO or socket — at `dest` or at the end of a link there.
fn check_destination(dest: &Path, input: Option<FileIdentity>) -> Result<bool, OutputError> {
    let io_error = |error: io::Error| OutputError::Io { dest: dest.to_path_buf(), error };
    // Links not followed: what is at the path itself (a dangling link is something too).
    let here = match std::fs::symlink_metadata(dest) {
        Ok(metadata) => metadata,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(io_error(e)),
    };
    let through_link = here.file_type().is_symlink();
    // Links followed: a symbolic link to the input, or a hard link of it, is the input.
    let target = if through_link {
        match std::fs::metadata(dest) {
            Ok(metadata) => metadata,
            // Dangling: replacing the link itself is harmless.
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(true),
            // A loop of links, a permission problem on the way: report it, do not guess.
            Err(e) => return Err(io_error(e)),
        }
    } else {
        here
    };
    if input.is_some_and(|input| input == FileIdentity::of_metadata(&target)) {
        return Err(OutputError::IsInput { dest: dest.to_path_buf() });
    }
    if target.is_dir() {
        return Err(OutputError::IsDirectory { dest: dest.to_path_buf() });
    }
    if let Some(kind) = special_kind(target.file_type()) {
        return Err(OutputError::NotAFile { dest: dest.to_path_buf(), kind, through_link });
    }
    Ok(true)
}

/// What a file that is neither a regular file nor a directory is ("a FIFO (named pipe)", …).
fn special_kind(kind: std::fs::FileType) -> Option<&'static str> {
    if kind.is_dir() {
        None
    } else {
        not_a_regular_file(kind)
    }
}

/// What a file is when it is not a regular file ("a directory", "a FIFO (named pipe)", …),
/// for messages that refuse to read or write it; `None` for a regular file.
pub fn not_a_regular_file(kind: std::fs::FileType) -> Option<&'static str> {
    if kind.is_file() {
        None
    } else if kind.is_dir() {
        Some("a directory")
    } else if kind.is_char_device() {
        Some("a character device")
    } else if kind.is_block_device() {
        Some("a block device")
    } else if kind.is_fifo() {
        Some("a FIFO (named pipe)")
    } else if kind.is_socket() {
        Some("a socket")
    } else {
        Some("a special file")
    }
}
