//! Block splits, permuted tables and the cost model that chooses between them.
//!
//! This module is pure: no I/O, no allocation on the query path.
//!
//! # Why permuted tables find every match
//!
//! Split the 64 bits of a fingerprint into `m` blocks. Two fingerprints within
//! Hamming distance `k < m` differ in at most `k` blocks, so they agree on at
//! least `m - k` whole blocks. A [`Plan`] keeps one [`Table`] per choice of
//! `m - k` blocks; in that table every fingerprint is stored with its bits
//! permuted so the chosen blocks come first (the table's *prefix*). A query
//! permutes itself the same way and only looks at the run of keys sharing its
//! prefix. Whatever the pair is, one table has their common blocks as its prefix,
//! so the search is exact.
//!
//! A [nested](Plan::nested) plan applies the argument twice (Manku, Jain and
//! Das Sarma, WWW 2007, section 3.1.1): choose `m1 - k` of `m1` blocks, then split
//! the remaining bits into `m2` sub-blocks and choose `m2 - k` of them, for
//! `C(m1, m1-k) · C(m2, m2-k)` tables with a longer prefix.
//!
//! Bit numbering: bit 63 is the most significant bit; block 0 holds the most
//! significant bits. Blocks are contiguous and their widths differ by at most
//! one, wider blocks first (64 bits in 6 blocks: 11, 11, 11, 11, 10, 10).

use std::fmt;

/// Hard upper bound on the number of tables a plan may have.
pub const MAX_TABLES: usize = 1024;

/// Expected candidates per query that [`Plan::auto`] accepts before it adds tables.
pub const CANDIDATE_BUDGET: f64 = 64.0;

/// Plans with more tables than this are not considered by [`Plan::auto`].
pub const MAX_AUTO_TABLES: usize = 64;

/// Why a plan cannot be built.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PlanError {
    /// Distances above 63 cannot be indexed (every pair of fingerprints is within 64).
    DistanceTooLarge {
        /// The distance asked for.
        k: u32,
    },
    /// The number of blocks must exceed `k` and be at most the number of bits to split.
    BadBlocks {
        /// The number of blocks asked for.
        blocks: u32,
        /// The distance the plan is for.
        k: u32,
        /// The number of bits to split.
        bits: u32,
    },
    /// The plan would need more than [`MAX_TABLES`] tables.
    TooManyTables {
        /// The number of tables the plan would need.
        tables: u128,
    },
}

impl fmt::Display for PlanError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PlanError::DistanceTooLarge { k } => {
                write!(
                    f,
                    "distance {k} is too large: at most 63 bits can be searched"
                )
            }
            PlanError::BadBlocks { blocks, k, bits } => write!(
                f,
                "cannot split {bits} bits into {blocks} blocks for distance {k}: \
                 need {k} < blocks <= {bits}"
            ),
            PlanError::TooManyTables { tables } => write!(
                f,
                "the plan needs {tables} tables, more than the limit of {MAX_TABLES}; \
                 use fewer blocks or a smaller distance"
            ),
        }
    }
}

impl std::error::Error for PlanError {}

/// The block structure of a plan, as recorded in an index.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Shape {
    /// `blocks` blocks over all 64 bits; one table per choice of `blocks - k` of them.
    Flat {
        /// The number of blocks.
        blocks: u32,
    },
    /// `outer` blocks over 64 bits, then `inner` sub-blocks over the bits left
    /// after the chosen outer blocks.
    Nested {
        /// The number of outer blocks (over all 64 bits).
        outer: u32,
        /// The number of sub-blocks the bits left after the chosen outer
        /// blocks are split into.
        inner: u32,
    },
}

impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Shape::Flat { blocks } => write!(f, "{blocks} blocks"),
            Shape::Nested { outer, inner } => write!(f, "{outer}x{inner} nested blocks"),
        }
    }
}

/// One permuted table: where each bit of a fingerprint goes, and how many
/// leading (permuted) bits form the prefix that a query must match exactly.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Table {
    /// `permuted |= x.rotate_left(rot) & mask` for each `(rot, mask)`; masks are
    /// disjoint and cover all 64 bits. One entry per distinct rotation, so a
    /// permutation costs a few rotates and masks.
    moves: Vec<(u32, u64)>,
    prefix_bits: u32,
    /// The prefix bits, in unpermuted positions.
    prefix_source_mask: u64,
}

