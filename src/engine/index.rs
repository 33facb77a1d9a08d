//! [`Index`]: the persistent index, its options and its answers.
//!
//! Write path: a batch is encoded as one WAL frame, appended (and synced in
//! [`Durability::Sync`]), then applied to the memtable. When the memtable
//! passes its byte budget it is flushed. With the flush thread (the default),
//! the writing thread starts a new WAL, commits a manifest naming it beside
//! the old one, and swaps in an empty memtable; the full one, frozen, goes to
//! the flush thread, which writes its tables and doc map as a new segment and
//! commits a manifest naming the segment and no longer the old WAL. Without
//! it, the writing thread does all of that itself, under the writer lock.
//! Each commit is a whole manifest replaced atomically (temp file, sync,
//! rename, directory sync). Only once the segment is committed do queries see
//! it instead of the frozen memtable.
//!
//! Read path: a query takes the state's read lock, searches the memtable,
//! the frozen memtable if there is one, and every segment's tables, and keeps
//! a document only if no newer source (a newer memtable, a newer segment)
//! holds a version or tombstone of its id, and it is within the retention
//! window.
//!
//! File layouts: docs/FORMAT.md.

use std::cmp::Reverse;
use std::collections::binary_heap::PeekMut;
use std::collections::{BinaryHeap, HashSet};
use std::io::BufWriter;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{
    Arc, Condvar, Mutex, MutexGuard, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard,
};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::error::{Error, Result};
use crate::fingerprint::{FingerprintConfig, FingerprintError, Simhasher};
use crate::format::{
    DEFAULT_BLOCK_LEN, DocEntry, DocMapReader, DocMapWriter, EncodeError, FileKind, FormatError,
    MANIFEST_TEMP_FILE_NAME, Manifest, Ranges, Record, SegmentInfo, SegmentMeta, SegmentReader,
    SegmentWriter, SortedDocMapWriter, Tombstone, WAL_UNSYNCED_APPENDS, WalEnd, WalFrame,
    WalReader, encode_frame, encode_wal_header_with_flags, holds_whole_frame,
    looks_like_lost_write_back,
};
use crate::plan::{Budget, Plan};
use crate::search::{self, SortedTables};

use super::fs::{FileSystem, Mapped, RealFs, WritableFile};
use super::keys::{sort_keys, sort_keys_with};
use super::lock::{DirLock, LockError};
use super::memtable::{Doc as MemDoc, Memtable, Version};
use super::policy::{MergePolicy, TieredMergePolicy};
use super::repair::check_without_manifest;
use super::schedule::{Hooks, Point};

/// When an acknowledged write is safe.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Durability {
    /// An acknowledged write has reached the operating system: it survives
    /// the process being killed at any instant, not a power loss.
    #[default]
    Buffered,
    /// An acknowledged write has been synced to the device: it also survives
    /// power loss. A batch shares one sync.
    Sync,
}

/// How to open or create an index.
#[derive(Debug, Clone)]
pub struct Options {
    /// The table plan. `None`: an existing index keeps its recorded plan; a
    /// new one gets `Plan::auto(expected_n, k)`. `Some`: must equal the
    /// recorded plan of an existing index.
    pub plan: Option<Plan>,
    /// Distance the automatic plan is built for (new indexes only).
    pub k: u32,
    /// Expected number of fingerprints the automatic plan is sized for.
    pub expected_n: u64,
    /// The fingerprint configuration recorded in a new index. `None`: the
    /// default `Simhasher`'s for a new index, and no check for an existing
    /// one. `Some`: must equal the recorded configuration.
    pub fingerprint: Option<FingerprintConfig>,
    /// When writes are acknowledged.
    pub durability: Durability,
    /// Entries older than this are not returned (and are dropped by
    /// compaction). Recorded in the index; `None` keeps everything.
    pub retention: Option<Duration>,
    /// The memtable is flushed to a segment when it holds about this many
    /// bytes. Default 32 MiB: about 350,000 documents without names.
    pub memtable_bytes: usize,
    /// The file system under the engine (tests swap in a fault-injecting one);
    /// `None` is the real one. Only the real one takes the directory lock.
    pub file_system: Option<Arc<dyn FileSystem>>,
    /// Which segments to merge after a flush; `None` merges only on
    /// `compact()`. Default: [`TieredMergePolicy`] with a fan-in of 16.
    pub merge_policy: Option<Arc<dyn MergePolicy>>,
    /// Run the merge policy's merges on a background thread, so that writes
    /// go on while segments merge; `false` merges (and flushes) on the
    /// writing thread. With a custom `file_system` that does not allow
    /// background threads ([`FileSystem::background_threads`]; a simulated
    /// crash must stop every write at once) merges and flushes always run on
    /// the writing thread. Dropping the `Index` waits for a flush or merge in
    /// progress to finish.
    pub merge_thread: bool,
    /// With merges on the merge thread, a flush that leaves more segments
    /// than this waits while the merge thread works, so that under sustained
    /// ingest writes slow down rather than segments (each one probed by
    /// every query) pile up. Default 32. A merge policy that declines to
    /// merge never makes a writer wait.
    pub max_segments: usize,
    /// After opening, map the segments' pages (their tables first, then
    /// their doc maps) on a background thread (Linux), so that queries soon
    /// stop paying a page fault for each page they touch first. The pages
    /// stay evictable page cache.
    pub prefault: bool,
    /// Give a segment too small to need the index's plan the plan with
    /// fewer tables that the cost model prefers for its size (`Plan::auto`):
    /// with the default plan, a flush of the default memtable writes 4
    /// tables instead of 10, and queries probe 4 of them. Results are the
    /// same either way. `false` writes every segment in the index's plan.
    /// Default `true`; not recorded in the index (segments record their own
    /// plans).
    pub small_segment_plans: bool,
    /// Write a full memtable to its segment on a background thread while
    /// writes go on into a new one, so that a write does not wait for a
    /// flush unless the previous one is still running. Queries read both
    /// memtables meanwhile. Only with `merge_thread` (and so, like merges,
    /// never over a custom `file_system` that does not allow background
    /// threads); otherwise flushes run on the writing thread.
    /// `flush()` still returns once the segment is committed. Default: on
    /// when the machine has more than two cores. On two, the flush thread
    /// competes with the writing and merge threads for them: ingest was no
    /// faster, and the longest waits (backpressure) grew, though a write
    /// that fills the memtable waited less (docs/BENCHMARKS.md).
    pub flush_thread: bool,
    /// Code run at each point of the commit protocol, for tests that choose
    /// how the threads interleave ([`crate::engine::schedule`]).
    #[cfg(feature = "schedule-hooks")]
    pub schedule: Option<crate::engine::schedule::Schedule>,
    /// Create a new index in a directory that already holds other files.
    /// Default `false`: a new index needs a missing or empty directory, so
    /// that a mistyped path is refused ([`Error::NotEmpty`]) rather than
    /// turned into an index. Engine files without a manifest are refused
    /// either way ([`Error::ManifestMissing`]).
    pub create_in_non_empty_dir: bool,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            plan: None,
            k: 3,
            expected_n: 50_000_000,
            fingerprint: None,
            durability: Durability::Buffered,
            retention: None,
            memtable_bytes: 32 << 20,
            file_system: None,
            merge_policy: Some(Arc::new(TieredMergePolicy::default())),
            merge_thread: true,
            max_segments: 32,
            prefault: true,
            small_segment_plans: true,
            flush_thread: std::thread::available_parallelism().is_ok_and(|n| n.get() > 2),
            #[cfg(feature = "schedule-hooks")]
            schedule: None,
            create_in_non_empty_dir: false,
        }
    }
}

/// A document found by a query.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Match {
    /// The document id.
    pub id: u64,
    /// Its fingerprint.
    pub fingerprint: u64,
    /// Hamming distance from the query.
    pub distance: u32,
    /// Its name, if it was inserted with one.
    pub name: Option<String>,
}

/// A live document, as [`Index::get_doc`] and [`Index::for_each_doc`] return it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Doc {
    /// The document id.
    pub id: u64,
    /// Its fingerprint.
    pub fingerprint: u64,
    /// Its name, if it was inserted with one.
    pub name: Option<String>,
    /// When it was inserted, in milliseconds since the Unix epoch.
    pub timestamp_ms: u64,
}

/// What [`Index::verify`] read.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct VerifyReport {
    /// Files checked: the manifest, every WAL, every segment and doc map.
    pub files: usize,
    /// Bytes read and checked.
    pub bytes: u64,
    /// WALs that end in bytes which do not form a valid frame: what a
    /// crash in the middle of an append leaves, and what damage to the last
    /// frame looks like. Recovery drops those bytes. In a WAL of a
    /// [`Durability::Sync`] writer the last batch was acknowledged only if
    /// its frame was complete; see [`WalTail::complete_frame`].
    pub wal_tails: Vec<WalTail>,
}

/// The end of a WAL that recovery drops (docs/FORMAT.md, "WAL torn tail").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WalTail {
    /// The WAL.
    pub path: PathBuf,
    /// Where the dropped bytes start.
    pub offset: u64,
    /// How many bytes are dropped.
    pub bytes: u64,
    /// Whether the WAL's header says its frames were acknowledged before
    /// being synced ([`Durability::Buffered`]).
    pub unsynced_appends: bool,
    /// Whether the dropped bytes hold a whole frame whose header checks
    /// out and whose payload fails its checksum. An interrupted append
    /// under a process kill never leaves that (the frame's bytes are written
    /// in one call); a power cut can, and so can damage to an acknowledged
    /// last frame. In a `Sync` WAL that was not just through a power cut,
    /// treat it as a lost acknowledged write.
    pub complete_frame: bool,
}

/// A snapshot of the index's shape and size.
#[derive(Debug, Clone, PartialEq)]
pub struct Stats {
    /// The plan.
    pub plan: Plan,
    /// The recorded fingerprint configuration line.
    pub fingerprint_config: String,
    /// Live segments.
    pub segments: usize,
    /// Documents in segments (including versions later replaced or deleted
    /// until compaction drops them).
    pub segment_docs: u64,
    /// Tombstones in segments.
    pub tombstones: u64,
    /// Distinct fingerprints per table, summed over segments.
    pub segment_keys: u64,
    /// Table bytes per key per table, over all segments and each one's own
    /// tables (raw would be 8).
    pub table_bytes_per_key: f64,
    /// Bytes of segment and doc-map files.
    pub disk_bytes: u64,
    /// Ids with a version in the memtable (live or deleted).
    pub memtable_docs: usize,
    /// Approximate memtable bytes.
    pub memtable_bytes: usize,
    /// Ids with a version in a full memtable the flush thread is writing
    /// to a segment; 0 when no flush is running. Queries search it too, and
    /// its writes are still in the WAL.
    pub flushing_docs: usize,
}

/// A persistent, exact near-duplicate index of 64-bit fingerprints.
///
/// `Index` is `Send + Sync`: queries run from many threads while one writes
/// (writes are serialised).
#[derive(Debug)]
pub struct Index {
    core: Arc<Core>,
    durability: Durability,
    memtable_budget: usize,
    max_segments: usize,
    read_only: bool,
    writer: Mutex<Option<Writer>>,
    /// The background merge thread, if merges run there.
    merger: Option<Merger>,
    /// The background flush thread, if flushes run there.
    flusher: Option<Flusher>,
    /// Tells the prefault thread started by the open to stop early.
    stop_prefault: Arc<AtomicBool>,
    // Dropped last: the lock outlives every file operation.
    _lock: Option<DirLock>,
}

/// What the writing thread and the merge thread share.
#[derive(Debug)]
struct Core {
    dir: PathBuf,
    /// The manifest's index id, written into every new file.
    index_id: u64,
    fs: Arc<dyn FileSystem>,
    plan: Plan,
    /// [`Options::small_segment_plans`].
    small_segment_plans: bool,
    fingerprint_config: String,
    retention_ms: u64,
    merge_policy: Option<Arc<dyn MergePolicy>>,
    state: RwLock<State>,
    /// The manifest as last committed, plus ids allocated since (a commit
    /// writes it whole, so a flush and a merge never lose each other's edits).
    manifest: Mutex<Manifest>,
    /// Held through each merge: merges (background or `compact`) run one at
    /// a time.
    merging: Mutex<()>,
    poisoned: AtomicBool,
    /// What poisoned the index: the first failure's message.
    poison_cause: Mutex<Option<String>>,
    /// What runs at each schedule point (nothing without the
    /// `schedule-hooks` feature).
    hooks: Hooks,
}

