//! The in-memory part of the index: recent writes, not yet in a segment.
//!
//! Every version written (an insert or a delete) is appended to a vector of
//! slots, and an id map points each id at its latest slot; a replaced slot
//! is emptied. Live slots are indexed for queries by `k + 1` chained hash
//! tables: split the 64 bits into `k + 1` blocks, and any fingerprint within
//! `k` of a query equals it in at least one block (pigeonhole), so a query
//! walks one bucket chain per block and skips emptied slots. Each link
//! carries its slot's fingerprint folded to 32 bits, which rules out most of
//! a bucket without reading the slots (a cache miss each: they are seven
//! times larger than the links). An insert costs
//! one hash-map update, a push and `k + 1` chain links; the segment's
//! permuted tables are sorted only once, at flush, by [`sort_keys`], which
//! also drops duplicate fingerprints. (Earlier designs kept one hash map per
//! permuted table, then sorted runs of every permuted table merged as they
//! grew, then a second map from fingerprint to ids; see
//! docs/ARCHITECTURE.md.)

use std::sync::Arc;

use super::keys::{PosMap, sort_keys_with};
use crate::format::prefetch_line;
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
    /// The verification value, if it was inserted with one: boxed, so that
    /// it takes 8 bytes of every slot (a slot is 64 bytes; 72 with the
    /// sketch inline, 56 before sketches).
    pub sketch: Option<Box<crate::sketch::Sketch>>,
}

/// Approximate heap bytes per version written (its slot), per id (its
/// entry of the id map, with the map's spare capacity), and per chain
/// link, used for the flush budget.
const SLOT_BYTES: usize = 64;
const ID_BYTES: usize = 24;
const LINK_BYTES: usize = std::mem::size_of::<Link>();

/// At most this many bits of a block select its bucket: 2^16 buckets of
/// four bytes per chain table.
const BUCKET_BITS: u32 = 16;

/// Chain walks [`Memtable::matching_many`] keeps in flight.
const WALKS: usize = 64;

/// How many walks ahead of its start [`Memtable::matching_many`] asks
/// for a walk's bucket head.
const HEADS_AHEAD: usize = 32;

/// End of a chain.
const NONE: u32 = u32::MAX;

/// A slot's place in one chain: the next older slot in its bucket, and its
/// fingerprint folded to 32 bits ([`fold`]), so that a query rejects most
/// of a bucket's slots without reading them (a random access into the
/// larger slot vector each).
#[derive(Debug, Clone, Copy)]
struct Link {
    next: u32,
    folded: u32,
}

/// The high half of `fp` XOR its low half. The folded difference of two
/// fingerprints has at most as many bits set as their difference, so a
/// folded difference of more than `k` bits rules a match out.
#[inline]
fn fold(fp: u64) -> u32 {
    (fp ^ (fp >> 32)) as u32
}

/// One block's hash table: bucket → the newest slot (position in
/// `Memtable::slots`) inserted live whose fingerprint's block falls in it,
/// and for every slot the next older one in its bucket.
#[derive(Debug, Clone)]
struct Chains {
    heads: Vec<u32>,
    next: Vec<Link>,
    /// The block's bits.
    mask: u64,
    /// The position of the block's lowest bit.
    offset: u32,
    /// Whether the block's bits are contiguous and at most `bits`: its
    /// value is then its bucket.
    direct: bool,
    /// `64 - bits`, where `bits` is the block's width capped at [`BUCKET_BITS`].
    shift: u32,
}

impl Chains {
    /// Empty chains for `2^bits` buckets of the block `mask`, with room for
    /// `docs` links.
    fn new(bits: u32, mask: u64, docs: usize) -> Chains {
        let offset = mask.trailing_zeros().min(63);
        let low = mask >> offset;
        Chains {
            heads: vec![NONE; 1 << bits],
            next: Vec::with_capacity(docs),
            mask,
            offset,
            direct: low.count_ones() <= bits && low & low.wrapping_add(1) == 0,
            shift: 64 - bits,
        }
    }