impl Table {
    /// Builds a table from the source bit positions listed from the most
    /// significant permuted bit down; `order` is a permutation of `0..64`.
    fn from_order(order: &[u32], prefix_bits: u32) -> Table {
        debug_assert_eq!(order.len(), 64);
        let mut moves: Vec<(u32, u64)> = Vec::new();
        let mut prefix_source_mask = 0u64;
        for (i, &src) in order.iter().enumerate() {
            let dst = 63 - i as u32;
            let rot = (dst + 64 - src) % 64;
            match moves.iter_mut().find(|(r, _)| *r == rot) {
                Some((_, mask)) => *mask |= 1 << dst,
                None => moves.push((rot, 1 << dst)),
            }
            if (i as u32) < prefix_bits {
                prefix_source_mask |= 1 << src;
            }
        }
        moves.sort_unstable();
        Table {
            moves,
            prefix_bits,
            prefix_source_mask,
        }
    }

    /// The fingerprint with this table's bits moved into place.
    #[inline]
    pub fn permute(&self, fp: u64) -> u64 {
        self.moves
            .iter()
            .fold(0, |acc, &(rot, mask)| acc | (fp.rotate_left(rot) & mask))
    }

    /// Inverse of [`permute`](Self::permute).
    #[inline]
    pub fn unpermute(&self, key: u64) -> u64 {
        self.moves.iter().fold(0, |acc, &(rot, mask)| {
            acc | ((key & mask).rotate_right(rot))
        })
    }

    /// Number of leading permuted bits that a candidate must share with the query.
    #[inline]
    pub fn prefix_bits(&self) -> u32 {
        self.prefix_bits
    }

    /// The prefix bits as a mask over permuted keys.
    #[inline]
    pub fn prefix_mask(&self) -> u64 {
        // prefix_bits is in 1..=64.
        u64::MAX << (64 - self.prefix_bits)
    }

    /// The prefix bits as a mask over unpermuted fingerprints.
    #[inline]
    pub fn prefix_source_mask(&self) -> u64 {
        self.prefix_source_mask
    }

    /// The inclusive range of permuted keys that share `permuted_query`'s prefix.
    #[inline]
    pub fn prefix_range(&self, permuted_query: u64) -> (u64, u64) {
        let lo = permuted_query & self.prefix_mask();
        (lo, lo | !self.prefix_mask())
    }

    /// Whether two fingerprints whose XOR is `diff` agree on this table's prefix.
    #[inline]
    pub fn shares_prefix(&self, diff: u64) -> bool {
        diff & self.prefix_source_mask == 0
    }
}

/// How the 64 bits are split into permuted tables; fixed when an index is created.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    shape: Shape,
    k: u32,
    tables: Vec<Table>,
}

/// Widths of `blocks` near-equal contiguous blocks over `bits` bits, wider first.
fn block_widths(bits: u32, blocks: u32) -> Vec<u32> {
    (0..blocks)
        .map(|i| bits / blocks + u32::from(i < bits % blocks))
        .collect()
}

/// Splits a sequence of positions into near-equal consecutive blocks.
fn split_positions(positions: &[u32], blocks: u32) -> Vec<Vec<u32>> {
    let mut out = Vec::with_capacity(blocks as usize);
    let mut start = 0usize;
    for w in block_widths(positions.len() as u32, blocks) {
        out.push(positions[start..start + w as usize].to_vec());
        start += w as usize;
    }
    out
}

/// All `choose`-element subsets of `0..n`, in lexicographic order.
fn combinations(n: u32, choose: u32) -> Vec<Vec<u32>> {
    let mut out = Vec::new();
    let mut current: Vec<u32> = (0..choose).collect();
    loop {
        out.push(current.clone());
        // Find the rightmost element that can still move right.
        let Some(i) = (0..choose as usize)
            .rev()
            .find(|&i| current[i] < n - choose + i as u32)
        else {
            return out;
        };
        current[i] += 1;
        for j in i + 1..choose as usize {
            current[j] = current[j - 1] + 1;
        }
    }
}

fn binomial(n: u32, r: u32) -> u128 {
    let r = r.min(n - r);
    (0..r).fold(1u128, |acc, i| acc * u128::from(n - i) / u128::from(i + 1))
}

