//! Readers beside a writer in another process: [`Index::refresh`], and
//! the retry that lets a reader's open, refresh and `verify` run while a
//! writer commits manifests and removes the files they no longer name.
//!
//! A reader takes no lock and writes nothing. It reads `MANIFEST` (replaced
//! whole by a rename at each commit), maps the segments it names and reads
//! the WALs it names up to their last complete frame. A writer removes a
//! file only after committing a manifest that no longer names it, so a
//! file the reader finds gone means a newer manifest: the reader starts
//! over from it. A file once mapped or read stays the reader's (on Unix a
//! mapping outlives the file's name). docs/ARCHITECTURE.md, "Readers beside
//! a writer", gives the whole argument.

use std::path::Path;
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::format::wal::WAL_HEADER_LEN;
use crate::format::{FileKind, Manifest, WalEnd, WalReader};

use super::check::{check_manifest, check_wal_seqs, segments_max_seq};
use super::core::{lock, read_lock, write_lock};
use super::files::{corrupted, io_error, named_file_error};
use super::fs::FileSystem;
use super::index::Index;
use super::recovery::{WalTailPos, open_segments, replay_wals};
use super::segment::{Segment, fits_in_memory};
use super::write::apply;

/// What a reader last read of its WALs.
#[derive(Debug, Default)]
pub(super) struct Loaded {
    /// Each WAL's length, in the order its manifest names them.
    pub(super) wal_lens: Vec<u64>,
    /// Where the last WAL's replay ended, if every WAL was read to its end.
    pub(super) tail: Option<WalTailPos>,
}

/// How many times a reader starts over when the index changes under it.
const ATTEMPTS: usize = 100;

/// Runs `attempt` until it succeeds, or fails with `MANIFEST` unchanged
/// across the attempt (then the failure is the index's own, not a race
/// with a writer's commit), at most [`ATTEMPTS`] times. Each commit
/// changes the manifest's bytes (its generation grows), so an unchanged
/// manifest means no commit came between.
pub(super) fn retry_while_changed<T>(
    dir: &Path,
    fs: &dyn FileSystem,
    mut attempt: impl FnMut() -> Result<T>,
) -> Result<T> {
    let path = dir.join(FileKind::Manifest.file_name(0));
    let mut before = fs.read(&path).ok();
    for _ in 1..ATTEMPTS {
        match attempt() {
            Ok(value) => return Ok(value),
            Err(e) => {
                let now = fs.read(&path).ok();
                if now == before {
                    return Err(e);
                }
                before = now;
            }
        }
    }
    attempt()
}

impl Index {
    /// Brings a read-only index up to date with its directory: afterwards
    /// it answers with every write the writer (in this process or another)
    /// had acknowledged when the call began, as a new
    /// [`open_read_only`](Index::open_read_only) would, without remapping
    /// the segments it holds already. Queries running meanwhile answer
    /// from the state before or after, never a mix. Cheap when nothing
    /// changed (the manifest read and compared, each WAL's length taken).
    ///
    /// On an index open for writing this does nothing: a writer sees its
    /// own writes.
    ///
    /// # Errors
    ///
    /// [`Error::Corrupted`] if the directory's files are damaged, or now
    /// hold another index; [`Error::Io`] if they cannot be read (the index
    /// removed). The index keeps answering from its state before the call.
    pub fn refresh(&self) -> Result<()> {
        if !self.read_only {
            return Ok(());
        }
        // Held through the refresh: refreshes run one at a time.
        let mut loaded = lock(&self.loaded);
        let fs = self.core.fs.clone();
        retry_while_changed(&self.core.dir, fs.as_ref(), || {
            self.refresh_attempt(&mut loaded)
        })
    }

