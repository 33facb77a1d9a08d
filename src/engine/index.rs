//! [`Index`]: the façade. Its public methods are here when they are a few
//! lines; the stages behind them live in their own files (the engine's
//! `mod.rs` lists them, docs/ARCHITECTURE.md describes each).
//!
//! Write path ([`write`](super::write)): a batch is encoded as one WAL
//! frame, appended (and synced in [`Durability::Sync`]), then applied to the
//! memtable. When the memtable passes its byte budget it is flushed
//! ([`flush`](super::flush)). With the flush thread ([`Options::flush_thread`],
//! on by default on machines with more than two cores), the writing thread
//! starts a new WAL, commits a manifest naming it beside the old one, and
//! swaps in an empty memtable; the full one, frozen, goes to the flush
//! thread, which writes its tables and doc map as a new segment and commits
//! a manifest naming the segment and no longer the old WAL. Without it, the
//! writing thread does all of that itself, under the writer lock. Each
//! commit is a whole manifest replaced atomically (temp file, sync, rename,
//! directory sync). Only once the segment is committed do queries see it
//! instead of the frozen memtable.
//!
//! Read path: [`read`](super::read). Opening: [`recovery`](super::recovery).
//! Merges: [`compaction`](super::compaction).
//!
//! File layouts: docs/FORMAT.md.

use std::collections::HashSet;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use crate::error::{Error, Result};
use crate::fingerprint::{FingerprintError, Simhasher};
use crate::format::{FileKind, Record};
use crate::plan::Plan;
use crate::sketch::Sketch;

use super::compaction::Merger;
use super::core::{Activity, Core, lock, now_ms, read_lock};
use super::files::io_error;
use super::flush::Flusher;
use super::keys::U64Map;
use super::lock::DirLock;
use super::options::{Durability, Options};
use super::pending::Pending;
use super::read::Accept;
use super::schedule::Point;
use super::segment::Segment;
use super::types::{Match, Stats};
use super::write::{Writer, check_name};

/// A persistent, exact near-duplicate index of 64-bit fingerprints.
///
/// `Index` is `Send + Sync`: queries run from many threads while one writes
/// (writes are serialised).
///
/// ```
/// use simhashdb::{Index, Options};
///
/// let dir = tempfile::tempdir()?;
/// let path = dir.path().join("pages");
/// let index = Index::open(&path, Options::new().k(3))?; // created: k = 3
/// index.insert_named(1, 0x0123_4567_89ab_cdef, "https://example.com/a")?;
/// index.insert(2, 0x0123_4567_89ab_cdee)?; // 1 bit from document 1
/// index.insert(3, 0xfedc_ba98_7654_3210)?; // far from both
/// let hits = index.query(0x0123_4567_89ab_cdef, 3)?; // nearest first
/// assert_eq!(hits.iter().map(|m| (m.id, m.distance)).collect::<Vec<_>>(), [(1, 0), (2, 1)]);
/// assert_eq!(hits[0].name.as_deref(), Some("https://example.com/a"));
/// index.close()?; // or drop it: close also reports a failed background flush
///
/// // Reopened, the index has every acknowledged write (its WAL is replayed).
/// let index = Index::open(&path, Options::new())?;
/// assert_eq!(index.get(2)?, Some(0x0123_4567_89ab_cdee));
/// assert_eq!(index.len()?, 3);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct Index {
    pub(super) core: Arc<Core>,
    pub(super) durability: Durability,
    pub(super) memtable_budget: usize,
    pub(super) max_segments: usize,
    pub(super) read_only: bool,
    pub(super) writer: Mutex<Option<Writer>>,
    /// What a reader last read of its WALs (`refresh`); held through a
    /// refresh.
    pub(super) loaded: Mutex<super::reader::Loaded>,
    /// The background merge thread, if merges run there.
    pub(super) merger: Option<Merger>,
    /// The background flush thread, if flushes run there.
    pub(super) flusher: Option<Flusher>,
    /// The [`Simhasher`] of the recorded configuration, built at the first
    /// call by text ([`Index::text_values`]).
    pub(super) text_hasher: std::sync::OnceLock<std::result::Result<Simhasher, FingerprintError>>,
    // Dropped last: the lock outlives every file operation.
    pub(super) _lock: Option<DirLock>,
}

impl Drop for Index {
    fn drop(&mut self) {
        self.stop_background();
    }
}

fn record_id(record: &Record) -> u64 {
    match record {
        Record::Insert { id, .. } | Record::Delete { id, .. } => *id,
    }
}

