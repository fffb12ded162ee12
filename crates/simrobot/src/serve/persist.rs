//! Where `rtloop sim --config-dir DIR` keeps each simulated servo's configuration, as a board
//! keeps it in flash: `DIR/bus<B>-servo<ID>.cfg`, one `key value` line per item (the text
//! `conf write` stores and `conf enumerate` prints).
//!
//! What it is for: [`ConfigDir::open`] checks the directory once; [`ConfigStore::load_into`]
//! powers the servos of one bus up with their stored files (bad lines are reported and
//! skipped, the rest applied — a stored `id.id` takes effect); [`ConfigWriter`] writes what
//! `conf write` asks to store, on a thread of its own, so the serving loop never waits for a
//! disk. `ID` is the servo's *slot*, the id it was given on the command line: a servo whose
//! stored configuration moves it to another id keeps its file's name.
//!
//! What it must never do: follow a symlink it did not create or write through one (files are
//! opened relative to the directory's descriptor with `O_NOFOLLOW`; a new file is a temporary
//! created with `O_CREAT | O_EXCL | O_NOFOLLOW`, synced, and renamed over the target, which
//! replaces a link rather than following it); read anything but a regular file of bounded
//! size (a FIFO is never waited on); leave a temporary file behind on an error; or let a
//! failed write stop the simulator (it is counted and reported).

use std::collections::BTreeMap;
use std::fmt;
use std::io::Write;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;

use nix::errno::Errno;
use nix::fcntl::{self, OFlag};
use nix::sys::stat::{self, Mode, SFlag};

/// The largest configuration file read, bytes. A real board's full configuration is a few
/// tens of kilobytes of text.
pub const MAX_CONFIG_BYTES: u64 = 1024 * 1024;

/// The name of the file that keeps the configuration of slot `slot` on bus `bus`.
pub fn config_file_name(bus: u8, slot: u8) -> String {
    format!("bus{bus}-servo{slot}.cfg")
}

/// The directory the configurations live in, opened once.
#[derive(Debug)]
pub struct ConfigDir {
    path: PathBuf,
    fd: OwnedFd,
}

