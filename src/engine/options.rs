//! How to open or create an index: [`Options`] and [`Durability`].

use std::sync::Arc;
use std::time::Duration;

use crate::error::Result;
use crate::fingerprint::{FingerprintConfig, Simhasher};
use crate::plan::Plan;

use super::compaction::policy::{MergePolicy, TieredMergePolicy};
use super::fs::FileSystem;

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
///
/// Outside the crate, start from [`Options::new`] (or `Options::default()`)
/// and chain the setters, or set the public fields one by one: the struct is
/// `#[non_exhaustive]`, so that adding a field is not a breaking change.
#[derive(Debug, Clone)]
#[non_exhaustive]
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
    /// bytes. Default 48 MiB: 375,000 to 420,000 documents without names
    /// (docs/ARCHITECTURE.md, "The memtable's default budget: 48 MiB").
    /// After its first flush an index keeps the flushed memtable's memory,
    /// emptied, for the next one, and its flush's sort buffers (about 80
    /// bytes per document): up to about three times this much in all,
    /// whether or not writes go on.
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
    /// progress to finish; merges called for but not started are left to the
    /// next open, which asks the policy again.
    pub merge_thread: bool,
    /// With merges on the merge thread, a flush that leaves more segments
    /// than this merges a run of the segments newer than the merge thread's
    /// run on the writing thread (when that run holds at least 4 times the
    /// documents of the writer's), or else waits while the merge thread
    /// works, so that under sustained ingest writes slow down rather than
    /// segments (each one probed by every query) pile up. Default 32. A
    /// merge policy that declines to merge never makes a writer wait.
    pub max_segments: usize,
    /// After opening, map the segments' pages on a background thread
    /// (Linux), so that queries soon stop paying a page fault for each page
    /// they touch first: every table's and doc map's block index, then, if
    /// the index fits in [`memory_budget`](Options::memory_budget), the
    /// whole files. The pages stay evictable page cache. Before that, if
    /// the index fits, the open itself checks the 4 KiB chunks of its flat
    /// tables (which maps them) while they come from the page cache, so
    /// that queries neither check nor fault from the first: 0.1–0.4 s for
    /// 50 M fingerprints (2.9 GB of tables) on a loaded 2-core machine,
    /// against 10 ms without (docs/BENCHMARKS.md, "Issue 41: 2 MiB folios
    /// and the open's check"). Once it has read 16 MiB from
    /// the disk (files not in the page cache) the open stops checking and
    /// leaves the rest to the background thread and the queries. `false`
    /// turns both off.
    pub prefault: bool,
    /// Bytes of memory the index's files may expect to keep in the page
    /// cache. An index whose files take at most half of it is prefaulted
    /// whole when opened (with [`prefault`](Options::prefault)), and a new
    /// segment of at most a quarter of it when written; the segments of a
    /// larger index, and larger new segments, are read as queries need
    /// them (with `prefault` or without), each query asking the kernel for
    /// all the blocks it needs at once (docs/ARCHITECTURE.md, "An index larger
    /// than memory"). Default `None`: the memory the process can fill, the
    /// machine's or its control group's limit, whichever is smaller.
    pub memory_budget: Option<u64>,
    /// Give a segment too small to need the index's plan the plan with
    /// fewer tables that the cost model prefers for its size (`Plan::auto`):
    /// with the default plan, a flush of the default memtable writes 4
    /// tables instead of 10, and queries probe 4 of them. Results are the
    /// same either way. `false` writes every segment in the index's plan.
    /// Default `true`; not recorded in the index (segments record their own
    /// plans).
    pub small_segment_plans: bool,
    /// Small segments of Rice-coded tables (those of format versions 3 and
    /// 4, or written with [`flat_tables`](Options::flat_tables)
    /// off) keep a decoded copy of their fingerprints on the
    /// heap, searched instead of their mapped tables: per table a directory
    /// of where each value of the keys' top bits starts, then the keys'
    /// other bits, 6 bytes each (about what the file takes), each compared
    /// with one XOR. A segment of 1 M keys is searched about four times as
    /// fast (docs/ARCHITECTURE.md, "Small segments' tables are searched
    /// decoded"). The copy has `k + 1` tables when that keeps a probe to
    /// 64 keys or fewer (up to 4 M keys at k = 3), else the segment's own
    /// (always a probed plan's own, whose tables are searched at several
    /// prefix values each: up to 4 M fingerprints for the 4 tables of the
    /// default plan at k = 6); this option caps its keys over all its
    /// tables. Only for segments expected
    /// in memory ([`memory_budget`](Options::memory_budget)): a segment
    /// written by this process gets its copy when written (on the flush or
    /// merge thread) once the index has answered a query since it was
    /// opened (a bulk load that does not query pays nothing), one opened
    /// from disk on the thread that prefaults it
    /// ([`prefault`](Options::prefault)); the first query has those still
    /// without a copy decoded on a thread of their own. Default 16 M
    /// (16,777,216) keys: at k = 3, every segment of up to 4 M
    /// fingerprints, about 100 MB each. 0 turns copies off. Results are the
    /// same either way.
    pub decoded_tables_up_to: u64,
    /// Write the tables of new segments (flushes and merges) flat (format
    /// version 5): a directory over the keys' top bits and each key's low
    /// bits at a fixed width, searched where they are mapped the way the
    /// decoded copies are (about twice as fast at 10 M fingerprints), with
    /// no copy and nothing decoded at the open (docs/ARCHITECTURE.md, "Flat
    /// tables in the file"; probed plans' too, "Flat tables of probed
    /// plans"). Segments too large to be expected in memory are Rice-coded
    /// ([`memory_budget`](Options::memory_budget)), whose queries read
    /// ahead the blocks they need.
    /// `false` writes Rice-coded tables, about a tenth smaller at 10 M
    /// fingerprints (docs/BENCHMARKS.md), searched through their decoded
    /// copies when small enough ([`decoded_tables_up_to`](Options::decoded_tables_up_to)).
    /// Results are the same either way; segments of both kinds are read
    /// whatever this says. Default `true`; not recorded in the index.
    pub flat_tables: bool,
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
    /// that a mistyped path is refused ([`Error::NotEmpty`](crate::Error::NotEmpty)) rather than
    /// turned into an index. Engine files without a manifest are refused
    /// either way ([`Error::ManifestMissing`](crate::Error::ManifestMissing)).
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
            memtable_bytes: 48 << 20,
            file_system: None,
            merge_policy: Some(Arc::new(TieredMergePolicy::default())),
            merge_thread: true,
            max_segments: 32,
            prefault: true,
            memory_budget: None,
            small_segment_plans: true,
            decoded_tables_up_to: 16 << 20,
            flat_tables: true,
            flush_thread: std::thread::available_parallelism().is_ok_and(|n| n.get() > 2),
            #[cfg(feature = "schedule-hooks")]
            schedule: None,
            create_in_non_empty_dir: false,
        }
    }
}

