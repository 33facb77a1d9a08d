//! The write path: the WAL writer, logging a batch, applying it to the
//! memtable, and creating the WALs that rotation starts.

use std::path::{Path, PathBuf};
use std::sync::{Arc, MutexGuard, PoisonError};

use crate::error::{Error, Result};
use crate::format::{
    FileKind, Record, WAL_UNSYNCED_APPENDS, encode_frame, encode_wal_header_with_flags,
};

use super::check::check_seq_room;
use super::core::write_lock;
use super::files::{io_error, write_file};
use super::fs::{FileSystem, WritableFile};
use super::index::Index;
use super::memtable::{Doc as MemDoc, Memtable};
use super::options::Durability;
use super::schedule::Point;

#[derive(Debug)]
pub(super) struct Writer {
    pub(super) wal: Box<dyn WritableFile>,
    pub(super) wal_id: u64,
    /// The WAL (id, file) of the memtable the flush thread was last given,
    /// which `sync()` syncs too (its segment may not be committed yet).
    pub(super) frozen_wal: Option<(u64, Box<dyn WritableFile>)>,
    /// The sequence number of the next record logged: one more than the
    /// last one logged in any WAL (or than the last one recovered), since
    /// recovery ends at a gap between WALs.
    pub(super) next_seq: u64,
}

impl Writer {
    /// The path of the WAL being written, in the index's directory `dir`:
    /// made only to name a failure (a `format!` and a `PathBuf` per write
    /// otherwise).
    pub(super) fn path(&self, dir: &Path) -> PathBuf {
        dir.join(FileKind::Wal.file_name(self.wal_id))
    }

    /// Syncs the WAL being written, in the index's directory `dir`; fails
    /// if it no longer has a name (the index's directory removed under the
    /// writer): a write logged there would not survive the process, so it
    /// must not be acknowledged as durable.
    pub(super) fn sync_wal(&mut self, dir: &Path) -> Result<()> {
        if let Err(e) = self.wal.sync() {
            return Err(io_error(&self.path(dir), "sync")(e));
        }
        match self.wal.linked() {
            Ok(true) => Ok(()),
            Ok(false) => Err(Error::Io {
                path: self.path(dir),
                op: "sync",
                source: std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    "the write-ahead log has been deleted (the index's directory removed \
                     while open?): writes logged in it will not survive the process",
                ),
            }),
            Err(e) => Err(io_error(&self.path(dir), "sync")(e)),
        }
    }

    /// Appends `frame`, the encoding of `records`, to the WAL being written
    /// in the index's directory `dir` (and syncs it with
    /// [`Durability::Sync`]); then the next sequence number follows the
    /// records'. Refuses, writing nothing, a frame whose first record does
    /// not follow the last one logged.
    fn append(
        &mut self,
        frame: &[u8],
        records: &[Record],
        durability: Durability,
        dir: &Path,
    ) -> Result<()> {
        let first = records.first().map(Record::seq);
        let last = records.last().map(Record::seq);
        let contiguous = records.windows(2).all(|w| w[0].seq() + 1 == w[1].seq());
        if first != Some(self.next_seq) || !contiguous {
            return Err(Error::Io {
                path: self.path(dir),
                op: "write",
                source: std::io::Error::other(format!(
                    "a frame of sequence numbers {first:?}..={last:?} would not continue the \
                     log at {}; nothing was written",
                    self.next_seq
                )),
            });
        }
        if let Err(e) = self.wal.write_all(frame) {
            return Err(io_error(&self.path(dir), "write")(e));
        }
        if durability == Durability::Sync {
            self.sync_wal(dir)?;
        }
        self.next_seq = last.map_or(self.next_seq, |seq| seq + 1);
        Ok(())
    }
}

