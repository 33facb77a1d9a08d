//! The read path: queries (one, or a batch in parallel), lookups and the
//! walk over every document (and the counts and iterator built on it).
//!
//! A query takes the state's read lock, searches the memtable, the frozen
//! memtable if there is one, and every segment's tables, and keeps a
//! document only if no newer source (a newer memtable, a newer segment)
//! holds a version or tombstone of its id, and it is within the retention
//! window.

use std::sync::Arc;

use rayon::prelude::*;

use crate::error::Result;
use crate::format::DocEntry;
use crate::search;
use crate::sketch::Sketch;

use super::core::{State, read_lock};
use super::files::corrupted;
use super::index::Index;
use super::memtable::Version;
use super::schedule::Point;
use super::segment::Segment;
use super::types::{Doc, Docs, Match};

impl Index {
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
                        sketch: doc.sketch.as_deref().copied(),
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
                    sketch: doc.sketch.as_deref().copied(),
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
        drop(segments);
        // The snapshot may have been the last reader of a segment that a
        // merge replaced meanwhile.
        self.core.remove_retired();
        Ok(())
    }

    /// Every live document within distance `k` of `fingerprint`, sorted by
    /// (distance, id). `k` above the plan's `k` is refused.
    pub fn query(&self, fingerprint: u64, k: u32) -> Result<Vec<Match>> {
        search::check_distance(&self.core.plan, k)?;
        self.core.note_query();
        let state = read_lock(&self.core.state);
        let mut matches = self
            .in_memtables(&state, &[fingerprint], k, usize::MAX, &ANY)
            .pop()
            .unwrap_or_default();
        for (s, segment) in state.segments.iter().enumerate() {
            for found in segment.matching_fingerprints(fingerprint, k)? {
                let hit = (0, found);
                self.in_segment(&state, s, fingerprint, hit, &mut matches, usize::MAX, &ANY)?;
            }
        }
        matches.sort_unstable_by_key(|m| (m.distance, m.id));
        Ok(matches)
    }

    /// [`query`](Self::query) for each of `fingerprints` under one hold of
    /// the state: each segment is searched for all of them together
    /// ([`search::probe_many`]).
    fn query_together(&self, fingerprints: &[u64], k: u32) -> Result<Vec<Vec<Match>>> {
        self.query_together_nearest(fingerprints, k, usize::MAX)
    }

    /// [`query_together`](Self::query_together), keeping at most the
    /// `limit` nearest matches of each query: no query ever holds more than
    /// twice `limit` of them, however many documents lie within `k`.
    fn query_together_nearest(
        &self,
        fingerprints: &[u64],
        k: u32,
        limit: usize,
    ) -> Result<Vec<Vec<Match>>> {
        self.query_together_filtered(fingerprints, k, limit, &ANY)
    }

    /// [`query_together_nearest`](Self::query_together_nearest), keeping
    /// only the documents `accept` accepts: it is asked before a document
    /// is kept (so the limit counts accepted documents only) with the
    /// query's position in `fingerprints`, the distance and the document's
    /// sketch.
    pub(super) fn query_together_filtered(
        &self,
        fingerprints: &[u64],
        k: u32,
        limit: usize,
        accept: &Accept<'_>,
    ) -> Result<Vec<Vec<Match>>> {
        self.core.note_query();
        let state = read_lock(&self.core.state);
        let mut answers = self.in_memtables(&state, fingerprints, k, limit, accept);
        let mut hits = Vec::new();
        for (s, segment) in state.segments.iter().enumerate() {
            hits.clear();
            segment
                .matching_fingerprints_many(fingerprints, k, |i, found| hits.push((i, found)))?;
            for &(i, found) in &hits {
                if let (Some(&fp), Some(matches)) = (fingerprints.get(i), answers.get_mut(i)) {
                    self.in_segment(&state, s, fp, (i, found), matches, limit, accept)?;
                }
            }
        }
        for matches in &mut answers {
            matches.sort_unstable_by_key(|m| (m.distance, m.id));
            matches.truncate(limit);
        }
        Ok(answers)
    }

    /// [`query`](Self::query), keeping only the `limit` nearest matches (by
    /// distance, then id): the memory a query takes is bounded by `limit`,
    /// however many documents lie within `k` (a fingerprint stored
    /// thousands of times, say). `limit` must be at least 1.
    pub fn query_nearest(&self, fingerprint: u64, k: u32, limit: usize) -> Result<Vec<Match>> {
        Ok(self
            .query_batch_nearest(&[fingerprint], k, limit)?
            .pop()
            .unwrap_or_default())
    }

    /// [`query_batch`](Self::query_batch), each query keeping only its
    /// `limit` nearest matches, as [`query_nearest`](Self::query_nearest).
    pub fn query_batch_nearest(
        &self,
        fingerprints: &[u64],
        k: u32,
        limit: usize,
    ) -> Result<Vec<Vec<Match>>> {
        search::check_distance(&self.core.plan, k)?;
        if limit == 0 {
            return Err(crate::Error::InvalidArgument(
                "a query's limit on its matches must be at least 1".into(),
            ));
        }
        if fingerprints.len() <= QUERY_RUN {
            return self.query_together_nearest(fingerprints, k, limit);
        }
        let runs = fingerprints
            .par_chunks(QUERY_RUN)
            .map(|run| self.query_together_nearest(run, k, limit))
            .collect::<Result<Vec<_>>>()?;
        Ok(runs.into_iter().flatten().collect())
    }

    /// For each of `fingerprints`, the live documents of the memtables
    /// within `k` of it (at most about twice `limit` of the nearest).
    fn in_memtables(
        &self,
        state: &State,
        fingerprints: &[u64],
        k: u32,
        limit: usize,
        accept: &Accept<'_>,
    ) -> Vec<Vec<Match>> {
        let mut answers: Vec<Vec<Match>> = vec![Vec::new(); fingerprints.len()];
        let mut add = |i: usize, id: u64, doc: &super::memtable::Doc| {
            if let (Some(&fp), Some(matches)) = (fingerprints.get(i), answers.get_mut(i))
                && self.core.fresh(doc.timestamp)
            {
                let distance = (doc.fingerprint ^ fp).count_ones();
                // Not nearer than the farthest of `limit` at hand: not kept,
                // and its name not copied.
                if farthest(matches, limit).is_some_and(|far| (distance, id) >= far)
                    || !accept(i, distance, doc.sketch.as_deref().copied())
                {
                    return;
                }
                matches.push(Match {
                    id,
                    fingerprint: doc.fingerprint,
                    distance,
                    name: doc.name.as_deref().map(str::to_owned),
                    sketch: doc.sketch.as_deref().copied(),
                });
                keep_nearest(matches, limit);
            }
        };
        state.memtable.matching_many(fingerprints, k, &mut add);
        if let Some(frozen) = &state.frozen {
            frozen.matching_many(fingerprints, k, |i, id, doc| {
                if state.memtable.version(id).is_none() {
                    add(i, id, doc);
                }
            });
        }
        answers
    }

    /// Adds to `matches` the live documents of segment `s` whose fingerprint
    /// is `found` (a fingerprint its tables hold near `fingerprint`, the
    /// query at position `i` of its run): those no newer source replaces or
    /// deletes and `accept` accepts; only the nearest, about twice `limit`
    /// at most, are kept.
    #[allow(clippy::too_many_arguments)]
    fn in_segment(
        &self,
        state: &State,
        s: usize,
        fingerprint: u64,
        (i, found): (usize, u64),
        matches: &mut Vec<Match>,
        limit: usize,
        accept: &Accept<'_>,
    ) -> Result<()> {
        let Some(segment) = state.segments.get(s) else {
            return Ok(());
        };
        let distance = (found ^ fingerprint).count_ones();
        // With `limit` matches at hand, one that is not nearer than the
        // farthest of them (by distance, then id) is not kept: a doc map
        // lists a fingerprint's documents by increasing id, so the walk
        // stops at the first such one (the first live one, for a limit of
        // 1 and no match yet).
        let mut far = farthest(matches, limit);
        for entry in segment.docs.by_fingerprint(found) {
            let entry = entry.map_err(|e| corrupted(&segment.ids_path, &e))?;
            if far.is_some_and(|far| (distance, entry.id) >= far) {
                break;
            }
            if self.core.fresh(entry.timestamp)
                && accept(i, distance, entry.sketch)
                && !shadowed(state, s, entry.id)?
                && !segment.deletes_here(&entry)?
            {
                matches.push(Match {
                    id: entry.id,
                    fingerprint: found,
                    distance,
                    name: entry.name.map(str::to_owned),
                    sketch: entry.sketch,
                });
                keep_nearest(matches, limit);
                far = farthest(matches, limit);
            }
        }
        Ok(())
    }

    /// `Ok` while the index accepts writes: [`Error::ReadOnly`] for an
    /// index opened read-only, [`Error::Poisoned`] (naming the cause) once
    /// a failed write, sync, flush or merge has poisoned it, and
    /// [`Error::Io`] if its write-ahead log no longer has a name (the
    /// directory removed under it; checked when no write is under way, and
    /// a sync then fails). What a service reports as not ready; reads go on
    /// either way. Never waits for a write.
    ///
    /// [`Error::ReadOnly`]: crate::Error::ReadOnly
    /// [`Error::Poisoned`]: crate::Error::Poisoned
    /// [`Error::Io`]: crate::Error::Io
    pub fn writable(&self) -> Result<()> {
        if self.read_only {
            return Err(crate::Error::ReadOnly);
        }
        self.core.check_poisoned()?;
        if let Ok(writer) = self.writer.try_lock()
            && let Some(w) = writer.as_ref()
            && matches!(w.wal.linked(), Ok(false))
        {
            return Err(crate::Error::Io {
                path: w.path(&self.core.dir),
                op: "stat",
                source: std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    "the write-ahead log has been deleted (the index's directory removed \
                     while open?)",
                ),
            });
        }
        Ok(())
    }

    /// The number of live documents (deleted and expired ones are not
    /// counted).
    ///
    /// Cost: a walk of every document, as [`for_each_doc`](Self::for_each_doc)
    /// (each segment's doc map read from its mapped file), so O(documents):
    /// about the cost of reading the doc maps. The index does not keep an
    /// exact count, because a write cannot tell cheaply whether it replaces
    /// a document of a segment. [`stats`](Self::stats) gives O(1) figures
    /// that count replaced versions and tombstones separately.
    pub fn len(&self) -> Result<u64> {
        let mut n = 0u64;
        self.for_each_doc(|_| n += 1)?;
        Ok(n)
    }

    /// Whether the index holds no live document. Costs a walk, as
    /// [`len`](Self::len).
    pub fn is_empty(&self) -> Result<bool> {
        Ok(self.len()? == 0)
    }

    /// Every live document, from a consistent snapshot taken when the call
    /// starts, in [`for_each_doc`](Self::for_each_doc)'s order (the
    /// memtables' documents in id order, then each segment's in fingerprint
    /// order).
    ///
    /// The iterator owns its documents: it borrows nothing from the index,
    /// and writes made while it is consumed are not part of it. It holds
    /// every document (its id, fingerprint, timestamp and name) in memory;
    /// for an index larger than memory, use `for_each_doc`, which holds none.
    ///
    /// ```
    /// use simhashdb::{Index, Options};
    ///
    /// let dir = tempfile::tempdir()?;
    /// let index = Index::open(dir.path(), Options::new())?;
    /// index.insert_named(1, 0xfeed, "a")?;
    /// index.insert(2, 0xbeef)?;
    /// let ids: Vec<u64> = index.docs()?.map(|doc| doc.id).collect();
    /// assert_eq!(ids, [1, 2]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn docs(&self) -> Result<Docs> {
        let mut docs = Vec::new();
        self.for_each_doc(|doc| docs.push(doc.clone()))?;
        Ok(Docs(docs.into_iter()))
    }

    /// [`query`](Self::query) for each of `fingerprints`: `result[i]` is
    /// the answer for `fingerprints[i]`. Runs of up to 64 fingerprints are
    /// searched together, each segment's tables for the whole run at once
    /// (their memory warmed ahead of the search, see
    /// [`probe_many`](crate::search::probe_many)), and the runs in parallel
    /// on rayon's global pool (as [`find_all`](crate::batch::find_all) runs
    /// its tables) when there are several. Each run sees the index as of
    /// its own start, so writes made during the batch may be seen by some
    /// queries and not by others. The first failing query's error is
    /// returned.
    pub fn query_batch(&self, fingerprints: &[u64], k: u32) -> Result<Vec<Vec<Match>>> {
        search::check_distance(&self.core.plan, k)?;
        if fingerprints.len() <= QUERY_RUN {
            return self.query_together(fingerprints, k);
        }
        let runs = fingerprints
            .par_chunks(QUERY_RUN)
            .map(|run| self.query_together(run, k))
            .collect::<Result<Vec<_>>>()?;
        Ok(runs.into_iter().flatten().collect())
    }

    /// [`query_batch`](Self::query_batch) on the calling thread only, run
    /// after run: for a caller that holds the writer lock, which must not
    /// wait for rayon's pool (a task of the pool may be waiting for the
    /// lock).
    /// Each query keeps its `limit` nearest matches, as
    /// [`query_batch_nearest`](Self::query_batch_nearest).
    /// Keeps only what `accept` accepts
    /// ([`query_together_filtered`](Self::query_together_filtered);
    /// positions are in `fingerprints`).
    pub(super) fn query_runs_here_filtered(
        &self,
        fingerprints: &[u64],
        k: u32,
        limit: usize,
        accept: &Accept<'_>,
    ) -> Result<Vec<Vec<Match>>> {
        search::check_distance(&self.core.plan, k)?;
        let mut answers = Vec::with_capacity(fingerprints.len());
        for (r, run) in fingerprints.chunks(QUERY_RUN).enumerate() {
            let at = r * QUERY_RUN;
            let accept = |i: usize, d: u32, s: Option<Sketch>| accept(at + i, d, s);
            answers.extend(self.query_together_filtered(run, k, limit, &accept)?);
        }
        Ok(answers)
    }

    /// [`query_batch_nearest`](Self::query_batch_nearest) keeping only
    /// what `accept` accepts (positions are in `fingerprints`): runs in
    /// parallel on rayon's global pool when there are several.
    pub(super) fn query_batch_filtered(
        &self,
        fingerprints: &[u64],
        k: u32,
        limit: usize,
        accept: &Accept<'_>,
    ) -> Result<Vec<Vec<Match>>> {
        search::check_distance(&self.core.plan, k)?;
        if fingerprints.len() <= QUERY_RUN {
            return self.query_together_filtered(fingerprints, k, limit, accept);
        }
        let runs = fingerprints
            .par_chunks(QUERY_RUN)
            .enumerate()
            .map(|(r, run)| {
                let at = r * QUERY_RUN;
                let accept = |i: usize, d: u32, s: Option<Sketch>| accept(at + i, d, s);
                self.query_together_filtered(run, k, limit, &accept)
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(runs.into_iter().flatten().collect())
    }
}

/// What a filtered search keeps: called with the query's position in its
/// run, the distance and the document's sketch.
pub(super) type Accept<'a> = dyn Fn(usize, u32, Option<Sketch>) -> bool + Sync + 'a;

/// Accepts every document.
const ANY: fn(usize, u32, Option<Sketch>) -> bool = |_, _, _| true;

/// A limit up to which a query with `limit` matches at hand skips those no
/// nearer than its farthest (finding the farthest costs a pass over them).
const FEW: usize = 64;

/// The farthest of `matches` (by distance, then id) when they are `limit`
/// or more and `limit` is at most [`FEW`]: no match beyond it is kept.
fn farthest(matches: &[Match], limit: usize) -> Option<(u32, u64)> {
    if matches.len() < limit || limit > FEW {
        return None;
    }
    matches.iter().map(|m| (m.distance, m.id)).max()
}

/// Keeps the `limit` nearest of `matches` (by distance, then id) once it
/// holds twice as many: amortised, a match costs O(1) and no query holds
/// more than twice `limit` matches.
fn keep_nearest(matches: &mut Vec<Match>, limit: usize) {
    if matches.len() >= limit.saturating_mul(2).max(2) && limit > 0 {
        matches.select_nth_unstable_by_key(limit - 1, |m| (m.distance, m.id));
        matches.truncate(limit);
    }
}

/// Fingerprints [`Index::query_batch`] searches together: enough to keep
/// the memory of several queries in flight, few enough that a batch splits
/// into runs for every thread of the pool.
const QUERY_RUN: usize = 64;

fn public_doc(entry: &DocEntry<'_>) -> Doc {
    Doc {
        id: entry.id,
        fingerprint: entry.fingerprint,
        name: entry.name.map(str::to_owned),
        timestamp_ms: entry.timestamp,
        sketch: entry.sketch,
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
