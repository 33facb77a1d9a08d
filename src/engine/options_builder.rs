//! Chainable setters for [`Options`], so that code outside the crate builds
//! options without a struct expression (`Options` is `#[non_exhaustive]`:
//! adding a field is not a breaking change).

use std::sync::Arc;
use std::time::Duration;

use crate::fingerprint::FingerprintConfig;
use crate::plan::Plan;

use super::fs::FileSystem;
use super::policy::MergePolicy;
use super::{Durability, Options};

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

    /// Sets [`small_segment_plans`](Options::small_segment_plans).
    pub fn small_segment_plans(mut self, on: bool) -> Options {
        self.small_segment_plans = on;
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
