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
//!
//! Locking works on the real file system only; an engine on an in-memory file
//! system holds no lock (`Option<DirLock>`).

use std::fmt;
use std::fs::{File, OpenOptions, TryLockError};
use std::io;
use std::path::{Path, PathBuf};

/// The name of the lock file inside an index directory.
pub const LOCK_FILE: &str = "LOCK";

/// A lock on an index directory, held until dropped.
#[derive(Debug)]
pub struct DirLock {
    file: File,
    /// The directory itself, locked the same way (Unix only).
    dir_file: Option<File>,
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
        let dir_lock = lock_directory(dir, true)?;
        lock(dir, file, dir_lock, true)
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
        }),
        Err(TryLockError::Error(source)) => Err(LockError::Io {
            path: dir.join(LOCK_FILE),
            source,
        }),
    }
}

fn lock(
    dir: &Path,
    file: File,
    dir_file: Option<File>,
    exclusive: bool,
) -> Result<DirLock, LockError> {
    try_lock(dir, &file, exclusive)?;
    Ok(DirLock {
        file,
        dir_file,
        dir: dir.to_path_buf(),
        exclusive,
    })
}

impl Drop for DirLock {
    fn drop(&mut self) {
        // Closing the files releases the locks as well; unlocking first also
        // releases them when a child process inherited the descriptors.
        // Nothing useful can be done with an error here.
        let _ = self.file.unlock();
        if let Some(dir_file) = &self.dir_file {
            let _ = dir_file.unlock();
        }
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