/// Each setter sets the field of the same name and returns the options, so
/// that settings chain:
///
/// ```
/// use simhashdb::{Durability, Options};
///
/// let options = Options::new().k(4).durability(Durability::Sync);
/// assert_eq!((options.k, options.durability), (4, Durability::Sync));
/// // The fields stay public: read them, or set them one by one.
/// let mut options = Options::default();
/// options.memtable_bytes = 1 << 20;
/// ```
impl Options {
    /// The default options ([`Options::default`]).
    pub fn new() -> Options {
        Options::default()
    }

    /// The plan's `k` of a new index made for texts by the command line's
    /// `check` and `add`, `serve` and the Python package: verified queries
    /// search candidates within `min(TextValues::candidate_k, plan k)`,
    /// and 6 lets texts of fewer than 500 tokens be searched at their own
    /// candidate distance (docs/QUALITY.md, "The default plan k of an index
    /// of texts": recall of the default check 0.99 instead of 0.93 on
    /// 500-character English, for more candidates per query).
    pub const TEXT_K: u32 = 6;

    /// The default options with [`k`](Options::k) = [`TEXT_K`](Options::TEXT_K):
    /// what the doors that take texts create an index with.
    pub fn for_texts() -> Options {
        Options::default().k(Options::TEXT_K)
    }

    /// Sets [`plan`](Options::plan) (`Some(plan)`).
    pub fn plan(mut self, plan: Plan) -> Options {
        self.plan = Some(plan);
        self
    }

    /// Sets [`k`](Options::k).
    pub fn k(mut self, k: u32) -> Options {
        self.k = k;
        self
    }

    /// Sets [`expected_n`](Options::expected_n).
    pub fn expected_n(mut self, expected_n: u64) -> Options {
        self.expected_n = expected_n;
        self
    }

