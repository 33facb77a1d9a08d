//! Flushing a full memtable to a segment: on the writing thread, or handed
//! to the background flush thread (`Options::flush_thread`) while writes go
//! on into a new memtable and WAL.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::JoinHandle;

use crate::error::{Error, Result};
use crate::format::{DocEntry, FileKind, Ranges, SortedDocMapWriter, Tombstone, id_index_order};

use super::compaction::{MergeShared, wake_merge};
use super::core::{Core, lock, read_lock};
use super::files::{create_buffered, encode_error, sync_buffered};
use super::index::Index;
use super::memtable::{Memtable, Version};
use super::schedule::Point;
use super::segment::Segment;
use super::write::Writer;

/// The background flush thread and the job it is given.
#[derive(Debug)]
pub(super) struct Flusher {
    shared: Arc<FlushShared>,
    pub(super) handle: Option<JoinHandle<()>>,
}

#[derive(Debug, Default)]
struct FlushShared {
    slot: Mutex<FlushSlot>,
    /// Wakes the thread: a job, or shutdown.
    wake: Condvar,
    /// Notified when a job ends.
    done: Condvar,
}

#[derive(Debug, Default)]
struct FlushSlot {
    /// The job given and not yet finished.
    job: Option<FlushJob>,
    pub(super) shutdown: bool,
}

/// Write `State::frozen` as segment `segment_id`, then commit a manifest
/// that names it and no longer names `old_wals` (the WALs it was logged in).
#[derive(Debug, Clone)]
struct FlushJob {
    pub(super) segment_id: u64,
    old_wals: Vec<u64>,
}

impl Flusher {
    /// Starts the thread; after each flush it wakes the merge thread, if
    /// `merge` is its signal.
    pub(super) fn start(
        core: Arc<Core>,
        merge: Option<Arc<MergeShared>>,
    ) -> std::io::Result<Flusher> {
        core.hooks.reach(Point::StartFlushThread)?;
        let shared = Arc::new(FlushShared::default());
        let thread_shared = shared.clone();
        let handle = std::thread::Builder::new()
            .name("simhashdb-flush".into())
            .spawn(move || {
                let shared = &*thread_shared;
                loop {
                    let job = {
                        let mut s = lock(&shared.slot);
                        while s.job.is_none() && !s.shutdown {
                            s = shared.wake.wait(s).unwrap_or_else(PoisonError::into_inner);
                        }
                        // A job given before shutdown is finished first.
                        match &s.job {
                            Some(job) => job.clone(),
                            None => {
                                core.hooks.pause(Point::FlushThreadStopped);
                                return;
                            }
                        }
                    };
                    core.hooks.pause(Point::FlushStarted);
                    if !core.poisoned.load(Ordering::Acquire) {
                        // On failure the memtable stays frozen (queries go
                        // on seeing it, its WALs stay named) and later
                        // writes fail.
                        let result = core.flush_frozen(&job);
                        if core.poison_on_error(result).is_ok()
                            && let Some(merge) = &merge
                        {
                            wake_merge(merge);
                        }
                    }
                    lock(&shared.slot).job = None;
                    shared.done.notify_all();
                }
            })?;
        Ok(Flusher {
            shared,
            handle: Some(handle),
        })
    }

    fn submit(&self, job: FlushJob) {
        let mut s = lock(&self.shared.slot);
        debug_assert!(s.job.is_none(), "one flush at a time");
        s.job = Some(job);
        self.shared.wake.notify_one();
    }