impl Index {
    pub(super) fn writer(&self) -> Result<MutexGuard<'_, Option<Writer>>> {
        if self.read_only {
            return Err(Error::ReadOnly);
        }
        let guard = self.writer.lock().unwrap_or_else(PoisonError::into_inner);
        self.core.check_poisoned()?;
        Ok(guard)
    }

    /// Logs `records` (assigning their sequence numbers), then applies them.
    ///
    /// Once the records are logged the write has happened, and its result
    /// says so: a flush it then starts, or the failure of an earlier
    /// background flush it then discovers, poisons the index (the next call
    /// fails, naming the cause) without turning this result into an error.
    pub(super) fn write(
        &self,
        writer: &mut Option<Writer>,
        mut records: Vec<Record>,
    ) -> Result<()> {
        let w = writer.as_mut().ok_or(Error::ReadOnly)?;
        // Before anything is written: a record numbered 2^63 or more would
        // make the WAL, and the index, refused at the next open.
        check_seq_room(w.next_seq, records.len() as u64)?;
        // Numbered from the writer's next sequence number, which moves on
        // only once the frame is logged: a refused batch (over the frame
        // limit) takes none, so the next frame, perhaps the first of a new
        // WAL, continues the sequence. Recovery ends at a gap between WALs
        // (docs/FORMAT.md, "Several WALs").
        for (seq, record) in (w.next_seq..).zip(&mut records) {
            match record {
                Record::Insert { seq: s, .. } | Record::Delete { seq: s, .. } => *s = seq,
            }
        }
        let frame = encode_frame(&records).map_err(|e| Error::InvalidArgument(e.to_string()))?;
        let logged = w.append(&frame, &records, self.durability, &self.core.dir);
        self.core.poison_on_error(logged)?;
        self.core.hooks.pause(Point::WriteLogged);
        let full = {
            let mut state = write_lock(&self.core.state);
            let memtable = Arc::get_mut(&mut state.memtable)
                .unwrap_or_else(|| unreachable!("a flush shares the memtable only while it runs"));
            apply_all(memtable, records);
            state.memtable.approximate_bytes() >= self.memtable_budget
        };
        if full {
            // A failure has poisoned the index; the next call reports it.
            let _ = self.flush_locked(writer, false);
        }
        Ok(())
    }

    /// Creates WAL `wal_id` (its header synced) and opens it for appends.
    pub(super) fn create_wal(&self, wal_id: u64) -> Result<Box<dyn WritableFile>> {
        let core = &*self.core;
        new_wal_file(
            &core.dir,
            core.fs.as_ref(),
            core.index_id,
            wal_id,
            self.durability,
        )?;
        let path = core.dir.join(FileKind::Wal.file_name(wal_id));
        core.fs.open_append(&path).map_err(io_error(&path, "open"))
    }
}

/// Records [`apply_all`] looks ahead: their cache lines are asked for
/// while this many records before them are applied.
const APPLY_AHEAD: usize = 8;

/// Applies logged `records` in order, each with the lines the record
/// [`APPLY_AHEAD`] places later will touch prefetched
/// ([`Memtable::prefetch`]): an insert's id map entry and chain heads are
/// cache misses at random places, which overlap this way instead of
/// adding up.
pub(super) fn apply_all(memtable: &mut Memtable, records: Vec<Record>) {
    let mut records = records.into_iter();
    for record in records.as_slice().iter().take(APPLY_AHEAD) {
        prefetch(memtable, record);
    }
    while let Some(record) = records.next() {
        if let Some(ahead) = records.as_slice().get(APPLY_AHEAD - 1) {
            prefetch(memtable, ahead);
        }
        apply(memtable, record);
    }
}

fn prefetch(memtable: &Memtable, record: &Record) {
    match *record {
        Record::Insert {
            id, fingerprint, ..
        } => memtable.prefetch(id, Some(fingerprint)),
        Record::Delete { id, .. } => memtable.prefetch(id, None),
    }
}

/// Applies one logged record to the memtable; returns its sequence number.
pub(super) fn apply(memtable: &mut Memtable, record: Record) -> u64 {
    match record {
        Record::Insert {
            seq,
            id,
            fingerprint,
            timestamp,
            name,
            sketch,
        } => {
            memtable.insert(
                id,
                MemDoc {
                    seq,
                    fingerprint,
                    timestamp,
                    name: name.map(Arc::from),
                    sketch: sketch.map(Box::new),
                },
            );
            seq
        }
        Record::Delete { seq, id, timestamp } => {
            memtable.delete(id, seq, timestamp);
            seq
        }
    }
}

pub(super) fn check_name(name: Option<&str>) -> Result<()> {
    match name {
        Some(n) if n.len() > crate::format::MAX_NAME_LEN => Err(Error::InvalidArgument(format!(
            "a document name is {} bytes; the limit is {} bytes",
            n.len(),
            crate::format::MAX_NAME_LEN
        ))),
        _ => Ok(()),
    }
}

/// The WAL header flags for a writer with `durability`.
pub(super) fn wal_flags(durability: Durability) -> u32 {
    match durability {
        Durability::Buffered => WAL_UNSYNCED_APPENDS,
        Durability::Sync => 0,
    }
}

/// Writes and syncs a new, empty WAL for a writer with `durability`.
pub(super) fn new_wal_file(
    dir: &Path,
    fs: &dyn FileSystem,
    index_id: u64,
    wal_id: u64,
    durability: Durability,
) -> Result<()> {
    let path = dir.join(FileKind::Wal.file_name(wal_id));
    write_file(
        fs,
        &path,
        &encode_wal_header_with_flags(index_id, wal_id, wal_flags(durability)),
    )
}
