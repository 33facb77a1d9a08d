//! [`Core`], what every thread of an index shares, and [`State`], what
//! queries read; the commit that changes both.
//!
//! Lock order. A thread that holds more than one of these locks takes them
//! in this order, and never the other way round:
//!
//! 1. `Index::writer` (the writing thread; `verify`, `compact`), or a
//!    reader's `Index::loaded` (its `refresh`);
//! 2. `Core::merging` (a merge, on the merge thread or in `compact`);
//! 3. `Core::merge_claims` (choosing the run of a merge);
//! 4. `Core::manifest` (a commit, or allocating ids);
//! 5. `Core::state` (read or write);
//! 6. `Core::poison_cause`.
//!
//! The flush thread's slot and the merge thread's signal are taken alone,
//! except that `Merger::wait_for_segments` reads the state while it holds
//! the merge signal (so nothing that holds the state takes the signal).
//! `Core::recent_writes` is taken under the writer lock or alone;
//! `Core::retired` and `Threads::handles` alone; a segment's decoding claim
//! last (a merge or a flush writing a segment may hold `merging`).

use std::collections::{HashSet, VecDeque};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::thread::JoinHandle;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::error::{Error, Result};
use crate::format::{FileKind, Manifest};
use crate::plan::{Budget, Plan};

use super::compaction::MergeClaims;
use super::compaction::policy::MergePolicy;
use super::files::commit_manifest;
use super::fs::FileSystem;
use super::memtable::Memtable;
use super::schedule::{Hooks, Point};
use super::segment::Segment;

/// The most keys a probe of a flat table compares in a segment given the
/// `k + 1` tables of [`Plan::new`] instead of the index's plan
/// ([`Core::segment_plan`]): 256 takes segments of up to 16 M fingerprints
/// at k = 3 (16-bit prefixes).
const FLAT_PROBE_KEYS: f64 = 256.0;

/// What the writing thread and the merge thread share.
#[derive(Debug)]
pub(super) struct Core {
    pub(super) dir: PathBuf,
    /// The manifest's index id, written into every new file.
    pub(super) index_id: u64,
    pub(super) fs: Arc<dyn FileSystem>,
    pub(super) plan: Plan,
    /// [`Options::small_segment_plans`].
    pub(super) small_segment_plans: bool,
    /// [`Options::memory_budget`].
    pub(super) memory_budget: Option<u64>,
    /// [`Options::decoded_tables_up_to`].
    pub(super) decoded_tables_up_to: u64,
    /// [`Options::flat_tables`].
    pub(super) flat_tables: bool,
    /// Whether a query has searched the segments since the open: until
    /// then, segments written get no decoded copy (a bulk load that never
    /// queries does not pay for them).
    pub(super) queried: AtomicBool,
    pub(super) fingerprint_config: String,
    pub(super) retention_ms: u64,
    pub(super) merge_policy: Option<Arc<dyn MergePolicy>>,
    pub(super) state: RwLock<State>,
    /// The manifest as last committed, plus ids allocated since (a commit
    /// writes it whole, so a flush and a merge never lose each other's edits).
    pub(super) manifest: Mutex<Manifest>,
    /// Held through each merge on the merge thread, by `compact` and by
    /// `verify`. The writing thread may merge a run of newer segments
    /// alongside the merge thread's without it ([`Core::help_merge`]);
    /// `compact` and `verify` hold the writer, which excludes that.
    pub(super) merging: Mutex<()>,
    /// The runs being merged.
    pub(super) merge_claims: Mutex<MergeClaims>,
    pub(super) poisoned: AtomicBool,
    /// What poisoned the index: the first failure's message.
    pub(super) poison_cause: Mutex<Option<String>>,
    /// What runs at each schedule point (nothing without the
    /// `schedule-hooks` feature).
    pub(super) hooks: Hooks,
    /// Flushes and merges run since the open ([`Stats`](super::Stats)).
    pub(super) activity: Activity,
    /// The prefault thread and the thread the first query starts.
    pub(super) threads: Threads,
    /// Segments that a merge replaced, until no reader holds them: their
    /// files are removed by [`Core::remove_retired`], never by a reader.
    pub(super) retired: Mutex<Vec<Arc<Segment>>>,
    /// What the batches of `Index::insert_if_new_many` settle with.
    pub(super) recent_writes: Mutex<RecentWrites>,
    /// The last flushed memtable, emptied, whose memory the next memtable
    /// reuses ([`Core::fresh_memtable`]).
    pub(super) spare_memtable: Mutex<Option<Memtable>>,
    /// The sort buffers of the last flush, which the next one reuses.
    pub(super) flush_buffers: Mutex<super::flush::FlushBuffers>,
}