    /// The bucket of `fp`: its block's value if that has at most `bits`
    /// bits (every block at k = 3 and above), otherwise a multiplicative
    /// hash of the block moved down to the low bits; equal blocks share a
    /// bucket (unequal ones may too). The hash of the block in place, as
    /// before, kept only the product's top bits: the 65,536 values of the
    /// block of bits 16 to 31 fell in 7,599 buckets, those of bits 0 to 15
    /// in 58,482, so at k = 3 a query's four chains were 13 links long on
    /// average in a full memtable instead of 4.3 (docs/BENCHMARKS.md,
    /// "The memtable's buckets spread, and a flush's two files at once").
    #[inline]
    fn bucket(&self, fp: u64) -> usize {
        let block = (fp & self.mask) >> self.offset;
        if self.direct {
            block as usize
        } else {
            (block.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> self.shift) as usize
        }
    }
}

#[derive(Debug)]
pub(crate) struct Memtable {
    /// `k + 1` blocks, one table each, whose prefix is the block: the
    /// chains' layout (never written to disk).
    blocks: Plan,
    /// id → position in `slots` of its latest version.
    docs: PosMap,
    /// Every version written, in write order; `None` once replaced.
    slots: Vec<Option<(u64, Version)>>,
    chains: Vec<Chains>,
    /// Slots holding a live version.
    live: usize,
    bytes: usize,
}

impl Memtable {
    pub(crate) fn new(plan: &Plan) -> Memtable {
        Memtable::with_capacity(plan, 0)
    }

    /// A memtable with room for `docs` versions before its vectors and map
    /// grow (the engine sizes each new memtable like the one it replaces).
    pub(crate) fn with_capacity(plan: &Plan, docs: usize) -> Memtable {
        let blocks = Plan::new(plan.k() + 1, plan.k())
            .unwrap_or_else(|e| unreachable!("k + 1 blocks always make a plan: {e}"));
        let chains = blocks
            .tables()
            .iter()
            .map(|table| {
                let bits = table.prefix_bits().min(BUCKET_BITS);
                Chains::new(bits, table.prefix_source_mask(), docs)
            })
            .collect();
        Memtable {
            blocks,
            docs: PosMap::with_capacity(docs),
            slots: Vec::with_capacity(docs),
            chains,
            live: 0,
            bytes: 0,
        }
    }

