//! Schedule points: the places in the commit protocol where the writing
//! thread, the flush thread, the merge thread and a walk of the documents
//! hand work to one another or commit it, and where the prefault and
//! decoding threads and `close` meet them. A test may run code at each (with
//! the `schedule-hooks` feature, `Options::schedule`): block the thread there
//! until another thread has done something, so that an interleaving that
//! would otherwise come by chance comes every run, or fail the start of a
//! background thread.
//!
//! Without the feature there are no hooks: every point compiles to nothing,
//! and the library pays nothing for them. The points are documented in
//! docs/RELIABILITY.md ("Schedules").

/// A point of the commit protocol, named by the thread that reaches it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Point {
    /// The writing thread has appended a batch's frame to the WAL (and
    /// synced it in `Durability::Sync`), and not yet applied it to the
    /// memtable.
    WriteLogged,
    /// The writing thread is about to flush: a write it applied filled the
    /// memtable, or `flush` or `compact` was called. With the flush thread
    /// it first waits for the previous flush to end, then hands the
    /// memtable over.
    FlushWanted,
    /// The writing thread has created the WAL of a hand-over and not yet
    /// committed the manifest naming it.
    HandOverWalCreated,
    /// The writing thread has committed the manifest naming the new WAL and
    /// frozen the memtable, and not yet given it to the flush thread.
    HandOverCommitted,
    /// The flush thread has taken a job and written nothing yet.
    FlushStarted,
    /// A flush (on the flush thread, or on the writing thread without one)
    /// has written and synced the segment's files and not yet committed the
    /// manifest naming it.
    FlushWritten,
    /// A flush has committed its segment (queries see it) and not yet
    /// removed the WALs it replaces.
    FlushCommitted,
    /// A merge (on the merge thread, or on the writing thread: `compact`, or
    /// merges without the merge thread) has written and synced the merged
    /// segment's files and not yet committed the manifest naming it.
    MergeWritten,
    /// A merge has committed.
    MergeCommitted,
    /// The writing thread, rather than wait for the merge thread's run, has
    /// claimed a run of newer segments and not yet started merging it.
    HelpMerge,
    /// `for_each_doc` has taken its snapshot and released the state's lock,
    /// and not yet called its callback.
    WalkSnapshotTaken,
    /// `open` is about to start the merge thread. An error returned here is
    /// the thread's start failing.
    StartMergeThread,
    /// `open` is about to start the flush thread (after the merge thread).
    /// An error returned here is the thread's start failing.
    StartFlushThread,
    /// The merge thread has been told to stop and is returning.
    MergeThreadStopped,
    /// The flush thread has been told to stop and is returning.
    FlushThreadStopped,
    /// A thread is about to claim a segment's tables to decode them; while
    /// another thread decodes them it waits for that one, then finds them
    /// decoded.
    DecodeWanted,
    /// A thread is about to decode a segment's tables (its decoded copy,
    /// `Options::decoded_tables_up_to`), holding the segment's claim to
    /// decode them: the prefault thread, the thread the first query
    /// starts, or a flush or merge writing the segment; or, for a segment
    /// of flat tables, to check their chunks: the same threads, or the
    /// thread opening an index that fits in memory.
    DecodeStarted,
    /// The open's prefault thread has started and not yet mapped anything
    /// (`open` has returned, or is about to).
    PrefaultThreadStarted,
    /// The open's prefault thread has finished (or been told to stop) and
    /// is returning.
    PrefaultThreadStopped,
    /// The thread the first query starts to decode the segments has
    /// finished (or been told to stop) and is returning.
    DecodeThreadStopped,
    /// `close` or a drop of the index has told every thread of the index
    /// to stop, and is about to wait for them (then the directory lock is
    /// released).
    Closing,
    /// `insert_if_new_many` has searched the index for its batch, holding
    /// no lock, and is about to take the writer lock to settle what was
    /// written meanwhile and log its documents.
    BatchSearched,
}

#[cfg(feature = "schedule-hooks")]
pub use hooks::Schedule;

#[cfg(feature = "schedule-hooks")]
mod hooks {
    use std::fmt;
    use std::sync::Arc;

    use super::Point;

    /// The code a test runs at every [`Point`], on the thread that reaches
    /// it. It may block. What it returns matters only at the points that
    /// start a thread ([`Point::StartMergeThread`],
    /// [`Point::StartFlushThread`]): an error there is the thread's start
    /// failing; elsewhere it is ignored.
    #[derive(Clone)]
    pub struct Schedule(pub Arc<dyn Fn(Point) -> std::io::Result<()> + Send + Sync>);

    impl Schedule {
        /// Runs `f` at every point.
        pub fn new(f: impl Fn(Point) -> std::io::Result<()> + Send + Sync + 'static) -> Schedule {
            Schedule(Arc::new(f))
        }
    }

    impl fmt::Debug for Schedule {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("Schedule(..)")
        }
    }
}

/// The engine's side: what runs at each point.
#[derive(Debug, Clone, Default)]
pub(crate) struct Hooks {
    #[cfg(feature = "schedule-hooks")]
    schedule: Option<Schedule>,
}

impl Hooks {
    #[cfg(feature = "schedule-hooks")]
    pub(crate) fn new(schedule: Option<Schedule>) -> Hooks {
        Hooks { schedule }
    }

    /// Runs the test's code at `point`, if there is any.
    #[inline(always)]
    pub(crate) fn reach(&self, point: Point) -> std::io::Result<()> {
        #[cfg(feature = "schedule-hooks")]
        if let Some(schedule) = &self.schedule {
            return (schedule.0)(point);
        }
        let _ = point;
        Ok(())
    }

    /// [`reach`](Self::reach) at a point that only pauses.
    #[inline(always)]
    pub(crate) fn pause(&self, point: Point) {
        let _ = self.reach(point);
    }
}