/// For each table of a one-level split of `positions` (most significant
/// first), the reordered positions and the number of prefix positions.
fn one_level(positions: &[u32], blocks: u32, k: u32) -> Vec<(Vec<u32>, u32)> {
    let parts = split_positions(positions, blocks);
    combinations(blocks, blocks - k)
        .into_iter()
        .map(|chosen| {
            let mut order: Vec<u32> = Vec::with_capacity(positions.len());
            for &c in &chosen {
                order.extend_from_slice(&parts[c as usize]);
            }
            let prefix = order.len() as u32;
            for (i, part) in parts.iter().enumerate() {
                if !chosen.contains(&(i as u32)) {
                    order.extend_from_slice(part);
                }
            }
            (order, prefix)
        })
        .collect()
}

fn check_split(bits: u32, blocks: u32, k: u32) -> Result<u128, PlanError> {
    if blocks <= k || blocks > bits {
        return Err(PlanError::BadBlocks { blocks, k, bits });
    }
    Ok(binomial(blocks, blocks - k))
}

fn check_k(k: u32) -> Result<(), PlanError> {
    if k > 63 {
        return Err(PlanError::DistanceTooLarge { k });
    }
    Ok(())
}

fn check_tables(tables: u128) -> Result<(), PlanError> {
    if tables > MAX_TABLES as u128 {
        return Err(PlanError::TooManyTables { tables });
    }
    Ok(())
}

/// All 64 bit positions, most significant first.
fn all_positions() -> Vec<u32> {
    (0..64).rev().collect()
}

impl Plan {
    /// `blocks` near-equal blocks, one table per choice of `blocks - k` of them.
    ///
    /// `k = 0` is valid (one block, one table: exact lookup). Errors when
    /// `blocks <= k`, `blocks > 64`, or the plan needs more than [`MAX_TABLES`] tables.
    pub fn new(blocks: u32, k: u32) -> Result<Plan, PlanError> {
        check_k(k)?;
        check_tables(check_split(64, blocks, k)?)?;
        let tables = one_level(&all_positions(), blocks, k)
            .into_iter()
            .map(|(order, prefix)| Table::from_order(&order, prefix))
            .collect();
        Ok(Plan {
            shape: Shape::Flat { blocks },
            k,
            tables,
        })
    }

    /// A two-level split: choose `outer - k` of `outer` blocks, then split the
    /// remaining bits into `inner` sub-blocks and choose `inner - k` of those.
    /// `Plan::nested(4, 4, 3)` is the paper's 16-table design with 28-bit prefixes.
    pub fn nested(outer: u32, inner: u32, k: u32) -> Result<Plan, PlanError> {
        check_k(k)?;
        let outer_tables = check_split(64, outer, k)?;
        // The fewest bits left after the outer prefix: the narrowest unchosen blocks.
        let mut widths = block_widths(64, outer);
        widths.sort_unstable();
        let rest_bits: u32 = widths[..k as usize].iter().sum();
        let inner_tables = check_split(rest_bits, inner, k)?;
        check_tables(outer_tables.saturating_mul(inner_tables))?;
        let mut tables = Vec::new();
        for (order, prefix) in one_level(&all_positions(), outer, k) {
            let (head, rest) = order.split_at(prefix as usize);
            for (inner_order, inner_prefix) in one_level(rest, inner, k) {
                let full: Vec<u32> = head.iter().chain(&inner_order).copied().collect();
                tables.push(Table::from_order(&full, prefix + inner_prefix));
            }
        }
        Ok(Plan {
            shape: Shape::Nested { outer, inner },
            k,
            tables,
        })
    }

    /// Builds the plan a [`Shape`] describes (as recorded in an index).
    pub fn from_shape(shape: Shape, k: u32) -> Result<Plan, PlanError> {
        match shape {
            Shape::Flat { blocks } => Plan::new(blocks, k),
            Shape::Nested { outer, inner } => Plan::nested(outer, inner, k),
        }
    }

    /// The plan the cost model prefers for about `expected_n` fingerprints
    /// searched at distance `k`. See [`Plan::alternatives`] for the reasoning.
    pub fn auto(expected_n: u64, k: u32) -> Result<Plan, PlanError> {
        let choice = Plan::alternatives(expected_n, k)?;
        Plan::from_shape(choice.chosen().shape, k)
    }

