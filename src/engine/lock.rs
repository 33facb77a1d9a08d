//! One writer per index directory.
//!
//! A writer holds an exclusive lock on the directory's `LOCK` file, read-only
//! opens a shared one, both taken without blocking. The locks are `flock`s
//! (std's `File::try_lock`): they belong to an open file, so two locks taken
//! in one process conflict just as locks from two processes do, and the
//! operating system drops them when the process dies.
//!
//! On Unix the same lock is also taken on the directory itself. `LOCK` can
//! be deleted (or replaced) under a running writer, and a second writer
//! would then lock the new file; the directory cannot be swapped under an
//! open descriptor of it, so the second writer is refused all the same.
//! A reader therefore needs no `LOCK` file on Unix: where there is none, it
//! locks the directory only and creates nothing, so that an index on a
//! read-only file system (a restored snapshot, a read-only mount) can be
//! read. Elsewhere a reader creates `LOCK` when it is missing.
//!
//! The locks this process holds are also listed in memory (with the id of
//! the process that took them), so that a conflict can say whether the
//! holder is another lock of this process or another process.
//!
//! [`Index::open_read_only`](crate::Index::open_read_only) takes no lock
//! (readers open beside a writer, docs/ARCHITECTURE.md, "Readers beside a
//! writer"); [`DirLock::shared`] remains for a tool that must keep writers
//! out while it works.
//!
//! Locking works on the real file system only; an engine on an in-memory file
//! system holds no lock (`Option<DirLock>`).

use std::fmt;
use std::fs::{File, OpenOptions, TryLockError};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

/// The name of the lock file inside an index directory.
pub const LOCK_FILE: &str = "LOCK";

/// A lock on an index directory, held until dropped.
#[derive(Debug)]
pub struct DirLock {
    /// `LOCK`, locked; `None` for a Unix reader where there is no `LOCK`.
    file: Option<File>,
    /// The directory itself, locked the same way (Unix only).
    dir_file: Option<File>,
    dir: PathBuf,
    exclusive: bool,
    /// This lock's entry in [`HELD`], if the directory could be identified.
    held: Option<Held>,
}

impl DirLock {
    /// Takes the writer's lock on `dir`, which must exist. Creates the `LOCK`
    /// file if needed. Fails with [`LockError::Locked`] if any other lock,
    /// shared or exclusive, is held.
    pub fn exclusive(dir: &Path) -> Result<DirLock, LockError> {
        let path = dir.join(LOCK_FILE);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|source| LockError::Io { path, source })?;
        let dir_lock = lock_directory(dir, true)?;
        lock(dir, Some(file), dir_lock, true)
    }

    /// Takes a reader's lock on `dir`, which must exist. Fails with
    /// [`LockError::Locked`] if a writer holds the exclusive lock.
    ///
    /// Opens `LOCK` read-only, so a reader needs no write permission once the
    /// file exists. Where it does not, a reader on Unix locks the directory
    /// alone (which a writer locks too) and creates nothing, so an index on
    /// a read-only file system can be read; elsewhere it creates `LOCK`.
    pub fn shared(dir: &Path) -> Result<DirLock, LockError> {
        let path = dir.join(LOCK_FILE);
        let file = match File::open(&path) {
            Ok(file) => Some(file),
            Err(err) if err.kind() == io::ErrorKind::NotFound && cfg!(unix) => None,
            Err(err) if err.kind() == io::ErrorKind::NotFound => Some(
                OpenOptions::new()
                    .read(true)
                    .write(true)
                    .create(true)
                    .truncate(false)
                    .open(&path)
                    .map_err(|source| LockError::Io { path, source })?,
            ),
            Err(source) => return Err(LockError::Io { path, source }),
        };
        let dir_lock = lock_directory(dir, false)?;
        lock(dir, file, dir_lock, false)
    }

    /// The directory, as given when locking.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Whether this is the writer's (exclusive) lock.
    pub fn is_exclusive(&self) -> bool {
        self.exclusive
    }
}

/// Locks the directory itself, where a directory can be opened as a file.
#[cfg(unix)]
fn lock_directory(dir: &Path, exclusive: bool) -> Result<Option<File>, LockError> {
    let file = File::open(dir).map_err(|source| LockError::Io {
        path: dir.join(LOCK_FILE),
        source,
    })?;
    try_lock(dir, &file, exclusive)?;
    Ok(Some(file))
}

#[cfg(not(unix))]
fn lock_directory(_dir: &Path, _exclusive: bool) -> Result<Option<File>, LockError> {
    Ok(None)
}

