//! The documents of one `Index::insert_if_new_many` batch answered `new`
//! so far, searchable by fingerprint: each later document of the batch is
//! checked against them without comparing it with every one of them. Split
//! the 64 bits into `k + 1` blocks as the memtable does: a fingerprint
//! within `k` of another equals it in at least one block, so a search looks
//! up one bucket per block. A batch's first few documents are compared with
//! each other instead ([`SCANNED`]).

use super::keys::U64Map;
use crate::plan::Plan;

/// End of a chain.
const NONE: u32 = u32::MAX;

/// Members compared one by one, up to this many: the `k + 1` blocks (a
/// plan, and a map and a list per block: about a dozen allocations) cost
/// more than a few comparisons, in the rounds of a few single checks the
/// server answers together (docs/BENCHMARKS.md, "The header timeout
/// without a timer per request"). Past it the blocks are laid out.
const SCANNED: usize = 16;

#[derive(Debug)]
pub(super) struct Pending {
    /// `k + 1` blocks, one table each, whose prefix is the block (from
    /// the first insert on).
    blocks: Option<Plan>,
    k: u32,
    /// The members expected, for the maps' first allocation.
    capacity: usize,
    /// Every member: its position in the batch and its fingerprint.
    members: Vec<(usize, u64)>,
    /// Per block: the block's bits → the newest member holding them.
    heads: Vec<U64Map<u32>>,
    /// Per block, per member: the next older member with the same bits.
    next: Vec<Vec<u32>>,
}

impl Pending {
    /// An empty set searched at distance `k` (at most 63), with room for
    /// `capacity` members before its maps grow. Its blocks are laid out by
    /// the first insert: a batch of one document, the server's single
    /// checks, never needs them.
    pub(super) fn new(k: u32, capacity: usize) -> Pending {
        Pending {
            blocks: None,
            k,
            capacity,
            members: Vec::new(),
            heads: Vec::new(),
            next: Vec::new(),
        }
    }

    /// Adds the document at `position` of the batch, of fingerprint `fp`.
    pub(super) fn insert(&mut self, position: usize, fp: u64) {
        let Ok(member) = u32::try_from(self.members.len()) else {
            unreachable!("a batch of more than u32::MAX documents");
        };
        if self.members.is_empty() {
            self.members.reserve(self.capacity);
        }
        self.members.push((position, fp));
        if self.blocks.is_some() {
            self.index(member, fp);
        } else if self.members.len() > SCANNED {
            self.lay_out();
        }
    }

    /// Lays out the blocks, with every member so far in them.
    fn lay_out(&mut self) {
        let blocks = Plan::new(self.k + 1, self.k)
            .unwrap_or_else(|e| unreachable!("k + 1 blocks always make a plan: {e}"));
        let n = blocks.tables().len();
        let capacity = self.capacity.max(self.members.len());
        self.heads = (0..n)
            .map(|_| U64Map::with_capacity_and_hasher(capacity, Default::default()))
            .collect();
        self.next = (0..n).map(|_| Vec::with_capacity(capacity)).collect();
        self.blocks = Some(blocks);
        for member in 0..self.members.len() {
            let fp = self.members.get(member).map_or(0, |&(_, fp)| fp);
            self.index(member as u32, fp);
        }
    }

    /// Puts member `member`, of fingerprint `fp`, in the blocks.
    fn index(&mut self, member: u32, fp: u64) {
        let Some(blocks) = &self.blocks else {
            return;
        };
        for ((table, heads), next) in blocks
            .tables()
            .iter()
            .zip(&mut self.heads)
            .zip(&mut self.next)
        {
            let older = heads.insert(fp & table.prefix_source_mask(), member);
            next.push(older.unwrap_or(NONE));
        }
    }

    /// The positions of the members within `k` of `fp`, each once, newest
    /// first within each block.
    pub(super) fn matching(&self, fp: u64) -> Vec<usize> {
        let mut out = Vec::new();
        let Some(blocks) = &self.blocks else {
            // Few members: each compared.
            out.extend(
                self.members
                    .iter()
                    .filter(|&&(_, other)| crate::hamming(other, fp) <= self.k)
                    .map(|&(position, _)| position),
            );
            return out;
        };
        for (t, ((table, heads), next)) in blocks
            .tables()
            .iter()
            .zip(&self.heads)
            .zip(&self.next)
            .enumerate()
        {
            let mut at = heads
                .get(&(fp & table.prefix_source_mask()))
                .copied()
                .unwrap_or(NONE);
            while let Some(&(position, other)) = self.members.get(at as usize) {
                // A member equal in several blocks is reported in the
                // first only.
                if blocks.reports(t, other ^ fp, self.k) {
                    out.push(position);
                }
                at = next.get(at as usize).copied().unwrap_or(NONE);
            }
        }
        out
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing)]
mod tests {
    use super::*;

    fn xorshift(state: &mut u64) -> u64 {
        *state ^= *state << 13;
        *state ^= *state >> 7;
        *state ^= *state << 17;
        *state
    }

    /// The positions of `members` within `k` of `fp`, in order: the brute
    /// force the tests compare with.
    fn within(members: &[u64], fp: u64, k: u32) -> Vec<usize> {
        (0..members.len())
            .filter(|&p| (members[p] ^ fp).count_ones() <= k)
            .collect()
    }

    /// A batch of a few documents, its blocks never laid out: the members
    /// within k found by comparing with each, against brute force.
    #[test]
    fn few_members_are_compared_with_each() {
        let base = 0x0f0f_3c3c_a5a5_9696_u64;
        for k in 0..8 {
            let mut pending = Pending::new(k, 1);
            let mut members = Vec::new();
            let mut found = 0;
            for position in 0..SCANNED {
                // Two at each distance from the base, farther by one bit
                // every second.
                let fp = base ^ ((1u64 << (position / 2)) - 1);
                let got = pending.matching(fp);
                let want = within(&members, fp, k);
                assert_eq!(got, want, "k {k}, position {position}");
                found += got.len();
                pending.insert(position, fp);
                members.push(fp);
            }
            assert!(pending.blocks.is_none(), "k {k}");
            assert!(found > 0, "k {k}: the test never found a match");
        }
    }

    /// Against brute force: members near each other (bits flipped from a
    /// few seeds, so that buckets hold several and matches abound), every
    /// k from 0 to 7.
    #[test]
    fn finds_exactly_the_members_within_k() {
        let mut state = 0x1234_5678_9abc_def1;
        for k in 0..8 {
            let seeds: Vec<u64> = (0..4).map(|_| xorshift(&mut state)).collect();
            let near = |state: &mut u64| {
                let mut fp = seeds[(xorshift(state) % 4) as usize];
                for _ in 0..xorshift(state) % (2 * k as u64 + 3) {
                    fp ^= 1 << (xorshift(state) % 64);
                }
                fp
            };
            let mut pending = Pending::new(k, if k % 2 == 0 { 0 } else { 300 });
            let mut members = Vec::new();
            for position in 0..300 {
                let fp = near(&mut state);
                let mut got = pending.matching(fp);
                got.sort_unstable();
                let want = within(&members, fp, k);
                assert_eq!(got, want, "k {k}, position {position}");
                pending.insert(position, fp);
                members.push(fp);
            }
            assert!(pending.blocks.is_some(), "k {k}: past {SCANNED} members");
            assert!(
                (0..300).any(|_| !pending.matching(near(&mut state)).is_empty()),
                "k {k}: the test never found a match"
            );
        }
    }
}