    /// Every plan [`Plan::auto`] considers for `expected_n` fingerprints at
    /// distance `k`, with its estimated costs and the one it chooses.
    ///
    /// The rule: the fewest tables (least space) whose expected candidates per
    /// query stay within [`CANDIDATE_BUDGET`]; among equals, the fewest
    /// candidates. When no plan of at most [`MAX_AUTO_TABLES`] tables meets the
    /// budget, the plan minimising `candidates + tables × budget` (a table
    /// probe is priced like a budget's worth of candidate checks).
    pub fn alternatives(expected_n: u64, k: u32) -> Result<PlanChoice, PlanError> {
        check_k(k)?;
        let mut shapes: Vec<Shape> = Vec::new();
        for blocks in k + 1..=64 {
            if binomial(blocks, blocks - k) > MAX_AUTO_TABLES as u128 {
                break;
            }
            shapes.push(Shape::Flat { blocks });
        }
        for outer in k + 1..=k + 4 {
            for inner in k + 1..=k + 4 {
                let tables = binomial(outer, outer - k).saturating_mul(binomial(inner, inner - k));
                if k > 0 && tables <= MAX_AUTO_TABLES as u128 {
                    shapes.push(Shape::Nested { outer, inner });
                }
            }
        }
        let mut costs: Vec<PlanCost> = shapes
            .into_iter()
            .filter_map(|shape| Plan::from_shape(shape, k).ok())
            .map(|plan| plan.cost(expected_n))
            .collect();
        costs.sort_by(|a, b| {
            (a.tables, a.shape)
                .cmp(&(b.tables, b.shape))
                .then(a.expected_candidates.total_cmp(&b.expected_candidates))
        });
        let within: Option<usize> = costs
            .iter()
            .enumerate()
            .filter(|(_, c)| c.expected_candidates <= CANDIDATE_BUDGET)
            .min_by(|(_, a), (_, b)| {
                a.tables
                    .cmp(&b.tables)
                    .then(a.expected_candidates.total_cmp(&b.expected_candidates))
            })
            .map(|(i, _)| i);
        let chosen = match within {
            Some(i) => i,
            None => costs
                .iter()
                .enumerate()
                .min_by(|(_, a), (_, b)| {
                    let score =
                        |c: &PlanCost| c.expected_candidates + c.tables as f64 * CANDIDATE_BUDGET;
                    score(a).total_cmp(&score(b))
                })
                .map(|(i, _)| i)
                .ok_or(PlanError::BadBlocks {
                    blocks: 0,
                    k,
                    bits: 64,
                })?,
        };
        Ok(PlanChoice {
            expected_n,
            k,
            within_budget: within.is_some(),
            chosen,
            alternatives: costs,
        })
    }

    /// Estimated costs of this plan for `n` fingerprints.
    pub fn cost(&self, n: u64) -> PlanCost {
        let n_f = n as f64;
        let expected_candidates = self
            .tables
            .iter()
            .map(|t| n_f / 2f64.powi(t.prefix_bits as i32))
            .sum();
        let per_table = estimated_table_bytes_per_key(n);
        PlanCost {
            shape: self.shape,
            tables: self.tables.len(),
            min_prefix_bits: self.tables.iter().map(|t| t.prefix_bits).min().unwrap_or(0),
            max_prefix_bits: self.tables.iter().map(|t| t.prefix_bits).max().unwrap_or(0),
            expected_candidates,
            bytes_per_fingerprint: per_table * self.tables.len() as f64,
            total_bytes: per_table * self.tables.len() as f64 * n_f,
        }
    }

    /// The block structure.
    pub fn shape(&self) -> Shape {
        self.shape
    }

    /// The largest distance this plan answers exactly.
    pub fn k(&self) -> u32 {
        self.k
    }

    /// The permuted tables.
    pub fn tables(&self) -> &[Table] {
        &self.tables
    }

    /// Whether a candidate whose XOR with the query is `diff`, found in table
    /// `t`, is reported there: it is reported by the first table whose prefix
    /// it shares, so that every match is reported exactly once without a set.
    #[inline]
    pub fn first_table_sharing(&self, t: usize, diff: u64) -> bool {
        !self.tables[..t].iter().any(|e| e.shares_prefix(diff))
    }
}

/// With the `serde` feature: a plan serializes as its [`Display`](fmt::Display)
/// form (`"6 blocks, k = 3, 20 tables"`), as `simhashdb stats` prints it.
#[cfg(feature = "serde")]
impl serde::Serialize for Plan {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl fmt::Display for Plan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}, k = {}, {} tables",
            self.shape,
            self.k,
            self.tables.len()
        )
    }
}

