//! The in-memory part of the index: recent writes, not yet in a segment.
//!
//! One B-tree per permuted table holds the permuted fingerprints of the live
//! documents (with a count, since several ids may share a fingerprint), beside
//! the doc map: the latest version of every id written since the last flush,
//! live or deleted. Queries read it under the engine's read lock.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

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

/// Approximate heap bytes per table entry and per document, used for the
/// flush budget (B-tree nodes, hash map slots, the fingerprint index).
const TABLE_ENTRY_BYTES: usize = 24;
const DOC_BYTES: usize = 96;

#[derive(Debug)]
pub(crate) struct Memtable {
    plan: Plan,
    /// Per permuted table: permuted fingerprint → number of live ids with it.
    tables: Vec<BTreeMap<u64, u32>>,
    /// id → latest version.
    docs: HashMap<u64, Version>,
    /// fingerprint → live ids with it.
    by_fingerprint: BTreeMap<u64, BTreeSet<u64>>,
    bytes: usize,
}

impl Memtable {
    pub(crate) fn new(plan: &Plan) -> Memtable {
        Memtable {
            plan: plan.clone(),
            tables: vec![BTreeMap::new(); plan.tables().len()],
            docs: HashMap::new(),
            by_fingerprint: BTreeMap::new(),
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
            .into_iter()
            .flatten()
            .filter_map(|id| match self.docs.get(id) {
                Some(Version::Live(doc)) => Some((*id, doc)),
                _ => None,
            })
    }

    /// Distinct live fingerprints within `k` of `fp` (`k` at most the plan's),
    /// each once.
    pub(crate) fn matching_fingerprints(&self, fp: u64, k: u32) -> Vec<u64> {
        let mut out = Vec::new();
        for (t, (table, keys)) in self.plan.tables().iter().zip(&self.tables).enumerate() {
            let q = table.permute(fp);
            let (lo, hi) = table.prefix_range(q);
            for (&key, _) in keys.range(lo..=hi) {
                if (key ^ q).count_ones() <= k {
                    let found = table.unpermute(key);
                    if self.plan.first_table_sharing(t, found ^ fp) {
                        out.push(found);
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

    /// Distinct live fingerprints in ascending order of table `t`'s permuted key.
    pub(crate) fn table_keys(&self, t: usize) -> impl Iterator<Item = u64> + '_ {
        self.tables
            .get(t)
            .into_iter()
            .flat_map(|keys| keys.keys().copied())
    }

    fn link(&mut self, id: u64, fingerprint: u64) {
        let ids = self.by_fingerprint.entry(fingerprint).or_default();
        if ids.is_empty() {
            for (table, keys) in self.plan.tables().iter().zip(&mut self.tables) {
                *keys.entry(table.permute(fingerprint)).or_insert(0) += 1;
            }
            self.bytes += TABLE_ENTRY_BYTES * self.tables.len();
        }
        ids.insert(id);
    }

    fn unlink_live(&mut self, id: u64) {
        let Some(Version::Live(doc)) = self.docs.get(&id) else {
            return;
        };
        let fingerprint = doc.fingerprint;
        if let Some(ids) = self.by_fingerprint.get_mut(&fingerprint) {
            ids.remove(&id);
            if ids.is_empty() {
                self.by_fingerprint.remove(&fingerprint);
                for (table, keys) in self.plan.tables().iter().zip(&mut self.tables) {
                    let key = table.permute(fingerprint);
                    if let Some(count) = keys.get_mut(&key) {
                        *count -= 1;
                        if *count == 0 {
                            keys.remove(&key);
                        }
                    }
                }
                self.bytes -= TABLE_ENTRY_BYTES * self.tables.len();
            }
        }
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
        assert!(
            m.table_keys(0).eq([u64::MAX]
                .into_iter()
                .map(|fp| plan.tables()[0].permute(fp)))
        );
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