#[derive(Debug)]
struct State {
    /// Where writes go. Shared with a flush in progress on the writing
    /// thread, which writes it without holding the lock; only the writing
    /// thread changes it, never during its own flush.
    memtable: Arc<Memtable>,
    /// A full memtable the flush thread is writing to a segment: newer than
    /// every segment, older than `memtable`. It leaves when its segment
    /// joins `segments`, under the same write lock.
    frozen: Option<Arc<Memtable>>,
    /// Newest first.
    segments: Vec<Arc<Segment>>,
}

#[derive(Debug)]
struct Writer {
    wal: Box<dyn WritableFile>,
    wal_id: u64,
    /// The WAL (id, file) of the memtable the flush thread was last given,
    /// which `sync()` syncs too (its segment may not be committed yet).
    frozen_wal: Option<(u64, Box<dyn WritableFile>)>,
    /// The sequence number of the next record logged: one more than the
    /// last one logged in any WAL (or than the last one recovered), since
    /// recovery ends at a gap between WALs.
    next_seq: u64,
}

impl Writer {
    /// Appends `frame`, the encoding of `records`, to the WAL at `path` (and
    /// syncs it with [`Durability::Sync`]); then the next sequence number
    /// follows the records'. Refuses, writing nothing, a frame whose first
    /// record does not follow the last one logged.
    fn append(
        &mut self,
        frame: &[u8],
        records: &[Record],
        durability: Durability,
        path: &Path,
    ) -> Result<()> {
        let first = records.first().map(Record::seq);
        let last = records.last().map(Record::seq);
        let contiguous = records.windows(2).all(|w| w[0].seq() + 1 == w[1].seq());
        if first != Some(self.next_seq) || !contiguous {
            return Err(Error::Io {
                path: path.to_path_buf(),
                op: "write",
                source: std::io::Error::other(format!(
                    "a frame of sequence numbers {first:?}..={last:?} would not continue the \
                     log at {}; nothing was written",
                    self.next_seq
                )),
            });
        }
        self.wal.write_all(frame).map_err(io_error(path, "write"))?;
        if durability == Durability::Sync {
            self.wal.sync().map_err(io_error(path, "sync"))?;
        }
        self.next_seq = last.map_or(self.next_seq, |seq| seq + 1);
        Ok(())
    }
}

impl State {
    /// The memtables, newest first: the one written to, then the one being
    /// flushed, if any.
    fn memtables(&self) -> impl Iterator<Item = &Memtable> {
        std::iter::once(&*self.memtable).chain(self.frozen.as_deref())
    }
}

/// The background flush thread and the job it is given.
#[derive(Debug)]
struct Flusher {
    shared: Arc<FlushShared>,
    handle: Option<JoinHandle<()>>,
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
    shutdown: bool,
}

/// Write `State::frozen` as segment `segment_id`, then commit a manifest
/// that names it and no longer names `old_wals` (the WALs it was logged in).
#[derive(Debug, Clone)]
struct FlushJob {
    segment_id: u64,
    old_wals: Vec<u64>,
}

