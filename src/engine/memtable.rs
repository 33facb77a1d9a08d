//! The in-memory part of the index: recent writes, not yet in a segment.
//!
//! Per permuted table, a hash map from the table's prefix to the live
//! fingerprints having it: a query looks up one bucket per table. (The tables
//! need sorting only when the memtable is written as a segment, so the
//! memtable keeps no order; see docs/ARCHITECTURE.md.) Beside them, the doc
//! map: the latest version of every id written since the last flush, live or
//! deleted, and the live ids of each fingerprint.

use std::sync::Arc;

use fnv::FnvHashMap;
use rayon::prelude::*;

use crate::plan::{Plan, Table};

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

/// Approximate heap bytes per table entry and per document, used for the
/// flush budget (hash map slots and buckets, the fingerprint index).
const TABLE_ENTRY_BYTES: usize = 32;
const DOC_BYTES: usize = 96;

#[derive(Debug)]
pub(crate) struct Memtable {
    plan: Plan,
    /// Per permuted table: the table's prefix → live fingerprints with it.
    tables: Vec<FnvHashMap<u64, Set>>,
    /// id → latest version.
    docs: FnvHashMap<u64, Version>,
    /// fingerprint → live ids with it.
    by_fingerprint: FnvHashMap<u64, Set>,
    bytes: usize,
}

/// The prefix of `fp` in `table`, as a number.
#[inline]
fn prefix(table: &Table, fp: u64) -> u64 {
    // prefix_bits is in 1..=64.
    table.permute(fp) >> (64 - table.prefix_bits())
}

impl Memtable {
    pub(crate) fn new(plan: &Plan) -> Memtable {
        Memtable::with_capacity(plan, 0)
    }

    /// A memtable with room for `docs` documents before its maps grow (the
    /// engine sizes each new memtable like the one it replaces: growing
    /// eleven hash maps while ingesting costs more than the inserts).
    pub(crate) fn with_capacity(plan: &Plan, docs: usize) -> Memtable {
        let map = || FnvHashMap::with_capacity_and_hasher(docs, Default::default());
        Memtable {
            plan: plan.clone(),
            tables: (0..plan.tables().len()).map(|_| map()).collect(),
            docs: FnvHashMap::with_capacity_and_hasher(docs, Default::default()),
            by_fingerprint: map(),
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

    /// Distinct live fingerprints within `k` of `fp` (`k` at most the plan's),
    /// each once.
    pub(crate) fn matching_fingerprints(&self, fp: u64, k: u32) -> Vec<u64> {
        let mut out = Vec::new();
        for (t, (table, buckets)) in self.plan.tables().iter().zip(&self.tables).enumerate() {
            let Some(bucket) = buckets.get(&prefix(table, fp)) else {
                continue;
            };
            for &found in bucket.as_slice() {
                let diff = found ^ fp;
                if diff.count_ones() <= k && self.plan.first_table_sharing(t, diff) {
                    out.push(found);
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
        let fingerprints: Vec<u64> = self.by_fingerprint.keys().copied().collect();
        self.plan
            .tables()
            .par_iter()
            .map(|table| {
                let mut keys: Vec<u64> = fingerprints.iter().map(|&fp| table.permute(fp)).collect();
                keys.sort_unstable();
                keys
            })
            .collect()
    }

    fn link(&mut self, id: u64, fingerprint: u64) {
        match self.by_fingerprint.get_mut(&fingerprint) {
            Some(ids) => ids.insert(id),
            None => {
                self.by_fingerprint.insert(fingerprint, Set::One(id));
                for (table, buckets) in self.plan.tables().iter().zip(&mut self.tables) {
                    buckets
                        .entry(prefix(table, fingerprint))
                        .and_modify(|b| b.insert(fingerprint))
                        .or_insert(Set::One(fingerprint));
                }
                self.bytes += TABLE_ENTRY_BYTES * (self.tables.len() + 1);
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
        if !ids.remove(id) {
            return;
        }
        self.by_fingerprint.remove(&fingerprint);
        for (table, buckets) in self.plan.tables().iter().zip(&mut self.tables) {
            let key = prefix(table, fingerprint);
            if buckets.get_mut(&key).is_some_and(|b| b.remove(fingerprint)) {
                buckets.remove(&key);
            }
        }
        self.bytes -= TABLE_ENTRY_BYTES * (self.tables.len() + 1);
    }
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
        assert!(m.matching_fingerprints(0b1110, 3).is_empty());
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
    fn byte_budget_returns_to_zero() {
        let plan = Plan::new(5, 3).unwrap();
        let mut m = Memtable::new(&plan);
        assert_eq!(m.approximate_bytes(), 0);
        m.insert(
            7,
            Doc {
                name: Some("a name".into()),
                ..doc(1, 42)
            },
        );
        let one = m.approximate_bytes();
        assert!(one > DOC_BYTES);
        m.insert(7, doc(2, 43));
        assert_eq!(m.approximate_bytes(), one - "a name".len());
        m.delete(7, 3, 0);
        assert_eq!(m.approximate_bytes(), DOC_BYTES);
    }
}
