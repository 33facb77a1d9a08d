//! The in-memory part of the index: recent writes, not yet in a segment.
//!
//! The doc map holds the latest version of every id written since the last
//! flush, live or deleted, and the live ids of each fingerprint. The permuted
//! tables are kept as a small log-structured merge of their own: new
//! fingerprints are appended to an unsorted tail, which queries scan; a full
//! tail is sorted into a run (one sorted vector per permuted table), and runs
//! of similar size are merged, so there are O(log n) runs and each key is
//! merged O(log n) times. An insert costs two hash-map updates and a push;
//! the per-table work is sequential sorting and merging, and the tables come
//! out sorted for the segment at flush. (An earlier design kept one hash map
//! per table, updated on every insert; see docs/ARCHITECTURE.md.)
//!
//! Every fingerprint appears at most once in the tail and runs. A fingerprint
//! whose last live id is deleted or replaced stays there, marked dead, and is
//! dropped when the tables are written; it comes back to life without a
//! second copy if it is inserted again.

use std::sync::Arc;

use fnv::{FnvHashMap, FnvHashSet};

use crate::plan::Plan;

/// The latest version of one id in the memtable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Version {
    /// The document as last inserted.
    Live(Doc),
    /// Deleted at `seq`: shadows any older version in a segment.
    Deleted { seq: u64, timestamp: u64 },
}

/// One live document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Doc {
    pub seq: u64,
    pub fingerprint: u64,
    /// Insert time, milliseconds since the Unix epoch.
    pub timestamp: u64,
    pub name: Option<Arc<str>>,
}

/// A small set of `u64`, without a heap allocation for the common single value.
#[derive(Debug, Clone)]
enum Set {
    One(u64),
    Many(Vec<u64>),
}

impl Set {
    fn insert(&mut self, value: u64) {
        match self {
            Set::One(v) if *v == value => {}
            Set::One(v) => *self = Set::Many(vec![*v, value]),
            Set::Many(values) if !values.contains(&value) => values.push(value),
            Set::Many(_) => {}
        }
    }

    /// Removes `value`; returns whether the set is now empty.
    fn remove(&mut self, value: u64) -> bool {
        match self {
            Set::One(v) => *v == value,
            Set::Many(values) => {
                values.retain(|&v| v != value);
                if let [only] = values[..] {
                    *self = Set::One(only);
                }
                matches!(self, Set::Many(values) if values.is_empty())
            }
        }
    }

    fn as_slice(&self) -> &[u64] {
        match self {
            Set::One(v) => std::slice::from_ref(v),
            Set::Many(values) => values,
        }
    }
}

/// Approximate heap bytes per document (the id map's slot and version) and
/// per distinct fingerprint and table (a key, and its copy while runs merge),
/// used for the flush budget.
const DOC_BYTES: usize = 96;
const FINGERPRINT_BYTES: usize = 40;
const TABLE_KEY_BYTES: usize = 16;

/// Fingerprints in the unsorted tail before it is sorted into a run. A query
/// scans the tail with one XOR and popcount per fingerprint.
const TAIL_LEN: usize = 2048;

/// Per permuted table, distinct keys in ascending order.
#[derive(Debug, Clone)]
struct Run {
    tables: Vec<Vec<u64>>,
}

impl Run {
    fn len(&self) -> usize {
        self.tables.first().map_or(0, Vec::len)
    }
}

#[derive(Debug)]
pub(crate) struct Memtable {
    plan: Plan,
    /// id → latest version.
    docs: FnvHashMap<u64, Version>,
    /// fingerprint → live ids with it.
    by_fingerprint: FnvHashMap<u64, Set>,
    /// Fingerprints not yet in a run, in insertion order.
    tail: Vec<u64>,
    /// Sorted runs, oldest first; each less than half the size of the one
    /// before it.
    runs: Vec<Run>,
    /// Fingerprints in the tail or a run with no live id.
    dead: FnvHashSet<u64>,
    bytes: usize,
}

impl Memtable {
    pub(crate) fn new(plan: &Plan) -> Memtable {
        Memtable::with_capacity(plan, 0)
    }

    /// A memtable with room for `docs` documents before its maps grow (the
    /// engine sizes each new memtable like the one it replaces).
    pub(crate) fn with_capacity(plan: &Plan, docs: usize) -> Memtable {
        Memtable {
            plan: plan.clone(),
            docs: FnvHashMap::with_capacity_and_hasher(docs, Default::default()),
            by_fingerprint: FnvHashMap::with_capacity_and_hasher(docs, Default::default()),
            tail: Vec::with_capacity(TAIL_LEN),
            runs: Vec::new(),
            dead: FnvHashSet::default(),
            bytes: 0,
        }
    }