/// Temporary names already used by this process (with the pid, unique across processes).
static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// Why a configuration directory, file or write failed. `path` is the directory
/// (`--config-dir`) or the file, as the user would look for it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigStoreError {
    /// `--config-dir` with an empty path.
    #[error("--config-dir is empty; give the directory the configurations are kept in")]
    EmptyPath,
    /// The directory does not exist.
    #[error("--config-dir {} does not exist; create it first (mkdir -p {})", .path.display(), .path.display())]
    NoDirectory {
        /// The directory.
        path: PathBuf,
    },
    /// The path is not a directory.
    #[error("--config-dir {} is not a directory; give a directory", .path.display())]
    NotADirectory {
        /// The path.
        path: PathBuf,
    },
    /// The directory cannot be opened.
    #[error("--config-dir {}: cannot open it: {source}", .path.display())]
    CannotOpen {
        /// The directory.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The directory is not writable.
    #[error("--config-dir {} is not writable ({source}); give a directory you can write in", .path.display())]
    NotWritable {
        /// The directory.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A configuration file is a symbolic link.
    #[error(
        "{} is a symbolic link; the simulator only reads configuration files it wrote itself: remove the link",
        .path.display()
    )]
    Link {
        /// The file.
        path: PathBuf,
    },
    /// A configuration file cannot be read.
    #[error("cannot read {}: {source}", .path.display())]
    CannotRead {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A configuration file that is not a regular file.
    #[error("{} is not a regular file; remove it or choose another --config-dir", .path.display())]
    NotRegular {
        /// The file.
        path: PathBuf,
    },
    /// A configuration file larger than [`MAX_CONFIG_BYTES`].
    #[error(
        "{} is {size} bytes, more than a configuration can be ({MAX_CONFIG_BYTES}); remove it or choose another --config-dir",
        .path.display()
    )]
    TooBig {
        /// The file.
        path: PathBuf,
        /// Its size, bytes.
        size: u64,
    },
    /// A configuration file grew past [`MAX_CONFIG_BYTES`] while it was read.
    #[error("{} grew past {MAX_CONFIG_BYTES} bytes while it was read; remove it", .path.display())]
    Grew {
        /// The file.
        path: PathBuf,
    },
    /// A configuration file that is not UTF-8 text.
    #[error("{} is not text; remove it or choose another --config-dir", .path.display())]
    NotText {
        /// The file.
        path: PathBuf,
    },
    /// Writing the temporary file failed.
    #[error("cannot write {}: {source}", .path.display())]
    CannotWrite {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A step of replacing the file failed: `what` is `create a temporary file to write`,
    /// `replace` or `sync the directory of`.
    #[error("cannot {what} {}: {source}", .path.display())]
    Store {
        /// The step.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A bus with another number of servos than configuration slots (a bug in the caller).
    #[error("bus {bus}: {servos} servos but {slots} configuration slots; this is a bug in the caller")]
    SlotMismatch {
        /// The bus.
        bus: u8,
        /// Servos on it.
        servos: usize,
        /// Slots given.
        slots: usize,
    },
    /// The writer thread is gone.
    #[error("the configuration writer thread has stopped")]
    WriterStopped,
    /// [`ConfigWriter::finish`] was called already.
    #[error("the configuration writer has finished")]
    WriterFinished,
}

impl ConfigDir {
    /// Open `path`, which must be an existing directory this process may write in. The
    /// error is one sentence naming `--config-dir` and saying how to fix it.
    pub fn open(path: &Path) -> Result<ConfigDir, ConfigStoreError> {
        if path.as_os_str().is_empty() {
            return Err(ConfigStoreError::EmptyPath);
        }
        let owned = || path.to_path_buf();
        let fd =
            fcntl::open(path, OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC, Mode::empty()).map_err(|e| {
                match e {
                    Errno::ENOENT => ConfigStoreError::NoDirectory { path: owned() },
                    Errno::ENOTDIR => ConfigStoreError::NotADirectory { path: owned() },
                    e => ConfigStoreError::CannotOpen { path: owned(), source: e.into() },
                }
            })?;
        if let Err(e) = nix::unistd::access(path, nix::unistd::AccessFlags::W_OK | nix::unistd::AccessFlags::X_OK) {
            return Err(ConfigStoreError::NotWritable { path: owned(), source: e.into() });
        }
        Ok(ConfigDir { path: owned(), fd })
    }

    /// The directory as the user named it.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The stored text of `name`, `None` when there is no such file. A link, a non-regular
    /// file, an oversized file or one that is not text is an error (one sentence).
    pub fn load(&self, name: &str) -> Result<Option<String>, ConfigStoreError> {
        let path = self.path.join(name);
        let cannot_read = |source: std::io::Error| ConfigStoreError::CannotRead { path: path.clone(), source };
        // O_NONBLOCK: a FIFO planted here must not hang the start.
        let flags = OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC;
        let fd = match fcntl::openat(&self.fd, name, flags, Mode::empty()) {
            Ok(fd) => fd,
            Err(Errno::ENOENT) => return Ok(None),
            Err(Errno::ELOOP) => return Err(ConfigStoreError::Link { path }),
            Err(e) => return Err(cannot_read(e.into())),
        };
        let st = stat::fstat(&fd).map_err(|e| cannot_read(e.into()))?;
        if SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT != SFlag::S_IFREG {
            return Err(ConfigStoreError::NotRegular { path });
        }
        let size = u64::try_from(st.st_size).unwrap_or(0);
        if size > MAX_CONFIG_BYTES {
            return Err(ConfigStoreError::TooBig { path, size });
        }
        let mut bytes = Vec::new();
        let mut file = std::fs::File::from(fd);
        use std::io::Read;
        (&mut file).take(MAX_CONFIG_BYTES + 1).read_to_end(&mut bytes).map_err(cannot_read)?;
        if bytes.len() as u64 > MAX_CONFIG_BYTES {
            return Err(ConfigStoreError::Grew { path });
        }
        String::from_utf8(bytes).map(Some).map_err(|_| ConfigStoreError::NotText { path })
    }

    /// Replace `name` with `text`: a temporary file created exclusively beside it, written,
    /// synced and renamed over it, then the directory synced. Whatever was at `name` — a file,
    /// a link — is replaced, never followed. On error nothing is left behind.
    pub fn store(&self, name: &str, text: &str) -> Result<(), ConfigStoreError> {
        let path = self.path.join(name);
        let os = |what: &'static str, e: Errno| ConfigStoreError::Store { what, path: path.clone(), source: e.into() };
        let flags = OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        let mode = Mode::from_bits_truncate(0o644);
        let mut attempt = 0;
        let (temp, fd) = loop {
            let n = TEMP_COUNTER.fetch_add(1, Ordering::Relaxed);
            let temp = format!(".{name}.tmp-{}-{n}", std::process::id());
            match fcntl::openat(&self.fd, temp.as_str(), flags, mode) {
                Ok(fd) => break (temp, fd),
                // Someone else's file by that name: never touched, another name is tried.
                Err(Errno::EEXIST) if attempt < 16 => attempt += 1,
                Err(e) => return Err(os("create a temporary file to write", e)),
            }
        };
        let result = (|| {
            let cannot_write = |source| ConfigStoreError::CannotWrite { path: path.clone(), source };
            let mut file = std::fs::File::from(fd);
            file.write_all(text.as_bytes()).map_err(cannot_write)?;
            file.sync_all().map_err(cannot_write)?;
            drop(file);
            fcntl::renameat(&self.fd, temp.as_str(), &self.fd, name).map_err(|e| os("replace", e))?;
            Ok(())
        })();
        if result.is_err() {
            let _ = nix::unistd::unlinkat(&self.fd, temp.as_str(), nix::unistd::UnlinkatFlags::NoRemoveDir);
            return result;
        }
        // The rename is durable once the directory is; a failure here is reported too.
        nix::unistd::fsync(&self.fd).map_err(|e| os("sync the directory of", e))
    }
}

/// The stored configurations of one served bus: which file belongs to which servo.
#[derive(Debug, Clone)]
pub struct ConfigStore {
    dir: Arc<ConfigDir>,
    bus: u8,
    /// Slot (command-line id) of each servo, in the bus's servo order.
    slots: Vec<u8>,
}

/// What [`ConfigStore::load_into`] found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LoadReport {
    /// Slots whose file was loaded.
    pub loaded: Vec<u8>,
    /// One sentence per line that could not be applied: `FILE:LINE: why`.
    pub warnings: Vec<String>,
    /// (slot, id) of every servo whose stored configuration gave it another id.
    pub renamed: Vec<(u8, u8)>,
}

