//! File helpers: errors naming their file, buffered and synced writes,
//! and the manifest commit point.

use std::io::BufWriter;
use std::path::Path;

use crate::error::{Error, Result};
use crate::format::{EncodeError, FileKind, FormatError, MANIFEST_TEMP_FILE_NAME, Manifest};

use super::check::manifest_problem;
use super::fs::{FileSystem, WritableFile};
use super::lock::LockError;

pub(super) fn io_error<'a>(
    path: &'a Path,
    op: &'static str,
) -> impl FnOnce(std::io::Error) -> Error + 'a {
    move |source| Error::Io {
        path: path.to_path_buf(),
        op,
        source,
    }
}

/// [`io_error`], except that a file the manifest names but which does not
/// exist is damage to the index, not a failed call.
pub(super) fn named_file_error<'a>(
    path: &'a Path,
    op: &'static str,
) -> impl FnOnce(std::io::Error) -> Error + 'a {
    move |source| match source.kind() {
        std::io::ErrorKind::NotFound => Error::Corrupted {
            path: path.to_path_buf(),
            offset: 0,
            reason: "the manifest names this file, but it does not exist".to_string(),
        },
        _ => io_error(path, op)(source),
    }
}

/// A file whose header names another index than the manifest's.
pub(super) fn foreign(path: &Path, found: u64, index_id: u64) -> Error {
    Error::Corrupted {
        path: path.to_path_buf(),
        offset: 0,
        reason: format!(
            "the file belongs to another index (index id {found:016x}; this index is \
             {index_id:016x}): it was copied or restored into the wrong directory; put back \
             this index's own file"
        ),
    }
}

pub(super) fn corrupted(path: &Path, e: &FormatError) -> Error {
    Error::Corrupted {
        path: path.to_path_buf(),
        offset: e.offset,
        reason: e.to_string(),
    }
}

pub(super) fn lock_error(e: LockError) -> Error {
    match e {
        LockError::Locked {
            dir,
            in_this_process,
        } => Error::Locked {
            dir,
            in_this_process,
        },
        LockError::Io { path, source } => Error::Io {
            path,
            op: "lock",
            source,
        },
    }
}

/// Bytes buffered before each write to a segment or doc map file.
const WRITE_BUFFER: usize = 1 << 20;

/// A file being written, as [`std::io::Write`] for the format's encoders.
pub(super) struct FileWriter(Box<dyn WritableFile>);

impl std::io::Write for FileWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.write_all(buf)?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

pub(super) fn create_buffered(fs: &dyn FileSystem, path: &Path) -> Result<BufWriter<FileWriter>> {
    let file = fs.create_new(path).map_err(io_error(path, "create"))?;
    Ok(BufWriter::with_capacity(WRITE_BUFFER, FileWriter(file)))
}

/// Writes out what `out` still buffers, then syncs the file.
pub(super) fn sync_buffered(out: BufWriter<FileWriter>, path: &Path) -> Result<()> {
    let mut file = out
        .into_inner()
        .map_err(|e| io_error(path, "write")(e.into_error()))?;
    file.0.sync().map_err(io_error(path, "sync"))
}

/// An encoder's error while writing `path`: the file's I/O error, or an
/// invalid input.
pub(super) fn encode_error(path: &Path) -> impl FnOnce(EncodeError) -> Error + '_ {
    move |e| match e {
        EncodeError::Io(e) => io_error(path, "write")(e),
        e => Error::InvalidArgument(e.to_string()),
    }
}

/// Creates the new file `path` (never over an existing one) holding `bytes`,
/// synced. If writing fails (a full disk), the file is removed again:
/// nothing partial stays.
pub(super) fn write_file(fs: &dyn FileSystem, path: &Path, bytes: &[u8]) -> Result<()> {
    let file = fs.create_new(path).map_err(io_error(path, "create"))?;
    let written = write_all_and_sync(file, path, bytes);
    if written.is_err() {
        // Best effort: a file left behind is an orphan the next open removes.
        let _ = fs.remove(path);
    }
    written
}

fn write_all_and_sync(mut file: Box<dyn WritableFile>, path: &Path, bytes: &[u8]) -> Result<()> {
    file.write_all(bytes).map_err(io_error(path, "write"))?;
    file.sync().map_err(io_error(path, "sync"))
}

/// The commit point: the manifest is written to a temporary file, synced,
/// renamed over `MANIFEST`, and the directory synced.
/// A manifest that the next open would refuse (`check::manifest_problem`)
/// is not committed: nothing is written.
pub(super) fn commit_manifest(dir: &Path, fs: &dyn FileSystem, manifest: &Manifest) -> Result<()> {
    if let Some(reason) = manifest_problem(manifest) {
        return Err(unopenable(&reason));
    }
    let bytes = manifest
        .encode()
        .map_err(|e| Error::InvalidArgument(e.to_string()))?;
    let tmp = dir.join(MANIFEST_TEMP_FILE_NAME);
    match fs.create_new(&tmp) {
        Ok(file) => {
            if let Err(e) = write_all_and_sync(file, &tmp, &bytes) {
                // Not committed: the temporary file is debris (best effort).
                let _ = fs.remove(&tmp);
                return Err(e);
            }
        }
        // Debris of an interrupted commit: never named by the manifest, so
        // replacing it loses nothing. Removed first, since no file is ever
        // created over an existing one.
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            fs.remove(&tmp).map_err(io_error(&tmp, "remove"))?;
            write_file(fs, &tmp, &bytes)?;
        }
        Err(e) => return Err(io_error(&tmp, "create")(e)),
    }
    let path = dir.join(FileKind::Manifest.file_name(0));
    if let Err(e) = fs.rename(&tmp, &path) {
        // Not committed: the temporary file is debris (best effort).
        let _ = fs.remove(&tmp);
        return Err(io_error(&path, "rename")(e));
    }
    fs.sync_dir(dir).map_err(io_error(dir, "sync"))
}

/// Whether the committed `MANIFEST` names WAL `wal_id` (after a failed
/// commit: whether its rename went through before the failure).
pub(super) fn manifest_names_wal(dir: &Path, fs: &dyn FileSystem, wal_id: u64) -> bool {
    fs.read(&dir.join(FileKind::Manifest.file_name(0)))
        .ok()
        .and_then(|bytes| Manifest::decode(&bytes).ok())
        .is_some_and(|m| m.wal_ids.contains(&wal_id))
}

/// The refusal of a manifest that the next open would refuse, for `reason`.
pub(super) fn unopenable(reason: &str) -> Error {
    Error::InvalidArgument(format!(
        "a manifest that the next open would refuse was not committed ({reason}); nothing \
         was written"
    ))
}