    /// Empties the memtable for reuse, keeping its vectors' and maps'
    /// memory: as new as [`with_capacity`](Self::with_capacity) made it, but
    /// without a page fault per 4 KiB written to fresh memory (a third of
    /// an ingest's writing thread was the kernel's, mostly those:
    /// docs/ARCHITECTURE.md, "A flush reuses the memory of the flush
    /// before").
    pub(crate) fn clear(&mut self) {
        self.docs.clear();
        self.slots.clear();
        for chains in &mut self.chains {
            chains.heads.fill(NONE);
            chains.next.clear();
        }
        self.live = 0;
        self.bytes = 0;
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

    /// Number of versions written (the capacity the next memtable needs).
    pub(crate) fn slots(&self) -> usize {
        self.slots.len()
    }

    /// Inserts or replaces the document `id`.
    pub(crate) fn insert(&mut self, id: u64, doc: Doc) {
        let fingerprint = doc.fingerprint;
        let pos = self.push(id, Version::Live(doc));
        self.live += 1;
        let folded = fold(fingerprint);
        for chains in &mut self.chains {
            let bucket = chains.bucket(fingerprint);
            chains.next.push(Link {
                next: chains.heads[bucket],
                folded,
            });
            chains.heads[bucket] = pos;
        }
    }

    /// Asks the processor for the cache lines that writing a version of
    /// `id` will touch at random: its entry in the id map and, for a live
    /// version with `fingerprint`, the head of its bucket in each chain
    /// table. A batch applied with the writes a few records ahead
    /// prefetched overlaps their cache misses.
    #[inline]
    pub(crate) fn prefetch(&self, id: u64, fingerprint: Option<u64>) {
        self.docs.prefetch(id);
        if let Some(fp) = fingerprint {
            for chains in &self.chains {
                prefetch_line(&chains.heads, chains.bucket(fp));
            }
        }
    }

    /// Records the deletion of `id` (whether or not a version is known here:
    /// the tombstone must shadow older segments).
    pub(crate) fn delete(&mut self, id: u64, seq: u64, timestamp: u64) {
        self.push(id, Version::Deleted { seq, timestamp });
        for chains in &mut self.chains {
            chains.next.push(Link {
                next: NONE,
                folded: 0,
            });
        }
    }

    /// Appends `version` as `id`'s latest, retiring the one it replaces;
    /// returns its position. The caller links it into the chains (a live
    /// version) or pushes an empty link (a deletion).
    fn push(&mut self, id: u64, version: Version) -> u32 {
        let pos = u32::try_from(self.slots.len())
            .ok()
            .filter(|&pos| pos != NONE)
            .unwrap_or_else(|| panic!("a memtable holds fewer than 2^32 - 1 versions"));
        self.bytes += SLOT_BYTES + LINK_BYTES * self.chains.len() + name_len(&version);
        match self.docs.insert(id, pos) {
            Some(old) => {
                if let Some((_, old)) = self.slots[old as usize].take() {
                    self.bytes -= name_len(&old);
                    if matches!(old, Version::Live(_)) {
                        self.live -= 1;
                    }
                }
            }
            None => self.bytes += ID_BYTES,
        }
        self.slots.push(Some((id, version)));
        pos
    }

    /// The latest version of `id` written here, if any.
    pub(crate) fn version(&self, id: u64) -> Option<&Version> {
        let pos = self.docs.get(id)?;
        self.slots[pos as usize].as_ref().map(|(_, v)| v)
    }

    /// Every live document within `k` of `fp` (`k` at most the plan's),
    /// each once, with its id, in no particular order.
    #[cfg(test)]
    pub(crate) fn matching(&self, fp: u64, k: u32) -> Vec<(u64, &Doc)> {
        let mut out = Vec::new();
        self.matching_many(&[fp], k, |_, id, doc| out.push((id, doc)));
        out
    }

    /// For each of `fps`, every live document within `k` of it (`k` at
    /// most the plan's): `found(i, id, doc)` for each document near
    /// `fps[i]`, each once per query, in no particular order.
    ///
    /// Every link is a likely cache miss, and the `k + 1` chain walks of
    /// each query do not depend on each other: [`WALKS`] walks are kept
    /// in flight, a link of each in turn, so that their misses overlap
    /// instead of adding up. A walk that ends is replaced at once by the
    /// next (query, block), whose bucket's head was asked for [`HEADS_AHEAD`]
    /// walks earlier: the walks in flight stay [`WALKS`] to the last query
    /// (before, the walks of 16 queries were started together and the
    /// next 16 waited for the longest of them, the last rounds with few
    /// walks left each waiting out a miss; docs/BENCHMARKS.md, "The
    /// batched check: lines asked for into the second-level cache, walks
    /// streamed").
    pub(crate) fn matching_many<'a>(
        &'a self,
        fps: &[u64],
        k: u32,
        mut found: impl FnMut(usize, u64, &'a Doc),
    ) {
        // A walk is item `w`: query `w / blocks`, block `w % blocks`.
        let blocks = self.chains.len().max(1);
        let items = fps.len().saturating_mul(blocks);
        let head_of = |w: usize| -> (&Chains, usize) {
            let chains = &self.chains[w % blocks];
            (chains, chains.bucket(fps[w / blocks]))
        };
        for w in 0..items.min(HEADS_AHEAD) {
            let (chains, bucket) = head_of(w);
            prefetch_line(&chains.heads, bucket);
        }
        // Per walk in flight: its item and the slot of its next link.
        let mut walks = [(0usize, NONE); WALKS];
        let mut next_item = 0;
        let mut active = 0usize;
        loop {
            for (item, pos) in &mut walks {
                if *pos == NONE {
                    // Start the next walks until one has a link (an
                    // empty bucket ends its walk at once).
                    while *pos == NONE && next_item < items {
                        let (chains, bucket) = head_of(next_item);
                        if let Some(ahead) = next_item.checked_add(HEADS_AHEAD)
                            && ahead < items
                        {
                            let (chains, bucket) = head_of(ahead);
                            prefetch_line(&chains.heads, bucket);
                        }
                        *item = next_item;
                        *pos = chains.heads[bucket];
                        next_item += 1;
                    }
                    if *pos != NONE {
                        active += 1;
                        prefetch_line(&self.chains[*item % blocks].next, *pos as usize);
                    }
                    continue;
                }
                let (j, t) = (*item / blocks, *item % blocks);
                let chains = &self.chains[t];
                let link = chains.next[*pos as usize];
                // Its successor asked for at once, for this walk's next
                // turn (a prefetch holds nothing up while it is in
                // flight).
                if link.next != NONE {
                    prefetch_line(&chains.next, link.next as usize);
                }
                let fp = fps[j];
                if (link.folded ^ fold(fp)).count_ones() <= k
                    && let Some((id, Version::Live(doc))) = &self.slots[*pos as usize]
                {
                    // A bucket holds other blocks too: the search rule
                    // checks the whole block, and reports a match in one
                    // table only.
                    if self.blocks.reports(t, doc.fingerprint ^ fp, k) {
                        found(j, *id, doc);
                    }
                }
                *pos = link.next;
                if *pos == NONE {
                    active -= 1;
                }
            }
            if active == 0 && next_item >= items {
                break;
            }
        }
    }

    /// Every version with its slot (for [`version_at`](Self::version_at)),
    /// in write order.
    pub(crate) fn versions_at(&self) -> impl Iterator<Item = (u32, u64, &Version)> + '_ {
        (0u32..)
            .zip(&self.slots)
            .filter_map(|(pos, slot)| slot.as_ref().map(|(id, v)| (pos, *id, v)))
    }

