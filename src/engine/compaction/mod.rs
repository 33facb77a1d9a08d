//! Compaction: the background merge thread ([`Merger`]) and the loop that
//! consults the merge policy ([`policy`]) and merges the run it chooses
//! ([`merge`]) with its tables ([`tables`]).

mod merge;
pub mod policy;
mod tables;

use std::sync::atomic::Ordering;
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::error::Result;
use crate::format::SegmentMeta;

use self::merge::Run;
use self::policy::MergePolicy;
use super::core::{Core, lock, read_lock};
use super::schedule::Point;
use super::segment::Segment;

/// The background merge thread and its wake-up signal.
#[derive(Debug)]
pub(super) struct Merger {
    pub(super) signal: Arc<MergeShared>,
    /// Notified when the thread finishes a merge or goes idle.
    progress: Arc<Condvar>,
    pub(super) handle: Option<JoinHandle<()>>,
}

/// The merge thread's signal and the condition variable that wakes it.
pub(super) type MergeShared = (Mutex<MergeSignal>, Condvar);

/// Tells the merge thread that a flush happened.
pub(super) fn wake_merge(shared: &MergeShared) {
    let (signal, wake) = shared;
    lock(signal).pending = true;
    wake.notify_one();
}

#[derive(Debug, Default)]
pub(super) struct MergeSignal {
    /// A flush happened since the thread last consulted the policy.
    pending: bool,
    /// The thread is consulting the policy or merging.
    running: bool,
    pub(super) shutdown: bool,
}