/// Estimated bytes per key of one delta-compressed sorted table of `n` random
/// 64-bit keys: a sorted table of `n` keys needs about `64 - log2(n)` bits per
/// key for the low bits plus about 2 bits for the entropy-coded gap size.
pub fn estimated_table_bytes_per_key(n: u64) -> f64 {
    let log_n = (n.max(1) as f64).log2();
    ((64.0 - log_n + 2.0) / 8.0).clamp(0.5, 8.0)
}

/// Estimated costs of one plan at a given corpus size.
#[derive(Debug, Clone, PartialEq)]
pub struct PlanCost {
    /// The plan's block structure.
    pub shape: Shape,
    /// Number of permuted tables.
    pub tables: usize,
    /// Shortest table prefix, in bits.
    pub min_prefix_bits: u32,
    /// Longest table prefix, in bits.
    pub max_prefix_bits: u32,
    /// Expected fingerprints examined per query: the sum over tables of `n / 2^prefix`.
    pub expected_candidates: f64,
    /// Estimated table bytes per fingerprint over all tables (compressed).
    pub bytes_per_fingerprint: f64,
    /// Estimated table bytes for all `n` fingerprints.
    pub total_bytes: f64,
}

/// The plans [`Plan::auto`] weighed, and its choice.
#[derive(Debug, Clone, PartialEq)]
pub struct PlanChoice {
    /// The corpus size the costs are estimated for.
    pub expected_n: u64,
    /// The distance the plans answer.
    pub k: u32,
    /// Whether the chosen plan meets [`CANDIDATE_BUDGET`].
    pub within_budget: bool,
    /// Index of the chosen plan in `alternatives`.
    pub chosen: usize,
    /// Every plan considered, ordered by number of tables.
    pub alternatives: Vec<PlanCost>,
}

impl PlanChoice {
    /// The chosen plan's costs.
    pub fn chosen(&self) -> &PlanCost {
        &self.alternatives[self.chosen]
    }

