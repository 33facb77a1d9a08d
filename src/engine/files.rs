//! File helpers: errors naming their file, buffered and synced writes,
//! and the manifest commit point.

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

/// Bytes buffered before each write to a segment or doc map file, and
/// the file offsets its writes end at: whole 2 MiB pieces at 2 MiB
/// offsets (the last one shorter). A file system with large page-cache
/// folios (ext4 and XFS on recent Linux) then keeps the new file in 2 MiB
/// folios, which a mapping maps 2 MiB at a time (one page-table entry, one
/// fault) instead of 4 KiB: the first queries after an open take about
/// 1/500th of the page faults and `MADV_POPULATE_READ` maps the file three
/// times as fast (docs/BENCHMARKS.md, "Segment files written in 2 MiB
/// pieces"). Writes of 1 MiB at offsets that are not multiples of 1 MiB
/// left most of a 50 M segment in folios of 4 to 512 KiB.
const WRITE_BUFFER: usize = 2 << 20;

/// A new segment or doc map file being written through a buffer: every
/// write to the file but the last ends at a multiple of [`WRITE_BUFFER`]
/// from its start, as [`create_buffered`] creates it empty.
pub(super) struct BufferedFile {
    file: Box<dyn WritableFile>,
    buf: Vec<u8>,
    /// Bytes written to the file so far.
    written: usize,
}

impl BufferedFile {
    /// Writes out what is buffered.
    fn write_buffered(&mut self) -> std::io::Result<()> {
        if !self.buf.is_empty() {
            self.file.write_all(&self.buf)?;
            self.written += self.buf.len();
            self.buf.clear();
        }
        Ok(())
    }
}

impl std::io::Write for BufferedFile {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        // Bytes up to the next piece boundary of the file.
        let room = WRITE_BUFFER - (self.written + self.buf.len()) % WRITE_BUFFER;
        if self.buf.is_empty() && data.len() >= room {
            // Straight to the file, up to the last boundary in `data`.
            let n = room + (data.len() - room) / WRITE_BUFFER * WRITE_BUFFER;
            let whole = data.get(..n).unwrap_or(data);
            self.file.write_all(whole)?;
            self.written += whole.len();
            return Ok(whole.len());
        }
        let n = data.len().min(room);
        self.buf.extend_from_slice(data.get(..n).unwrap_or(data));
        if n == room {
            self.write_buffered()?;
        }
        Ok(n)
    }

    /// Writes out what is buffered: the next piece then ends at the next
    /// boundary, whatever it starts at.
    fn flush(&mut self) -> std::io::Result<()> {
        self.write_buffered()
    }
}

pub(super) fn create_buffered(fs: &dyn FileSystem, path: &Path) -> Result<BufferedFile> {
    let file = fs.create_new(path).map_err(io_error(path, "create"))?;
    Ok(BufferedFile {
        file,
        buf: Vec::with_capacity(WRITE_BUFFER),
        written: 0,
    })
}

/// Writes out what `out` still buffers, then syncs the file.
pub(super) fn sync_buffered(mut out: BufferedFile, path: &Path) -> Result<()> {
    out.write_buffered().map_err(io_error(path, "write"))?;
    out.file.sync().map_err(io_error(path, "sync"))
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

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::io::Write;
    use std::sync::{Arc, Mutex};

    use super::*;

    /// A file that records each write's end offset and keeps the bytes.
    #[derive(Debug, Default, Clone)]
    struct Recorded(Arc<Mutex<(Vec<u8>, Vec<usize>)>>);

    impl WritableFile for Recorded {
        fn write_all(&mut self, buf: &[u8]) -> std::io::Result<()> {
            let mut state = self.0.lock().unwrap();
            state.0.extend_from_slice(buf);
            let end = state.0.len();
            state.1.push(end);
            Ok(())
        }

        fn sync(&mut self) -> std::io::Result<()> {
            Ok(())
        }

        fn len(&self) -> u64 {
            self.0.lock().unwrap().0.len() as u64
        }
    }

    #[test]
    fn buffered_writes_end_at_2_mib_offsets_of_the_file() {
        let file = Recorded::default();
        let mut out = BufferedFile {
            file: Box::new(file.clone()),
            buf: Vec::with_capacity(WRITE_BUFFER),
            written: 0,
        };
        let mut expected = Vec::new();
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        // Small writes, writes larger than a piece, a flush between.
        for (i, len) in [1usize, 4095, 70_000, 5 << 20, 3, 2 << 20, 1 << 20]
            .into_iter()
            .cycle()
            .take(40)
            .enumerate()
        {
            let bytes: Vec<u8> = (0..len)
                .map(|_| {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    state as u8
                })
                .collect();
            out.write_all(&bytes).unwrap();
            expected.extend_from_slice(&bytes);
            if i == 9 {
                out.flush().unwrap();
            }
        }
        sync_buffered(out, Path::new("f")).unwrap();
        let (bytes, ends) = file.0.lock().unwrap().clone();
        assert!(
            bytes == expected,
            "the file holds what was written, in order"
        );
        // Every write but the last and the one the flush made ends at a
        // piece boundary.
        let unaligned: Vec<usize> = ends[..ends.len() - 1]
            .iter()
            .copied()
            .filter(|end| end % WRITE_BUFFER != 0)
            .collect();
        assert!(unaligned.len() <= 1, "writes ending at {unaligned:?}");
        assert!(ends.len() > 10, "{} writes", ends.len());
        assert_eq!(*ends.last().unwrap(), expected.len());
    }
}