/// The threads an index starts besides its flush and merge threads (which
/// [`Flusher`](super::flush::Flusher) and [`Merger`](super::compaction::Merger)
/// own): the open's prefault thread and the thread the first query starts
/// to decode segments. `close` and `drop` tell them to stop and join them
/// ([`Core::stop_threads`]) before the directory lock is released.
#[derive(Debug, Default)]
pub(super) struct Threads {
    /// Tells them to stop early.
    pub(super) stop: AtomicBool,
    handles: Mutex<Vec<JoinHandle<()>>>,
}

/// The ids written while batches of `Index::insert_if_new_many` search
/// the index without the writer lock: each batch then settles what was
/// written since its search began. Taken under the writer lock.
#[derive(Debug, Default)]
pub(super) struct RecentWrites {
    /// Batches between the start of their search and their settling.
    searching: usize,
    /// (sequence number, id) of each record logged while a batch
    /// searches, oldest first; at most [`RECENT_WRITES`].
    ids: VecDeque<(u64, u64)>,
}

/// The most records [`RecentWrites`] remembers (16 bytes each: 1 MiB). A
/// batch that more records were written beside is searched again, under
/// the writer lock.
pub(super) const RECENT_WRITES: usize = 1 << 16;

impl RecentWrites {
    /// A batch begins its search (under the writer lock).
    pub(super) fn begin(&mut self) {
        self.searching += 1;
    }

    /// A batch has settled (or given up).
    pub(super) fn end(&mut self) {
        self.searching = self.searching.saturating_sub(1);
        if self.searching == 0 {
            self.ids = VecDeque::new();
        }
    }

    /// Whether a write must note its ids.
    pub(super) fn watching(&self) -> bool {
        self.searching > 0
    }

    /// Notes records `first_seq..` of `ids`, logged.
    pub(super) fn note(&mut self, first_seq: u64, ids: &[u64]) {
        for (seq, &id) in (first_seq..).zip(ids) {
            if self.ids.len() == RECENT_WRITES {
                self.ids.pop_front();
            }
            self.ids.push_back((seq, id));
        }
    }

    /// The ids written from sequence number `from` up to `next_seq` (the
    /// writer's next), or `None` if some of them were forgotten.
    pub(super) fn since(&self, from: u64, next_seq: u64) -> Option<HashSet<u64>> {
        if next_seq <= from {
            return Some(HashSet::new());
        }
        if self.ids.front().is_none_or(|&(seq, _)| seq > from) {
            return None;
        }
        Some(
            self.ids
                .iter()
                .filter(|&&(seq, _)| seq >= from)
                .map(|&(_, id)| id)
                .collect(),
        )
    }
}

/// Counts of flushes, merges and decodes since the open, wherever they ran
/// (the writing thread, the flush thread, the merge thread, `compact`, the
/// prefault thread, the thread the first query starts).
#[derive(Debug, Default)]
pub(super) struct Activity {
    pub(super) flushes: AtomicU64,
    pub(super) flush_failures: AtomicU64,
    pub(super) merges: AtomicU64,
    pub(super) merge_failures: AtomicU64,
    /// Segments whose tables were decoded ([`Segment::decode_tables`]).
    pub(super) decodes: AtomicU64,
}

impl Activity {
    /// Counts `result` as a success in `ok` or a failure in `failed`.
    pub(super) fn count<T>(&self, result: &Result<T>, ok: &AtomicU64, failed: &AtomicU64) {
        let counter = if result.is_ok() { ok } else { failed };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    pub(super) fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }
}

#[derive(Debug)]
pub(super) struct State {
    /// Where writes go. Shared with a flush in progress on the writing
    /// thread, which writes it without holding the lock; only the writing
    /// thread changes it, never during its own flush.
    pub(super) memtable: Arc<Memtable>,
    /// A full memtable the flush thread is writing to a segment: newer than
    /// every segment, older than `memtable`. It leaves when its segment
    /// joins `segments`, under the same write lock.
    pub(super) frozen: Option<Arc<Memtable>>,
    /// Newest first.
    pub(super) segments: Vec<Arc<Segment>>,
}