impl ConfigStore {
    /// The store of bus `bus` in `dir`; `slots` are the ids given on the command line, in the
    /// order the servos were added to the bus.
    pub fn new(dir: Arc<ConfigDir>, bus: u8, slots: Vec<u8>) -> Self {
        ConfigStore { dir, bus, slots }
    }

    /// The directory.
    pub fn dir(&self) -> &Arc<ConfigDir> {
        &self.dir
    }

    /// The bus number.
    pub fn bus(&self) -> u8 {
        self.bus
    }

    /// The file name of the servo at `index` on the bus.
    pub fn file_name(&self, index: usize) -> Option<String> {
        self.slots.get(index).map(|&slot| config_file_name(self.bus, slot))
    }

    /// The path of the servo at `index`, for messages.
    pub fn file_path(&self, index: usize) -> Option<PathBuf> {
        self.file_name(index).map(|n| self.dir.path().join(n))
    }

    /// Power every servo of `bus` that has a stored file up with it. A file that cannot be
    /// read at all is an error (one sentence); lines that cannot be applied are warnings.
    pub fn load_into(&self, bus: &mut rtloop_sim::SimBus) -> Result<LoadReport, ConfigStoreError> {
        let servos = bus.servos_mut();
        if servos.len() != self.slots.len() {
            return Err(ConfigStoreError::SlotMismatch {
                bus: self.bus,
                servos: servos.len(),
                slots: self.slots.len(),
            });
        }
        let mut report = LoadReport::default();
        for (servo, &slot) in servos.iter_mut().zip(&self.slots) {
            let name = config_file_name(self.bus, slot);
            let Some(text) = self.dir.load(&name)? else { continue };
            let shown = self.dir.path().join(&name);
            for (line, why) in servo.load_stored_config(&text) {
                report.warnings.push(format!("{}:{line}: {why}; the line was skipped", shown.display()));
            }
            report.loaded.push(slot);
            if servo.id() != slot {
                report.renamed.push((slot, servo.id()));
            }
        }
        Ok(report)
    }
}