    /// Waits until the job given, if any, has ended.
    pub(super) fn wait_idle(&self) {
        let mut s = lock(&self.shared.slot);
        while s.job.is_some() {
            s = self
                .shared
                .done
                .wait(s)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }
}

/// Stops the thread once it has finished the job it was given, if any. (So
/// an `open` that fails after starting it stops it too.)
impl Drop for Flusher {
    fn drop(&mut self) {
        lock(&self.shared.slot).shutdown = true;
        self.shared.wake.notify_one();
        if let Some(handle) = self.handle.take() {
            // A panic there has already been reported.
            let _ = handle.join();
        }
    }
}

impl Index {
    /// Flushes the memtable, then lets the merge policy act: on the merge
    /// thread if there is one, here otherwise. With the flush thread the
    /// memtable is handed to it (after the previous flush ends), and this
    /// waits for its segment only if `wait`.
    pub(super) fn flush_locked(&self, writer: &mut Option<Writer>, wait: bool) -> Result<()> {
        let w = writer.as_mut().ok_or(Error::ReadOnly)?;
        self.core.hooks.pause(Point::FlushWanted);
        if let Some(flusher) = &self.flusher {
            flusher.wait_idle();
            self.core.check_poisoned()?;
            if !read_lock(&self.core.state).memtable.is_empty() {
                let result = self.hand_over(w, flusher);
                self.core.poison_on_error(result)?;
            }
            if wait {
                flusher.wait_idle();
                self.core.check_poisoned()?;
            }
            if let Some(merger) = &self.merger {
                let result = merger.wait_for_segments(&self.core, self.max_segments);
                self.core.poison_on_error(result)?;
            }
            return Ok(());
        }
        if read_lock(&self.core.state).memtable.is_empty() {
            return Ok(());
        }
        let result = self.flush_memtable(w);
        self.core.poison_on_error(result)?;
        match &self.merger {
            Some(merger) => {
                merger.wake();
                let result = merger.wait_for_segments(&self.core, self.max_segments);
                self.core.poison_on_error(result)
            }
            None => {
                let _merging = lock(&self.core.merging);
                let result = self.core.apply_merge_policy();
                self.core.poison_on_error(result)
            }
        }
    }

    /// Starts a new WAL (committing a manifest that names it beside the old
    /// ones before anything is logged in it), freezes the memtable with a new
    /// one in its place, and gives the frozen one to the flush thread, which
    /// commits its segment and drops the old WALs
    /// ([`Core::flush_frozen`]). The flush thread is idle.
    fn hand_over(&self, w: &mut Writer, flusher: &Flusher) -> Result<()> {
        let core = &*self.core;
        let (segment_id, new_wal_id) = core.next_segment_and_wal_ids();
        let new_wal = self.create_wal(new_wal_id)?;
        core.hooks.pause(Point::HandOverWalCreated);
        // Allocated before the write lock is taken.
        let capacity = read_lock(&core.state).memtable.slots();
        let fresh = Arc::new(core.fresh_memtable(capacity));
        let old_wals = core.commit(
            |manifest| {
                manifest.next_seq = w.next_seq;
                let old_wals = manifest.wal_ids.clone();
                manifest.wal_ids.push(new_wal_id);
                old_wals
            },
            |state| {
                let full = std::mem::replace(&mut state.memtable, fresh);
                state.frozen = Some(full);
            },
        )?;
        let old_wal = std::mem::replace(&mut w.wal, new_wal);
        w.frozen_wal = Some((w.wal_id, old_wal));
        w.wal_id = new_wal_id;
        core.hooks.pause(Point::HandOverCommitted);
        flusher.submit(FlushJob {
            segment_id,
            old_wals,
        });
        Ok(())
    }

    /// Writes the memtable as a new segment, starts a new WAL, and commits a
    /// manifest naming both (and no longer the old WALs).
    fn flush_memtable(&self, w: &mut Writer) -> Result<()> {
        let result = self.flush_memtable_now(w);
        let a = &self.core.activity;
        a.count(&result, &a.flushes, &a.flush_failures);
        result
    }

    fn flush_memtable_now(&self, w: &mut Writer) -> Result<()> {
        let core = &*self.core;
        let (segment_id, new_wal_id) = core.next_segment_and_wal_ids();
        // Queries go on reading the memtable meanwhile; this thread is the
        // only one that changes it.
        let m = read_lock(&core.state).memtable.clone();
        let segment = core.write_memtable(&m, segment_id)?;
        drop(m);
        core.hooks.pause(Point::FlushWritten);
        let new_wal = self.create_wal(new_wal_id)?;
        let capacity = read_lock(&core.state).memtable.slots();
        let fresh = Arc::new(core.fresh_memtable(capacity));
        let meta = segment.meta;
        let mut flushed = None;
        let old_wals = core.commit(
            |manifest| {
                manifest.segments.push(meta);
                manifest.next_seq = w.next_seq;
                std::mem::replace(&mut manifest.wal_ids, vec![new_wal_id])
            },
            |state| {
                state.segments.insert(0, Arc::new(segment));
                flushed = Some(std::mem::replace(&mut state.memtable, fresh));
            },
        )?;
        core.recycle_memtable(flushed);
        w.wal = new_wal;
        w.wal_id = new_wal_id;
        core.hooks.pause(Point::FlushCommitted);
        core.remove_wals(&old_wals);
        Ok(())
    }
}

impl Core {
    /// The flush thread's job: writes the frozen memtable as segment
    /// `job.segment_id`, then commits a manifest that names it and no longer
    /// names the WALs it was logged in, and puts the segment in the
    /// memtable's place.
    fn flush_frozen(&self, job: &FlushJob) -> Result<()> {
        let result = self.flush_frozen_now(job);
        let a = &self.activity;
        a.count(&result, &a.flushes, &a.flush_failures);
        result
    }