    /// The version in slot `pos`, with its id (`None` if it was replaced).
    pub(crate) fn version_at(&self, pos: u32) -> Option<(u64, &Version)> {
        self.slots
            .get(pos as usize)?
            .as_ref()
            .map(|(id, v)| (*id, v))
    }

    /// Asks the processor for slot `pos`'s cache line.
    #[inline]
    pub(crate) fn prefetch_slot(&self, pos: u32) {
        prefetch_line(&self.slots, pos as usize);
    }

    /// Every version, in no particular order (for writing a segment, whose
    /// doc map sorts them anyway): the slots in write order.
    pub(crate) fn versions_unordered(&self) -> impl Iterator<Item = (u64, &Version)> + '_ {
        self.slots.iter().flatten().map(|(id, v)| (*id, v))
    }

    /// Every version, ordered by id.
    pub(crate) fn versions(&self) -> impl Iterator<Item = (u64, &Version)> + '_ {
        let mut versions: Vec<(u64, &Version)> = self.versions_unordered().collect();
        versions.sort_unstable_by_key(|&(id, _)| id);
        versions.into_iter()
    }

    /// The number of live documents: at least the number of distinct live
    /// fingerprints (the key count of a segment), which
    /// [`sorted_tables`](Self::sorted_tables) counts exactly.
    pub(crate) fn live_docs(&self) -> usize {
        self.live
    }

    /// The number of distinct live fingerprints (the key count of each
    /// table), and for each permuted table of `plan` (the new segment's,
    /// which need not be the index's) its keys in ascending order: the
    /// tables of a segment. The first is built at once (it counts the
    /// distinct fingerprints), the others one at a time as the iterator is
    /// advanced.
    pub(crate) fn sorted_tables<'a>(
        &'a self,
        plan: &'a Plan,
    ) -> (u64, impl Iterator<Item = Vec<u64>> + 'a) {
        let tables = plan.tables();
        let mut first: Vec<u64> = self
            .versions_unordered()
            .filter_map(|(_, v)| match v {
                Version::Live(doc) => Some(tables[0].permute(doc.fingerprint)),
                Version::Deleted { .. } => None,
            })
            .collect();
        // One radix output buffer for every table's sort in turn.
        let mut scratch = Vec::new();
        sort_keys_with(&mut first, &mut scratch);
        first.dedup();
        let distinct: Vec<u64> = first.iter().map(|&key| tables[0].unpermute(key)).collect();
        let key_count = first.len() as u64;
        let rest = tables[1..].iter().map(move |table| {
            let mut keys: Vec<u64> = distinct.iter().map(|&fp| table.permute(fp)).collect();
            sort_keys_with(&mut keys, &mut scratch);
            keys
        });
        (key_count, std::iter::once(first).chain(rest))
    }
}