fn try_lock(dir: &Path, file: &File, exclusive: bool) -> Result<(), LockError> {
    let locked = if exclusive {
        file.try_lock()
    } else {
        file.try_lock_shared()
    };
    match locked {
        Ok(()) => Ok(()),
        Err(TryLockError::WouldBlock) => Err(LockError::Locked {
            dir: dir.to_path_buf(),
            in_this_process: identify(dir).is_some_and(held_here),
        }),
        Err(TryLockError::Error(source)) => Err(LockError::Io {
            path: dir.join(LOCK_FILE),
            source,
        }),
    }
}

fn lock(
    dir: &Path,
    file: Option<File>,
    dir_file: Option<File>,
    exclusive: bool,
) -> Result<DirLock, LockError> {
    if let Some(file) = &file {
        try_lock(dir, file, exclusive)?;
    }
    let held = identify(dir).map(|key| {
        let held = Held {
            key,
            pid: std::process::id(),
        };
        HELD.lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(held.clone());
        held
    });
    Ok(DirLock {
        file,
        dir_file,
        dir: dir.to_path_buf(),
        exclusive,
        held,
    })
}

impl Drop for DirLock {
    fn drop(&mut self) {
        // Closing the files releases the locks as well; unlocking first also
        // releases them when a child process inherited the descriptors.
        // Nothing useful can be done with an error here.
        if let Some(file) = &self.file {
            let _ = file.unlock();
        }
        if let Some(dir_file) = &self.dir_file {
            let _ = dir_file.unlock();
        }
        if let Some(held) = &self.held {
            let mut list = HELD.lock().unwrap_or_else(PoisonError::into_inner);
            if let Some(i) = list.iter().position(|h| h == held) {
                list.swap_remove(i);
            }
        }
    }
}

/// A directory, as the operating system identifies it (whatever path names
/// it): device and inode on Unix, the canonical path elsewhere.
#[derive(Clone, Debug, PartialEq, Eq)]
enum DirKey {
    #[cfg(unix)]
    Inode(u64, u64),
    #[cfg(not(unix))]
    Path(PathBuf),
}

/// One lock taken through [`DirLock`] in this process (or, in a child
/// process, inherited from its parent: `pid` says which).
#[derive(Clone, Debug, PartialEq, Eq)]
struct Held {
    key: DirKey,
    /// The process that took the lock.
    pid: u32,
}

/// Every lock [`DirLock`] holds in this process's memory.
static HELD: Mutex<Vec<Held>> = Mutex::new(Vec::new());

#[cfg(unix)]
fn identify(dir: &Path) -> Option<DirKey> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(dir).ok()?;
    Some(DirKey::Inode(meta.dev(), meta.ino()))
}

#[cfg(not(unix))]
fn identify(dir: &Path) -> Option<DirKey> {
    std::fs::canonicalize(dir).ok().map(DirKey::Path)
}

/// Whether this process took a lock on the directory `key`.
fn held_here(key: DirKey) -> bool {
    let pid = std::process::id();
    HELD.lock()
        .unwrap_or_else(PoisonError::into_inner)
        .iter()
        .any(|h| h.key == key && h.pid == pid)
}

/// Why a directory could not be locked.
#[derive(Debug)]
pub enum LockError {
    /// Another writer (or, for a writer, a reader) holds the directory,
    /// in this process or another.
    Locked {
        /// The directory, as given.
        dir: PathBuf,
        /// Whether the holder is another lock taken in this process.
        in_this_process: bool,
    },
    /// The lock file could not be opened or locked.
    Io {
        /// The lock file.
        path: PathBuf,
        /// The underlying error.
        source: io::Error,
    },
}

impl fmt::Display for LockError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LockError::Locked {
                dir,
                in_this_process,
            } => write!(f, "{}", locked_message(dir, *in_this_process)),
            LockError::Io { path, source } => {
                write!(f, "cannot lock {}: {source}", path.display())
            }
        }
    }
}

impl std::error::Error for LockError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            LockError::Locked { .. } => None,
            LockError::Io { source, .. } => Some(source),
        }
    }
}

/// The message of a lock conflict, shared with [`crate::Error::Locked`].
pub(crate) fn locked_message(dir: &Path, in_this_process: bool) -> String {
    if in_this_process {
        format!(
            "index at {} is already open in this process (another open index holds its \
             lock): close that one first, or use it",
            dir.display()
        )
    } else {
        format!("index at {} is locked by another process", dir.display())
    }
}