    /// Approximate memory held, for the flush budget.
    pub(crate) fn approximate_bytes(&self) -> usize {
        self.bytes
    }

    /// Whether nothing was written since the memtable was created.
    pub(crate) fn is_empty(&self) -> bool {
        self.docs.is_empty()
    }

    /// Number of ids with a version here (live or deleted).
    pub(crate) fn len(&self) -> usize {
        self.docs.len()
    }

    /// Inserts or replaces the document `id`.
    pub(crate) fn insert(&mut self, id: u64, doc: Doc) {
        let name_bytes = doc.name.as_ref().map_or(0, |n| n.len());
        self.unlink_live(id);
        self.link(id, doc.fingerprint);
        self.bytes += DOC_BYTES + name_bytes;
        if let Some(old) = self.docs.insert(id, Version::Live(doc)) {
            self.bytes -= DOC_BYTES + name_len(&old);
        }
    }

    /// Records the deletion of `id` (whether or not a version is known here:
    /// the tombstone must shadow older segments).
    pub(crate) fn delete(&mut self, id: u64, seq: u64, timestamp: u64) {
        self.unlink_live(id);
        self.bytes += DOC_BYTES;
        if let Some(old) = self.docs.insert(id, Version::Deleted { seq, timestamp }) {
            self.bytes -= DOC_BYTES + name_len(&old);
        }
    }

    /// The latest version of `id` written here, if any.
    pub(crate) fn version(&self, id: u64) -> Option<&Version> {
        self.docs.get(&id)
    }

    /// Live ids whose fingerprint is exactly `fingerprint`.
    pub(crate) fn ids_with(&self, fingerprint: u64) -> impl Iterator<Item = (u64, &Doc)> + '_ {
        self.by_fingerprint
            .get(&fingerprint)
            .map_or(&[][..], Set::as_slice)
            .iter()
            .filter_map(|id| match self.docs.get(id) {
                Some(Version::Live(doc)) => Some((*id, doc)),
                _ => None,
            })
    }

    /// Distinct fingerprints within `k` of `fp` (`k` at most the plan's),
    /// each once. Some may have no live id left ([`ids_with`](Self::ids_with)
    /// yields nothing for them).
    pub(crate) fn matching_fingerprints(&self, fp: u64, k: u32) -> Vec<u64> {
        let mut out: Vec<u64> = self
            .tail
            .iter()
            .copied()
            .filter(|&found| (found ^ fp).count_ones() <= k)
            .collect();
        for (t, table) in self.plan.tables().iter().enumerate() {
            let q = table.permute(fp);
            let (lo, hi) = table.prefix_range(q);
            for run in &self.runs {
                let keys = &run.tables[t];
                let start = keys.partition_point(|&key| key < lo);
                for &key in keys[start..].iter().take_while(|&&key| key <= hi) {
                    if (key ^ q).count_ones() <= k {
                        let found = table.unpermute(key);
                        if self.plan.first_table_sharing(t, found ^ fp) {
                            out.push(found);
                        }
                    }
                }
            }
        }
        out
    }

    /// Every version, ordered by id (for writing a segment).
    pub(crate) fn versions(&self) -> impl Iterator<Item = (u64, &Version)> + '_ {
        let mut ids: Vec<u64> = self.docs.keys().copied().collect();
        ids.sort_unstable();
        ids.into_iter()
            .filter_map(|id| self.docs.get(&id).map(|v| (id, v)))
    }

    /// For each permuted table, its keys (the live fingerprints, permuted)
    /// in ascending order: the tables of a segment.
    pub(crate) fn sorted_tables(&self) -> Vec<Vec<u64>> {
        let tail = sort_tail(&self.plan, &self.tail);
        (0..self.plan.tables().len())
            .map(|t| {
                let table = &self.plan.tables()[t];
                let mut keys = merge_all(
                    self.runs
                        .iter()
                        .map(|run| &run.tables[t][..])
                        .chain(std::iter::once(&tail.tables[t][..])),
                );
                if !self.dead.is_empty() {
                    let mut dead: Vec<u64> =
                        self.dead.iter().map(|&fp| table.permute(fp)).collect();
                    dead.sort_unstable();
                    keys.retain(|key| dead.binary_search(key).is_err());
                }
                keys
            })
            .collect()
    }

    fn link(&mut self, id: u64, fingerprint: u64) {
        match self.by_fingerprint.get_mut(&fingerprint) {
            Some(ids) => ids.insert(id),
            None => {
                self.by_fingerprint.insert(fingerprint, Set::One(id));
                if self.dead.is_empty() || !self.dead.remove(&fingerprint) {
                    self.tail.push(fingerprint);
                    self.bytes += FINGERPRINT_BYTES + TABLE_KEY_BYTES * self.plan.tables().len();
                    if self.tail.len() >= TAIL_LEN {
                        self.seal_tail();
                    }
                }
            }
        }
    }

    fn unlink_live(&mut self, id: u64) {
        let Some(Version::Live(doc)) = self.docs.get(&id) else {
            return;
        };
        let fingerprint = doc.fingerprint;
        let Some(ids) = self.by_fingerprint.get_mut(&fingerprint) else {
            return;
        };
        if ids.remove(id) {
            self.by_fingerprint.remove(&fingerprint);
            self.dead.insert(fingerprint);
        }
    }

    /// Sorts the tail into a run, then merges the newest runs while the
    /// older of the last two is no more than twice the newer's size.
    fn seal_tail(&mut self) {
        let run = sort_tail(&self.plan, &self.tail);
        self.tail.clear();
        self.runs.push(run);
        while let [.., older, newer] = &self.runs[..] {
            if older.len() > 2 * newer.len() {
                break;
            }
            let newer = self.runs.pop().unwrap_or_else(|| unreachable!());
            let older = self.runs.pop().unwrap_or_else(|| unreachable!());
            let tables = older
                .tables
                .iter()
                .zip(&newer.tables)
                .map(|(a, b)| merge_all([&a[..], &b[..]]))
                .collect();
            self.runs.push(Run { tables });
        }
    }
}