impl State {
    /// The memtables, newest first: the one written to, then the one being
    /// flushed, if any.
    pub(super) fn memtables(&self) -> impl Iterator<Item = &Memtable> {
        std::iter::once(&*self.memtable).chain(self.frozen.as_deref())
    }
}

pub(super) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

pub(super) fn read_lock<T>(lock: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    // A panic while holding the lock leaves consistent data (every update is
    // a single assignment or completes before unlocking), so carry on.
    lock.read().unwrap_or_else(PoisonError::into_inner)
}

pub(super) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // As for the state: every update completes before unlocking.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

pub(super) fn write_lock<T>(lock: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    lock.write().unwrap_or_else(PoisonError::into_inner)
}

impl Core {
    /// Commits the last committed manifest as `edit` changes it (a new
    /// generation), then, still holding the manifest's lock so that the
    /// query state changes in commit order, makes the matching change to the
    /// state under its write lock. Returns what `edit` returns.
    pub(super) fn commit<T>(
        &self,
        edit: impl FnOnce(&mut Manifest) -> T,
        apply: impl FnOnce(&mut State),
    ) -> Result<T> {
        let mut committed = lock(&self.manifest);
        let mut manifest = committed.clone();
        let edited = edit(&mut manifest);
        manifest.generation += 1;
        commit_manifest(&self.dir, self.fs.as_ref(), &manifest)?;
        *committed = manifest;
        apply(&mut write_lock(&self.state));
        Ok(edited)
    }

    /// An empty memtable for the writes after a flush: the spare one if a
    /// flushed memtable was recycled, otherwise a new one with room for
    /// `capacity` versions.
    pub(super) fn fresh_memtable(&self, capacity: usize) -> Memtable {
        lock(&self.spare_memtable)
            .take()
            .unwrap_or_else(|| Memtable::with_capacity(&self.plan, capacity))
    }

    /// Keeps flushed memtable `m`, emptied, as the spare the next
    /// [`fresh_memtable`](Self::fresh_memtable) reuses (if no reader still
    /// holds it): fresh memory costs a page fault per 4 KiB written
    /// (docs/ARCHITECTURE.md, "A flush reuses the memory of the flush
    /// before"). At most one is kept, so an index holds at most one
    /// memtable's memory more than before.
    pub(super) fn recycle_memtable(&self, m: Option<Arc<Memtable>>) {
        if let Some(mut m) = m.and_then(|m| Arc::try_unwrap(m).ok()) {
            m.clear();
            *lock(&self.spare_memtable) = Some(m);
        }
    }

    /// Allocates the ids of a flush's segment and of the WAL that follows it.
    pub(super) fn next_segment_and_wal_ids(&self) -> (u64, u64) {
        let mut m = lock(&self.manifest);
        let ids = (m.next_segment_id, m.next_wal_id);
        m.next_segment_id += 1;
        m.next_wal_id += 1;
        ids
    }

    /// Removes WALs the committed manifest no longer names (best effort: a
    /// file left behind is removed at the next open).
    pub(super) fn remove_wals(&self, wal_ids: &[u64]) {
        for &id in wal_ids {
            let _ = self.fs.remove(&self.dir.join(FileKind::Wal.file_name(id)));
        }
    }

    pub(super) fn fresh(&self, timestamp: u64) -> bool {
        self.fresh_at(timestamp, now_ms())
    }

    /// The plan of a new segment of `keys` distinct fingerprints: with
    /// [`Options::small_segment_plans`], the plan the cost model prefers for
    /// that many (`Plan::auto`; `Budget::Unprobed` when the index's plan does
    /// not probe) when it has fewer tables than the index's;
    /// else the index's. A segment of flat tables takes `k + 1` tables
    /// while their probes stay short ([`Core::flat_plan`]). A flush of the default
    /// memtable gets 4 tables instead of 10 (docs/ARCHITECTURE.md, "Small
    /// segments have fewer tables").
    pub(super) fn segment_plan(&self, keys: u64) -> Plan {
        // An index whose plan does not probe keeps its segments unprobed too.
        let budget = if self.plan.radius() == 0 {
            Budget::Unprobed
        } else {
            Budget::default()
        };
        if let Some(fewer) = self.flat_plan(keys) {
            return fewer;
        }
        match Plan::choose(keys, self.plan.k(), budget) {
            Ok(small)
                if self.small_segment_plans && small.tables().len() < self.plan.tables().len() =>
            {
                small
            }
            _ => self.plan.clone(),
        }
    }