    /// One sentence saying why the choice was made.
    pub fn reason(&self) -> String {
        let c = self.chosen();
        if self.within_budget {
            format!(
                "{} ({} tables) is the smallest plan that keeps the expected candidates per query \
                 ({:.3}) within the budget of {CANDIDATE_BUDGET} for n = {}, k = {}",
                c.shape, c.tables, c.expected_candidates, self.expected_n, self.k
            )
        } else {
            format!(
                "no plan of at most {MAX_AUTO_TABLES} tables keeps the expected candidates per query \
                 within {CANDIDATE_BUDGET} for n = {}, k = {}; {} ({} tables, {:.0} candidates) has the \
                 lowest combined cost",
                self.expected_n, self.k, c.shape, c.tables, c.expected_candidates
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn block_widths_differ_by_at_most_one() {
        assert_eq!(block_widths(64, 6), vec![11, 11, 11, 11, 10, 10]);
        assert_eq!(block_widths(64, 4), vec![16; 4]);
        assert_eq!(block_widths(48, 4), vec![12; 4]);
        assert_eq!(block_widths(64, 1), vec![64]);
    }

    #[test]
    fn flat_plan_table_counts_and_prefixes() {
        let p = Plan::new(6, 3).unwrap();
        assert_eq!(p.tables().len(), 20);
        let bits: Vec<u32> = p.tables().iter().map(|t| t.prefix_bits()).collect();
        assert_eq!(bits.iter().min(), Some(&31));
        assert_eq!(bits.iter().max(), Some(&33));
        // First table: blocks 0, 1, 2 lead, so the identity permutation.
        assert_eq!(
            p.tables()[0].permute(0x0123_4567_89ab_cdef),
            0x0123_4567_89ab_cdef
        );
        assert_eq!(p.tables()[0].prefix_bits(), 33);
    }

    #[test]
    fn k_zero_is_one_exact_table() {
        let p = Plan::new(1, 0).unwrap();
        assert_eq!(p.tables().len(), 1);
        assert_eq!(p.tables()[0].prefix_bits(), 64);
        assert_eq!(p.tables()[0].prefix_range(42), (42, 42));
    }

    #[test]
    fn nested_plan_is_googles_sixteen_tables() {
        let p = Plan::nested(4, 4, 3).unwrap();
        assert_eq!(p.tables().len(), 16);
        assert!(p.tables().iter().all(|t| t.prefix_bits() == 28));
    }

    #[test]
    fn bad_plans_are_errors() {
        assert!(matches!(Plan::new(3, 3), Err(PlanError::BadBlocks { .. })));
        assert!(matches!(Plan::new(65, 3), Err(PlanError::BadBlocks { .. })));
        assert!(matches!(Plan::new(0, 0), Err(PlanError::BadBlocks { .. })));
        assert!(matches!(
            Plan::new(64, 64),
            Err(PlanError::DistanceTooLarge { .. })
        ));
        assert!(matches!(
            Plan::new(40, 20),
            Err(PlanError::TooManyTables { .. })
        ));
        assert!(matches!(
            Plan::nested(4, 3, 3),
            Err(PlanError::BadBlocks { .. })
        ));
        assert!(Plan::new(64, 63).is_ok());
    }

    #[test]
    fn binomials() {
        assert_eq!(binomial(6, 3), 20);
        assert_eq!(binomial(64, 32), 1_832_624_140_942_590_534);
        assert_eq!(combinations(4, 2).len(), 6);
        assert_eq!(combinations(5, 5), vec![vec![0, 1, 2, 3, 4]]);
    }

    #[test]
    fn auto_matches_the_papers_choices() {
        // Tens of millions at k = 3: 10 tables of 26-bit prefixes.
        let c = Plan::alternatives(50_000_000, 3).unwrap();
        assert!(c.within_budget);
        assert_eq!(c.chosen().shape, Shape::Flat { blocks: 5 });
        // Eight billion (the paper's corpus): 20 tables.
        let c = Plan::alternatives(8_000_000_000, 3).unwrap();
        assert_eq!(c.chosen().tables, 20);
        // Small corpora need only k + 1 tables.
        assert_eq!(Plan::auto(100_000, 3).unwrap().tables().len(), 4);
        assert_eq!(Plan::auto(1000, 0).unwrap().tables().len(), 1);
        // A large k falls back to the combined cost, never an error.
        let c = Plan::alternatives(1_000_000, 12).unwrap();
        assert!(!c.within_budget);
        assert!(c.chosen().tables <= MAX_AUTO_TABLES);
        assert!(c.reason().contains("no plan"));
    }

    #[test]
    fn every_alternative_costs_are_monotone_in_n() {
        let small = Plan::new(5, 3).unwrap().cost(1_000_000);
        let large = Plan::new(5, 3).unwrap().cost(100_000_000);
        assert!(large.expected_candidates > small.expected_candidates * 99.0);
        assert!(large.bytes_per_fingerprint < small.bytes_per_fingerprint);
    }

    fn arb_plan() -> impl Strategy<Value = Plan> {
        prop_oneof![
            (0u32..8)
                .prop_flat_map(|k| (Just(k), k + 1..=(k + 4).min(64)))
                .prop_map(|(k, b)| Plan::new(b, k).unwrap()),
            Just(Plan::new(64, 63).unwrap()),
            Just(Plan::nested(4, 4, 3).unwrap()),
            Just(Plan::nested(3, 5, 2).unwrap()),
        ]
    }

    proptest! {
        #[test]
        fn permute_round_trips(plan in arb_plan(), fp in any::<u64>()) {
            for t in plan.tables() {
                prop_assert_eq!(t.unpermute(t.permute(fp)), fp);
                prop_assert_eq!(t.permute(fp).count_ones(), fp.count_ones());
            }
        }

        #[test]
        fn prefix_masks_agree(plan in arb_plan(), a in any::<u64>(), b in any::<u64>()) {
            for t in plan.tables() {
                let same_permuted = (t.permute(a) ^ t.permute(b)) & t.prefix_mask() == 0;
                prop_assert_eq!(same_permuted, t.shares_prefix(a ^ b));
                prop_assert_eq!(t.prefix_source_mask().count_ones(), t.prefix_bits());
            }
        }

        #[test]
        fn some_table_shares_the_prefix_of_every_close_pair(
            plan in arb_plan(), a in any::<u64>(), flips in proptest::collection::vec(0u32..64, 0..8)
        ) {
            let mut b = a;
            for f in flips.iter().take(plan.k() as usize) {
                b ^= 1 << f;
            }
            prop_assert!(plan.tables().iter().any(|t| t.shares_prefix(a ^ b)));
        }
    }
}