    fn refresh_attempt(&self, loaded: &mut Loaded) -> Result<()> {
        let core = &self.core;
        let path = core.dir.join(FileKind::Manifest.file_name(0));
        let bytes = core.fs.read(&path).map_err(io_error(&path, "read"))?;
        let manifest = Manifest::decode(&bytes).map_err(|e| corrupted(&path, &e))?;
        check_manifest(&path, &manifest)?;
        if manifest.index_id != core.index_id
            || manifest.shape != core.plan.shape()
            || manifest.k != core.plan.k()
        {
            return Err(Error::Corrupted {
                path,
                offset: 0,
                reason: format!(
                    "the directory now holds another index (index id {:016x}; the one opened \
                     is {:016x}): open it anew",
                    manifest.index_id, core.index_id
                ),
            });
        }
        let current = lock(&core.manifest).clone();
        if current.wal_ids == manifest.wal_ids {
            // The same WALs, only ever appended to: the same lengths, the
            // same writes; longer ones, the frames after those replayed.
            // The segments may have changed (a merge commits without
            // touching the WALs).
            let lens: std::io::Result<Vec<u64>> = manifest
                .wal_ids
                .iter()
                .map(|&id| core.fs.len(&core.dir.join(FileKind::Wal.file_name(id))))
                .collect();
            if let Ok(lens) = lens {
                let segments = if current.segments == manifest.segments {
                    None
                } else {
                    let held = read_lock(&core.state).segments.clone();
                    Some(open_segments(
                        &core.dir,
                        &core.fs,
                        &manifest,
                        core.plan.k(),
                        &held,
                    )?)
                };
                if self.catch_up(&manifest, loaded, lens, segments)? {
                    *lock(&core.manifest) = manifest;
                    return Ok(());
                }
            }
        }
        let held = read_lock(&core.state).segments.clone();
        let segments = open_segments(&core.dir, &core.fs, &manifest, core.plan.k(), &held)?;
        drop(held);
        let replayed = replay_wals(&core.dir, core.fs.as_ref(), &manifest, &core.plan, false)?;
        mark_out_of_memory(&segments, core.memory_budget);
        loaded.wal_lens = replayed.wal_lens;
        loaded.tail = replayed.tail;
        let mut committed = lock(&core.manifest);
        *committed = manifest;
        let mut state = write_lock(&core.state);
        state.segments = segments;
        state.memtable = Arc::new(replayed.memtable);
        Ok(())
    }

    /// A refresh's quick way when the manifest names the same WALs as the
    /// reader's (only `segments`, if given, changed: a merge) and at most
    /// the last WAL grew (`lens`): its frames after the last one replayed
    /// are applied to the memtable, and the segments swapped in with them.
    /// `false` (nothing changed) when that does not apply (an earlier WAL
    /// changed length, the last replay ended early, the new bytes are not
    /// whole frames that follow on, or a walk shares the memtable): the
    /// caller then loads everything again.
    fn catch_up(
        &self,
        manifest: &Manifest,
        loaded: &mut Loaded,
        lens: Vec<u64>,
        segments: Option<Vec<Arc<Segment>>>,
    ) -> Result<bool> {
        let core = &self.core;
        if lens == loaded.wal_lens {
            if let Some(segments) = segments {
                self.set_segments(segments);
            }
            return Ok(true);
        }
        let Some(tail) = &loaded.tail else {
            return Ok(false);
        };
        let (Some((&last_id, _)), Some((&last_len, earlier))) =
            (manifest.wal_ids.split_last(), lens.split_last())
        else {
            return Ok(false);
        };
        if last_id != tail.wal_id
            || last_len < tail.end
            || loaded.wal_lens.get(..earlier.len()) != Some(earlier)
        {
            return Ok(false);
        }
        let path = core.dir.join(FileKind::Wal.file_name(last_id));
        let mut bytes = tail.header.clone();
        bytes.extend_from_slice(
            &core
                .fs
                .read_from(&path, tail.end)
                .map_err(named_file_error(&path, "read"))?,
        );
        let Ok(reader) = WalReader::new(&bytes) else {
            return Ok(false);
        };
        let (frames, end) = reader.read_all();
        if !matches!(end, WalEnd::Clean | WalEnd::TornTail { .. })
            || check_wal_seqs(&path, &frames, segments_max_seq(manifest)).is_err()
        {
            return Ok(false);
        }
        let first = frames
            .first()
            .and_then(|f| f.records.first())
            .map(crate::format::Record::seq);
        if first.is_some() && tail.last_seq.is_some() && first != tail.last_seq.map(|s| s + 1) {
            return Ok(false);
        }
        let consumed = frames.last().map_or(0, |f| f.end - WAL_HEADER_LEN as u64);
        let mut last_seq = tail.last_seq;
        {
            let mut state = write_lock(&core.state);
            let Some(memtable) = Arc::get_mut(&mut state.memtable) else {
                return Ok(false);
            };
            for frame in frames {
                for record in frame.records {
                    last_seq = Some(apply(memtable, record));
                }
            }
            if let Some(segments) = segments {
                mark_out_of_memory(&segments, core.memory_budget);
                state.segments = segments;
            }
        }
        loaded.wal_lens = lens;
        if let Some(tail) = &mut loaded.tail {
            tail.end += consumed;
            tail.last_seq = last_seq;
        }
        Ok(true)
    }

    /// Puts `segments` in place of the reader's.
    fn set_segments(&self, segments: Vec<Arc<Segment>>) {
        mark_out_of_memory(&segments, self.core.memory_budget);
        write_lock(&self.core.state).segments = segments;
    }
}

/// Marks `segments` to be read a query's blocks at a time if together
/// they do not fit in memory, as an open does.
fn mark_out_of_memory(segments: &[Arc<Segment>], budget: Option<u64>) {
    let size: u64 = segments
        .iter()
        .map(|s| s.meta.seg_file_len + s.meta.ids_file_len)
        .sum();
    if !fits_in_memory(size, 2, budget) {
        for segment in segments {
            segment.set_out_of_memory();
        }
    }
}
