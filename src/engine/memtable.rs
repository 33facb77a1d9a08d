//! The in-memory part of the index: recent writes, not yet in a segment.
//!
//! The doc map holds the latest version of every id written since the last
//! flush, live or deleted, and the live ids of each fingerprint. Each
//! distinct fingerprint is appended once to a vector, and indexed for
//! queries by `k + 1` chained hash tables: split the 64 bits into `k + 1`
//! blocks, and any fingerprint within `k` of a query equals it in at least
//! one block (pigeonhole), so a query walks one bucket chain per block. An
//! insert costs two hash-map updates, a push and `k + 1` chain links; the
//! segment's permuted tables are sorted only once, at flush, by
//! [`sort_keys`]. (Earlier designs kept one hash map per permuted table,
//! then sorted runs of every permuted table merged as they grew; see
//! docs/ARCHITECTURE.md.)
//!
//! A fingerprint whose last live id is deleted or replaced stays in the
//! vector and the chains, marked dead, and is left out when the tables are
//! written; it comes back to life without a second copy if it is inserted
//! again.

use std::collections::hash_map::Entry;
use std::sync::Arc;

use super::keys::{U64Map, U64Set, sort_keys};
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
/// per distinct fingerprint (its slot in the fingerprint map and the
/// vector), plus per chain link, used for the flush budget.
const DOC_BYTES: usize = 96;
const FINGERPRINT_BYTES: usize = 56;
const LINK_BYTES: usize = 4;

/// At most this many bits of a block select its bucket: 2^16 buckets of
/// four bytes per chain table.
const BUCKET_BITS: u32 = 16;

/// End of a chain.
const NONE: u32 = u32::MAX;

/// One block's hash table: bucket → the newest fingerprint (position in
/// `Memtable::fingerprints`) whose block falls in it, and for every
/// fingerprint the next older one in its bucket.
#[derive(Debug, Clone)]
struct Chains {
    heads: Vec<u32>,
    next: Vec<u32>,
    /// The block's bits.
    mask: u64,
    /// `64 - bits`, where `bits` is the block's width capped at [`BUCKET_BITS`].
    shift: u32,
}

impl Chains {
    /// The bucket of `fp`: a multiplicative hash of its block, so equal
    /// blocks share a bucket (unequal ones may too).
    #[inline]
    fn bucket(&self, fp: u64) -> usize {
        ((fp & self.mask).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> self.shift) as usize
    }
}

#[derive(Debug)]
pub(crate) struct Memtable {
    /// `k + 1` blocks, one table each, whose prefix is the block: the
    /// chains' layout (never written to disk).
    blocks: Plan,
    /// id → latest version.
    docs: U64Map<Version>,
    /// fingerprint → live ids with it.
    by_fingerprint: U64Map<Set>,
    /// Every distinct fingerprint linked since the memtable was created,
    /// live or dead, in insertion order.
    fingerprints: Vec<u64>,
    chains: Vec<Chains>,
    /// Fingerprints in `fingerprints` with no live id.
    dead: U64Set,
    bytes: usize,
}

impl Memtable {
    pub(crate) fn new(plan: &Plan) -> Memtable {
        Memtable::with_capacity(plan, 0)
    }