/// The tail's fingerprints as a run.
fn sort_tail(plan: &Plan, tail: &[u64]) -> Run {
    let tables = plan
        .tables()
        .iter()
        .map(|table| {
            let mut keys: Vec<u64> = tail.iter().map(|&fp| table.permute(fp)).collect();
            keys.sort_unstable();
            keys
        })
        .collect();
    Run { tables }
}

/// The union of sorted slices with no key in common, sorted.
fn merge_all<'a>(slices: impl IntoIterator<Item = &'a [u64]>) -> Vec<u64> {
    let slices: Vec<&[u64]> = slices.into_iter().filter(|s| !s.is_empty()).collect();
    match slices[..] {
        [] => Vec::new(),
        [one] => one.to_vec(),
        [a, b] => merge_two(a, b),
        _ => {
            let mut out: Vec<u64> = slices.concat();
            // A stable sort finds the sorted runs and merges them.
            out.sort();
            out
        }
    }
}

fn merge_two(a: &[u64], b: &[u64]) -> Vec<u64> {
    let mut out = Vec::with_capacity(a.len() + b.len());
    let (mut i, mut j) = (0, 0);
    while i < a.len() && j < b.len() {
        let (x, y) = (a[i], b[j]);
        let take_a = x <= y;
        out.push(if take_a { x } else { y });
        i += usize::from(take_a);
        j += usize::from(!take_a);
    }
    out.extend_from_slice(&a[i..]);
    out.extend_from_slice(&b[j..]);
    out
}