/// A batch of `insert_if_new_many` between the start of its search and its
/// settling (or a failure): writes note their ids meanwhile.
struct Searching<'a>(&'a Core);

impl Drop for Searching<'_> {
    fn drop(&mut self) {
        lock(&self.0.recent_writes).end();
    }
}

impl Index {
    /// Opens the index in `dir`, creating it (and `dir`) if it does not exist.
    /// Takes the directory's exclusive lock: a second writer gets
    /// [`Error::Locked`].
    pub fn open(dir: impl AsRef<Path>, options: Options) -> Result<Index> {
        Index::open_with(dir.as_ref(), options, false)
    }

    /// Opens an existing index for queries only. Any number of readers, in
    /// any process, may open it at once, and beside its writer (another
    /// process's [`open`](Index::open), a `simhashdb serve`): a reader
    /// takes no lock and creates, writes or removes nothing, so it never
    /// holds up the writer, its flushes, merges or WAL rotations.
    ///
    /// A reader answers from the state of its open: every write the writer
    /// had acknowledged when the open began (the segments the manifest
    /// names and the WALs' complete frames; a frame being appended is left
    /// out, and nothing is repaired). [`refresh`](Index::refresh) brings it
    /// up to date. Segments a merge replaces stay readable to it while it
    /// holds them. A file the manifest names that a writer's commit
    /// removes while the reader opens sends it to the newer manifest
    /// (docs/ARCHITECTURE.md, "Readers beside a writer").
    ///
    /// # Errors
    ///
    /// [`Error::Io`] naming `MANIFEST` if `dir` holds no index;
    /// [`Error::ManifestMissing`] if it holds index files without a
    /// manifest; [`Error::Corrupted`] naming the file if a file is damaged.
    pub fn open_read_only(dir: impl AsRef<Path>) -> Result<Index> {
        Index::open_with(dir.as_ref(), Options::default(), true)
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
        self.insert_batch_sketched(
            docs.into_iter()
                .map(|(id, fingerprint, name)| (id, fingerprint, None, name)),
        )
    }

    /// Inserts document `id` with `fingerprint`, its verification value
    /// `sketch` (the [`Sketch`] of the text the fingerprint was computed
    /// from, kept with the document: docs/FORMAT.md, "Doc map entry
    /// block") and an optional name, replacing any earlier version of `id`.
    /// Queries return the sketch with the document ([`Match::sketch`],
    /// [`Doc::sketch`](crate::Doc::sketch)).
    pub fn insert_sketched(
        &self,
        id: u64,
        fingerprint: u64,
        sketch: Sketch,
        name: Option<String>,
    ) -> Result<()> {
        self.insert_batch_sketched([(id, fingerprint, Some(sketch), name)])
    }

    /// [`insert_batch`](Index::insert_batch) with an optional sketch for
    /// each document: (id, fingerprint, sketch, name).
    pub fn insert_batch_sketched<I, S>(&self, docs: I) -> Result<()>
    where
        I: IntoIterator<Item = (u64, u64, Option<Sketch>, Option<S>)>,
        S: Into<String>,
    {
        let timestamp = now_ms();
        let docs = docs.into_iter();
        // Sized once rather than copied as it doubles.
        let mut records = Vec::with_capacity(docs.size_hint().0);
        for (id, fingerprint, sketch, name) in docs {
            let name: Option<String> = name.map(Into::into);
            check_name(name.as_deref())?;
            records.push(Record::Insert {
                seq: 0,
                id,
                fingerprint,
                timestamp,
                name,
                sketch,
            });
        }
        let mut writer = self.writer()?;
        if records.is_empty() {
            // Nothing to log (a WAL frame holds at least one record).
            return Ok(());
        }
        self.log(&mut writer, records)
    }