    fn flush_frozen_now(&self, job: &FlushJob) -> Result<()> {
        let Some(m) = read_lock(&self.state).frozen.clone() else {
            unreachable!("the flush thread is given a job only with a frozen memtable")
        };
        let segment = self.write_memtable(&m, job.segment_id)?;
        drop(m);
        self.hooks.pause(Point::FlushWritten);
        let meta = segment.meta;
        let mut flushed = None;
        self.commit(
            |manifest| {
                manifest.segments.push(meta);
                manifest.wal_ids.retain(|id| !job.old_wals.contains(id));
            },
            |state| {
                state.segments.insert(0, Arc::new(segment));
                flushed = state.frozen.take();
            },
        )?;
        self.recycle_memtable(flushed);
        self.hooks.pause(Point::FlushCommitted);
        self.remove_wals(&job.old_wals);
        Ok(())
    }

    /// Writes memtable `m` as segment `segment_id`: its doc map, then its
    /// tables in the plan its size calls for. The caller commits it.
    fn write_memtable(&self, m: &Memtable, segment_id: u64) -> Result<Segment> {
        // One flush runs at a time: the buffers are taken, and given back
        // (grown to this memtable's size) for the next flush.
        let mut buffers = std::mem::take(&mut *lock(&self.flush_buffers));
        let result = self.write_memtable_with(m, segment_id, &mut buffers);
        *lock(&self.flush_buffers) = buffers;
        result
    }

    /// [`write_memtable`](Self::write_memtable) with its sort buffers.
    ///
    /// The doc map's records are sorted as small keys that point at the
    /// memtable's slots, then written in file order straight from the slots
    /// ([`SortedDocMapWriter`]): no copy of every document is made and
    /// sorted, and the buffers' memory is reused from flush to flush (fresh
    /// memory costs a page fault per 4 KiB: docs/ARCHITECTURE.md, "A flush
    /// reuses the memory of the flush before").
    fn write_memtable_with(
        &self,
        m: &Memtable,
        segment_id: u64,
        buffers: &mut FlushBuffers,
    ) -> Result<Segment> {
        // The plan is chosen by the live documents, which bound the distinct
        // fingerprints the tables count exactly.
        let plan = self.segment_plan(m.live_docs() as u64);
        let write_tables = || {
            let (key_count, mut tables) = m.sorted_tables(&plan);
            let fill = |_, keys: &mut Vec<u64>| {
                // Too few tables fail the segment writer's count check.
                *keys = tables.next().unwrap_or_default();
                Ok(())
            };
            self.write_table_file(segment_id, &plan, key_count, fill)
        };
        let ranges = if m.slots() >= PARALLEL_FLUSH {
            // The two files need nothing of each other: the doc map is
            // written on a thread of its own while this one sorts and
            // writes the tables (the second core is otherwise idle while
            // a writer flushes; docs/ARCHITECTURE.md, "A flush writes its
            // two files at once").
            let buffers = Mutex::new(buffers);
            let write_doc_map = || self.write_doc_map(m, segment_id, &mut lock(&buffers));
            std::thread::scope(|scope| {
                let doc_map = std::thread::Builder::new()
                    .name("simhashdb-flush-docs".into())
                    .spawn_scoped(scope, write_doc_map);
                let tables = write_tables();
                let ranges = match doc_map {
                    Ok(doc_map) => doc_map
                        .join()
                        .unwrap_or_else(|panic| std::panic::resume_unwind(panic)),
                    // No thread to be had: this one writes it too.
                    Err(_) => write_doc_map(),
                };
                tables.and(ranges)
            })?
        } else {
            let ranges = self.write_doc_map(m, segment_id, buffers)?;
            write_tables()?;
            ranges
        };
        self.open_written(segment_id, 0, ranges)
    }