/// How the stored configurations of one bus fared while serving.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StoreCounts {
    /// Files written.
    pub written: u64,
    /// Writes that failed.
    pub failed: u64,
    /// The first failure, as text.
    pub first_error: Option<String>,
}

/// One write for the writer thread: bus index (in the served list), directory, file, text.
type Job = (usize, Arc<ConfigDir>, String, String);

/// Writes stored configurations on a thread of its own, in the order asked; joined (every
/// write done) by [`ConfigWriter::finish`], which says how each bus fared.
#[derive(Debug)]
pub struct ConfigWriter {
    jobs: Option<mpsc::Sender<Job>>,
    thread: Option<JoinHandle<BTreeMap<usize, StoreCounts>>>,
}

impl ConfigWriter {
    /// Start the thread (`rtloop-config`).
    pub fn start() -> std::io::Result<ConfigWriter> {
        let (tx, rx) = mpsc::channel::<Job>();
        let thread = std::thread::Builder::new().name("rtloop-config".into()).spawn(move || {
            let mut counts: BTreeMap<usize, StoreCounts> = BTreeMap::new();
            for (bus, dir, name, text) in rx {
                let entry = counts.entry(bus).or_default();
                match dir.store(&name, &text) {
                    Ok(()) => entry.written += 1,
                    Err(e) => {
                        entry.failed += 1;
                        entry.first_error.get_or_insert(e.to_string());
                    }
                }
            }
            counts
        })?;
        Ok(ConfigWriter { jobs: Some(tx), thread: Some(thread) })
    }

    /// Queue a write of `text` to `name` in `dir` for bus index `bus`. Never waits.
    pub fn submit(&self, bus: usize, dir: &Arc<ConfigDir>, name: String, text: String) -> Result<(), ConfigStoreError> {
        match &self.jobs {
            Some(tx) => tx.send((bus, Arc::clone(dir), name, text)).map_err(|_| ConfigStoreError::WriterStopped),
            None => Err(ConfigStoreError::WriterFinished),
        }
    }

    /// Wait for every queued write and return the counts per bus index.
    pub fn finish(mut self) -> BTreeMap<usize, StoreCounts> {
        self.jobs = None;
        match self.thread.take().map(JoinHandle::join) {
            Some(Ok(counts)) => counts,
            // The writer panicked: say so rather than invent counts.
            Some(Err(panic)) => std::panic::resume_unwind(panic),
            None => BTreeMap::new(),
        }
    }
}