    /// Deletes document `id` (a no-op for queries if it does not exist).
    pub fn delete(&self, id: u64) -> Result<()> {
        let record = Record::Delete {
            seq: 0,
            id,
            timestamp: now_ms(),
        };
        let mut writer = self.writer()?;
        self.log(&mut writer, vec![record])
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
            sketch: None,
        };
        self.log(&mut writer, vec![record])?;
        Ok(Ok(()))
    }

    /// [`insert_if_new_named`](Index::insert_if_new_named) for many
    /// documents, in order, answered exactly as the same calls one after
    /// another would be: each document is checked against the index and
    /// against the documents of the batch inserted before it (a later
    /// document with the same id replaces an earlier one, in the batch or in
    /// the index), and gets `Ok(())` (inserted) or its near-duplicates,
    /// nearest first. The documents inserted are one write, under one
    /// acquisition of the writer lock: all or none survive a crash, in
    /// [`Durability::Sync`] they share one sync, and no other write comes
    /// between the answers and them. `k` above the plan's `k`, or a name
    /// over the limit, is refused and nothing is written.
    ///
    /// The documents are searched as [`query_batch`](Self::query_batch)
    /// searches them (a batch of more than 64 documents on rayon's global
    /// pool) before the writer lock is taken; then, under the lock, the
    /// answers are brought up to date with what other writes changed
    /// meanwhile. So the call may be made from any thread, a task on
    /// rayon's pool included, beside any other calls: it never waits for
    /// the pool while it holds a lock.
    pub fn insert_if_new_many<I, S>(
        &self,
        docs: I,
        k: u32,
    ) -> Result<Vec<std::result::Result<(), Vec<Match>>>>
    where
        I: IntoIterator<Item = (u64, u64, Option<S>)>,
        S: Into<String>,
    {
        self.insert_if_new_many_nearest(docs, k, usize::MAX)
    }

    /// [`insert_if_new_many`](Index::insert_if_new_many), a duplicate
    /// answered with at most its `limit` nearest matches (at least 1):
    /// the memory the call takes is bounded by the batch's length times
    /// `limit`, however many documents lie near each one
    /// ([`query_batch_nearest`](Index::query_batch_nearest)).
    pub fn insert_if_new_many_nearest<I, S>(
        &self,
        docs: I,
        k: u32,
        limit: usize,
    ) -> Result<Vec<std::result::Result<(), Vec<Match>>>>
    where
        I: IntoIterator<Item = (u64, u64, Option<S>)>,
        S: Into<String>,
    {
        self.insert_if_new_many_sketched(
            docs.into_iter()
                .map(|(id, fingerprint, name)| (id, fingerprint, None, name)),
            k,
            limit,
        )
    }

    /// [`insert_if_new_many_nearest`](Index::insert_if_new_many_nearest)
    /// with an optional sketch stored for each document inserted: (id,
    /// fingerprint, sketch, name). The documents are checked on their
    /// fingerprints as there; matches carry their documents' sketches.
    /// (To check texts by their sketches as well, see
    /// [`insert_if_new_many_verified`](Self::insert_if_new_many_verified).)
    pub fn insert_if_new_many_sketched<I, S>(
        &self,
        docs: I,
        k: u32,
        limit: usize,
    ) -> Result<Vec<std::result::Result<(), Vec<Match>>>>
    where
        I: IntoIterator<Item = (u64, u64, Option<Sketch>, Option<S>)>,
        S: Into<String>,
    {
        let docs = docs
            .into_iter()
            .map(|(id, fp, sketch, name)| (id, fp, sketch, name.map(Into::into)))
            .collect();
        self.check_and_insert(docs, k, limit, &|_, _, _| true)
    }

    /// The check-and-insert behind [`insert_if_new_many_sketched`]
    /// (Self::insert_if_new_many_sketched) and
    /// [`insert_if_new_many_verified`](Self::insert_if_new_many_verified):
    /// the candidates of document `i` of `docs` are the documents within
    /// `k` of its fingerprint that `accept(i, distance, their sketch)`
    /// accepts, in the index and among the documents of the batch inserted
    /// before it; the `limit` nearest of them are kept.
    pub(super) fn check_and_insert(
        &self,
        mut docs: Vec<(u64, u64, Option<Sketch>, Option<String>)>,
        k: u32,
        limit: usize,
        accept: &Accept<'_>,
    ) -> Result<Vec<std::result::Result<(), Vec<Match>>>> {
        if limit == 0 {
            return Err(Error::InvalidArgument(
                "a check's limit on its matches must be at least 1".into(),
            ));
        }
        if k > self.core.plan.k() {
            return Err(Error::DistanceTooLarge {
                requested: k,
                plan_k: self.core.plan.k(),
            });
        }
        for (_, _, _, name) in &docs {
            check_name(name.as_deref())?;
        }
        let fingerprints: Vec<u64> = docs.iter().map(|d| d.1).collect();
        // Every document's matches in the index, before any of the batch is
        // written, searched without the writer lock (a search on rayon's
        // pool under it could wait for a task of the pool that waits for
        // the lock). What was written from `from` on is noted meanwhile and
        // settled below.
        let from = {
            let writer = self.writer()?;
            lock(&self.core.recent_writes).begin();
            writer.as_ref().map_or(0, |w| w.next_seq)
        };
        let searching = Searching(&self.core);
        let searched = self.query_batch_filtered(&fingerprints, k, limit, accept);
        self.core.hooks.pause(Point::BatchSearched);
        let mut writer = self.writer()?;
        let changed = {
            let next_seq = writer.as_ref().map_or(0, |w| w.next_seq);
            lock(&self.core.recent_writes).since(from, next_seq)
        };
        drop(searching);
        // A flush or merge meanwhile moves documents without changing what
        // a search finds; the ids written since the search began are
        // looked up again. If more were written than are noted, the batch
        // is searched again, here, on this thread.
        let in_index = match changed {
            Some(changed) => self.settle(searched?, &fingerprints, &changed, k, limit, accept)?,
            None => self.query_runs_here_filtered(&fingerprints, k, limit, accept)?,
        };
        let mut answers = Vec::with_capacity(docs.len());
        // The batch's inserted documents, by id: position in `docs` of the
        // latest one (it replaces any version in the index or the batch).
        // (The memtable's id map hashes ids alike.)
        let mut inserted: U64Map<usize> =
            U64Map::with_capacity_and_hasher(docs.len(), Default::default());
        // And by fingerprint, each version (a replaced one is skipped).
        let mut pending = Pending::new(k, docs.len());
        for (i, mut matches) in in_index.into_iter().enumerate() {
            let (id, fingerprint) = (docs[i].0, docs[i].1);
            let cut = matches.len() >= limit;
            let found = matches.len();
            matches.retain(|m| !inserted.contains_key(&m.id));
            if cut && matches.len() < found {
                // The batch replaced some of the nearest: the next nearest
                // in the index, which the limit left out, may count.
                let wider = limit.saturating_add(inserted.len());
                let accept = |_, d, s| accept(i, d, s);
                matches = self
                    .query_together_filtered(&[fingerprint], k, wider, &accept)?
                    .pop()
                    .unwrap_or_default();
                matches.retain(|m| !inserted.contains_key(&m.id));
            }
            for j in pending.matching(fingerprint) {
                let (other, other_fp, sketch, name) = &docs[j];
                if inserted.get(other) == Some(&j)
                    && accept(i, crate::hamming(*other_fp, fingerprint), *sketch)
                {
                    matches.push(Match {
                        id: *other,
                        fingerprint: *other_fp,
                        distance: crate::hamming(*other_fp, fingerprint),
                        name: name.clone(),
                        sketch: *sketch,
                    });
                }
            }
            if matches.is_empty() {
                inserted.insert(id, i);
                // The last document is checked against nothing later.
                if i + 1 < docs.len() {
                    pending.insert(i, fingerprint);
                }
                answers.push(Ok(()));
            } else {
                matches.sort_unstable_by_key(|m| (m.distance, m.id));
                matches.truncate(limit);
                answers.push(Err(matches));
            }
        }
        let timestamp = now_ms();
        let records: Vec<Record> = answers
            .iter()
            .zip(&mut docs)
            .filter(|(answer, _)| answer.is_ok())
            .map(|(_, (id, fingerprint, sketch, name))| Record::Insert {
                seq: 0,
                id: *id,
                fingerprint: *fingerprint,
                timestamp,
                name: name.take(),
                sketch: *sketch,
            })
            .collect();
        if !records.is_empty() {
            self.log(&mut writer, records)?;
        }
        Ok(answers)
    }

    /// Brings `searched`, the matches of each of `fingerprints` found
    /// before the writer lock was taken (which the caller now holds), up to
    /// date: the documents of the ids in `changed` (written since) leave
    /// them, and those of their current versions within `k` join them.
    fn settle(
        &self,
        mut searched: Vec<Vec<Match>>,
        fingerprints: &[u64],
        changed: &HashSet<u64>,
        k: u32,
        limit: usize,
        accept: &Accept<'_>,
    ) -> Result<Vec<Vec<Match>>> {
        if changed.is_empty() {
            return Ok(searched);
        }
        let mut current = Vec::new();
        let mut near = Pending::new(k, changed.len());
        for &id in changed {
            if let Some(doc) = self.get_doc(id)? {
                near.insert(current.len(), doc.fingerprint);
                current.push(doc);
            }
        }
        for (i, (matches, &fp)) in searched.iter_mut().zip(fingerprints).enumerate() {
            let cut = matches.len() >= limit;
            let found = matches.len();
            matches.retain(|m| !changed.contains(&m.id));
            if cut && matches.len() < found {
                // The limit left out matches that may now count: this one
                // is searched again, here (the writer lock is held, so the
                // search sees every write).
                let accept = |_, d, s| accept(i, d, s);
                *matches = self
                    .query_runs_here_filtered(&[fp], k, limit, &accept)?
                    .pop()
                    .unwrap_or_default();
                continue;
            }
            for j in near.matching(fp) {
                let doc = &current[j];
                if !accept(i, crate::hamming(doc.fingerprint, fp), doc.sketch) {
                    continue;
                }
                matches.push(Match {
                    id: doc.id,
                    fingerprint: doc.fingerprint,
                    distance: crate::hamming(doc.fingerprint, fp),
                    name: doc.name.clone(),
                    sketch: doc.sketch,
                });
            }
        }
        Ok(searched)
    }

    /// Logs `records` and applies them ([`write`](Self::write)), noting
    /// their ids for the batches of `insert_if_new_many` searching
    /// meanwhile.
    fn log(&self, writer: &mut Option<Writer>, records: Vec<Record>) -> Result<()> {
        let first = writer.as_ref().map(|w| w.next_seq);
        let ids: Option<Vec<u64>> = lock(&self.core.recent_writes)
            .watching()
            .then(|| records.iter().map(record_id).collect());
        let result = self.write(writer, records);
        if let (Some(ids), Some(first)) = (ids, first)
            && writer.as_ref().is_some_and(|w| w.next_seq != first)
        {
            lock(&self.core.recent_writes).note(first, &ids);
        }
        result
    }

    /// How long documents are kept, as recorded in the index when it was
    /// created ([`Options::retention`]); `None`: forever.
    pub fn retention(&self) -> Option<std::time::Duration> {
        (self.core.retention_ms > 0)
            .then(|| std::time::Duration::from_millis(self.core.retention_ms))
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
        let result = w.sync_wal(&self.core.dir);
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

    /// Closes the index as dropping it does (every thread the index started
    /// told to stop, a flush or merge in progress waited for, the threads
    /// joined, the files of segments that merges replaced removed, then the
    /// directory lock released), and reports what a drop cannot: whether a
    /// write, a background flush or a background merge failed since the
    /// index was opened.
    ///
    /// Acknowledged writes are in the WAL already (synced, with
    /// [`Durability::Sync`]); `close` does not write the memtable to a
    /// segment: the next open replays the WAL. Call [`flush`](Self::flush)
    /// first to have it in a segment.
    ///
    /// # Errors
    ///
    /// [`Error::Poisoned`], naming the first failure, if one happened,
    /// including a background flush or merge that failed while `close` waited
    /// for it. The files are then as a crash at that moment would have left
    /// them, and the next open recovers every acknowledged write.
    pub fn close(mut self) -> Result<()> {
        self.stop_background();
        self.core.check_poisoned()
    }

    /// Stops every thread the index started, waiting for a flush or merge
    /// in progress, and joins them; then removes the files of the segments
    /// merges replaced: for `close` and `drop`, before the directory lock
    /// is released. No thread of the index outlives it, and no file is
    /// removed once another process may own the directory.
    fn stop_background(&mut self) {
        self.core.threads.stop.store(true, Ordering::Relaxed);
        self.core.hooks.pause(Point::Closing);
        // The flush thread first: the flush it finishes wakes the merge
        // thread.
        drop(self.flusher.take());
        drop(self.merger.take());
        // Then the prefault thread and the one the first query started.
        self.core.stop_threads();
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
            decoded_table_bytes: 0,
            disk_bytes: 0,
            memtable_docs: state.memtable.len(),
            memtable_bytes: state.memtable.approximate_bytes(),
            flushing_docs: state.frozen.as_ref().map_or(0, |m| m.len()),
            flushes: Activity::get(&self.core.activity.flushes),
            flush_failures: Activity::get(&self.core.activity.flush_failures),
            merges: Activity::get(&self.core.activity.merges),
            merge_failures: Activity::get(&self.core.activity.merge_failures),
            decodes: Activity::get(&self.core.activity.decodes),
        };
        let mut table_bytes = 0u64;
        let mut table_keys = 0u64;
        for segment in &state.segments {
            table_keys += segment.meta.key_count * segment.tables.table_count() as u64;
            stats.segment_docs += segment.meta.doc_count;
            stats.tombstones += segment.meta.tombstone_count;
            stats.segment_keys += segment.meta.key_count;
            stats.decoded_table_bytes += segment.decoded_bytes() as u64;
            stats.disk_bytes += segment.meta.seg_file_len + segment.meta.ids_file_len;
            table_bytes += (0..segment.tables.table_count())
                .filter_map(|t| segment.tables.table_size(t).ok())
                .sum::<u64>();
        }
        if table_keys > 0 {
            stats.table_bytes_per_key = table_bytes as f64 / table_keys as f64;
        }
        stats
    }
}