/// Heap bytes a version holds beside its slot: its name and its boxed
/// sketch.
fn name_len(version: &Version) -> usize {
    match version {
        Version::Live(doc) => {
            doc.name.as_ref().map_or(0, |n| n.len())
                + doc
                    .sketch
                    .as_ref()
                    .map_or(0, |_| crate::sketch::Sketch::BYTES)
        }
        Version::Deleted { .. } => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::super::keys::U64Map;
    use super::*;

    fn doc(seq: u64, fingerprint: u64) -> Doc {
        Doc {
            seq,
            fingerprint,
            timestamp: 0,
            name: None,
            sketch: None,
        }
    }

    fn ids(found: Vec<(u64, &Doc)>) -> Vec<u64> {
        let mut ids: Vec<u64> = found.into_iter().map(|(id, _)| id).collect();
        ids.sort_unstable();
        ids
    }

    #[test]
    fn upsert_moves_the_fingerprint_and_delete_hides_it() {
        let plan = Plan::new(4, 3).unwrap();
        let mut m = Memtable::new(&plan);
        m.insert(1, doc(1, 0b1111));
        m.insert(2, doc(2, 0b1111));
        assert_eq!(ids(m.matching(0b1110, 3)), vec![1, 2]);
        assert_eq!(ids(m.matching(0b1110, 0)), Vec::<u64>::new());
        m.insert(1, doc(3, u64::MAX));
        assert_eq!(ids(m.matching(0b1110, 3)), vec![2]);
        assert_eq!(ids(m.matching(u64::MAX, 0)), vec![1]);
        m.delete(2, 4, 0);
        assert_eq!(ids(m.matching(0b1110, 3)), Vec::<u64>::new());
        assert_eq!(
            m.version(2),
            Some(&Version::Deleted {
                seq: 4,
                timestamp: 0
            })
        );
        assert_eq!(m.version(1), Some(&Version::Live(doc(3, u64::MAX))));
        assert_eq!(m.version(3), None);
        let (key_count, tables) = m.sorted_tables(&plan);
        let tables: Vec<Vec<u64>> = tables.collect();
        assert_eq!(key_count, 1);
        assert_eq!(tables.len(), plan.tables().len());
        assert_eq!(tables[0], vec![plan.tables()[0].permute(u64::MAX)]);
        assert_eq!(m.len(), 2);
        assert_eq!(m.slots(), 4);
        assert_eq!(m.live_docs(), 1);
        let versions: Vec<u64> = m.versions().map(|(id, _)| id).collect();
        assert_eq!(versions, vec![1, 2]);
    }

    /// A cleared memtable holds nothing and then answers like a new one.
    #[test]
    fn a_cleared_memtable_is_like_a_new_one() {
        let plan = Plan::new(4, 3).unwrap();
        let mut reused = Memtable::new(&plan);
        for i in 0..5_000u64 {
            reused.insert(i % 700, doc(i, mix(i)));
            if i % 7 == 0 {
                reused.delete(i % 300, i, 0);
            }
        }
        reused.clear();
        assert!(reused.is_empty());
        assert_eq!(
            (
                reused.len(),
                reused.slots(),
                reused.live_docs(),
                reused.approximate_bytes()
            ),
            (0, 0, 0, 0)
        );
        assert_eq!(reused.version(1), None);
        assert_eq!(ids(reused.matching(mix(1), 3)), Vec::<u64>::new());
        let mut fresh = Memtable::new(&plan);
        for m in [&mut reused, &mut fresh] {
            for i in 0..2_000u64 {
                m.insert(i % 500, doc(i, mix(i % 900)));
                if i % 5 == 0 {
                    m.delete(i % 250, i, 0);
                }
            }
        }
        assert_eq!(reused.approximate_bytes(), fresh.approximate_bytes());
        assert_eq!(
            (reused.len(), reused.slots(), reused.live_docs()),
            (fresh.len(), fresh.slots(), fresh.live_docs())
        );
        for q in 0..900 {
            assert_eq!(
                ids(reused.matching(mix(q), 3)),
                ids(fresh.matching(mix(q), 3))
            );
        }
        for id in 0..600 {
            assert_eq!(reused.version(id), fresh.version(id), "id {id}");
        }
        let versions = |m: &Memtable| -> Vec<(u64, Version)> {
            m.versions().map(|(id, v)| (id, v.clone())).collect()
        };
        assert_eq!(versions(&reused), versions(&fresh));
        let tables = |m: &Memtable| -> (u64, Vec<Vec<u64>>) {
            let (count, tables) = m.sorted_tables(&plan);
            (count, tables.collect())
        };
        assert_eq!(tables(&reused), tables(&fresh));
    }

    #[test]
    fn byte_budget_counts_versions_ids_and_names() {
        // The budget's figure for a slot is a slot's size.
        assert_eq!(std::mem::size_of::<Option<(u64, Version)>>(), SLOT_BYTES);
        let plan = Plan::new(5, 3).unwrap();
        let per_version = SLOT_BYTES + LINK_BYTES * 4;
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
            ID_BYTES + per_version + "a name".len()
        );
        // A replaced version keeps its slot until a flush, not its name.
        m.insert(7, doc(2, 43));
        assert_eq!(m.approximate_bytes(), ID_BYTES + 2 * per_version);
        m.delete(7, 3, 0);
        assert_eq!(m.approximate_bytes(), ID_BYTES + 3 * per_version);
        m.insert(8, doc(4, 42));
        assert_eq!(m.approximate_bytes(), 2 * ID_BYTES + 4 * per_version);
    }

    /// splitmix64.
    fn mix(x: u64) -> u64 {
        let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    #[test]
    fn chains_and_replaced_versions_agree_with_brute_force() {
        let plan = Plan::new(5, 3).unwrap();
        let mut m = Memtable::new(&plan);
        let mut model: U64Map<u64> = U64Map::default();
        // A few clusters of nearby fingerprints so queries have matches, ids
        // reused so upserts and deletes retire versions, and fingerprints
        // shared by several ids.
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
                // Many queries at once (more walks than are kept in
                // flight), against the model.
                let queries: Vec<u64> = (0..40)
                    .map(|c| centres[(c * 7 + i as usize) % 1024] ^ (c as u64 & 3))
                    .collect();
                let mut together = vec![Vec::new(); queries.len()];
                m.matching_many(&queries, 3, |j, id, doc| {
                    together[j].push((id, doc.fingerprint))
                });
                for (j, &q) in queries.iter().enumerate() {
                    together[j].sort_unstable();
                    let mut want: Vec<(u64, u64)> = model
                        .iter()
                        .filter(|&(_, &fp)| (fp ^ q).count_ones() <= 3)
                        .map(|(&id, &fp)| (id, fp))
                        .collect();
                    want.sort_unstable();
                    assert_eq!(together[j], want, "query {j} of many after {i} writes");
                    matched += want.len();
                }
                for k in 0..=3 {
                    let mut got: Vec<(u64, u64)> = m
                        .matching(q, k)
                        .into_iter()
                        .map(|(id, doc)| (id, doc.fingerprint))
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
        assert!(
            m.slots.iter().any(Option::is_none),
            "no version was replaced"
        );
        assert_eq!(m.live_docs(), model.len());
        // Clustered fingerprints share buckets: the chains were walked.
        assert!(m.chains[0].heads.iter().filter(|&&h| h != NONE).count() < m.slots.len());
        let mut live: Vec<u64> = model.values().copied().collect();
        live.sort_unstable();
        live.dedup();
        assert!(
            live.len() < model.len(),
            "no fingerprint is shared by two ids"
        );
        let (key_count, tables) = m.sorted_tables(&plan);
        assert_eq!(key_count, live.len() as u64);
        for (t, keys) in tables.enumerate() {
            let table = &plan.tables()[t];
            let mut want: Vec<u64> = live.iter().map(|&fp| table.permute(fp)).collect();
            want.sort_unstable();
            assert_eq!(keys, want, "table {t}");
        }
    }

    /// Random fingerprints fill about as many buckets as random choices
    /// of a bucket would, in every block, at every plan distance: 20,000
    /// of them in 2^16 buckets about 17,200 (the hash of a block in place
    /// put those of the block of bits 16 to 31 in 6,860 at k = 3, chains
    /// 2.5 times as long).
    #[test]
    fn random_fingerprints_spread_over_every_block_s_buckets() {
        for k in [0, 1, 2, 3, 5, 7] {
            let plan = Plan::new(k + 1, k).unwrap();
            let mut m = Memtable::new(&plan);
            let n = 20_000u64;
            for i in 0..n {
                m.insert(i, doc(i, mix(i)));
            }
            for (t, chains) in m.chains.iter().enumerate() {
                let buckets = chains.heads.len() as f64;
                let used = chains.heads.iter().filter(|&&h| h != NONE).count() as f64;
                let expected = buckets * (1.0 - (-(n as f64) / buckets).exp());
                assert!(
                    used > 0.97 * expected,
                    "k {k}, block {t}: {used} buckets used of {buckets}, {expected:.0} expected"
                );
            }
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
            let queries: Vec<u64> = centres
                .iter()
                .enumerate()
                .flat_map(|(i, &c)| [c, c ^ (1 << i) ^ 1])
                .collect();
            for d in 0..=k {
                // Together (in groups of several queries' chains), as one
                // by one.
                let mut together = vec![Vec::new(); queries.len()];
                m.matching_many(&queries, d, |i, id, _| together[i].push(id));
                for (i, &q) in queries.iter().enumerate() {
                    together[i].sort_unstable();
                    let want: Vec<u64> = (0..3000u64)
                        .filter(|&i| (fps[i as usize] ^ q).count_ones() <= d)
                        .collect();
                    assert_eq!(together[i], want, "query {i} of many, k {k}, d {d}");
                    assert_eq!(
                        together[i],
                        ids(m.matching(q, d)),
                        "query {i}, k {k}, d {d}"
                    );
                }
            }
            for &q in &queries {
                for d in 0..=k {
                    let mut got = ids(m.matching(q, d));
                    let len = got.len();
                    got.dedup();
                    assert_eq!(got.len(), len, "a document reported twice (k {k}, d {d})");
                    let want: Vec<u64> = (0..3000u64)
                        .filter(|&i| (fps[i as usize] ^ q).count_ones() <= d)
                        .collect();
                    assert_eq!(got, want, "plan k {k}, query distance {d}");
                    matched += got.len();
                }
            }
            assert!(matched > 50, "k {k}: only {matched} matches");
        }
    }
}