impl Flusher {
    /// Starts the thread; after each flush it wakes the merge thread, if
    /// `merge` is its signal.
    fn start(core: Arc<Core>, merge: Option<Arc<MergeShared>>) -> std::io::Result<Flusher> {
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
    fn wait_idle(&self) {
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

/// The background merge thread and its wake-up signal.
#[derive(Debug)]
struct Merger {
    signal: Arc<MergeShared>,
    /// Notified when the thread finishes a merge or goes idle.
    progress: Arc<Condvar>,
    handle: Option<JoinHandle<()>>,
}

/// The merge thread's signal and the condition variable that wakes it.
type MergeShared = (Mutex<MergeSignal>, Condvar);

/// Tells the merge thread that a flush happened.
fn wake_merge(shared: &MergeShared) {
    let (signal, wake) = shared;
    lock(signal).pending = true;
    wake.notify_one();
}

#[derive(Debug, Default)]
struct MergeSignal {
    /// A flush happened since the thread last consulted the policy.
    pending: bool,
    /// The thread is consulting the policy or merging.
    running: bool,
    shutdown: bool,
}

impl Merger {
    fn start(core: Arc<Core>) -> std::io::Result<Merger> {
        core.hooks.reach(Point::StartMergeThread)?;
        let signal = Arc::new((Mutex::new(MergeSignal::default()), Condvar::new()));
        let progress = Arc::new(Condvar::new());
        let thread_signal = signal.clone();
        let thread_progress = progress.clone();
        let handle = std::thread::Builder::new()
            .name("simhashdb-merge".into())
            .spawn(move || {
                let (signal, wake) = &*thread_signal;
                loop {
                    {
                        let mut s = lock(signal);
                        while !s.pending && !s.shutdown {
                            s = wake.wait(s).unwrap_or_else(PoisonError::into_inner);
                        }
                        if s.shutdown {
                            core.hooks.pause(Point::MergeThreadStopped);
                            return;
                        }
                        s.pending = false;
                        s.running = true;
                    }
                    if !core.poisoned.load(Ordering::Acquire) {
                        let _merging = lock(&core.merging);
                        let result = core.apply_merge_policy_then(|| thread_progress.notify_all());
                        // A failed merge leaves the committed state intact;
                        // later writes fail (the files may be in an unknown
                        // state).
                        core.poison_on_error(result).ok();
                    }
                    lock(signal).running = false;
                    thread_progress.notify_all();
                }
            })?;
        Ok(Merger {
            signal,
            progress,
            handle: Some(handle),
        })
    }

    /// Waits while `core` has more than `max` segments and this thread has
    /// work to do (a merge running or a flush not yet considered).
    fn wait_for_segments(&self, core: &Core, max: usize) {
        let (signal, _) = &*self.signal;
        let mut s = lock(signal);
        while read_lock(&core.state).segments.len() > max
            && (s.pending || s.running)
            && !core.poisoned.load(Ordering::Acquire)
        {
            // A timeout as well, since a merge's commit and this check do
            // not share a lock.
            s = self
                .progress
                .wait_timeout(s, Duration::from_millis(50))
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }

    fn wake(&self) {
        wake_merge(&self.signal);
    }
}

impl Drop for Index {
    fn drop(&mut self) {
        self.stop_prefault.store(true, Ordering::Relaxed);
        // The flush thread first: the flush it finishes wakes the merge
        // thread.
        drop(self.flusher.take());
        drop(self.merger.take());
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

/// Stops the thread once a merge in progress, if any, has finished.
impl Drop for Merger {
    fn drop(&mut self) {
        let (signal, wake) = &*self.signal;
        lock(signal).shutdown = true;
        wake.notify_one();
        if let Some(handle) = self.handle.take() {
            // A panic there has already been reported.
            let _ = handle.join();
        }
    }
}

/// A live segment: its tables and doc map, mapped.
#[derive(Debug)]
pub(super) struct Segment {
    meta: SegmentMeta,
    seg_path: PathBuf,
    ids_path: PathBuf,
    /// The segment's own plan (its header's shape): the index's, or one
    /// with fewer tables for a small segment ([`Core::segment_plan`]).
    plan: Plan,
    tables: SegmentReader<Mapped>,
    /// The tables' mapping (also inside `tables`), for prefaulting.
    tables_map: Mapped,
    docs: DocMapReader<Mapped>,
    /// The doc map's mapping (also inside `docs`), for prefaulting.
    docs_map: Mapped,
    /// Set when a manifest no longer names the segment: its files are
    /// removed once the last reader drops it.
    obsolete: AtomicBool,
    /// Whether its contents are known to be sound: it was written by this
    /// process (from a memtable, or merged from sound segments), or
    /// [`Segment::verify`] passed. A merge verifies an input that is not,
    /// so that it never copies damage into a file that hides it.
    sound: AtomicBool,
    fs: Arc<dyn FileSystem>,
}

impl Drop for Segment {
    fn drop(&mut self) {
        if self.obsolete.load(Ordering::Acquire) {
            // Best effort: a file left behind is removed at the next open.
            let _ = self.fs.remove(&self.seg_path);
            let _ = self.fs.remove(&self.ids_path);
        }
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

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
fn named_file_error<'a>(
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

/// Reads the header of WAL `wal_id`, whose bytes are `bytes`, and checks
/// that it names itself: a WAL renamed or copied from elsewhere is refused.
fn open_wal<'a>(path: &Path, wal_id: u64, index_id: u64, bytes: &'a [u8]) -> Result<WalReader<'a>> {
    let reader = WalReader::new(bytes).map_err(|e| corrupted(path, &e))?;
    if reader.index_id() != index_id {
        return Err(foreign(path, reader.index_id(), index_id));
    }
    if reader.wal_id() != wal_id {
        return Err(Error::Corrupted {
            path: path.to_path_buf(),
            offset: 16,
            reason: format!(
                "the WAL's header names WAL {}, not {wal_id} as its file name says",
                reader.wal_id()
            ),
        });
    }
    Ok(reader)
}

/// A random id for a new index: keyed hashes of the clock, drawn from the
/// standard library's per-process random keys.
pub(super) fn new_index_id() -> u64 {
    use std::hash::BuildHasher;
    let state = std::collections::hash_map::RandomState::new();
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    state.hash_one((nanos, std::process::id()))
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
        LockError::Locked { dir } => Error::Locked { dir },
        LockError::Io { path, source } => Error::Io {
            path,
            op: "lock",
            source,
        },
    }
}

fn read_lock<T>(lock: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    // A panic while holding the lock leaves consistent data (every update is
    // a single assignment or completes before unlocking), so carry on.
    lock.read().unwrap_or_else(PoisonError::into_inner)
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // As for the state: every update completes before unlocking.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

fn write_lock<T>(lock: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    lock.write().unwrap_or_else(PoisonError::into_inner)
}

impl Index {
    /// Opens the index in `dir`, creating it (and `dir`) if it does not exist.
    /// Takes the directory's exclusive lock: a second writer gets
    /// [`Error::Locked`].
    pub fn open(dir: impl AsRef<Path>, options: Options) -> Result<Index> {
        Index::open_with(dir.as_ref(), options, false)
    }

    /// Opens an existing index for queries only, with a shared lock: many
    /// readers (in any process) may open it at once, but not while a writer
    /// holds it. A read-only index sees the state of its open.
    pub fn open_read_only(dir: impl AsRef<Path>) -> Result<Index> {
        Index::open_with(dir.as_ref(), Options::default(), true)
    }

    fn open_with(dir: &Path, options: Options, read_only: bool) -> Result<Index> {
        let (fs, lock): (Arc<dyn FileSystem>, Option<DirLock>) = match &options.file_system {
            Some(fs) => (fs.clone(), None),
            None => {
                if !read_only {
                    RealFs
                        .create_dir_all(dir)
                        .map_err(io_error(dir, "create directory"))?;
                }
                let manifest_path = dir.join(FileKind::Manifest.file_name(0));
                if !manifest_path.exists() {
                    // Before the lock file is created in a directory that
                    // may not be ours; checked again under the lock.
                    check_without_manifest(
                        dir,
                        &RealFs,
                        read_only || options.create_in_non_empty_dir,
                    )?;
                }
                if read_only && !manifest_path.exists() {
                    // Say so before the lock's own error about a missing LOCK.
                    return Err(Error::Io {
                        path: manifest_path,
                        op: "read",
                        source: std::io::Error::new(
                            std::io::ErrorKind::NotFound,
                            "no index here: the directory has no MANIFEST",
                        ),
                    });
                }
                let lock = if read_only {
                    DirLock::shared(dir)
                } else {
                    DirLock::exclusive(dir)
                };
                (Arc::new(RealFs), Some(lock.map_err(lock_error)?))
            }
        };
        if options.file_system.is_some() && !read_only {
            fs.create_dir_all(dir)
                .map_err(io_error(dir, "create directory"))?;
        }
        if !read_only {
            // A new directory's own entry must be durable too.
            if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
                fs.sync_dir(parent).map_err(io_error(parent, "sync"))?;
            }
        }
        let manifest_path = dir.join(FileKind::Manifest.file_name(0));
        let manifest = match fs.read(&manifest_path) {
            Ok(bytes) => Manifest::decode(&bytes).map_err(|e| corrupted(&manifest_path, &e))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && !read_only => {
                // Only an empty directory, or what an interrupted creation
                // left (no data), becomes a new index.
                let leftovers =
                    check_without_manifest(dir, fs.as_ref(), options.create_in_non_empty_dir)?;
                for path in leftovers {
                    fs.remove(&path).map_err(io_error(&path, "remove"))?;
                }
                Index::create(dir, fs.as_ref(), &options)?
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                check_without_manifest(dir, fs.as_ref(), true)?;
                return Err(io_error(&manifest_path, "read")(e));
            }
            Err(e) => return Err(io_error(&manifest_path, "read")(e)),
        };
        let plan = Plan::from_shape(manifest.shape, manifest.k)?;
        if let Some(given) = &options.plan
            && (given.shape() != plan.shape() || given.k() != plan.k())
        {
            return Err(Error::Mismatch {
                what: "plan",
                recorded: plan.to_string(),
                given: given.to_string(),
            });
        }
        if let Some(given) = &options.fingerprint
            && given.to_string() != manifest.fingerprint_config
        {
            return Err(Error::Mismatch {
                what: "fingerprint config",
                recorded: manifest.fingerprint_config.clone(),
                given: given.to_string(),
            });
        }

        check_manifest_counters(&manifest_path, &manifest)?;
        let mut manifest = manifest;
        if !read_only {
            skip_ids_of_debris(dir, fs.as_ref(), &mut manifest)?;
        }
        let mut segments = Vec::with_capacity(manifest.segments.len());
        for meta in &manifest.segments {
            segments.push(Arc::new(Segment::open(
                dir,
                &fs,
                *meta,
                plan.k(),
                manifest.index_id,
            )?));
        }
        // Newest first.
        segments.sort_by_key(|s| Reverse(s.meta.max_seq));
        // Maps to prefault once the open is otherwise done.
        let prefault: Vec<Mapped> = if options.prefault && options.file_system.is_none() {
            // Tables first: every query reads them, and only queries that
            // find a document read the doc map.
            let tables = segments.iter().map(|s| s.tables_map.clone());
            tables
                .chain(segments.iter().map(|s| s.docs_map.clone()))
                .collect()
        } else {
            Vec::new()
        };

        let mut memtable = Memtable::new(&plan);
        let mut next_seq = manifest.next_seq;
        // The valid frames of every WAL, in order, and whether a WAL ended
        // in a torn tail.
        let mut logged: Vec<u8> = Vec::new();
        let mut torn = false;
        // Whether the last WAL read says its frames were acknowledged unsynced.
        let mut last_unsynced = false;
        // The sequence number of the last record replayed.
        let mut last_seq: Option<u64> = None;
        for (i, &wal_id) in manifest.wal_ids.iter().enumerate() {
            if torn {
                // A later WAL's frames came after the ones lost.
                break;
            }
            let path = dir.join(FileKind::Wal.file_name(wal_id));
            let bytes = fs.read(&path).map_err(named_file_error(&path, "read"))?;
            let reader = open_wal(&path, wal_id, manifest.index_id, &bytes)?;
            last_unsynced = reader.unsynced_appends();
            let (frames, end) = reader.read_all();
            // Sequence numbers run on from one WAL to the next (a WAL is
            // started only after a write to the one before). A gap means a
            // power cut took the end of the earlier WAL, whose appends were
            // not synced, but not the start of this one, written after: a
            // Buffered WAL's unsynced tail can be cut at a frame boundary,
            // leaving no torn tail to see. Replaying this one would leave a
            // hole, so recovery keeps the prefix before the gap.
            check_wal_seqs(&path, &frames)?;
            let first_seq = frames
                .first()
                .and_then(|frame| frame.records.first())
                .map(Record::seq);
            if i > 0 && first_seq.is_some() && first_seq != last_seq.map(|s| s + 1) {
                torn = true;
                break;
            }
            for frame in frames {
                logged.extend_from_slice(
                    bytes
                        .get(frame.offset as usize..frame.end as usize)
                        .unwrap_or_default(),
                );
                for record in frame.records {
                    let seq = apply(&mut memtable, record);
                    last_seq = Some(seq);
                    next_seq = next_seq.max(seq + 1);
                }
            }
            match end {
                WalEnd::Clean => {}
                WalEnd::TornTail { .. } => torn = true,
                // Frames acknowledged without a sync may be lost in any
                // order by a power cut (pages written back out of order): if
                // the damage looks like such a lost page, keep the prefix
                // before it and drop the rest, later WALs included
                // (docs/FORMAT.md, "WAL torn tail").
                WalEnd::Corrupted { error, next_valid }
                    if last_unsynced
                        && looks_like_lost_write_back(&bytes, error.offset, next_valid) =>
                {
                    torn = true;
                    break;
                }
                WalEnd::Corrupted { error, .. } | WalEnd::Unparsable { error } => {
                    return Err(corrupted(&path, &error));
                }
            }
        }

        let writer = if read_only {
            (None, manifest)
        } else {
            let mut manifest = manifest;
            manifest.next_seq = next_seq;
            let path = if logged.is_empty()
                && !torn
                && manifest.wal_ids.len() == 1
                && last_unsynced == (options.durability == Durability::Buffered)
            {
                // A crash may have come between a rename and its directory
                // sync: make what was recovered durable before building on it.
                fs.sync_dir(dir).map_err(io_error(dir, "sync"))?;
                dir.join(FileKind::Wal.file_name(manifest.wal_ids[0]))
            } else {
                // Files of earlier failed or interrupted work first, so that
                // the copy below finds the space they held (a full disk).
                remove_orphans(dir, fs.as_ref(), &manifest);
                // What was replayed may be visible without being durable
                // (unsynced when the last process died, or lost to a failed
                // sync), so new writes must not be appended after it: log it
                // again in a new, synced WAL (dropping any torn tail), and
                // commit a manifest naming that one only.
                let wal_id = manifest.next_wal_id;
                manifest.next_wal_id += 1;
                manifest.wal_ids = vec![wal_id];
                manifest.generation += 1;
                let path = dir.join(FileKind::Wal.file_name(wal_id));
                let mut bytes = encode_wal_header_with_flags(
                    manifest.index_id,
                    wal_id,
                    wal_flags(options.durability),
                );
                bytes.extend_from_slice(&logged);
                write_file(fs.as_ref(), &path, &bytes)?;
                if let Err(e) = commit_manifest(dir, fs.as_ref(), &manifest) {
                    // Unless the rename went through (only the directory
                    // sync failed), nothing names the new WAL: remove it
                    // rather than leave a copy of the log on a full disk.
                    if !manifest_names_wal(dir, fs.as_ref(), wal_id) {
                        let _ = fs.remove(&path);
                    }
                    return Err(e);
                }
                path
            };
            let wal = fs.open_append(&path).map_err(io_error(&path, "open"))?;
            remove_orphans(dir, fs.as_ref(), &manifest);
            let wal_id = manifest.wal_ids.last().copied().unwrap_or(0);
            (
                Some(Writer {
                    wal,
                    wal_id,
                    frozen_wal: None,
                    next_seq,
                }),
                manifest,
            )
        };
        let (writer, manifest) = writer;

        let core = Arc::new(Core {
            dir: dir.to_path_buf(),
            index_id: manifest.index_id,
            fs,
            plan,
            small_segment_plans: options.small_segment_plans,
            fingerprint_config: manifest.fingerprint_config.clone(),
            retention_ms: manifest.retention_ms,
            merge_policy: options.merge_policy.clone(),
            state: RwLock::new(State {
                memtable: Arc::new(memtable),
                frozen: None,
                segments,
            }),
            manifest: Mutex::new(manifest),
            merging: Mutex::new(()),
            poisoned: AtomicBool::new(false),
            poison_cause: Mutex::new(None),
            #[cfg(feature = "schedule-hooks")]
            hooks: Hooks::new(options.schedule.clone()),
            #[cfg(not(feature = "schedule-hooks"))]
            hooks: Hooks::default(),
        });
        let merger = if !read_only
            && options.merge_thread
            && core.fs.background_threads()
            && core.merge_policy.is_some()
        {
            Some(Merger::start(core.clone()).map_err(io_error(dir, "start the merge thread"))?)
        } else {
            None
        };
        let flusher = if !read_only
            && options.flush_thread
            && options.merge_thread
            && core.fs.background_threads()
        {
            let merge = merger.as_ref().map(|m| m.signal.clone());
            Some(
                Flusher::start(core.clone(), merge)
                    .map_err(io_error(dir, "start the flush thread"))?,
            )
        } else {
            None
        };
        let stop_prefault = Arc::new(AtomicBool::new(false));
        if !prefault.is_empty() {
            // Map the tables' pages in the background, started last so that
            // nothing above waits for the address-space lock it takes: the
            // open stays quick, and queries soon stop taking a page fault per
            // first touch.
            // It stops when the index is dropped.
            let stop = stop_prefault.clone();
            let spawned = std::thread::Builder::new()
                .name("simhashdb-prefault".into())
                .spawn(move || {
                    let stopped = || stop.load(Ordering::Relaxed);
                    prefault.iter().for_each(|m| m.prefault_until(stopped));
                });
            // Without the thread, pages fault in as queries touch them.
            drop(spawned);
        }
        Ok(Index {
            core,
            durability: options.durability,
            memtable_budget: options.memtable_bytes,
            max_segments: options.max_segments,
            read_only,
            writer: Mutex::new(writer),
            merger,
            flusher,
            stop_prefault,
            _lock: lock,
        })
    }

    /// Creates a new index: an empty WAL and the first manifest.
    fn create(dir: &Path, fs: &dyn FileSystem, options: &Options) -> Result<Manifest> {
        let plan = match &options.plan {
            Some(plan) => plan.clone(),
            None => Plan::auto(options.expected_n, options.k)?,
        };
        let config = options
            .fingerprint
            .unwrap_or_else(|| Simhasher::default().config());
        let retention_ms = options.retention.map_or(0, |r| {
            u64::try_from(r.as_millis()).unwrap_or(u64::MAX).max(1)
        });
        let manifest = Manifest {
            index_id: new_index_id(),
            shape: plan.shape(),
            k: plan.k(),
            fingerprint_config: config.to_string(),
            retention_ms,
            generation: 0,
            next_segment_id: 1,
            next_wal_id: 1,
            next_seq: 1,
            wal_ids: Vec::new(),
            segments: Vec::new(),
        };
        // A creation interrupted before its manifest was committed may have
        // left a WAL behind: never create a file over it.
        let mut manifest = manifest;
        skip_ids_of_debris(dir, fs, &mut manifest)?;
        let wal_id = manifest.next_wal_id;
        manifest.next_wal_id += 1;
        manifest.wal_ids = vec![wal_id];
        new_wal_file(dir, fs, manifest.index_id, wal_id, options.durability)?;
        if let Err(e) = commit_manifest(dir, fs, &manifest) {
            // Unless the rename went through, the new WAL holds nothing and
            // nothing names it.
            if !manifest_names_wal(dir, fs, wal_id) {
                let _ = fs.remove(&dir.join(FileKind::Wal.file_name(wal_id)));
            }
            return Err(e);
        }
        Ok(manifest)
    }

    /// The directory of the index.
    pub fn dir(&self) -> &Path {
        &self.core.dir
    }

    /// The index's plan (its `k` is the largest distance queries may ask for).
    pub fn plan(&self) -> &Plan {
        &self.core.plan
    }

    /// A [`Simhasher`] for the fingerprint configuration recorded in the
    /// index: texts fingerprinted with it are comparable with the index's
    /// fingerprints. Fails if the recorded configuration is one this version
    /// cannot build (a later algorithm version, or an IDF table: use
    /// [`Simhasher::from_config_with_idf`] with the recorded
    /// [`Stats::fingerprint_config`]).
    pub fn simhasher(&self) -> std::result::Result<Simhasher, FingerprintError> {
        Simhasher::from_config(&self.core.fingerprint_config.parse()?)
    }

    /// Inserts document `id` with `fingerprint`, replacing any earlier version of `id`.
    pub fn insert(&self, id: u64, fingerprint: u64) -> Result<()> {
        self.insert_batch([(id, fingerprint, None::<String>)])
    }

    /// Inserts document `id` with a name (a URL or path, at most
    /// [`MAX_NAME_LEN`](crate::format::MAX_NAME_LEN) bytes) returned with matches.
    pub fn insert_named(&self, id: u64, fingerprint: u64, name: impl Into<String>) -> Result<()> {
        self.insert_batch([(id, fingerprint, Some(name.into()))])
    }

    /// Inserts many documents as one write: all or none survive a crash, and
    /// in [`Durability::Sync`] they share one sync.
    pub fn insert_batch<I, S>(&self, docs: I) -> Result<()>
    where
        I: IntoIterator<Item = (u64, u64, Option<S>)>,
        S: Into<String>,
    {
        let timestamp = now_ms();
        let mut records = Vec::new();
        for (id, fingerprint, name) in docs {
            let name: Option<String> = name.map(Into::into);
            check_name(name.as_deref())?;
            records.push(Record::Insert {
                seq: 0,
                id,
                fingerprint,
                timestamp,
                name,
            });
        }
        let mut writer = self.writer()?;
        if records.is_empty() {
            // Nothing to log (a WAL frame holds at least one record).
            return Ok(());
        }
        self.write(&mut writer, records)
    }

    /// Deletes document `id` (a no-op for queries if it does not exist).
    pub fn delete(&self, id: u64) -> Result<()> {
        let record = Record::Delete {
            seq: 0,
            id,
            timestamp: now_ms(),
        };
        let mut writer = self.writer()?;
        self.write(&mut writer, vec![record])
    }

    /// Inserts `id` unless a live document lies within `k` of `fingerprint`;
    /// then returns those instead, and writes nothing. Atomic with respect to
    /// other writes: of two near-identical documents inserted at once, one is
    /// kept and the other gets the first as its match.
    pub fn insert_if_new(
        &self,
        id: u64,
        fingerprint: u64,
        k: u32,
    ) -> Result<std::result::Result<(), Vec<Match>>> {
        self.insert_if_new_named(id, fingerprint, None, k)
    }

    /// [`insert_if_new`](Index::insert_if_new) with a name stored for the
    /// inserted document.
    pub fn insert_if_new_named(
        &self,
        id: u64,
        fingerprint: u64,
        name: Option<String>,
        k: u32,
    ) -> Result<std::result::Result<(), Vec<Match>>> {
        check_name(name.as_deref())?;
        let mut writer = self.writer()?;
        let matches = self.query(fingerprint, k)?;
        if !matches.is_empty() {
            return Ok(Err(matches));
        }
        let record = Record::Insert {
            seq: 0,
            id,
            fingerprint,
            timestamp: now_ms(),
            name,
        };
        self.write(&mut writer, vec![record])?;
        Ok(Ok(()))
    }

    /// The fingerprint of document `id`, if it is live.
    pub fn get(&self, id: u64) -> Result<Option<u64>> {
        Ok(self.get_doc(id)?.map(|doc| doc.fingerprint))
    }

    /// Document `id` with its name and insertion time, if it is live.
    pub fn get_doc(&self, id: u64) -> Result<Option<Doc>> {
        let state = read_lock(&self.core.state);
        for memtable in state.memtables() {
            match memtable.version(id) {
                Some(Version::Live(doc)) => {
                    return Ok(self.core.fresh(doc.timestamp).then(|| Doc {
                        id,
                        fingerprint: doc.fingerprint,
                        name: doc.name.as_deref().map(str::to_owned),
                        timestamp_ms: doc.timestamp,
                    }));
                }
                Some(Version::Deleted { .. }) => return Ok(None),
                None => {}
            }
        }
        for segment in &state.segments {
            if let Some(entry) = segment.by_id(id)? {
                if segment.deletes_here(&entry)? {
                    return Ok(None);
                }
                return Ok(self.core.fresh(entry.timestamp).then(|| public_doc(&entry)));
            }
            if segment.tombstone(id)?.is_some() {
                return Ok(None);
            }
        }
        Ok(None)
    }

    /// Calls `f` once for every live document, from a consistent snapshot
    /// taken when the call starts: the memtables' in id order (the one
    /// written to, then one being flushed), then each segment's in
    /// fingerprint order.
    ///
    /// `f` runs without any lock held: it may query and write to the index
    /// (what it writes is not part of the walk). The snapshot holds a copy of
    /// the memtable's versions (up to the memtable's budget; names are
    /// shared, not copied) and keeps the segments of the walk, and their
    /// files, alive until it ends.
    pub fn for_each_doc(&self, mut f: impl FnMut(&Doc)) -> Result<()> {
        let snapshot = {
            let state = read_lock(&self.core.state);
            // Copied: the writing thread changes it in place. The frozen
            // memtable and the segments never change.
            let memtable: Vec<(u64, Version)> = state
                .memtable
                .versions()
                .map(|(id, version)| (id, version.clone()))
                .collect();
            (memtable, state.frozen.clone(), state.segments.clone())
        };
        let (memtable, frozen, segments) = snapshot;
        self.core.hooks.pause(Point::WalkSnapshotTaken);
        // `memtable` is sorted by id.
        let in_memtable = |id: u64| memtable.binary_search_by_key(&id, |(i, _)| *i).is_ok();
        let in_memtables =
            |id: u64| in_memtable(id) || frozen.as_ref().is_some_and(|m| m.version(id).is_some());
        let frozen_versions = frozen
            .iter()
            .flat_map(|frozen| frozen.versions())
            .filter(|&(id, _)| !in_memtable(id));
        for (id, version) in memtable
            .iter()
            .map(|(id, v)| (*id, v))
            .chain(frozen_versions)
        {
            if let Version::Live(doc) = version
                && self.core.fresh(doc.timestamp)
            {
                f(&Doc {
                    id,
                    fingerprint: doc.fingerprint,
                    name: doc.name.as_deref().map(str::to_owned),
                    timestamp_ms: doc.timestamp,
                });
            }
        }
        for (s, segment) in segments.iter().enumerate() {
            for entry in segment.docs.entries() {
                let entry = entry.map_err(|e| corrupted(&segment.ids_path, &e))?;
                if self.core.fresh(entry.timestamp)
                    && !in_memtables(entry.id)
                    && !in_segments(&segments[..s], entry.id)?
                    && !segment.deletes_here(&entry)?
                {
                    f(&public_doc(&entry));
                }
            }
        }
        Ok(())
    }

    /// Reads every file the index consists of and checks every checksum and
    /// structural invariant: the manifest, each WAL (a torn tail is not
    /// damage: it is what a crash mid-append leaves, and recovery drops it),
    /// and each segment's tables (every block decoded) and doc map. The first
    /// damage found is returned as [`Error::Corrupted`] with its file and
    /// offset.
    pub fn verify(&self) -> Result<VerifyReport> {
        let _writer = if self.read_only {
            None
        } else {
            // Hold off flushes so the files stay as the manifest says.
            Some(self.writer.lock().unwrap_or_else(PoisonError::into_inner))
        };
        if let Some(flusher) = &self.flusher {
            flusher.wait_idle();
        }
        // And merges.
        let _merging = lock(&self.core.merging);
        let mut report = VerifyReport::default();
        let manifest_path = self.core.dir.join(FileKind::Manifest.file_name(0));
        let bytes = self
            .core
            .fs
            .read(&manifest_path)
            .map_err(named_file_error(&manifest_path, "read"))?;
        let manifest = Manifest::decode(&bytes).map_err(|e| corrupted(&manifest_path, &e))?;
        report.files += 1;
        report.bytes += bytes.len() as u64;
        check_manifest_counters(&manifest_path, &manifest)?;
        for &wal_id in &manifest.wal_ids {
            let path = self.core.dir.join(FileKind::Wal.file_name(wal_id));
            let bytes = self
                .core
                .fs
                .read(&path)
                .map_err(named_file_error(&path, "read"))?;
            let reader = open_wal(&path, wal_id, manifest.index_id, &bytes)?;
            let unsynced_appends = reader.unsynced_appends();
            let (frames, end) = reader.read_all();
            check_wal_seqs(&path, &frames)?;
            match end {
                WalEnd::Clean => {}
                WalEnd::TornTail { offset } => report.wal_tails.push(WalTail {
                    path: path.clone(),
                    offset,
                    bytes: bytes.len() as u64 - offset,
                    unsynced_appends,
                    complete_frame: holds_whole_frame(&bytes, offset),
                }),
                WalEnd::Corrupted { error, .. } | WalEnd::Unparsable { error } => {
                    return Err(corrupted(&path, &error));
                }
            }
            report.files += 1;
            report.bytes += bytes.len() as u64;
        }
        // The segments' list, not the lock: queries go on meanwhile (nothing
        // else changes it while this holds the writer and merge locks).
        let segments = read_lock(&self.core.state).segments.clone();
        for segment in &segments {
            segment.verify()?;
            report.files += 2;
            report.bytes += segment.meta.seg_file_len + segment.meta.ids_file_len;
        }
        // Queries take the newest version of an id from the segment with
        // the highest sequence numbers: the segments' ranges must not
        // overlap (each flush and merge covers a run of writes of its own).
        let mut ranges: Vec<&SegmentMeta> = segments
            .iter()
            .map(|s| &s.meta)
            .filter(|m| m.doc_count > 0 || m.tombstone_count > 0)
            .collect();
        ranges.sort_by_key(|m| m.min_seq);
        for pair in ranges.windows(2) {
            if let [older, newer] = pair
                && newer.min_seq <= older.max_seq
            {
                return Err(Error::Corrupted {
                    path: manifest_path.clone(),
                    offset: 0,
                    reason: format!(
                        "segments {} and {} hold overlapping sequence numbers ({}..={} and {}..={})",
                        older.id,
                        newer.id,
                        older.min_seq,
                        older.max_seq,
                        newer.min_seq,
                        newer.max_seq
                    ),
                });
            }
        }
        Ok(report)
    }

    /// Every live document within distance `k` of `fingerprint`, sorted by
    /// (distance, id). `k` above the plan's `k` is refused.
    pub fn query(&self, fingerprint: u64, k: u32) -> Result<Vec<Match>> {
        search::check_distance(&self.core.plan, k)?;
        let state = read_lock(&self.core.state);
        let mut matches = Vec::new();
        let frozen = state.frozen.iter().flat_map(|frozen| {
            frozen
                .matching(fingerprint, k)
                .into_iter()
                .filter(|(id, _)| state.memtable.version(*id).is_none())
        });
        for (id, doc) in state
            .memtable
            .matching(fingerprint, k)
            .into_iter()
            .chain(frozen)
        {
            if self.core.fresh(doc.timestamp) {
                matches.push(Match {
                    id,
                    fingerprint: doc.fingerprint,
                    distance: (doc.fingerprint ^ fingerprint).count_ones(),
                    name: doc.name.as_deref().map(str::to_owned),
                });
            }
        }
        for (s, segment) in state.segments.iter().enumerate() {
            for found in segment.matching_fingerprints(fingerprint, k)? {
                let distance = (found ^ fingerprint).count_ones();
                for entry in segment.docs.by_fingerprint(found) {
                    let entry = entry.map_err(|e| corrupted(&segment.ids_path, &e))?;
                    if self.core.fresh(entry.timestamp)
                        && !shadowed(&state, s, entry.id)?
                        && !segment.deletes_here(&entry)?
                    {
                        matches.push(Match {
                            id: entry.id,
                            fingerprint: found,
                            distance,
                            name: entry.name.map(str::to_owned),
                        });
                    }
                }
            }
        }
        matches.sort_unstable_by_key(|m| (m.distance, m.id));
        Ok(matches)
    }

    /// Syncs the WAL: every acknowledged write survives power loss afterwards.
    pub fn sync(&self) -> Result<()> {
        let mut writer = self.writer()?;
        let w = writer.as_mut().ok_or(Error::ReadOnly)?;
        if let Some((wal_id, frozen_wal)) = &mut w.frozen_wal {
            // Its memtable's segment may not be committed yet.
            let path = self.core.dir.join(FileKind::Wal.file_name(*wal_id));
            let result = frozen_wal.sync().map_err(io_error(&path, "sync"));
            self.core.poison_on_error(result)?;
        }
        let path = self.wal_path(w);
        let result = w.wal.sync().map_err(io_error(&path, "sync"));
        self.core.poison_on_error(result)
    }

    /// Writes the memtable to a new segment (nothing if it is empty), and
    /// returns once the segment is committed. With the merge thread, merges
    /// the flush calls for may still be running when this returns.
    pub fn flush(&self) -> Result<()> {
        let mut writer = self.writer()?;
        self.flush_locked(&mut writer, true)
    }

    /// Merges every segment into one, dropping replaced, deleted and expired
    /// documents and the tombstones that no longer hide anything. Every
    /// segment not written by this process is verified first (as
    /// [`verify`](Index::verify) does): a damaged one is refused with
    /// [`Error::Corrupted`] and nothing is written.
    pub fn compact(&self) -> Result<()> {
        let mut writer = self.writer()?;
        {
            // Refuse damaged segments before anything is written (a refusal
            // is not a failed write: the index is not poisoned), even one
            // that a merge would leave as it is.
            let _merging = lock(&self.core.merging);
            let segments: Vec<Arc<Segment>> = read_lock(&self.core.state).segments.clone();
            for segment in &segments {
                if !segment.sound.load(Ordering::Acquire) {
                    segment.verify()?;
                }
            }
        }
        self.flush_locked(&mut writer, true)?;
        // Waits for a background merge in progress.
        let _merging = lock(&self.core.merging);
        let segments = read_lock(&self.core.state).segments.len();
        let result = self.core.merge_newest(segments);
        self.core.poison_on_error(result)
    }

    /// Sizes and counts.
    pub fn stats(&self) -> Stats {
        let state = read_lock(&self.core.state);
        let mut stats = Stats {
            plan: self.core.plan.clone(),
            fingerprint_config: self.core.fingerprint_config.clone(),
            segments: state.segments.len(),
            segment_docs: 0,
            tombstones: 0,
            segment_keys: 0,
            table_bytes_per_key: 0.0,
            disk_bytes: 0,
            memtable_docs: state.memtable.len(),
            memtable_bytes: state.memtable.approximate_bytes(),
            flushing_docs: state.frozen.as_ref().map_or(0, |m| m.len()),
        };
        let mut table_bytes = 0u64;
        let mut table_keys = 0u64;
        for segment in &state.segments {
            table_keys += segment.meta.key_count * segment.tables.table_count() as u64;
            stats.segment_docs += segment.meta.doc_count;
            stats.tombstones += segment.meta.tombstone_count;
            stats.segment_keys += segment.meta.key_count;
            stats.disk_bytes += segment.meta.seg_file_len + segment.meta.ids_file_len;
            table_bytes += (0..segment.tables.table_count())
                .filter_map(|t| segment.tables.table(t).ok())
                .map(|table| table.size_bytes())
                .sum::<u64>();
        }
        if table_keys > 0 {
            stats.table_bytes_per_key = table_bytes as f64 / table_keys as f64;
        }
        stats
    }

    fn writer(&self) -> Result<MutexGuard<'_, Option<Writer>>> {
        if self.read_only {
            return Err(Error::ReadOnly);
        }
        let guard = self.writer.lock().unwrap_or_else(PoisonError::into_inner);
        self.core.check_poisoned()?;
        Ok(guard)
    }

    fn wal_path(&self, writer: &Writer) -> PathBuf {
        self.core.dir.join(FileKind::Wal.file_name(writer.wal_id))
    }

    /// Logs `records` (assigning their sequence numbers), then applies them.
    ///
    /// Once the records are logged the write has happened, and its result
    /// says so: a flush it then starts, or the failure of an earlier
    /// background flush it then discovers, poisons the index (the next call
    /// fails, naming the cause) without turning this result into an error.
    fn write(&self, writer: &mut Option<Writer>, mut records: Vec<Record>) -> Result<()> {
        let w = writer.as_mut().ok_or(Error::ReadOnly)?;
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
        let path = self.wal_path(w);
        let logged = w.append(&frame, &records, self.durability, &path);
        self.core.poison_on_error(logged)?;
        self.core.hooks.pause(Point::WriteLogged);
        let full = {
            let mut state = write_lock(&self.core.state);
            let memtable = Arc::get_mut(&mut state.memtable)
                .unwrap_or_else(|| unreachable!("a flush shares the memtable only while it runs"));
            for record in records {
                apply(memtable, record);
            }
            state.memtable.approximate_bytes() >= self.memtable_budget
        };
        if full {
            // A failure has poisoned the index; the next call reports it.
            let _ = self.flush_locked(writer, false);
        }
        Ok(())
    }

    /// Flushes the memtable, then lets the merge policy act: on the merge
    /// thread if there is one, here otherwise. With the flush thread the
    /// memtable is handed to it (after the previous flush ends), and this
    /// waits for its segment only if `wait`.
    fn flush_locked(&self, writer: &mut Option<Writer>, wait: bool) -> Result<()> {
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
                merger.wait_for_segments(&self.core, self.max_segments);
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
                merger.wait_for_segments(&self.core, self.max_segments);
                Ok(())
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
        let fresh = Arc::new(Memtable::with_capacity(&core.plan, capacity));
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

    /// Creates WAL `wal_id` (its header synced) and opens it for appends.
    fn create_wal(&self, wal_id: u64) -> Result<Box<dyn WritableFile>> {
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

    /// Writes the memtable as a new segment, starts a new WAL, and commits a
    /// manifest naming both (and no longer the old WALs).
    fn flush_memtable(&self, w: &mut Writer) -> Result<()> {
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
        let fresh = Arc::new(Memtable::with_capacity(&core.plan, capacity));
        let meta = segment.meta;
        let old_wals = core.commit(
            |manifest| {
                manifest.segments.push(meta);
                manifest.next_seq = w.next_seq;
                std::mem::replace(&mut manifest.wal_ids, vec![new_wal_id])
            },
            |state| {
                state.segments.insert(0, Arc::new(segment));
                state.memtable = fresh;
            },
        )?;
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
        let Some(m) = read_lock(&self.state).frozen.clone() else {
            unreachable!("the flush thread is given a job only with a frozen memtable")
        };
        let segment = self.write_memtable(&m, job.segment_id)?;
        drop(m);
        self.hooks.pause(Point::FlushWritten);
        let meta = segment.meta;
        self.commit(
            |manifest| {
                manifest.segments.push(meta);
                manifest.wal_ids.retain(|id| !job.old_wals.contains(id));
            },
            |state| {
                state.segments.insert(0, Arc::new(segment));
                state.frozen = None;
            },
        )?;
        self.hooks.pause(Point::FlushCommitted);
        self.remove_wals(&job.old_wals);
        Ok(())
    }

    /// Commits the last committed manifest as `edit` changes it (a new
    /// generation), then, still holding the manifest's lock so that the
    /// query state changes in commit order, makes the matching change to the
    /// state under its write lock. Returns what `edit` returns.
    fn commit<T>(
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
    fn next_segment_and_wal_ids(&self) -> (u64, u64) {
        let mut m = lock(&self.manifest);
        let ids = (m.next_segment_id, m.next_wal_id);
        m.next_segment_id += 1;
        m.next_wal_id += 1;
        ids
    }

    /// Removes WALs the committed manifest no longer names (best effort: a
    /// file left behind is removed at the next open).
    fn remove_wals(&self, wal_ids: &[u64]) {
        for &id in wal_ids {
            let _ = self.fs.remove(&self.dir.join(FileKind::Wal.file_name(id)));
        }
    }

    /// Writes memtable `m` as segment `segment_id`: its doc map, then its
    /// tables in the plan its size calls for. The caller commits it.
    fn write_memtable(&self, m: &Memtable, segment_id: u64) -> Result<Segment> {
        let mut docs = DocMapWriter::new(self.index_id, segment_id);
        for (id, version) in m.versions_unordered() {
            match version {
                Version::Live(doc) => docs
                    .push(DocEntry {
                        fingerprint: doc.fingerprint,
                        id,
                        seq: doc.seq,
                        timestamp: doc.timestamp,
                        name: doc.name.as_deref(),
                    })
                    .map_err(|e| Error::InvalidArgument(e.to_string()))?,
                Version::Deleted { seq, timestamp } => docs.push_tombstone(Tombstone {
                    id,
                    seq: *seq,
                    timestamp: *timestamp,
                }),
            }
        }
        let ranges = docs.ranges();
        let ids_path = self.dir.join(FileKind::DocMap.file_name(segment_id));
        let ids_file = docs
            .finish_into(create_buffered(self.fs.as_ref(), &ids_path)?)
            .map_err(encode_error(&ids_path))?;
        sync_buffered(ids_file, &ids_path)?;
        // The plan is chosen by the live documents, which bound the distinct
        // fingerprints the tables count exactly.
        let plan = self.segment_plan(m.live_docs() as u64);
        let (key_count, mut tables) = m.sorted_tables(&plan);
        let fill = |_, keys: &mut Vec<u64>| {
            // Too few tables fail the segment writer's count check.
            *keys = tables.next().unwrap_or_default();
            Ok(())
        };
        self.write_segment(segment_id, 0, &plan, key_count, fill, ranges)
    }

    fn fresh(&self, timestamp: u64) -> bool {
        self.fresh_at(timestamp, now_ms())
    }

    /// The plan of a new segment of `keys` distinct fingerprints: with
    /// [`Options::small_segment_plans`], the plan the cost model prefers for
    /// that many (`Plan::auto`; `Budget::Unprobed` when the index's plan does
    /// not probe) when it has fewer tables than the index's;
    /// else the index's. A flush of the default
    /// memtable gets 4 tables instead of 10 (docs/ARCHITECTURE.md, "Small
    /// segments have fewer tables").
    fn segment_plan(&self, keys: u64) -> Plan {
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
    fn fresh_at(&self, timestamp: u64, now: u64) -> bool {
        self.retention_ms == 0 || timestamp.saturating_add(self.retention_ms) >= now
    }

    /// [`Error::Poisoned`] if a write, flush or merge has failed.
    fn check_poisoned(&self) -> Result<()> {
        if self.poisoned.load(Ordering::Acquire) {
            let cause = lock(&self.poison_cause).clone();
            return Err(Error::Poisoned {
                cause: cause.unwrap_or_default(),
            });
        }
        Ok(())
    }

    fn poison_on_error<T>(&self, result: Result<T>) -> Result<T> {
        if let Err(e) = &result {
            // The first failure is the cause; later ones follow from it.
            lock(&self.poison_cause).get_or_insert_with(|| e.to_string());
            self.poisoned.store(true, Ordering::Release);
        }
        result
    }

    /// Writes the table file of segment `segment_id` in `plan`, streamed
    /// through a buffer and synced; its doc map file the caller has written
    /// and synced (its records' sequence numbers and timestamps span
    /// `ranges`). Then maps and opens the segment; the caller commits a
    /// manifest naming it. `fill(t, keys)` sets `keys` to table `t`'s
    /// sorted keys, `key_count` of them; one buffer serves every table.
    fn write_segment(
        &self,
        segment_id: u64,
        level: u32,
        plan: &Plan,
        key_count: u64,
        mut fill: impl FnMut(usize, &mut Vec<u64>) -> Result<()>,
        ranges: Option<Ranges>,
    ) -> Result<Segment> {
        let seg_path = self.dir.join(FileKind::Segment.file_name(segment_id));
        let ids_path = self.dir.join(FileKind::DocMap.file_name(segment_id));
        let mut seg = SegmentWriter::with_writer(
            create_buffered(self.fs.as_ref(), &seg_path)?,
            SegmentInfo {
                index_id: self.index_id,
                segment_id,
                shape: plan.shape(),
                k: plan.k(),
                table_count: plan.tables().len() as u32,
                key_count,
            },
            block_len(plan),
        )
        .map_err(encode_error(&seg_path))?;
        let mut keys = Vec::new();
        for t in 0..plan.tables().len() {
            keys.clear();
            fill(t, &mut keys)?;
            seg.push_table(keys.iter().copied())
                .map_err(encode_error(&seg_path))?;
        }
        drop(keys);
        let seg_file = seg.finish().map_err(encode_error(&seg_path))?;
        sync_buffered(seg_file, &seg_path)?;

        let map = |path: &Path| self.fs.map(path).map_err(io_error(path, "map"));
        let tables = SegmentReader::new(map(&seg_path)?).map_err(|e| corrupted(&seg_path, &e))?;
        let docs = DocMapReader::new(map(&ids_path)?).map_err(|e| corrupted(&ids_path, &e))?;
        let meta = SegmentMeta {
            id: segment_id,
            level,
            key_count: tables.key_count(),
            doc_count: docs.len() as u64,
            tombstone_count: docs.tombstone_count() as u64,
            min_seq: ranges.map_or(u64::MAX, |r| r.min_seq),
            max_seq: ranges.map_or(0, |r| r.max_seq),
            min_timestamp: ranges.map_or(u64::MAX, |r| r.min_timestamp),
            max_timestamp: ranges.map_or(0, |r| r.max_timestamp),
            seg_file_len: tables.as_bytes().len() as u64,
            ids_file_len: docs.as_bytes().len() as u64,
            seg_footer_crc: tables.footer_crc(),
            ids_footer_crc: docs.footer_crc(),
        };
        let segment = Segment::open(&self.dir, &self.fs, meta, self.plan.k(), self.index_id)?;
        // Built from a memtable or from sound segments.
        segment.sound.store(true, Ordering::Release);
        // Just written, so in the page cache: map its pages now rather than
        // one fault at a time under queries.
        segment.tables_map.prefault();
        segment.docs_map.prefault();
        Ok(segment)
    }

    /// Lets the merge policy merge runs of the newest segments until it is
    /// satisfied. The caller holds `merging`.
    fn apply_merge_policy(&self) -> Result<()> {
        self.apply_merge_policy_then(|| {})
    }

    /// [`apply_merge_policy`](Self::apply_merge_policy), calling `merged`
    /// after each merge is committed.
    fn apply_merge_policy_then(&self, merged: impl Fn()) -> Result<()> {
        let Some(policy) = &self.merge_policy else {
            return Ok(());
        };
        loop {
            let metas: Vec<SegmentMeta> = read_lock(&self.state)
                .segments
                .iter()
                .map(|s| s.meta)
                .collect();
            match policy.merge_newest(&metas) {
                Some(n) if n >= 2 && n <= metas.len() => {
                    self.merge_newest(n)?;
                    merged();
                }
                _ => return Ok(()),
            }
        }
    }

    /// Merges the `n` newest segments into one: the newest version of every
    /// id wins and expired documents are dropped; tombstones are dropped too
    /// when no older segment remains for them to hide, and kept otherwise.
    /// The caller holds `merging`; flushes may add newer segments meanwhile
    /// (they stay newer than the run, so the run stays contiguous).
    fn merge_newest(&self, n: usize) -> Result<()> {
        let (run, all): (Vec<Arc<Segment>>, usize) = {
            let state = read_lock(&self.state);
            (
                state.segments.iter().take(n).cloned().collect(),
                state.segments.len(),
            )
        };
        let includes_oldest = run.len() == all;
        // A merge reads only what it copies, and its output would carry no
        // trace of semantic damage in an input (a table that disagrees with
        // its doc map, duplicated records): never launder it.
        for segment in &run {
            if !segment.sound.load(Ordering::Acquire) {
                segment.verify()?;
            }
        }
        if run.is_empty()
            || (run.len() == 1
                && (!includes_oldest
                    || (run[0].meta.tombstone_count == 0 && self.retention_ms == 0)))
        {
            return Ok(());
        }
        let docs_in_run: u64 = run
            .iter()
            .map(|s| s.meta.doc_count + s.meta.tombstone_count)
            .sum();
        // Which version of each id is the newest: every segment's id index
        // and tombstones (each sorted by id), newest segment first, then a
        // stable sort by id, which keeps that order among equal ids. (A hash
        // set of ids seen missed the cache on nearly every id.)
        const TOMBSTONE: u64 = 1 << 32;
        let mut versions: Vec<(u64, u64)> =
            Vec::with_capacity(usize::try_from(docs_in_run).unwrap_or(0));
        for (s, segment) in (0u64..).zip(&run) {
            // An id with both an entry and a tombstone in one doc map: the
            // newer of the two is its version there, the other is skipped.
            let mut deleted_here: HashSet<u64> = HashSet::new();
            let mut tombstones = Vec::new();
            for (i, tombstone) in (0u64..).zip(segment.docs.tombstones()) {
                let t = tombstone.map_err(|e| corrupted(&segment.ids_path, &e))?;
                match segment.by_id(t.id)? {
                    Some(entry) if entry.seq > t.seq => continue,
                    Some(_) => {
                        deleted_here.insert(t.id);
                    }
                    None => {}
                }
                tombstones.push((t.id, s << 33 | TOMBSTONE | i));
            }
            for record in segment.docs.ids() {
                let (id, position) = record.map_err(|e| corrupted(&segment.ids_path, &e))?;
                if deleted_here.is_empty() || !deleted_here.contains(&id) {
                    versions.push((id, s << 33 | position as u64));
                }
            }
            versions.extend(tombstones);
        }
        versions.sort_by_key(|&(id, _)| id);
        // Each id's newest version (the first of its equal ids), in id order:
        // the new id index, in the order it is written.
        versions.dedup_by_key(|&mut (id, _)| id);
        // Per input entry: NOT_NEWEST, NEWEST, or (once written) its
        // position in the new doc map.
        const NOT_NEWEST: u32 = u32::MAX;
        const NEWEST: u32 = u32::MAX - 1;
        let mut positions: Vec<Vec<u32>> =
            run.iter().map(|s| vec![NOT_NEWEST; s.docs.len()]).collect();
        let mut newest_tombstone: Vec<Vec<bool>> = run
            .iter()
            .map(|s| vec![false; s.docs.tombstone_count()])
            .collect();
        let mut tombstones_kept = 0u64;
        for &(_, tag) in &versions {
            let (s, i) = ((tag >> 33) as usize, (tag & (TOMBSTONE - 1)) as usize);
            if tag & TOMBSTONE != 0 {
                if let Some(flag) = newest_tombstone.get_mut(s).and_then(|v| v.get_mut(i)) {
                    // Tombstones go when no older segment remains to hide.
                    *flag = !includes_oldest;
                    tombstones_kept += u64::from(!includes_oldest);
                }
            } else if let Some(p) = positions.get_mut(s).and_then(|v| v.get_mut(i)) {
                *p = NEWEST;
            }
        }
        // One clock reading per merge, so the count below and the writing
        // agree on which documents expired.
        let now = now_ms();
        let fresh = |timestamp: u64| self.fresh_at(timestamp, now);
        let mut survivors = 0u64;
        for (s, segment) in run.iter().enumerate() {
            if self.retention_ms == 0 {
                survivors += positions[s].iter().filter(|&&p| p == NEWEST).count() as u64;
                continue;
            }
            for (i, entry) in segment.docs.entries().enumerate() {
                let e = entry.map_err(|e| corrupted(&segment.ids_path, &e))?;
                if positions[s].get(i) == Some(&NEWEST) && fresh(e.timestamp) {
                    survivors += 1;
                }
            }
        }
        let segment_id = {
            let mut m = lock(&self.manifest);
            m.next_segment_id += 1;
            m.next_segment_id - 1
        };
        let merged = if survivors == 0 && tombstones_kept == 0 {
            // Nothing left: the run simply leaves the manifest.
            None
        } else {
            // The new doc map, written as its records come: the inputs'
            // entries merged in (fingerprint, id) order, then the id index
            // in the order of `versions`, then the kept tombstones.
            let ids_path = self.dir.join(FileKind::DocMap.file_name(segment_id));
            let mut docs = SortedDocMapWriter::new(
                create_buffered(self.fs.as_ref(), &ids_path)?,
                self.index_id,
                segment_id,
                survivors,
                tombstones_kept,
            )
            .map_err(encode_error(&ids_path))?;
            let mut live_fingerprints: Vec<u64> =
                Vec::with_capacity(usize::try_from(survivors).unwrap_or(0));
            let mut dropped: Vec<u64> = Vec::new();
            let mut inputs: Vec<_> = run.iter().map(|s| s.docs.entries().enumerate()).collect();
            let mut heads: Vec<Option<(usize, DocEntry<'_>)>> = Vec::with_capacity(run.len());
            let mut heap = BinaryHeap::with_capacity(run.len());
            for (s, input) in inputs.iter_mut().enumerate() {
                let head = next_entry(input, &run[s].ids_path)?;
                if let Some((_, e)) = head {
                    heap.push(Reverse((e.fingerprint, e.id, s)));
                }
                heads.push(head);
            }
            while let Some(mut top) = heap.peek_mut() {
                let Reverse((_, _, s)) = *top;
                let Some((i, e)) = heads[s].take() else {
                    PeekMut::pop(top);
                    continue;
                };
                if positions[s][i] == NEWEST && fresh(e.timestamp) {
                    positions[s][i] = docs.push(e).map_err(encode_error(&ids_path))?;
                    if live_fingerprints.last() != Some(&e.fingerprint) {
                        live_fingerprints.push(e.fingerprint);
                    }
                } else {
                    positions[s][i] = NOT_NEWEST;
                    // Its fingerprint leaves the tables unless a survivor has it.
                    dropped.push(e.fingerprint);
                }
                heads[s] = next_entry(&mut inputs[s], &run[s].ids_path)?;
                match heads[s] {
                    Some((_, e)) => *top = Reverse((e.fingerprint, e.id, s)),
                    None => {
                        PeekMut::pop(top);
                    }
                }
            }
            drop(heads);
            drop(inputs);
            for &(id, tag) in &versions {
                let (s, i) = ((tag >> 33) as usize, (tag & (TOMBSTONE - 1)) as usize);
                if tag & TOMBSTONE == 0 && positions[s][i] < NEWEST {
                    docs.push_id(id, positions[s][i])
                        .map_err(encode_error(&ids_path))?;
                }
            }
            drop(positions);
            drop(versions);
            let mut kept = Vec::with_capacity(usize::try_from(tombstones_kept).unwrap_or(0));
            for (s, segment) in run.iter().enumerate() {
                for (i, tombstone) in segment.docs.tombstones().enumerate() {
                    let t = tombstone.map_err(|e| corrupted(&segment.ids_path, &e))?;
                    if newest_tombstone[s][i] {
                        kept.push(t);
                    }
                }
            }
            kept.sort_unstable_by_key(|t| t.id);
            for t in kept {
                docs.push_tombstone(t).map_err(encode_error(&ids_path))?;
            }
            let ranges = docs.ranges();
            let ids_file = docs.finish().map_err(encode_error(&ids_path))?;
            sync_buffered(ids_file, &ids_path)?;
            let key_count = live_fingerprints.len() as u64;
            let plan = self.segment_plan(key_count);
            let tables = merged_tables(&run, &plan, live_fingerprints, dropped)?;
            // A level read from the manifest may be anything.
            let level = run
                .iter()
                .map(|s| s.meta.level)
                .max()
                .unwrap_or(0)
                .saturating_add(1);
            Some(self.write_segment(segment_id, level, &plan, key_count, tables, ranges)?)
        };
        self.hooks.pause(Point::MergeWritten);
        let run_ids: HashSet<u64> = run.iter().map(|s| s.meta.id).collect();
        let meta = merged.as_ref().map(|segment| segment.meta);
        self.commit(
            |manifest| {
                manifest.segments.retain(|m| !run_ids.contains(&m.id));
                manifest.segments.extend(meta);
            },
            |state| {
                state.segments.retain(|s| !run_ids.contains(&s.meta.id));
                if let Some(segment) = merged {
                    state.segments.push(Arc::new(segment));
                }
                state.segments.sort_by_key(|s| Reverse(s.meta.max_seq));
            },
        )?;
        for segment in run {
            segment.obsolete.store(true, Ordering::Release);
        }
        self.hooks.pause(Point::MergeCommitted);
        Ok(())
    }
}

/// The permuted tables of a merge's output in `plan`, as a `fill` for
/// [`Core::write_segment`]. `live_fingerprints` are the survivors'
/// fingerprints, sorted and distinct; `dropped` those of the entries that
/// did not survive (replaced, deleted or expired), which leave the tables
/// unless a survivor has them too.
///
/// An input whose plan is `plan` contributes its table as it is: decoded,
/// less the dropped keys. The other inputs (small segments have fewer
/// tables) contribute their fingerprints, read once from their first table,
/// permuted and radix-sorted per table as one more run. A stable sort of the
/// concatenated runs merges them, and duplicates go (one fingerprint may
/// live in several inputs). When no input has `plan`, the tables are built
/// from `live_fingerprints` alone.
fn merged_tables<'a>(
    run: &'a [Arc<Segment>],
    plan: &'a Plan,
    live_fingerprints: Vec<u64>,
    mut dropped: Vec<u64>,
) -> Result<impl FnMut(usize, &mut Vec<u64>) -> Result<()> + 'a> {
    let live = live_fingerprints.len();
    let (same, other): (Vec<&Segment>, Vec<&Segment>) = run
        .iter()
        .map(|s| &**s)
        .partition(|s| s.plan.shape() == plan.shape());
    sort_keys(&mut dropped);
    dropped.dedup();
    dropped.retain(|fp| live_fingerprints.binary_search(fp).is_err());
    // The fingerprints of the inputs whose tables cannot be reused.
    let others = if same.is_empty() {
        live_fingerprints
    } else {
        drop(live_fingerprints);
        let mut others = Vec::new();
        for segment in other {
            let first = &segment.plan.tables()[0];
            let reader = segment
                .tables
                .table(0)
                .map_err(|e| corrupted(&segment.seg_path, &e))?;
            for key in reader.iter() {
                let fp = first.unpermute(key.map_err(|e| corrupted(&segment.seg_path, &e))?);
                if dropped.binary_search(&fp).is_err() {
                    others.push(fp);
                }
            }
        }
        others
    };
    let mut dead: Vec<u64> = Vec::with_capacity(if same.is_empty() { 0 } else { dropped.len() });
    let (mut permuted, mut scratch): (Vec<u64>, Vec<u64>) = (Vec::new(), Vec::new());
    Ok(move |t: usize, keys: &mut Vec<u64>| {
        let table = plan
            .tables()
            .get(t)
            .ok_or_else(|| Error::InvalidArgument(format!("the plan has no table {t}")))?;
        if !same.is_empty() {
            dead.clear();
            dead.extend(dropped.iter().map(|&fp| table.permute(fp)));
            dead.sort_unstable();
        }
        for segment in &same {
            let reader = segment
                .tables
                .table(t)
                .map_err(|e| corrupted(&segment.seg_path, &e))?;
            for key in reader.iter() {
                let key = key.map_err(|e| corrupted(&segment.seg_path, &e))?;
                if dead.is_empty() || dead.binary_search(&key).is_err() {
                    keys.push(key);
                }
            }
        }
        if !others.is_empty() {
            permuted.clear();
            permuted.extend(others.iter().map(|&fp| table.permute(fp)));
            sort_keys_with(&mut permuted, &mut scratch);
            keys.extend_from_slice(&permuted);
        }
        if same.len() + usize::from(!others.is_empty()) > 1 {
            keys.sort();
        }
        keys.dedup();
        if keys.len() != live {
            return Err(Error::Corrupted {
                path: run.first().map(|s| s.seg_path.clone()).unwrap_or_default(),
                offset: 0,
                reason: format!(
                    "merging table {t}: {} keys for {live} live fingerprints (a table and its doc map disagree)",
                    keys.len()
                ),
            });
        }
        Ok(())
    })
}

/// The next entry of a doc map being merged, with its position.
fn next_entry<'a>(
    entries: &mut impl Iterator<Item = (usize, std::result::Result<DocEntry<'a>, FormatError>)>,
    path: &Path,
) -> Result<Option<(usize, DocEntry<'a>)>> {
    entries
        .next()
        .map(|(i, e)| e.map(|e| (i, e)).map_err(|e| corrupted(path, &e)))
        .transpose()
}

fn public_doc(entry: &DocEntry<'_>) -> Doc {
    Doc {
        id: entry.id,
        fingerprint: entry.fingerprint,
        name: entry.name.map(str::to_owned),
        timestamp_ms: entry.timestamp,
    }
}

/// Whether a version of `id` newer than segment `s` exists.
fn shadowed(state: &State, s: usize, id: u64) -> Result<bool> {
    if state.memtables().any(|m| m.version(id).is_some()) {
        return Ok(true);
    }
    in_segments(&state.segments[..s], id)
}

/// Whether one of `segments` holds a version or a tombstone of `id`.
fn in_segments(segments: &[Arc<Segment>], id: u64) -> Result<bool> {
    for segment in segments {
        if segment.by_id(id)?.is_some() || segment.tombstone(id)?.is_some() {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Applies one logged record to the memtable; returns its sequence number.
fn apply(memtable: &mut Memtable, record: Record) -> u64 {
    match record {
        Record::Insert {
            seq,
            id,
            fingerprint,
            timestamp,
            name,
        } => {
            memtable.insert(
                id,
                MemDoc {
                    seq,
                    fingerprint,
                    timestamp,
                    name: name.map(Arc::from),
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

fn check_name(name: Option<&str>) -> Result<()> {
    match name {
        Some(n) if n.len() > crate::format::MAX_NAME_LEN => Err(Error::InvalidArgument(format!(
            "a document name is {} bytes; the limit is {} bytes",
            n.len(),
            crate::format::MAX_NAME_LEN
        ))),
        _ => Ok(()),
    }
}

/// Bytes buffered before each write to a segment or doc map file.
const WRITE_BUFFER: usize = 1 << 20;

/// A file being written, as [`std::io::Write`] for the format's encoders.
struct FileWriter(Box<dyn WritableFile>);

impl std::io::Write for FileWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.write_all(buf)?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn create_buffered(fs: &dyn FileSystem, path: &Path) -> Result<BufWriter<FileWriter>> {
    let file = fs.create_new(path).map_err(io_error(path, "create"))?;
    Ok(BufWriter::with_capacity(WRITE_BUFFER, FileWriter(file)))
}

/// Writes out what `out` still buffers, then syncs the file.
fn sync_buffered(out: BufWriter<FileWriter>, path: &Path) -> Result<()> {
    let mut file = out
        .into_inner()
        .map_err(|e| io_error(path, "write")(e.into_error()))?;
    file.0.sync().map_err(io_error(path, "sync"))
}

/// An encoder's error while writing `path`: the file's I/O error, or an
/// invalid input.
fn encode_error(path: &Path) -> impl FnOnce(EncodeError) -> Error + '_ {
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

/// The WAL header flags for a writer with `durability`.
pub(super) fn wal_flags(durability: Durability) -> u32 {
    match durability {
        Durability::Buffered => WAL_UNSYNCED_APPENDS,
        Durability::Sync => 0,
    }
}

/// Writes and syncs a new, empty WAL for a writer with `durability`.
fn new_wal_file(
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

/// The commit point: the manifest is written to a temporary file, synced,
/// renamed over `MANIFEST`, and the directory synced.
pub(super) fn commit_manifest(dir: &Path, fs: &dyn FileSystem, manifest: &Manifest) -> Result<()> {
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
fn manifest_names_wal(dir: &Path, fs: &dyn FileSystem, wal_id: u64) -> bool {
    fs.read(&dir.join(FileKind::Manifest.file_name(0)))
        .ok()
        .and_then(|bytes| Manifest::decode(&bytes).ok())
        .is_some_and(|m| m.wal_ids.contains(&wal_id))
}

/// Checks that the manifest's counters lie past everything it names: the
/// next segment id above every segment's, the next WAL id above every WAL's,
/// the next sequence number above every segment's. A manifest that fails
/// would make the engine reuse a live file's name or a sequence number, so
/// it is refused as damage (docs/FORMAT.md, "Manifest file").
fn check_manifest_counters(path: &Path, manifest: &Manifest) -> Result<()> {
    let refuse = |reason: String| Error::Corrupted {
        path: path.to_path_buf(),
        offset: 0,
        reason,
    };
    for (what, value) in [
        ("next segment id", manifest.next_segment_id),
        ("next WAL id", manifest.next_wal_id),
        ("next sequence number", manifest.next_seq),
        ("generation", manifest.generation),
    ] {
        if value >= COUNTER_LIMIT {
            return Err(refuse(format!(
                "the {what} {value} is beyond 2^63, which no index reaches"
            )));
        }
    }
    for meta in &manifest.segments {
        if meta.id >= manifest.next_segment_id {
            return Err(refuse(format!(
                "the next segment id {} is not above segment {} that the manifest names",
                manifest.next_segment_id, meta.id
            )));
        }
        if (meta.doc_count > 0 || meta.tombstone_count > 0) && meta.max_seq >= manifest.next_seq {
            return Err(refuse(format!(
                "the next sequence number {} is not above segment {}'s largest, {}",
                manifest.next_seq, meta.id, meta.max_seq
            )));
        }
    }
    if let Some(&wal_id) = manifest
        .wal_ids
        .iter()
        .find(|&&id| id >= manifest.next_wal_id)
    {
        return Err(refuse(format!(
            "the next WAL id {} is not above WAL {} that the manifest names",
            manifest.next_wal_id, wal_id
        )));
    }
    Ok(())
}

/// Ids and sequence numbers stay below this: at a billion a second, 2^63
/// takes 292 years. A larger counter in a file is damage, and the counters
/// can never overflow.
const COUNTER_LIMIT: u64 = 1 << 63;

/// Checks the sequence numbers of a WAL's records: each below
/// [`COUNTER_LIMIT`], and increasing (every write takes a number above the
/// last). A WAL that fails has checksum-valid frames written by no writer of
/// this index, or reordered.
fn check_wal_seqs(path: &Path, frames: &[WalFrame]) -> Result<()> {
    let mut last: Option<u64> = None;
    for frame in frames {
        for record in &frame.records {
            let seq = record.seq();
            if seq >= COUNTER_LIMIT || last.is_some_and(|l| seq <= l) {
                return Err(Error::Corrupted {
                    path: path.to_path_buf(),
                    offset: frame.offset,
                    reason: format!(
                        "a record's sequence number {seq} does not follow the previous one ({}) or is beyond 2^63",
                        last.map_or("none".to_owned(), |l| l.to_string())
                    ),
                });
            }
            last = Some(seq);
        }
    }
    Ok(())
}

/// Moves the manifest's next segment and WAL ids past any file in `dir`
/// that already has them: the debris of a flush or merge interrupted before
/// its commit (its ids were allocated after the last commit). New files are
/// created exclusively, so without this such debris would make the next
/// flush fail; it is removed after recovery (see [`remove_orphans`]).
fn skip_ids_of_debris(dir: &Path, fs: &dyn FileSystem, manifest: &mut Manifest) -> Result<()> {
    for path in fs.list(dir).map_err(io_error(dir, "list"))? {
        let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        // Ids from 2^63 on are never handed out, so files with them never
        // collide with a new one.
        match FileKind::parse_file_name(name) {
            Some((FileKind::Segment | FileKind::DocMap, id))
                if id >= manifest.next_segment_id && id < COUNTER_LIMIT - 1 =>
            {
                manifest.next_segment_id = id + 1;
            }
            Some((FileKind::Wal, id)) if id >= manifest.next_wal_id && id < COUNTER_LIMIT - 1 => {
                manifest.next_wal_id = id + 1;
            }
            _ => {}
        }
    }
    Ok(())
}

/// A digest of a set of distinct `u64`s: their number and two sums of a
/// keyed hash. Two sets with equal digests are equal, but for a chance of
/// about 2^-128 that no file can aim at without the keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct SetHash {
    keys: (u64, u64),
    count: u64,
    sums: (u64, u64),
}

impl SetHash {
    fn random_keys() -> (u64, u64) {
        use std::hash::BuildHasher;
        let state = std::collections::hash_map::RandomState::new();
        (state.hash_one(1u64), state.hash_one(2u64))
    }

    fn new(keys: (u64, u64)) -> SetHash {
        SetHash {
            keys,
            count: 0,
            sums: (0, 0),
        }
    }

    fn add(&mut self, x: u64) {
        let h = fmix64(x ^ self.keys.0);
        self.count += 1;
        self.sums.0 = self.sums.0.wrapping_add(h);
        self.sums.1 = self.sums.1.wrapping_add(fmix64(h ^ self.keys.1));
    }
}

/// MurmurHash3's 64-bit finaliser: a bijection that mixes every bit.
fn fmix64(mut x: u64) -> u64 {
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    x ^ (x >> 33)
}

/// Removes files the manifest does not name (left by a crash mid-flush or
/// mid-compaction). Best effort.
fn remove_orphans(dir: &Path, fs: &dyn FileSystem, manifest: &Manifest) {
    let Ok(files) = fs.list(dir) else { return };
    let segments: HashSet<u64> = manifest.segments.iter().map(|m| m.id).collect();
    let wals: HashSet<u64> = manifest.wal_ids.iter().copied().collect();
    for path in files {
        let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        let orphan = match FileKind::parse_file_name(name) {
            Some((FileKind::Segment | FileKind::DocMap, id)) => !segments.contains(&id),
            Some((FileKind::Wal, id)) => !wals.contains(&id),
            _ => name == MANIFEST_TEMP_FILE_NAME,
        };
        if orphan {
            let _ = fs.remove(&dir.join(name));
        }
    }
}

/// Keys per table block in a new segment of `plan`. A probe decodes its
/// block from the start up to the probed prefix, so a plan that probes many
/// prefix values per query gets shorter blocks (a larger block index: 16
/// bytes per block) to halve what each probe decodes. docs/BENCHMARKS.md,
/// "Probed plans".
fn block_len(plan: &Plan) -> u32 {
    if plan.radius() > 0 {
        PROBED_BLOCK_LEN
    } else {
        DEFAULT_BLOCK_LEN
    }
}

/// Keys per table block of a probed plan's segment.
const PROBED_BLOCK_LEN: u32 = 32;

impl SortedTables for Segment {
    type Error = Error;
    type Table<'a> = (crate::format::TableReader<'a>, &'a Path);

    fn table(&self, t: usize) -> Result<Self::Table<'_>> {
        let reader = self
            .tables
            .table(t)
            .map_err(|e| corrupted(&self.seg_path, &e))?;
        Ok((reader, &self.seg_path))
    }

    #[inline]
    fn keys_in(
        (reader, path): &Self::Table<'_>,
        lo: u64,
        hi: u64,
        mut visit: impl FnMut(u64),
    ) -> Result<()> {
        for key in reader.range(lo, hi) {
            visit(key.map_err(|e| corrupted(path, &e))?);
        }
        Ok(())
    }
}

impl Segment {
    /// Maps a published segment of an index searched at distance `k`,
    /// refusing files shorter than the manifest says before mapping them,
    /// and checking their footers and the segment's plan.
    pub(super) fn open(
        dir: &Path,
        fs: &Arc<dyn FileSystem>,
        meta: SegmentMeta,
        k: u32,
        index_id: u64,
    ) -> Result<Segment> {
        let seg_path = dir.join(FileKind::Segment.file_name(meta.id));
        let ids_path = dir.join(FileKind::DocMap.file_name(meta.id));
        let map = |path: &Path, expected_len: u64| -> Result<Mapped> {
            let len = fs.len(path).map_err(named_file_error(path, "stat"))?;
            if len != expected_len {
                return Err(Error::Corrupted {
                    path: path.to_path_buf(),
                    offset: len.min(expected_len),
                    reason: format!("the file is {len} bytes; the manifest says {expected_len}"),
                });
            }
            fs.map(path).map_err(io_error(path, "map"))
        };
        let tables_map = map(&seg_path, meta.seg_file_len)?;
        let tables =
            SegmentReader::new(tables_map.clone()).map_err(|e| corrupted(&seg_path, &e))?;
        let docs_map = map(&ids_path, meta.ids_file_len)?;
        let docs = DocMapReader::new(docs_map.clone()).map_err(|e| corrupted(&ids_path, &e))?;
        let mismatch = |path: &Path, what: &str| Error::Corrupted {
            path: path.to_path_buf(),
            offset: 0,
            reason: format!("{what} does not match the manifest"),
        };
        if tables.footer_crc() != meta.seg_footer_crc {
            return Err(mismatch(&seg_path, "the footer checksum"));
        }
        if docs.footer_crc() != meta.ids_footer_crc {
            return Err(mismatch(&ids_path, "the footer checksum"));
        }
        // The files' own headers (whose counts their readers checked against
        // the files' sizes) against the manifest's record: a count that
        // sizes an allocation is never taken from the manifest unchecked.
        let differs = |path: &Path, what: &str, file: u64, recorded: u64| Error::Corrupted {
            path: path.to_path_buf(),
            offset: 0,
            reason: format!("the file's {what} is {file}; the manifest records {recorded}"),
        };
        for (path, file) in [(&seg_path, tables.index_id()), (&ids_path, docs.index_id())] {
            if file != index_id {
                return Err(foreign(path, file, index_id));
            }
        }
        for (path, what, file, recorded) in [
            (&seg_path, "segment id", tables.segment_id(), meta.id),
            (&ids_path, "segment id", docs.segment_id(), meta.id),
            (&seg_path, "key count", tables.key_count(), meta.key_count),
            (&ids_path, "entry count", docs.len() as u64, meta.doc_count),
            (
                &ids_path,
                "tombstone count",
                docs.tombstone_count() as u64,
                meta.tombstone_count,
            ),
        ] {
            if file != recorded {
                return Err(differs(path, what, file, recorded));
            }
        }
        // Any plan of the index's k answers exactly; segments of one index
        // may differ in their number of tables.
        let info = tables.info();
        let plan = Plan::from_shape(info.shape, info.k)
            .ok()
            .filter(|plan| plan.k() == k && plan.tables().len() == tables.table_count())
            .ok_or_else(|| mismatch(&seg_path, "the plan"))?;
        Ok(Segment {
            meta,
            seg_path,
            ids_path,
            plan,
            tables,
            tables_map,
            docs,
            docs_map,
            obsolete: AtomicBool::new(false),
            sound: AtomicBool::new(false),
            fs: fs.clone(),
        })
    }

    /// Checks every checksum of both files, then that they agree: every
    /// table holds, under its permutation, exactly the distinct fingerprints
    /// of the doc map's entries, and the doc map's sequence numbers and
    /// timestamps span what the manifest records (queries order segments by
    /// them). Names the file that is wrong. Marks the segment sound.
    ///
    /// The key sets are compared by count and by a sum of a keyed hash of
    /// each key (keys drawn at random per call, so no file can be crafted to
    /// pass): O(1) memory, one pass over each table and the doc map.
    pub(super) fn verify(&self) -> Result<()> {
        self.tables
            .verify()
            .map_err(|e| corrupted(&self.seg_path, &e))?;
        self.docs
            .verify()
            .map_err(|e| corrupted(&self.ids_path, &e))?;
        let keys = SetHash::random_keys();
        let mut fingerprints = SetHash::new(keys);
        let mut last = None;
        let (mut seq, mut time) = ((u64::MAX, 0u64), (u64::MAX, 0u64));
        let mut span = |s: u64, t: u64| {
            seq = (seq.0.min(s), seq.1.max(s));
            time = (time.0.min(t), time.1.max(t));
        };
        for entry in self.docs.entries() {
            let e = entry.map_err(|e| corrupted(&self.ids_path, &e))?;
            if last != Some(e.fingerprint) {
                fingerprints.add(e.fingerprint);
                last = Some(e.fingerprint);
            }
            span(e.seq, e.timestamp);
        }
        for tombstone in self.docs.tombstones() {
            let t = tombstone.map_err(|e| corrupted(&self.ids_path, &e))?;
            span(t.seq, t.timestamp);
        }
        let recorded = (
            (self.meta.min_seq, self.meta.max_seq),
            (self.meta.min_timestamp, self.meta.max_timestamp),
        );
        if (seq, time) != recorded {
            return Err(Error::Corrupted {
                path: self.ids_path.clone(),
                offset: 0,
                reason: format!(
                    "its records span sequence numbers {}..={} and timestamps {}..={}; the manifest records {}..={} and {}..={}",
                    seq.0,
                    seq.1,
                    time.0,
                    time.1,
                    recorded.0.0,
                    recorded.0.1,
                    recorded.1.0,
                    recorded.1.1
                ),
            });
        }
        let mut tables = Vec::with_capacity(self.plan.tables().len());
        for (t, table) in self.plan.tables().iter().enumerate() {
            let reader = self
                .tables
                .table(t)
                .map_err(|e| corrupted(&self.seg_path, &e))?;
            let mut held = SetHash::new(keys);
            for key in reader.iter() {
                held.add(table.unpermute(key.map_err(|e| corrupted(&self.seg_path, &e))?));
            }
            tables.push(held);
        }
        let Some(wrong) = tables.iter().position(|h| *h != fingerprints) else {
            self.sound.store(true, Ordering::Release);
            return Ok(());
        };
        if tables.iter().all(|h| *h == tables[0]) && tables.len() > 1 {
            // Every table agrees with the others and none with the doc map.
            return Err(Error::Corrupted {
                path: self.ids_path.clone(),
                offset: 0,
                reason: format!(
                    "its entries' {} distinct fingerprints are not the {} keys that all {} tables of its segment hold",
                    fingerprints.count,
                    tables[0].count,
                    tables.len()
                ),
            });
        }
        Err(Error::Corrupted {
            path: self.seg_path.clone(),
            offset: self.tables.table_offset(wrong).unwrap_or(0),
            reason: format!(
                "table {wrong} does not hold the doc map's {} distinct fingerprints under its permutation (it holds {} keys{})",
                fingerprints.count,
                tables[wrong].count,
                if tables.contains(&fingerprints) {
                    ", and other tables agree with the doc map"
                } else {
                    ""
                }
            ),
        })
    }

    /// Distinct fingerprints of this segment within `k` of `fp`, each once
    /// (the search of [`search::probe`] over this segment's tables).
    fn matching_fingerprints(&self, fp: u64, k: u32) -> Result<Vec<u64>> {
        let mut out = Vec::new();
        search::probe(&self.plan, self, fp, k, |hit| out.push(hit.fingerprint))?;
        Ok(out)
    }

    fn by_id(&self, id: u64) -> Result<Option<DocEntry<'_>>> {
        self.docs
            .by_id(id)
            .map_err(|e| corrupted(&self.ids_path, &e))
    }

    /// Whether this segment's doc map also holds a tombstone of `entry`'s
    /// id that is newer than it (sequence numbers decide; docs/FORMAT.md,
    /// "Doc map file"). The engine never writes both for one id, but the
    /// format allows it.
    fn deletes_here(&self, entry: &DocEntry<'_>) -> Result<bool> {
        if self.meta.tombstone_count == 0 {
            return Ok(false);
        }
        Ok(self.tombstone(entry.id)?.is_some_and(|t| t.seq > entry.seq))
    }

    fn tombstone(&self, id: u64) -> Result<Option<Tombstone>> {
        self.docs
            .tombstone(id)
            .map_err(|e| corrupted(&self.ids_path, &e))
    }
}