    /// Sets [`fingerprint`](Options::fingerprint) (`Some(config)`).
    pub fn fingerprint(mut self, config: FingerprintConfig) -> Options {
        self.fingerprint = Some(config);
        self
    }

    /// Sets [`durability`](Options::durability).
    pub fn durability(mut self, durability: Durability) -> Options {
        self.durability = durability;
        self
    }

    /// Sets [`retention`](Options::retention) (`Some(retention)`).
    pub fn retention(mut self, retention: Duration) -> Options {
        self.retention = Some(retention);
        self
    }

    /// Sets [`memtable_bytes`](Options::memtable_bytes).
    pub fn memtable_bytes(mut self, bytes: usize) -> Options {
        self.memtable_bytes = bytes;
        self
    }

    /// Sets [`file_system`](Options::file_system) (`Some(fs)`).
    pub fn file_system(mut self, fs: Arc<dyn FileSystem>) -> Options {
        self.file_system = Some(fs);
        self
    }

    /// Sets [`merge_policy`](Options::merge_policy): `None` merges only on
    /// `compact()`.
    pub fn merge_policy(mut self, policy: Option<Arc<dyn MergePolicy>>) -> Options {
        self.merge_policy = policy;
        self
    }

    /// Sets [`merge_thread`](Options::merge_thread).
    pub fn merge_thread(mut self, on: bool) -> Options {
        self.merge_thread = on;
        self
    }

    /// Sets [`max_segments`](Options::max_segments).
    pub fn max_segments(mut self, max_segments: usize) -> Options {
        self.max_segments = max_segments;
        self
    }

    /// Sets [`prefault`](Options::prefault).
    pub fn prefault(mut self, on: bool) -> Options {
        self.prefault = on;
        self
    }

    /// Sets [`memory_budget`](Options::memory_budget).
    pub fn memory_budget(mut self, bytes: u64) -> Options {
        self.memory_budget = Some(bytes);
        self
    }

    /// Sets [`small_segment_plans`](Options::small_segment_plans).
    pub fn small_segment_plans(mut self, on: bool) -> Options {
        self.small_segment_plans = on;
        self
    }

    /// Sets [`decoded_tables_up_to`](Options::decoded_tables_up_to).
    pub fn decoded_tables_up_to(mut self, keys: u64) -> Options {
        self.decoded_tables_up_to = keys;
        self
    }

    /// Sets [`flat_tables`](Options::flat_tables).
    pub fn flat_tables(mut self, on: bool) -> Options {
        self.flat_tables = on;
        self
    }

    /// Sets [`flush_thread`](Options::flush_thread).
    pub fn flush_thread(mut self, on: bool) -> Options {
        self.flush_thread = on;
        self
    }

    /// Sets [`create_in_non_empty_dir`](Options::create_in_non_empty_dir).
    pub fn create_in_non_empty_dir(mut self, on: bool) -> Options {
        self.create_in_non_empty_dir = on;
        self
    }

    /// Sets [`schedule`](Options::schedule) (`Some(schedule)`).
    #[cfg(feature = "schedule-hooks")]
    pub fn schedule(mut self, schedule: crate::engine::schedule::Schedule) -> Options {
        self.schedule = Some(schedule);
        self
    }
}

/// What a new index records, worked out from [`Options`]: creation and
/// `Index::repair` without a manifest to read the settings from share it.
#[derive(Debug)]
pub(super) struct NewIndexSettings {
    /// The given plan, or `Plan::auto(expected_n, k)`.
    pub(super) plan: Plan,
    /// The given fingerprint configuration, or the default `Simhasher`'s.
    pub(super) fingerprint: FingerprintConfig,
    /// The retention window in milliseconds; 0 keeps everything (a window
    /// shorter than a millisecond is recorded as one).
    pub(super) retention_ms: u64,
}

impl Options {
    /// The settings a new index created with these options records.
    pub(super) fn new_index_settings(&self) -> Result<NewIndexSettings> {
        let plan = match &self.plan {
            Some(plan) => plan.clone(),
            None => Plan::auto(self.expected_n, self.k)?,
        };
        let fingerprint = self
            .fingerprint
            .unwrap_or_else(|| Simhasher::default().config());
        let retention_ms = self.retention.map_or(0, |r| {
            u64::try_from(r.as_millis()).unwrap_or(u64::MAX).max(1)
        });
        Ok(NewIndexSettings {
            plan,
            fingerprint,
            retention_ms,
        })
    }
}