    /// Writes and syncs the doc map file of memtable `m` as segment
    /// `segment_id`'s; returns the range of its records' sequence numbers
    /// and timestamps.
    fn write_doc_map(
        &self,
        m: &Memtable,
        segment_id: u64,
        buffers: &mut FlushBuffers,
    ) -> Result<Option<Ranges>> {
        let FlushBuffers {
            order,
            order_scratch,
            by_id,
            by_id_scratch,
            tombstones,
        } = buffers;
        order.clear();
        tombstones.clear();
        for (pos, id, version) in m.versions_at() {
            match *version {
                Version::Live(ref doc) => order.push((doc.fingerprint, id, pos)),
                Version::Deleted { seq, timestamp } => {
                    tombstones.push(Tombstone { id, seq, timestamp })
                }
            }
        }
        // By (fingerprint, id): an id has one version here, so the order
        // is total.
        crate::radix::sort_by_top_bits_with(order, order_scratch, |e| e.0, |e| (e.0, e.1));
        id_index_order(order.iter().map(|e| e.1), by_id, by_id_scratch);
        tombstones.sort_unstable();
        let ids_path = self.dir.join(FileKind::DocMap.file_name(segment_id));
        let mut docs = SortedDocMapWriter::new(
            create_buffered(self.fs.as_ref(), &ids_path)?,
            self.index_id,
            segment_id,
            order.len() as u64,
            tombstones.len() as u64,
        )
        .map_err(encode_error(&ids_path))?;
        for (i, &(_, _, pos)) in order.iter().enumerate() {
            // The slots are read in fingerprint order, a cache miss each:
            // asked for a few documents ahead.
            if let Some(&(_, _, ahead)) = order.get(i + SLOTS_AHEAD) {
                m.prefetch_slot(ahead);
            }
            let Some((id, Version::Live(doc))) = m.version_at(pos) else {
                unreachable!("slot {pos} was listed as live")
            };
            docs.push(DocEntry {
                fingerprint: doc.fingerprint,
                id,
                seq: doc.seq,
                timestamp: doc.timestamp,
                name: doc.name.as_deref(),
                sketch: doc.sketch.as_deref().copied(),
            })
            .map_err(|e| Error::InvalidArgument(e.to_string()))?;
        }
        for &(id, position) in by_id.iter() {
            docs.push_id(id, position)
                .map_err(encode_error(&ids_path))?;
        }
        for &t in tombstones.iter() {
            docs.push_tombstone(t).map_err(encode_error(&ids_path))?;
        }
        let ranges = docs.ranges();
        let ids_file = docs.finish().map_err(encode_error(&ids_path))?;
        sync_buffered(ids_file, &ids_path)?;
        Ok(ranges)
    }
}

/// Versions from which a flush writes its doc map on a thread of its own
/// beside the tables ([`Core::write_memtable`]): a thread costs tens of
/// microseconds, a flush of this many versions several milliseconds.
/// Below it (the small memtables of most tests among them), one thread
/// writes both files, the doc map first.
pub(super) const PARALLEL_FLUSH: usize = 16_384;

/// Documents a flush looks ahead when it reads the memtable's slots in
/// fingerprint order.
const SLOTS_AHEAD: usize = 8;

/// The sort buffers of a flush, kept for the next one
/// ([`Core::flush_buffers`]).
#[derive(Debug, Default)]
pub(super) struct FlushBuffers {
    /// (fingerprint, id, slot) of every live document, sorted by
    /// (fingerprint, id): the doc map's entries.
    order: Vec<(u64, u64, u32)>,
    order_scratch: Vec<(u64, u64, u32)>,
    /// (id, position among the entries), sorted by id: the id index.
    by_id: Vec<(u64, u32)>,
    by_id_scratch: Vec<(u64, u32)>,
    tombstones: Vec<Tombstone>,
}
