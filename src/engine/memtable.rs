//! The in-memory part of the index: recent writes, not yet in a segment.
//!
//! The doc map holds the latest version of every id written since the last
//! flush, live or deleted. Every insert also appends its fingerprint and id
//! to two vectors, and links that position into `k + 1` chained hash tables:
//! split the 64 bits into `k + 1` blocks, and any fingerprint within `k` of a
//! query equals it in at least one block (pigeonhole), so a query walks one
//! bucket chain per block. A position whose id was since replaced or deleted
//! is stale: a query checks each candidate against the doc map, and a flush
//! takes the live fingerprints from the doc map alone. An insert thus costs
//! one hash-map update, two pushes and `k + 1` links; the segment's permuted
//! tables are sorted only once, at flush, by [`sort_keys`]. (Earlier designs
//! kept one hash map per permuted table, then sorted runs of every permuted
//! table merged as they grew, then a second map from fingerprint to ids; see
//! docs/ARCHITECTURE.md.)

use std::sync::Arc;

use super::keys::{U64Map, sort_keys};
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

/// Approximate heap bytes per document (the id map's slot and version), and
/// per position (its fingerprint and id) and chain link, used for the flush
/// budget.
const DOC_BYTES: usize = 96;
const POSITION_BYTES: usize = 16;
const LINK_BYTES: usize = 4;

/// At most this many bits of a block select its bucket: 2^16 buckets of
/// four bytes per chain table.
const BUCKET_BITS: u32 = 16;

/// End of a chain.
const NONE: u32 = u32::MAX;