    /// The `k + 1` tables of [`Plan::new`] for a segment of `keys` flat
    /// tables, if they have fewer tables than the index's plan and a probe
    /// then compares at most [`FLAT_PROBE_KEYS`] keys: at 10 M
    /// fingerprints (152 keys a probe) they were as fast as the 10 tables
    /// of the index's plan at p50 and faster at p99, for half the bytes on
    /// disk (docs/BENCHMARKS.md, "Flat tables"). Only for unprobed plans
    /// with [`Options::small_segment_plans`], and segments that get flat
    /// tables ([`Core::writes_flat`]).
    fn flat_plan(&self, keys: u64) -> Option<Plan> {
        if !self.small_segment_plans || self.plan.radius() > 0 {
            return None;
        }
        let k = self.plan.k();
        let fewer = Plan::new(k + 1, k).ok()?;
        if !self.writes_flat(keys, fewer.tables().len()) {
            return None;
        }
        let prefix = fewer.tables().iter().map(|t| t.prefix_bits()).min()?;
        let per_probe = keys as f64 / 2f64.powi(prefix as i32);
        (per_probe <= FLAT_PROBE_KEYS && fewer.tables().len() < self.plan.tables().len())
            .then_some(fewer)
    }

    /// Whether a document written at `timestamp` is inside the retention
    /// window at time `now` (ms since the Unix epoch).
    pub(super) fn fresh_at(&self, timestamp: u64, now: u64) -> bool {
        self.retention_ms == 0 || timestamp.saturating_add(self.retention_ms) >= now
    }

    /// Records that a query searched the segments ([`Core::queried`]). The
    /// first time, the segments without a decoded copy yet (written before
    /// it, say by a bulk load and a compaction, or opened without the
    /// prefault thread) get theirs on a thread of their own.
    #[inline]
    pub(super) fn note_query(self: &Arc<Core>) {
        if !self.queried.load(Ordering::Relaxed) && !self.queried.swap(true, Ordering::Relaxed) {
            self.decode_segments();
        }
    }

    /// See [`note_query`](Self::note_query).
    #[cold]
    fn decode_segments(self: &Arc<Core>) {
        if self.decoded_tables_up_to == 0 || !self.fs.background_threads() {
            return;
        }
        let segments: Vec<Arc<Segment>> = read_lock(&self.state)
            .segments
            .iter()
            .filter(|s| s.in_memory.load(Ordering::Relaxed) && s.decoded.get().is_none())
            .cloned()
            .collect();
        if segments.is_empty() {
            return;
        }
        // Without the thread, the segments are searched in their files
        // until merges rewrite them.
        self.spawn("simhashdb-decode", move |core| {
            for segment in segments {
                if core.threads.stop.load(Ordering::Relaxed) {
                    break;
                }
                // A damaged table is left to the queries, which read it
                // through its checked blocks and report it.
                let _ = segment.decode_tables(core);
            }
            core.hooks.pause(Point::DecodeThreadStopped);
        });
    }

