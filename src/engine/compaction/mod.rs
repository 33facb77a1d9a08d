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

use super::core::{Core, lock, read_lock};
use super::schedule::Point;

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
    /// work to do (a merge running or a flush not yet considered).
    pub(super) fn wait_for_segments(&self, core: &Core, max: usize) {
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

impl Core {
    /// Lets the merge policy merge runs of the newest segments until it is
    /// satisfied. The caller holds `merging`.
    pub(super) fn apply_merge_policy(&self) -> Result<()> {
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
}