    /// A memtable with room for `docs` documents before its maps grow (the
    /// engine sizes each new memtable like the one it replaces).
    pub(crate) fn with_capacity(plan: &Plan, docs: usize) -> Memtable {
        let blocks = Plan::new(plan.k() + 1, plan.k())
            .unwrap_or_else(|e| unreachable!("k + 1 blocks always make a plan: {e}"));
        let chains = blocks
            .tables()
            .iter()
            .map(|table| {
                let bits = table.prefix_bits().min(BUCKET_BITS);
                Chains {
                    heads: vec![NONE; 1 << bits],
                    next: Vec::with_capacity(docs),
                    mask: table.prefix_source_mask(),
                    shift: 64 - bits,
                }
            })
            .collect();
        Memtable {
            blocks,
            docs: U64Map::with_capacity_and_hasher(docs, Default::default()),
            by_fingerprint: U64Map::with_capacity_and_hasher(docs, Default::default()),
            fingerprints: Vec::with_capacity(docs),
            chains,
            dead: U64Set::default(),
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
        let fingerprint = doc.fingerprint;
        self.bytes += DOC_BYTES + doc.name.as_ref().map_or(0, |n| n.len());
        let old = match self.docs.entry(id) {
            Entry::Occupied(mut e) => Some(std::mem::replace(e.get_mut(), Version::Live(doc))),
            Entry::Vacant(e) => {
                e.insert(Version::Live(doc));
                None
            }
        };
        if let Some(old) = old {
            self.forget(id, &old);
        }
        self.link(id, fingerprint);
    }

    /// Records the deletion of `id` (whether or not a version is known here:
    /// the tombstone must shadow older segments).
    pub(crate) fn delete(&mut self, id: u64, seq: u64, timestamp: u64) {
        self.bytes += DOC_BYTES;
        if let Some(old) = self.docs.insert(id, Version::Deleted { seq, timestamp }) {
            self.forget(id, &old);
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
        let mut out = Vec::new();
        for (t, (table, chains)) in self.blocks.tables().iter().zip(&self.chains).enumerate() {
            let mut pos = chains.heads[chains.bucket(fp)];
            while pos != NONE {
                let found = self.fingerprints[pos as usize];
                let diff = found ^ fp;
                // A bucket holds other blocks too; `shares_prefix` checks
                // the whole block,
                // and `first_table_sharing` reports a match in one table only.
                if diff.count_ones() <= k
                    && table.shares_prefix(diff)
                    && self.blocks.first_table_sharing(t, diff)
                {
                    out.push(found);
                }
                pos = chains.next[pos as usize];
            }
        }
        out
    }

    /// Every version, in no particular order (for writing a segment, whose
    /// doc map sorts them anyway): the map is read in its memory order.
    pub(crate) fn versions_unordered(&self) -> impl Iterator<Item = (u64, &Version)> + '_ {
        self.docs.iter().map(|(&id, v)| (id, v))
    }

    /// Every version, ordered by id.
    pub(crate) fn versions(&self) -> impl Iterator<Item = (u64, &Version)> + '_ {
        // Sorting (id, reference) pairs read in the map's order, rather than
        // looking each sorted id up again: one cache miss per id saved.
        let mut versions: Vec<(u64, &Version)> = self.docs.iter().map(|(&id, v)| (id, v)).collect();
        versions.sort_unstable_by_key(|&(id, _)| id);
        versions.into_iter()
    }

    /// The number of live distinct fingerprints: the key count of each of
    /// [`sorted_tables`](Self::sorted_tables).
    pub(crate) fn live_fingerprints(&self) -> usize {
        self.fingerprints.len() - self.dead.len()
    }