/// One block's hash table: bucket → the newest position whose block falls
/// in it, and for every position the next older one in its bucket.
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
    plan: Plan,
    /// `k + 1` blocks, one table each, whose prefix is the block: the
    /// chains' layout (never written to disk).
    blocks: Plan,
    /// id → latest version.
    docs: U64Map<Version>,
    /// The fingerprint of every insert that added a position, in order.
    fingerprints: Vec<u64>,
    /// The id of each position.
    owners: Vec<u64>,
    chains: Vec<Chains>,
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
            plan: plan.clone(),
            blocks,
            docs: U64Map::with_capacity_and_hasher(docs, Default::default()),
            fingerprints: Vec::with_capacity(docs),
            owners: Vec::with_capacity(docs),
            chains,
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
        let old = self.docs.insert(id, Version::Live(doc));
        if let Some(old) = &old {
            self.bytes -= DOC_BYTES + name_len(old);
        }
        // The same id and fingerprint again: its position is still current.
        if !matches!(old, Some(Version::Live(d)) if d.fingerprint == fingerprint) {
            self.push_position(id, fingerprint);
        }
    }

    /// Records the deletion of `id` (whether or not a version is known here:
    /// the tombstone must shadow older segments).
    pub(crate) fn delete(&mut self, id: u64, seq: u64, timestamp: u64) {
        self.bytes += DOC_BYTES;
        if let Some(old) = self.docs.insert(id, Version::Deleted { seq, timestamp }) {
            self.bytes -= DOC_BYTES + name_len(&old);
        }
    }

    /// The latest version of `id` written here, if any.
    pub(crate) fn version(&self, id: u64) -> Option<&Version> {
        self.docs.get(&id)
    }

    /// The live documents whose fingerprints lie within `k` of `fp` (`k` at
    /// most the plan's), each once, in no particular order.
    pub(crate) fn matching_docs(&self, fp: u64, k: u32) -> Vec<(u64, &Doc)> {
        let mut out: Vec<(u64, &Doc)> = Vec::new();
        for (t, (table, chains)) in self.blocks.tables().iter().zip(&self.chains).enumerate() {
            let mut pos = chains.heads[chains.bucket(fp)];
            while pos != NONE {
                let p = pos as usize;
                pos = chains.next[p];
                let found = self.fingerprints[p];
                let diff = found ^ fp;
                // A bucket holds other blocks too; `shares_prefix` checks
                // the whole block, and `first_table_sharing` reports a match
                // in one table only.
                if diff.count_ones() > k
                    || !table.shares_prefix(diff)
                    || !self.blocks.first_table_sharing(t, diff)
                {
                    continue;
                }
                let id = self.owners[p];
                // A stale position: the id was replaced or deleted since.
                if let Some(Version::Live(doc)) = self.docs.get(&id)
                    && doc.fingerprint == found
                {
                    out.push((id, doc));
                }
            }
        }
        // An id that went back to an earlier fingerprint has two positions.
        out.sort_unstable_by_key(|&(id, _)| id);
        out.dedup_by_key(|&mut (id, _)| id);
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

    /// The tables of a segment: the number of distinct live fingerprints,
    /// and for each permuted table of the plan its keys (those fingerprints,
    /// permuted) in ascending order, built one at a time as the iterator is
    /// advanced.
    pub(crate) fn segment_tables(&self) -> (u64, impl Iterator<Item = Vec<u64>> + '_) {
        let mut live: Vec<u64> = self
            .docs
            .values()
            .filter_map(|v| match v {
                Version::Live(doc) => Some(doc.fingerprint),
                Version::Deleted { .. } => None,
            })
            .collect();
        sort_keys(&mut live);
        live.dedup();
        let count = live.len() as u64;
        let tables = self.plan.tables().iter().map(move |table| {
            let mut keys: Vec<u64> = live.iter().map(|&fp| table.permute(fp)).collect();
            sort_keys(&mut keys);
            keys
        });
        (count, tables)
    }

    /// Appends a position and links it into every chain table.
    fn push_position(&mut self, id: u64, fingerprint: u64) {
        let pos = u32::try_from(self.fingerprints.len())
            .ok()
            .filter(|&pos| pos != NONE)
            .unwrap_or_else(|| panic!("a memtable holds fewer than 2^32 - 1 positions"));
        self.fingerprints.push(fingerprint);
        self.owners.push(id);
        for chains in &mut self.chains {
            let bucket = chains.bucket(fingerprint);
            chains.next.push(chains.heads[bucket]);
            chains.heads[bucket] = pos;
        }
        self.bytes += POSITION_BYTES + LINK_BYTES * self.chains.len();
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

    fn ids(found: Vec<(u64, &Doc)>) -> Vec<u64> {
        found.into_iter().map(|(id, _)| id).collect()
    }

    #[test]
    fn upsert_moves_the_fingerprint_and_delete_hides_it() {
        let plan = Plan::new(4, 3).unwrap();
        let mut m = Memtable::new(&plan);
        m.insert(1, doc(1, 0b1111));
        m.insert(2, doc(2, 0b1111));
        assert_eq!(ids(m.matching_docs(0b1110, 3)), vec![1, 2]);
        m.insert(1, doc(3, u64::MAX));
        assert_eq!(ids(m.matching_docs(0b1110, 3)), vec![2]);
        assert_eq!(ids(m.matching_docs(u64::MAX, 0)), vec![1]);
        m.delete(2, 4, 0);
        assert!(m.matching_docs(0b1110, 3).is_empty());
        // Back to the first fingerprint: two positions, one match.
        m.insert(1, doc(5, 0b1111));
        assert_eq!(ids(m.matching_docs(0b1111, 0)), vec![1]);
        assert_eq!(m.matching_docs(0b1111, 0)[0].1.seq, 5);
        assert!(m.matching_docs(u64::MAX, 3).is_empty());
        assert_eq!(
            m.version(2),
            Some(&Version::Deleted {
                seq: 4,
                timestamp: 0
            })
        );
        let (count, tables) = m.segment_tables();
        let tables: Vec<Vec<u64>> = tables.collect();
        assert_eq!(count, 1);
        assert_eq!(tables.len(), plan.tables().len());
        for (table, keys) in plan.tables().iter().zip(&tables) {
            assert_eq!(keys, &vec![table.permute(0b1111)]);
        }
        assert_eq!(m.len(), 2);
    }

    #[test]
    fn byte_budget_counts_documents_and_positions() {
        let plan = Plan::new(5, 3).unwrap();
        let per_position = POSITION_BYTES + LINK_BYTES * 4;
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
            DOC_BYTES + "a name".len() + per_position
        );
        // The replaced fingerprint's position stays until a flush.
        m.insert(7, doc(2, 43));
        assert_eq!(m.approximate_bytes(), DOC_BYTES + 2 * per_position);
        // The same id and fingerprint again adds no position.
        m.insert(7, doc(3, 43));
        assert_eq!(m.approximate_bytes(), DOC_BYTES + 2 * per_position);
        m.delete(7, 4, 0);
        assert_eq!(m.approximate_bytes(), DOC_BYTES + 2 * per_position);
        m.insert(8, doc(5, 42));
        assert_eq!(m.approximate_bytes(), 2 * DOC_BYTES + 3 * per_position);
    }

    /// splitmix64.
    fn mix(x: u64) -> u64 {
        let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// The memtable's live (id, fingerprint) pairs within `k` of `q`, sorted.
    fn found(m: &Memtable, q: u64, k: u32) -> Vec<(u64, u64)> {
        let got: Vec<(u64, u64)> = m
            .matching_docs(q, k)
            .into_iter()
            .map(|(id, doc)| (id, doc.fingerprint))
            .collect();
        let mut sorted = got.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), got.len(), "a document reported twice");
        sorted
    }

    fn brute_force(model: &U64Map<u64>, q: u64, k: u32) -> Vec<(u64, u64)> {
        let mut want: Vec<(u64, u64)> = model
            .iter()
            .filter(|&(_, &fp)| (fp ^ q).count_ones() <= k)
            .map(|(&id, &fp)| (id, fp))
            .collect();
        want.sort_unstable();
        want
    }

    #[test]
    fn stale_positions_agree_with_brute_force() {
        let plan = Plan::new(5, 3).unwrap();
        let mut m = Memtable::new(&plan);
        let mut model: U64Map<u64> = U64Map::default();
        // A few clusters of nearby fingerprints so queries have matches, ids
        // reused so upserts and deletes leave stale positions, and ids going
        // back to earlier fingerprints.
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
                    let got = found(&m, q, k);
                    assert_eq!(
                        got,
                        brute_force(&model, q, k),
                        "query {q:x} at k {k} after {i} writes"
                    );
                    matched += got.len();
                }
            }
        }
        assert!(
            matched > 20,
            "only {matched} matches: the queries test little"
        );
        assert!(m.fingerprints.len() > model.len(), "no stale positions");
        let mut live: Vec<u64> = model.values().copied().collect();
        live.sort_unstable();
        live.dedup();
        let (count, tables) = m.segment_tables();
        assert_eq!(count, live.len() as u64);
        for (t, keys) in tables.enumerate() {
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
            let mut model: U64Map<u64> = U64Map::default();
            let centres: Vec<u64> = (0..64).map(|i| mix(i + 1000 * u64::from(k))).collect();
            for i in 0..3000u64 {
                let r = mix(i ^ 0xbeef);
                let mut fp = centres[(r % 64) as usize];
                for b in 0..(r >> 60) {
                    fp ^= 1 << (mix(r + b) % 64);
                }
                m.insert(i, doc(i, fp));
                model.insert(i, fp);
            }
            let mut matched = 0;
            let queries = centres
                .iter()
                .enumerate()
                .flat_map(|(i, &c)| [c, c ^ (1 << i) ^ 1]);
            for q in queries {
                for d in 0..=k {
                    let got = found(&m, q, d);
                    assert_eq!(
                        got,
                        brute_force(&model, q, d),
                        "plan k {k}, query distance {d}"
                    );
                    matched += got.len();
                }
            }
            assert!(matched > 50, "k {k}: only {matched} matches");
        }
    }
}
