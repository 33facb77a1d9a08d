//! Merging a run of the newest segments into one: the newest version of
//! each id, expired documents and needless tombstones dropped.

use std::cmp::Reverse;
use std::collections::binary_heap::PeekMut;
use std::collections::{BinaryHeap, HashSet};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use crate::error::{Error, Result};
use crate::format::{DocEntry, FileKind, FormatError, SortedDocMapWriter};

use super::tables::merged_tables;
use crate::engine::core::{Core, lock, now_ms, read_lock};
use crate::engine::files::{corrupted, create_buffered, encode_error, sync_buffered};
use crate::engine::schedule::Point;
use crate::engine::segment::Segment;

impl Core {
    /// Merges the `n` newest segments into one ([`merge_run`](Self::merge_run)).
    /// The caller holds `merging` (`compact`).
    pub(in crate::engine) fn merge_newest(&self, n: usize) -> Result<()> {
        let run = self.newest_run(n);
        self.merge_run(run)
    }

    /// The `n` newest segments.
    fn newest_run(&self, n: usize) -> Run {
        let state = read_lock(&self.state);
        Run {
            segments: state.segments.iter().take(n).cloned().collect(),
            includes_oldest: n >= state.segments.len(),
        }
    }

    /// Merges `run`, a contiguous run of segments, into one: the newest
    /// version of every id wins and expired documents are dropped;
    /// tombstones are dropped too when the run includes the oldest segment
    /// (none remains for them to hide), and kept otherwise. Flushes, and a
    /// merge of a run newer or older than this one, may commit meanwhile
    /// (the run stays contiguous): docs/ARCHITECTURE.md, "Merges beside the
    /// merge thread".
    pub(in crate::engine) fn merge_run(&self, run: Run) -> Result<()> {
        let result = self.merge_segments(run);
        // A run with nothing to merge (one compacted segment) is no merge,
        // nor one given up because another failure poisoned the index.
        if !matches!(result, Ok(false) | Err(Error::Poisoned { .. })) {
            let a = &self.activity;
            a.count(&result, &a.merges, &a.merge_failures);
        }
        // The run's segments, replaced, may have had no other reader.
        self.remove_retired();
        result.map(|_| ())
    }

    /// Whether it merged.
    fn merge_segments(&self, run: Run) -> Result<bool> {
        let docs_in_run = run.records();
        let Run {
            segments: run,
            includes_oldest,
        } = run;
        let _read_through = Segment::read_through(&run);
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
            return Ok(false);
        }
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
        if let Err(e) = self.check_poisoned() {
            // Another thread's failure since the run was chosen: the files
            // may be in an unknown state, so nothing more is committed. The
            // merged segment's files are not named; the next open removes
            // what is left of them.
            if let Some(segment) = merged {
                let paths = [segment.seg_path.clone(), segment.ids_path.clone()];
                drop(segment);
                for path in &paths {
                    let _ = self.fs.remove(path);
                }
            }
            return Err(e);
        }
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
        // Its files are removed once no reader holds it.
        self.retire(run);
        self.hooks.pause(Point::MergeCommitted);
        Ok(true)
    }
}

/// A contiguous run of segments chosen for a merge, newest first.
#[derive(Debug)]
pub(in crate::engine) struct Run {
    pub(in crate::engine) segments: Vec<Arc<Segment>>,
    /// Whether no segment older than the run existed when it was chosen.
    pub(in crate::engine) includes_oldest: bool,
}

impl Run {
    /// The documents and tombstones of the run's segments.
    pub(in crate::engine) fn records(&self) -> u64 {
        self.segments
            .iter()
            .map(|s| s.meta.doc_count + s.meta.tombstone_count)
            .sum()
    }
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