    /// For each permuted table of `plan` (the new segment's, which need not
    /// be the index's), its keys (the live fingerprints, permuted) in
    /// ascending order: the tables of a segment, built one at a time as the
    /// iterator is advanced.
    pub(crate) fn sorted_tables<'a>(
        &'a self,
        plan: &'a Plan,
    ) -> impl Iterator<Item = Vec<u64>> + 'a {
        let live: Vec<u64> = if self.dead.is_empty() {
            self.fingerprints.clone()
        } else {
            self.fingerprints
                .iter()
                .copied()
                .filter(|fp| !self.dead.contains(fp))
                .collect()
        };
        plan.tables().iter().map(move |table| {
            let mut keys: Vec<u64> = live.iter().map(|&fp| table.permute(fp)).collect();
            sort_keys(&mut keys);
            keys
        })
    }

    /// Undoes the index entries of `id`'s replaced version `old`.
    fn forget(&mut self, id: u64, old: &Version) {
        self.bytes -= DOC_BYTES + name_len(old);
        let Version::Live(doc) = old else {
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

    fn link(&mut self, id: u64, fingerprint: u64) {
        match self.by_fingerprint.entry(fingerprint) {
            Entry::Occupied(mut ids) => ids.get_mut().insert(id),
            Entry::Vacant(slot) => {
                slot.insert(Set::One(id));
                if self.dead.is_empty() || !self.dead.remove(&fingerprint) {
                    self.push_fingerprint(fingerprint);
                }
            }
        }
    }

    /// Appends a new distinct fingerprint and links it into every chain table.
    fn push_fingerprint(&mut self, fingerprint: u64) {
        let pos = u32::try_from(self.fingerprints.len())
            .ok()
            .filter(|&pos| pos != NONE)
            .unwrap_or_else(|| panic!("a memtable holds fewer than 2^32 - 1 fingerprints"));
        self.fingerprints.push(fingerprint);
        for chains in &mut self.chains {
            let bucket = chains.bucket(fingerprint);
            chains.next.push(chains.heads[bucket]);
            chains.heads[bucket] = pos;
        }
        self.bytes += FINGERPRINT_BYTES + LINK_BYTES * self.chains.len();
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
        let tables: Vec<Vec<u64>> = m.sorted_tables(&plan).collect();
        assert_eq!(tables.len(), plan.tables().len());
        assert_eq!(tables[0], vec![plan.tables()[0].permute(u64::MAX)]);
        assert_eq!(m.len(), 2);
    }

    #[test]
    fn byte_budget_counts_documents_and_kept_fingerprints() {
        let plan = Plan::new(5, 3).unwrap();
        let per_fingerprint = FINGERPRINT_BYTES + LINK_BYTES * 4;
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
    fn chains_and_dead_fingerprints_agree_with_brute_force() {
        let plan = Plan::new(5, 3).unwrap();
        let mut m = Memtable::new(&plan);
        let mut model: U64Map<u64> = U64Map::default();
        // A few clusters of nearby fingerprints so queries have matches, ids
        // reused so upserts and deletes kill and revive fingerprints.
        let centres: Vec<u64> = (0..1024).map(mix).collect();
        let mut matched = 0;
        for i in 0..20_000u64 {
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
            if i.is_multiple_of(997) || i == 19_999 {
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
        assert!(!m.dead.is_empty());
        // Clustered fingerprints share buckets: the chains were walked.
        assert!(m.chains[0].heads.iter().filter(|&&h| h != NONE).count() < m.fingerprints.len());
        let mut live: Vec<u64> = model.values().copied().collect();
        live.sort_unstable();
        live.dedup();
        for (t, keys) in m.sorted_tables(&plan).enumerate() {
            let table = &plan.tables()[t];
            let mut want: Vec<u64> = live.iter().map(|&fp| table.permute(fp)).collect();
            want.sort_unstable();
            assert_eq!(keys, want, "table {t}");
        }
    }

    /// Every plan distance, including blocks wider than a bucket (k = 0, 1,
    /// 2: more than 16 bits per block) and narrower ones (k = 7: 8 bits),
    /// queried at every distance up to the plan's.
    #[test]
    fn chains_are_exact_for_every_k() {
        for k in [0, 1, 2, 3, 5, 7] {
            let plan = Plan::new(k + 1, k).unwrap();
            let mut m = Memtable::new(&plan);
            let centres: Vec<u64> = (0..64).map(|i| mix(i + 1000 * u64::from(k))).collect();
            let mut fps = Vec::new();
            for i in 0..3000u64 {
                let r = mix(i ^ 0xbeef);
                let mut fp = centres[(r % 64) as usize];
                for b in 0..(r >> 60) {
                    fp ^= 1 << (mix(r + b) % 64);
                }
                m.insert(i, doc(i, fp));
                fps.push(fp);
            }
            let mut matched = 0;
            let queries = centres
                .iter()
                .enumerate()
                .flat_map(|(i, &c)| [c, c ^ (1 << i) ^ 1]);
            for q in queries {
                for d in 0..=k {
                    let mut got = m.matching_fingerprints(q, d);
                    got.sort_unstable();
                    let len = got.len();
                    got.dedup();
                    assert_eq!(
                        got.len(),
                        len,
                        "a fingerprint reported twice (k {k}, d {d})"
                    );
                    let mut want: Vec<u64> = fps
                        .iter()
                        .copied()
                        .filter(|fp| (fp ^ q).count_ones() <= d)
                        .collect();
                    want.sort_unstable();
                    want.dedup();
                    assert_eq!(got, want, "plan k {k}, query distance {d}");
                    matched += got.len();
                }
            }
            assert!(matched > 50, "k {k}: only {matched} matches");
        }
    }
}
