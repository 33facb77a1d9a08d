//! [`Core`], what every thread of an index shares, and [`State`], what
//! queries read; the commit that changes both.
//!
//! Lock order. A thread that holds more than one of these locks takes them
//! in this order, and never the other way round:
//!
//! 1. `Index::writer` (the writing thread; `verify`, `compact`);
//! 2. `Core::merging` (a merge, on the merge thread or in `compact`);
//! 3. `Core::merge_claims` (choosing the run of a merge);
//! 4. `Core::manifest` (a commit, or allocating ids);
//! 5. `Core::state` (read or write);
//! 6. `Core::poison_cause`.
//!
//! The flush thread's slot and the merge thread's signal are taken alone,
//! except that `Merger::wait_for_segments` reads the state while it holds
//! the merge signal (so nothing that holds the state takes the signal).

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::error::{Error, Result};
use crate::format::{FileKind, Manifest};
use crate::plan::{Budget, Plan};

use super::compaction::MergeClaims;
use super::compaction::policy::MergePolicy;
use super::files::commit_manifest;
use super::fs::FileSystem;
use super::memtable::Memtable;
use super::schedule::Hooks;
use super::segment::Segment;

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
}

/// Counts of flushes and merges since the open, wherever they ran (the
/// writing thread, the flush thread, the merge thread, `compact`).
#[derive(Debug, Default)]
pub(super) struct Activity {
    pub(super) flushes: AtomicU64,
    pub(super) flush_failures: AtomicU64,
    pub(super) merges: AtomicU64,
    pub(super) merge_failures: AtomicU64,
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
    /// else the index's. A flush of the default
    /// memtable gets 4 tables instead of 10 (docs/ARCHITECTURE.md, "Small
    /// segments have fewer tables").
    pub(super) fn segment_plan(&self, keys: u64) -> Plan {
        // An index whose plan does not probe keeps its segments unprobed too.
        let budget = if self.plan.radius() == 0 {
            Budget::Unprobed
        } else {
            Budget::default()
        };
        match Plan::choose(keys, self.plan.k(), budget) {
            Ok(small)
                if self.small_segment_plans && small.tables().len() < self.plan.tables().len() =>
            {
                small
            }
            _ => self.plan.clone(),
        }
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
    pub(super) fn note_query(&self) {
        if !self.queried.load(Ordering::Relaxed) && !self.queried.swap(true, Ordering::Relaxed) {
            self.decode_segments();
        }
    }

    /// See [`note_query`](Self::note_query).
    #[cold]
    fn decode_segments(&self) {
        let up_to = self.decoded_tables_up_to;
        if up_to == 0 || !self.fs.background_threads() {
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
        let _ = std::thread::Builder::new()
            .name("simhashdb-decode".into())
            .spawn(move || {
                for segment in segments {
                    // A damaged table is left to the queries, which read
                    // it through its checked blocks and report it.
                    let _ = segment.decode_tables(up_to);
                }
            });
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