fn name_len(version: &Version) -> usize {
    match version {
        Version::Live(doc) => doc.name.as_ref().map_or(0, |n| n.len()),
        Version::Deleted { .. } => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc(seq: u64, fingerprint: u64) -> Doc {
        Doc {
            seq,
            fingerprint,
            timestamp: 0,
            name: None,
        }
    }

    #[test]
    fn upsert_moves_the_fingerprint_and_delete_hides_it() {
        let plan = Plan::new(4, 3).unwrap();
        let mut m = Memtable::new(&plan);
        m.insert(1, doc(1, 0b1111));
        m.insert(2, doc(2, 0b1111));
        assert_eq!(m.matching_fingerprints(0b1110, 3), vec![0b1111]);
        assert_eq!(
            m.ids_with(0b1111).map(|(id, _)| id).collect::<Vec<_>>(),
            vec![1, 2]
        );
        m.insert(1, doc(3, u64::MAX));
        assert_eq!(
            m.ids_with(0b1111).map(|(id, _)| id).collect::<Vec<_>>(),
            vec![2]
        );
        m.delete(2, 4, 0);
        // The dead fingerprint may still be found, but has no live id.
        assert!(
            m.matching_fingerprints(0b1110, 3)
                .into_iter()
                .all(|fp| m.ids_with(fp).next().is_none())
        );
        assert_eq!(m.matching_fingerprints(u64::MAX, 0), vec![u64::MAX]);
        assert_eq!(
            m.version(2),
            Some(&Version::Deleted {
                seq: 4,
                timestamp: 0
            })
        );
        let tables = m.sorted_tables();
        assert_eq!(tables.len(), plan.tables().len());
        assert_eq!(tables[0], vec![plan.tables()[0].permute(u64::MAX)]);
        assert_eq!(m.len(), 2);
    }

    #[test]
    fn byte_budget_counts_documents_and_kept_fingerprints() {
        let plan = Plan::new(5, 3).unwrap();
        let per_fingerprint = FINGERPRINT_BYTES + TABLE_KEY_BYTES * plan.tables().len();
        let mut m = Memtable::new(&plan);
        assert_eq!(m.approximate_bytes(), 0);
        m.insert(
            7,
            Doc {
                name: Some("a name".into()),
                ..doc(1, 42)
            },
        );
        assert_eq!(
            m.approximate_bytes(),
            DOC_BYTES + "a name".len() + per_fingerprint
        );
        // The replaced fingerprint stays in the tables (dead) until a flush.
        m.insert(7, doc(2, 43));
        assert_eq!(m.approximate_bytes(), DOC_BYTES + 2 * per_fingerprint);
        m.delete(7, 3, 0);
        assert_eq!(m.approximate_bytes(), DOC_BYTES + 2 * per_fingerprint);
        // Reviving a dead fingerprint adds no second copy.
        m.insert(8, doc(4, 42));
        assert_eq!(m.approximate_bytes(), 2 * DOC_BYTES + 2 * per_fingerprint);
    }

    /// splitmix64.
    fn mix(x: u64) -> u64 {
        let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    #[test]
    fn runs_tail_and_dead_fingerprints_agree_with_brute_force() {
        let plan = Plan::new(5, 3).unwrap();
        let mut m = Memtable::new(&plan);
        let mut model: FnvHashMap<u64, u64> = FnvHashMap::default();
        // A few clusters of nearby fingerprints so queries have matches, ids
        // reused so upserts and deletes kill and revive fingerprints.
        let centres: Vec<u64> = (0..1024).map(mix).collect();
        let mut matched = 0;
        for i in 0..(TAIL_LEN as u64 * 9 + 77) {
            let r = mix(i ^ 0xdead);
            let id = r % 5_000;
            if r.is_multiple_of(11) {
                m.delete(id, i, 0);
                model.remove(&id);
            } else {
                let fp = centres[(r >> 20) as usize % 1024] ^ (1 << (r >> 58)) ^ ((r >> 40) & 3);
                m.insert(id, doc(i, fp));
                model.insert(id, fp);
            }
            if i.is_multiple_of(997) || i == TAIL_LEN as u64 * 9 + 76 {
                let q = centres[(r >> 20) as usize % 1024] ^ (r & 1);
                for k in 0..=3 {
                    let mut got: Vec<(u64, u64)> = m
                        .matching_fingerprints(q, k)
                        .into_iter()
                        .flat_map(|fp| m.ids_with(fp).map(move |(id, _)| (id, fp)))
                        .collect();
                    got.sort_unstable();
                    let mut want: Vec<(u64, u64)> = model
                        .iter()
                        .filter(|&(_, &fp)| (fp ^ q).count_ones() <= k)
                        .map(|(&id, &fp)| (id, fp))
                        .collect();
                    want.sort_unstable();
                    assert_eq!(got, want, "query {q:x} at k {k} after {i} writes");
                    matched += got.len();
                }
            }
        }
        assert!(
            matched > 20,
            "only {matched} matches: the queries test little"
        );
        assert!(m.runs.len() >= 2, "{} runs", m.runs.len());
        assert!(!m.dead.is_empty() && !m.tail.is_empty());
        let mut live: Vec<u64> = model.values().copied().collect();
        live.sort_unstable();
        live.dedup();
        for (t, keys) in m.sorted_tables().into_iter().enumerate() {
            let table = &plan.tables()[t];
            let mut want: Vec<u64> = live.iter().map(|&fp| table.permute(fp)).collect();
            want.sort_unstable();
            assert_eq!(keys, want, "table {t}");
        }
    }

    #[test]
    fn merging_keeps_every_key_in_order() {
        assert_eq!(
            merge_two(&[1, 4, 9], &[2, 3, 10, 11]),
            vec![1, 2, 3, 4, 9, 10, 11]
        );
        assert_eq!(merge_two(&[], &[5]), vec![5]);
        assert_eq!(
            merge_all([&[1u64, 7][..], &[3, 4][..], &[][..], &[0, 9][..]]),
            vec![0, 1, 3, 4, 7, 9]
        );
    }
}