impl Drop for ConfigWriter {
    fn drop(&mut self) {
        self.jobs = None;
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl fmt::Display for StoreCounts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} written, {} failed", self.written, self.failed)?;
        if let Some(e) = &self.first_error {
            write!(f, " (first: {e})")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir() -> (tempfile::TempDir, ConfigDir) {
        let t = tempfile::tempdir().unwrap();
        let d = ConfigDir::open(t.path()).unwrap();
        (t, d)
    }

    #[test]
    fn store_then_load_round_trips_and_leaves_no_temporary() {
        let (t, d) = dir();
        assert_eq!(d.load("bus1-servo1.cfg").unwrap(), None);
        d.store("bus1-servo1.cfg", "id.id 1\n").unwrap();
        d.store("bus1-servo1.cfg", "id.id 5\n").unwrap();
        assert_eq!(d.load("bus1-servo1.cfg").unwrap().as_deref(), Some("id.id 5\n"));
        let names: Vec<_> = std::fs::read_dir(t.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names, ["bus1-servo1.cfg"]);
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(t.path().join("bus1-servo1.cfg")).unwrap().permissions().mode();
        assert_eq!(mode & 0o600, 0o600);
    }

    #[test]
    fn a_link_is_replaced_never_followed_and_never_read() {
        let (t, d) = dir();
        let victim = t.path().join("victim");
        std::fs::write(&victim, "precious").unwrap();
        let link = t.path().join("bus1-servo2.cfg");
        std::os::unix::fs::symlink(&victim, &link).unwrap();
        let e = d.load("bus1-servo2.cfg").unwrap_err();
        assert!(matches!(&e, ConfigStoreError::Link { path } if *path == link), "{e:?}");
        assert!(e.to_string().contains("symbolic link"), "{e}");
        d.store("bus1-servo2.cfg", "id.id 2\n").unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
        assert!(!std::fs::symlink_metadata(&link).unwrap().file_type().is_symlink());
        assert_eq!(std::fs::read_to_string(&link).unwrap(), "id.id 2\n");
    }

    #[test]
    fn a_fifo_or_directory_is_refused_without_waiting() {
        let (t, d) = dir();
        nix::unistd::mkfifo(&t.path().join("bus1-servo3.cfg"), Mode::from_bits_truncate(0o600)).unwrap();
        let e = d.load("bus1-servo3.cfg").unwrap_err();
        assert!(matches!(&e, ConfigStoreError::NotRegular { path } if path.ends_with("bus1-servo3.cfg")), "{e:?}");
        assert!(e.to_string().contains("not a regular file"), "{e}");
        std::fs::create_dir(t.path().join("bus1-servo4.cfg")).unwrap();
        assert!(d.load("bus1-servo4.cfg").is_err());
        // Writing over a directory fails, is reported, and leaves no temporary behind.
        assert!(d.store("bus1-servo4.cfg", "x\n").is_err());
        let mut names: Vec<_> =
            std::fs::read_dir(t.path()).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
        names.sort();
        assert_eq!(names, ["bus1-servo3.cfg", "bus1-servo4.cfg"]);
    }

    #[test]
    fn open_refuses_a_missing_directory_and_a_file_in_one_sentence() {
        let t = tempfile::tempdir().unwrap();
        let missing = t.path().join("nope");
        let e = ConfigDir::open(&missing).unwrap_err();
        assert!(matches!(&e, ConfigStoreError::NoDirectory { path } if *path == missing), "{e:?}");
        let e = e.to_string();
        assert!(e.contains("does not exist") && e.contains("mkdir -p"), "{e}");
        let file = t.path().join("file");
        std::fs::write(&file, "").unwrap();
        let e = ConfigDir::open(&file).unwrap_err().to_string();
        assert!(e.contains("is not a directory"), "{e}");
        assert_eq!(e.lines().count(), 1);
    }

    #[test]
    fn the_writer_thread_counts_successes_and_failures_per_bus() {
        let (t, d) = dir();
        let d = Arc::new(d);
        std::fs::create_dir(t.path().join("bus2-servo1.cfg")).unwrap();
        let w = ConfigWriter::start().unwrap();
        w.submit(0, &d, "bus1-servo1.cfg".into(), "a 1\n".into()).unwrap();
        w.submit(1, &d, "bus2-servo1.cfg".into(), "a 1\n".into()).unwrap();
        let counts = w.finish();
        assert_eq!(counts[&0].written, 1);
        assert_eq!(counts[&1].failed, 1);
        assert!(counts[&1].first_error.as_deref().unwrap().contains("bus2-servo1.cfg"));
    }
}
