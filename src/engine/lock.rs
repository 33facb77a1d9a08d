//! One writer per index directory.
//!
//! A writer holds an exclusive lock on the directory's `LOCK` file, read-only
//! opens a shared one, both taken without blocking. The locks are `flock`s
//! (through `fs2`): they belong to an open file, so two locks taken in one
//! process conflict just as locks from two processes do, and the operating
//! system drops them when the process dies.
//!
//! Locking works on the real file system only; an engine on an in-memory file
//! system holds no lock (`Option<DirLock>`).

use std::fmt;
use std::fs::{File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};

/// The name of the lock file inside an index directory.
pub const LOCK_FILE: &str = "LOCK";

/// A lock on an index directory, held until dropped.
#[derive(Debug)]
pub struct DirLock {
    file: File,
    dir: PathBuf,
    exclusive: bool,
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
        lock(dir, file, true)
    }

    /// Takes a reader's lock on `dir`, which must exist. Fails with
    /// [`LockError::Locked`] if a writer holds the exclusive lock.
    ///
    /// Opens `LOCK` read-only, so a reader needs no write permission once the
    /// file exists; creates it otherwise.
    pub fn shared(dir: &Path) -> Result<DirLock, LockError> {
        let path = dir.join(LOCK_FILE);
        let file = match File::open(&path) {
            Err(err) if err.kind() == io::ErrorKind::NotFound => OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .open(&path),
            opened => opened,
        }
        .map_err(|source| LockError::Io { path, source })?;
        lock(dir, file, false)
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

fn lock(dir: &Path, file: File, exclusive: bool) -> Result<DirLock, LockError> {
    // Called through the trait by name: newer std has inherent `File` locking
    // methods with other signatures that would shadow these.
    let locked = if exclusive {
        fs2::FileExt::try_lock_exclusive(&file)
    } else {
        fs2::FileExt::try_lock_shared(&file)
    };
    match locked {
        Ok(()) => Ok(DirLock {
            file,
            dir: dir.to_path_buf(),
            exclusive,
        }),
        Err(err) if is_contended(&err) => Err(LockError::Locked {
            dir: dir.to_path_buf(),
        }),
        Err(source) => Err(LockError::Io {
            path: dir.join(LOCK_FILE),
            source,
        }),
    }
}

fn is_contended(err: &io::Error) -> bool {
    err.kind() == io::ErrorKind::WouldBlock
        || err.raw_os_error() == fs2::lock_contended_error().raw_os_error()
}

impl Drop for DirLock {
    fn drop(&mut self) {
        // Closing the file releases the lock as well; unlocking first also
        // releases it when a child process inherited the descriptor. Nothing
        // useful can be done with an error here.
        let _ = fs2::FileExt::unlock(&self.file);
    }
}

/// Why a directory could not be locked.
#[derive(Debug)]
pub enum LockError {
    /// Another writer (or, for a writer, a reader) holds the directory,
    /// in this process or another.
    Locked {
        /// The directory, as given.
        dir: PathBuf,
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
            LockError::Locked { dir } => {
                write!(f, "index at {} is locked by another process", dir.display())
            }
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