impl Merger {
    pub(super) fn start(core: Arc<Core>) -> std::io::Result<Merger> {
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
    /// work to do (a merge running or a flush not yet considered). While
    /// this thread merges a run, a run the policy chooses among the newer
    /// segments is merged here instead of waiting ([`Core::help_merge`]).
    pub(super) fn wait_for_segments(&self, core: &Core, max: usize) -> Result<()> {
        let (signal, _) = &*self.signal;
        let must_wait = |s: &MergeSignal| {
            read_lock(&core.state).segments.len() > max
                && (s.pending || s.running)
                && !core.poisoned.load(Ordering::Acquire)
        };
        loop {
            if !must_wait(&lock(signal)) {
                return Ok(());
            }
            if core.help_merge()? {
                // It may have declined a run that this merge held.
                self.wake();
                continue;
            }
            let s = lock(signal);
            if !must_wait(&s) {
                return Ok(());
            }
            // A timeout as well, since a merge's commit and this check do
            // not share a lock.
            drop(
                self.progress
                    .wait_timeout(s, Duration::from_millis(50))
                    .unwrap_or_else(PoisonError::into_inner),
            );
        }
    }

    pub(super) fn wake(&self) {
        wake_merge(&self.signal);
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

/// Which runs of segments are being merged, so that two merges never take
/// the same segment: the merge thread's run, and a run of segments newer
/// than it that the writing thread merges rather than wait
/// ([`Core::help_merge`]).
#[derive(Debug, Default)]
pub(super) struct MergeClaims {
    /// The run the merge thread is merging: its newest `max_seq`, and its
    /// documents and tombstones.
    merge_thread: Option<(u64, u64)>,
    /// The oldest `max_seq` of the run the writing thread is merging (of
    /// segments newer than the merge thread's run when it chose it); the
    /// merge thread meanwhile chooses among the segments older than it.
    writer: Option<u64>,
}

impl Core {
    /// Lets the merge policy merge runs of the newest segments until it is
    /// satisfied. The caller holds `merging`.
    pub(super) fn apply_merge_policy(&self) -> Result<()> {
        self.apply_merge_policy_then(|| {})
    }

    /// [`apply_merge_policy`](Self::apply_merge_policy), calling `merged`
    /// after each merge is committed. While the writing thread merges a
    /// run, only the segments older than it are considered.
    fn apply_merge_policy_then(&self, merged: impl Fn()) -> Result<()> {
        let Some(policy) = &self.merge_policy else {
            return Ok(());
        };
        loop {
            // A failure elsewhere (a write, a flush) stops the merges: the
            // files may be in an unknown state.
            self.check_poisoned()?;
            let run = {
                let mut claims = lock(&self.merge_claims);
                let window = Window {
                    above: None,
                    below: claims.writer,
                };
                let Some(run) = self.choose_run(policy.as_ref(), window) else {
                    return Ok(());
                };
                let newest = run.segments.iter().map(|s| s.meta.max_seq).max();
                claims.merge_thread = newest.map(|seq| (seq, run.records()));
                run
            };
            let result = self.merge_run(run);
            lock(&self.merge_claims).merge_thread = None;
            result?;
            merged();
        }
    }

    /// The run `policy` chooses among the segments in `window`, read in one
    /// look at the state. For the writing thread (`window.above` given), if
    /// the policy chooses none: the newest run of segments of one level, or
    /// else the two newest segments, so that a writer that must not wait
    /// brings the count of segments down whenever at least two are newer
    /// than the merge thread's run.
    fn choose_run(&self, policy: &dyn MergePolicy, window: Window) -> Option<Run> {
        let state = read_lock(&self.state);
        let newer = window.below.map_or(0, |seq| {
            state
                .segments
                .iter()
                .take_while(|s| s.meta.max_seq >= seq)
                .count()
        });
        let candidates: Vec<&Arc<Segment>> = state.segments[newer..]
            .iter()
            .take_while(|s| window.above.is_none_or(|seq| s.meta.max_seq > seq))
            .collect();
        let metas: Vec<SegmentMeta> = candidates.iter().map(|s| s.meta).collect();
        let range = policy.choose_run(&metas).or_else(|| {
            let level = metas.first()?.level;
            let newest = metas.iter().take_while(|m| m.level == level).count();
            window.above.map(|_| 0..newest.max(2))
        })?;
        let chosen = candidates.get(range.clone())?;
        (chosen.len() >= 2).then(|| Run {
            segments: chosen.iter().map(|&s| s.clone()).collect(),
            includes_oldest: newer + range.end == state.segments.len(),
        })
    }

    /// On the writing thread, instead of waiting for a merge thread that is
    /// busy with a run (a long merge of large segments, while flushes pile
    /// up above it): merges a run of the segments newer than that one, the
    /// policy's choice or else the newest of one level, if there is one and
    /// the merge thread's run holds at least [`HELP_RATIO`] times its
    /// documents. Whether it merged.
    pub(super) fn help_merge(&self) -> Result<bool> {
        let Some(policy) = &self.merge_policy else {
            return Ok(false);
        };
        let run = {
            let mut claims = lock(&self.merge_claims);
            let Some((above, busy)) = claims.merge_thread else {
                return Ok(false);
            };
            let window = Window {
                above: Some(above),
                below: None,
            };
            let Some(run) = self.choose_run(policy.as_ref(), window) else {
                return Ok(false);
            };
            // A run about as large as the merge thread's would take about
            // as long as waiting for it, and leave the merge thread idle
            // after it: wait instead.
            if busy < HELP_RATIO.saturating_mul(run.records()) {
                return Ok(false);
            }
            claims.writer = run.segments.iter().map(|s| s.meta.max_seq).min();
            run
        };
        self.hooks.pause(Point::HelpMerge);
        let result = self.merge_run(run);
        lock(&self.merge_claims).writer = None;
        result.map(|()| true)
    }
}

/// How many times the documents of the writer's run the merge thread's run
/// must hold for the writer to merge rather than wait.
const HELP_RATIO: u64 = 4;

/// Which segments a merge may choose from: those with a `max_seq` above
/// `above` and below `below` (the runs other merges hold), newest first.
#[derive(Debug, Clone, Copy)]
struct Window {
    above: Option<u64>,
    below: Option<u64>,
}