    /// Starts the open's prefault thread: it maps `ranges` of the segments'
    /// files, in order, then decodes the tables of `decode`
    /// ([`Segment::decode_tables`]), stopping early when told to. Without
    /// the thread, pages fault in as queries touch them.
    ///
    /// With `out_of_memory` set (the segments over the memory budget, whose
    /// mappings are advised to be read at random, and `ranges` their block
    /// indexes only), each range is asked for ahead of the mapping
    /// ([`Mapped::read_range_until`]), so that it comes from the disk in
    /// large reads rather than a page per fault, competing with the first
    /// queries for a fraction of a second rather than for seconds; once all
    /// are read, the segments are told ([`Segment::mark_indexes_read`]).
    ///
    /// [`Mapped::read_range_until`]: super::fs::Mapped::read_range_until
    pub(super) fn start_prefault(
        self: &Arc<Core>,
        ranges: Vec<(super::fs::Mapped, std::ops::Range<usize>)>,
        out_of_memory: Vec<Arc<Segment>>,
        decode: Vec<Arc<Segment>>,
    ) {
        self.spawn("simhashdb-prefault", move |core| {
            core.hooks.pause(Point::PrefaultThreadStarted);
            let stop = &core.threads.stop;
            let stopped = || stop.load(Ordering::Relaxed);
            for (map, range) in &ranges {
                if out_of_memory.is_empty() {
                    map.prefault_range_until(range.clone(), stopped);
                } else {
                    map.read_range_until(range.clone(), stopped);
                }
            }
            if !stopped() {
                for segment in &out_of_memory {
                    segment.mark_indexes_read();
                }
            }
            drop(out_of_memory);
            drop(ranges);
            for segment in decode {
                if stopped() {
                    break;
                }
                // A damaged table is left to the queries, which read it
                // through its checked blocks and report it.
                let _ = segment.decode_tables(core);
            }
            core.hooks.pause(Point::PrefaultThreadStopped);
        });
    }

    /// Runs `work` on a thread named `name` that `close` and `drop` join
    /// ([`Threads`]). The thread holds the core, so the files it reads stay
    /// the index's until it is joined. Nothing happens if the thread
    /// cannot start.
    fn spawn(self: &Arc<Core>, name: &str, work: impl FnOnce(&Core) + Send + 'static) {
        let core = self.clone();
        let mut handles = lock(&self.threads.handles);
        let spawned = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                work(&core);
                // What it held may have been the last reader of a
                // segment a merge replaced.
                core.remove_retired();
            });
        if let Ok(handle) = spawned {
            handles.push(handle);
        }
    }

    /// Tells the threads of [`Threads`] to stop and waits for them. For
    /// `close` and `drop`, once the flush and merge threads are joined;
    /// then removes the files of the segments merges replaced.
    pub(super) fn stop_threads(&self) {
        self.threads.stop.store(true, Ordering::Relaxed);
        let handles = std::mem::take(&mut *lock(&self.threads.handles));
        for handle in handles {
            // A panic there has already been reported.
            let _ = handle.join();
        }
        self.remove_retired();
    }

    /// Adds the segments of a committed merge, which the state no longer
    /// holds, to [`Core::retired`].
    pub(super) fn retire(&self, segments: Vec<Arc<Segment>>) {
        lock(&self.retired).extend(segments);
    }

    /// Removes the files of the retired segments that no reader holds any
    /// longer (a walk's snapshot, a merge, a decoding thread may hold one
    /// for a while). Best effort: a file left behind (a failed removal, or
    /// a reader still holding it when the index closes) is not named by
    /// the manifest, and the next open removes it. Only the index's own
    /// calls and threads run this, all before the directory lock is
    /// released: a file is never removed once another process may own the
    /// directory.
    pub(super) fn remove_retired(&self) {
        let unread: Vec<Arc<Segment>> = {
            let mut retired = lock(&self.retired);
            if retired.is_empty() {
                return;
            }
            // Held only here (and no one can take a new reference from
            // the state, which no longer names it).
            let (unread, read) = std::mem::take(&mut *retired)
                .into_iter()
                .partition(|s| Arc::strong_count(s) == 1);
            *retired = read;
            unread
        };
        for segment in unread {
            let paths = [segment.seg_path.clone(), segment.ids_path.clone()];
            // Unmapped before its files go.
            drop(segment);
            for path in &paths {
                let _ = self.fs.remove(path);
            }
        }
    }

    /// [`Error::Poisoned`] if a write, flush or merge has failed.
    pub(super) fn check_poisoned(&self) -> Result<()> {
        if self.poisoned.load(Ordering::Acquire) {
            let cause = lock(&self.poison_cause).clone();
            return Err(Error::Poisoned {
                cause: cause.unwrap_or_default(),
            });
        }
        Ok(())
    }

    pub(super) fn poison_on_error<T>(&self, result: Result<T>) -> Result<T> {
        if let Err(e) = &result {
            // The first failure is the cause; later ones follow from it.
            lock(&self.poison_cause).get_or_insert_with(|| e.to_string());
            self.poisoned.store(true, Ordering::Release);
        }
        result
    }
}
