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
//! A [probed](Plan::probed) plan trades tables for lookups (multi-index
//! hashing: Norouzi, Punjani and Fleet, "Fast search in Hamming space with
//! multi-index hashing", CVPR 2012). Its `t` tables are probed not only at the
//! query's prefix but at every prefix value within Hamming radius `r` of it,
//! so a pair is found when it differs in at most `r` of some table's prefix
//! bits. Split 64 bits into `m` blocks: a pair within `k` differs in at most
//! `floor(k / m)` bits of its least different block, so one table per block
//! and `r = floor(k / m)` is exact, which is `m · (r + 1) > k`. A prefix of `c`
//! blocks ([`Plan::probed`] takes the most that stay exact) lengthens the
//! prefix at the price of `C(m, c)` tables. `r = 0` is the permuted plan above.
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

/// Hard upper bound on the prefix values a plan probes per query (over all tables).
pub const MAX_PROBES: u64 = 1 << 18;

/// Plans probing more prefix values than this per query are not considered by [`Plan::choose`].
pub const MAX_AUTO_PROBES: u64 = 1 << 14;

/// What one probe (finding the run of one prefix value in a sorted table)
/// costs, in candidate checks: the cost model's unit. A probe of a segment
/// searches a block index and decodes the start of a block (about 330 ns
/// measured); a candidate check decodes one key and counts the bits of one
/// XOR (about 10 ns). docs/BENCHMARKS.md, "Probed plans".
pub const PROBE_COST: f64 = 32.0;

/// The expected cost per query (candidates plus [`PROBE_COST`] per probe)
/// that [`Budget::default`] accepts before it adds tables.
pub const DEFAULT_LATENCY_BUDGET: f64 = 1024.0;

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
    /// With `blocks` blocks, probing radius `radius` cannot cover distance `k`:
    /// exactness needs `blocks × (radius + 1) > k`.
    RadiusTooSmall {
        /// The number of blocks asked for.
        blocks: u32,
        /// The probing radius asked for.
        radius: u32,
        /// The distance the plan is for.
        k: u32,
    },
    /// The plan would probe more than [`MAX_PROBES`] prefix values per query.
    TooManyProbes {
        /// The prefix values the plan would probe per query.
        probes: u128,
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
            PlanError::RadiusTooSmall { blocks, radius, k } => write!(
                f,
                "{blocks} blocks probed at radius {radius} cannot find every pair within {k}: \
                 need blocks × (radius + 1) > k"
            ),
            PlanError::TooManyProbes { probes } => write!(
                f,
                "the plan probes {probes} prefix values per query, more than the limit of \
                 {MAX_PROBES}; use a smaller radius or more blocks"
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
    /// `blocks` blocks over 64 bits; one table per choice of the most blocks
    /// that stay exact when each table is probed at every prefix within
    /// `radius` (at least 1) of the query's ([`Plan::probed`]).
    Probed {
        /// The number of blocks.
        blocks: u32,
        /// The probing radius (at least 1).
        radius: u32,
    },
}

impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Shape::Flat { blocks } => write!(f, "{blocks} blocks"),
            Shape::Nested { outer, inner } => write!(f, "{outer}x{inner} nested blocks"),
            Shape::Probed { blocks, radius } => write!(f, "{blocks} blocks, radius {radius}"),
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
    /// Every XOR of the prefix bits (in permuted positions) of weight at most
    /// the plan's radius, ascending: the prefix values a query probes are its
    /// own XOR each of these. `[0]` when the plan does not probe.
    probes: Vec<u64>,
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
            probes: vec![0],
        }
    }

    /// Sets the probes of radius `radius` (see [`Table::probe_ranges`]).
    fn with_radius(mut self, radius: u32) -> Table {
        let prefix = self.prefix_mask();
        let mut probes = vec![0u64];
        // Masks of weight w + 1 are those of weight w with one more bit set
        // below their lowest (so each is made once).
        let mut last: Vec<u64> = vec![0];
        for _ in 0..radius {
            let mut next = Vec::new();
            for &m in &last {
                let below = if m == 0 {
                    prefix
                } else {
                    (m & m.wrapping_neg()).wrapping_sub(1) & prefix
                };
                let mut bits = below;
                while bits != 0 {
                    let b = bits & bits.wrapping_neg();
                    next.push(m | b);
                    bits ^= b;
                }
            }
            probes.extend_from_slice(&next);
            last = next;
        }
        probes.sort_unstable();
        self.probes = probes;
        self
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

    /// Whether two fingerprints whose XOR is `diff` differ in at most
    /// `radius` bits of this table's prefix.
    #[inline]
    pub fn prefix_within(&self, diff: u64, radius: u32) -> bool {
        (diff & self.prefix_source_mask).count_ones() <= radius
    }

    /// Number of prefix values a query probes in this table.
    #[inline]
    pub fn probe_count(&self) -> usize {
        self.probes.len()
    }

    /// The inclusive ranges of permuted keys a query probes: one per prefix
    /// value within the plan's radius of `permuted_query`'s, in a fixed order
    /// (the query's own prefix first), disjoint. Without probing, the one
    /// range of [`prefix_range`](Self::prefix_range).
    #[inline]
    pub fn probe_ranges(&self, permuted_query: u64) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.probe_ranges_within(permuted_query, u64::BITS)
    }

    /// [`probe_ranges`](Self::probe_ranges) of the prefix values within
    /// `radius` (at most the table's) of `permuted_query`'s: what a search
    /// at a distance below the plan's k probes
    /// ([`Plan::radius_for`]).
    #[inline]
    pub fn probe_ranges_within(
        &self,
        permuted_query: u64,
        radius: u32,
    ) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.probe_ranges_of_weights(permuted_query, u64::MAX >> (63 - radius.min(63)))
    }

    /// [`probe_ranges`](Self::probe_ranges) of the prefix values whose
    /// distance `w` from `permuted_query`'s has bit `w` of `weights` set
    /// ([`Plan::probe_weights`]).
    #[inline]
    pub fn probe_ranges_of_weights(
        &self,
        permuted_query: u64,
        weights: u64,
    ) -> impl Iterator<Item = (u64, u64)> + '_ {
        let prefix = self.prefix_mask();
        self.probes
            .iter()
            .filter(move |m| weights.checked_shr(m.count_ones()).unwrap_or(0) & 1 == 1)
            .map(move |&m| {
                let lo = (permuted_query ^ m) & prefix;
                (lo, lo | !prefix)
            })
    }
}

/// How the 64 bits are split into permuted tables; fixed when an index is created.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    shape: Shape,
    k: u32,
    /// Prefix values within this distance of the query's are probed (0: only its own).
    radius: u32,
    /// For each query distance `0..=k`, the radius that keeps the search
    /// exact at that distance ([`radius_for`](Self::radius_for)); empty
    /// when the plan does not probe.
    radii: Vec<u32>,
    /// Whether every table's prefix is one block, table `t` block `t`
    /// (a flat plan of `k + 1` blocks, a probed one whose prefixes take one
    /// block): then [`probe_weights`](Self::probe_weights) leaves out the
    /// probes that cannot report a match.
    single_block_prefixes: bool,
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

/// The most bits a pair within `k` can differ in, over the least different
/// `c` of `m` blocks: `k` spread as evenly as the blocks allow.
fn worst_prefix_diff(m: u32, c: u32, k: u32) -> u32 {
    let (q, rem) = (k / m, k % m);
    c * q + c.saturating_sub(m - rem)
}

/// The most of `m` blocks a probed table's prefix may take so that every
/// pair within `k` differs in at most `radius` bits of some table's prefix
/// (0 when even one block does not do).
fn probed_prefix_blocks(m: u32, radius: u32, k: u32) -> u32 {
    (1..=m)
        .rev()
        .find(|&c| worst_prefix_diff(m, c, k) <= radius)
        .unwrap_or(0)
}

/// Number of values within distance `radius` of a `bits`-bit value.
fn ball(bits: u32, radius: u32) -> u128 {
    (0..=radius.min(bits)).map(|i| binomial(bits, i)).sum()
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
            radius: 0,
            radii: Vec::new(),
            single_block_prefixes: blocks - k == 1,
            tables,
        })
    }

    /// `blocks` near-equal blocks, one table per choice of `c` of them,
    /// each probed at every prefix value within `radius` of the query's
    /// (multi-index hashing). `c` is the most blocks that keep the plan
    /// exact: every pair within `k` must differ in at most `radius` bits
    /// of some table's prefix. `Plan::probed(2, 1, 3)` is two tables of
    /// 32-bit prefixes, each probed at 33 values.
    ///
    /// `radius = 0` is [`Plan::new`]. Errors when `blocks × (radius + 1) <= k`,
    /// `blocks` is 0 or above 64, or the plan needs more than [`MAX_TABLES`]
    /// tables or [`MAX_PROBES`] probes per query.
    pub fn probed(blocks: u32, radius: u32, k: u32) -> Result<Plan, PlanError> {
        check_k(k)?;
        if radius == 0 {
            return Plan::new(blocks, k);
        }
        if blocks == 0 || blocks > 64 {
            return Err(PlanError::BadBlocks {
                blocks,
                k,
                bits: 64,
            });
        }
        let c = probed_prefix_blocks(blocks, radius, k);
        if c == 0 {
            return Err(PlanError::RadiusTooSmall { blocks, radius, k });
        }
        let tables = binomial(blocks, c);
        check_tables(tables)?;
        let widest_prefix: u32 = block_widths(64, blocks)[..c as usize].iter().sum();
        let probes = tables.saturating_mul(ball(widest_prefix, radius));
        if probes > u128::from(MAX_PROBES) {
            return Err(PlanError::TooManyProbes { probes });
        }
        // One level with `blocks - c` blocks left out of each prefix.
        let tables = one_level(&all_positions(), blocks, blocks - c)
            .into_iter()
            .map(|(order, prefix)| Table::from_order(&order, prefix).with_radius(radius))
            .collect();
        Ok(Plan {
            shape: Shape::Probed { blocks, radius },
            k,
            radius,
            // A pair within `d <= k` differs in at most
            // `worst_prefix_diff(blocks, c, d)` bits of some table's
            // prefix, fewer than `radius` when `d < k`.
            radii: (0..=k)
                .map(|d| worst_prefix_diff(blocks, c, d).min(radius))
                .collect(),
            single_block_prefixes: c == 1,
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
            radius: 0,
            radii: Vec::new(),
            single_block_prefixes: false,
            tables,
        })
    }

    /// Builds the plan a [`Shape`] describes (as recorded in an index).
    pub fn from_shape(shape: Shape, k: u32) -> Result<Plan, PlanError> {
        match shape {
            Shape::Flat { blocks } => Plan::new(blocks, k),
            Shape::Nested { outer, inner } => Plan::nested(outer, inner, k),
            Shape::Probed { blocks, radius } if radius > 0 => Plan::probed(blocks, radius, k),
            // A radius of 0 is a flat shape; recorded shapes never say this.
            Shape::Probed { blocks, .. } => Err(PlanError::BadBlocks {
                blocks,
                k,
                bits: 64,
            }),
        }
    }

    /// The plan the cost model prefers for about `expected_n` fingerprints
    /// searched at distance `k`, within the default [`Budget`]
    /// (`Plan::choose(expected_n, k, Budget::default())`). The plan may probe;
    /// [`batch::find_all`](crate::batch::find_all) needs [`Budget::Unprobed`].
    pub fn auto(expected_n: u64, k: u32) -> Result<Plan, PlanError> {
        Plan::choose(expected_n, k, Budget::default())
    }

    /// The plan the cost model prefers for about `expected_n` fingerprints
    /// searched at distance `k`, within `budget`. See [`Plan::alternatives`].
    pub fn choose(expected_n: u64, k: u32, budget: Budget) -> Result<Plan, PlanError> {
        let choice = Plan::alternatives(expected_n, k, budget)?;
        Plan::from_shape(choice.chosen().shape, k)
    }

    /// Every plan [`Plan::choose`] considers for `expected_n` fingerprints at
    /// distance `k` within `budget`, with its estimated costs and the one it
    /// chooses (see [`Budget`] for each rule).
    ///
    /// Considered: flat plans ([`Plan::new`]) and nested ones
    /// ([`Plan::nested`]) of at most [`MAX_AUTO_TABLES`] tables, and unless
    /// the budget is [`Budget::Unprobed`], probed ones ([`Plan::probed`]) of
    /// at most [`MAX_AUTO_TABLES`] tables and [`MAX_AUTO_PROBES`] probes.
    pub fn alternatives(expected_n: u64, k: u32, budget: Budget) -> Result<PlanChoice, PlanError> {
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
        if budget != Budget::Unprobed {
            for radius in 1..=k {
                for blocks in 1..=64 {
                    let c = probed_prefix_blocks(blocks, radius, k);
                    // A radius no prefix needs is a smaller radius's plan.
                    if c == 0 || probed_prefix_blocks(blocks, radius - 1, k) == c {
                        continue;
                    }
                    let widest: u32 = block_widths(64, blocks)[..c as usize].iter().sum();
                    let tables = binomial(blocks, c);
                    if tables <= MAX_AUTO_TABLES as u128
                        && tables * ball(widest, radius) <= u128::from(MAX_AUTO_PROBES)
                    {
                        shapes.push(Shape::Probed { blocks, radius });
                    }
                }
            }
        }
        let mut costs: Vec<PlanCost> = shapes
            .into_iter()
            .filter_map(|shape| Plan::from_shape(shape, k).ok())
            .map(|plan| plan.cost(expected_n))
            .collect();
        costs.sort_by(|a, b| {
            a.tables
                .cmp(&b.tables)
                .then(a.expected_cost.total_cmp(&b.expected_cost))
                .then(a.shape.cmp(&b.shape))
        });
        let fewest_tables_then_cost = |a: &&PlanCost, b: &&PlanCost| {
            a.tables
                .cmp(&b.tables)
                .then(a.expected_cost.total_cmp(&b.expected_cost))
        };
        let position = |c: &PlanCost| costs.iter().position(|x| x == c);
        let within =
            match budget {
                Budget::Unprobed => costs
                    .iter()
                    .filter(|c| c.expected_candidates <= CANDIDATE_BUDGET)
                    .min_by(fewest_tables_then_cost),
                Budget::Latency(max_cost) => costs
                    .iter()
                    .filter(|c| c.expected_cost <= max_cost)
                    .min_by(fewest_tables_then_cost),
                Budget::Space(max_tables) => costs
                    .iter()
                    .filter(|c| c.tables <= max_tables)
                    .min_by(|a, b| {
                        a.expected_cost
                            .total_cmp(&b.expected_cost)
                            .then(a.tables.cmp(&b.tables))
                    }),
            }
            .and_then(position);
        let chosen = match within {
            Some(i) => i,
            None => {
                // A table is priced like the budget's worth of work (for
                // Space, like one more table of the cheapest plan).
                let per_table = match budget {
                    Budget::Unprobed => CANDIDATE_BUDGET,
                    Budget::Latency(max_cost) => max_cost,
                    Budget::Space(_) => 0.0,
                };
                let score = |c: &PlanCost| match budget {
                    Budget::Unprobed => c.expected_candidates + c.tables as f64 * per_table,
                    Budget::Latency(_) => c.expected_cost + c.tables as f64 * per_table,
                    Budget::Space(_) => c.tables as f64,
                };
                costs
                    .iter()
                    .enumerate()
                    .min_by(|(_, a), (_, b)| {
                        score(a)
                            .total_cmp(&score(b))
                            .then(a.expected_cost.total_cmp(&b.expected_cost))
                    })
                    .map(|(i, _)| i)
                    .ok_or(PlanError::BadBlocks {
                        blocks: 0,
                        k,
                        bits: 64,
                    })?
            }
        };
        Ok(PlanChoice {
            expected_n,
            k,
            budget,
            within_budget: within.is_some(),
            chosen,
            alternatives: costs,
        })
    }

    /// Estimated costs of this plan for `n` fingerprints, searched at its
    /// k: the probes [`probe_weights`](Self::probe_weights) keeps (52 of
    /// the 68 prefix values of the default plan at k = 6 for ten
    /// million), and the candidates they examine.
    pub fn cost(&self, n: u64) -> PlanCost {
        let n_f = n as f64;
        let made: Vec<f64> = (0..self.tables.len())
            .map(|t| self.probes_made(t, self.k) as f64)
            .collect();
        let probes: f64 = made.iter().sum();
        let expected_candidates = self
            .tables
            .iter()
            .zip(&made)
            .map(|(t, &made)| made * n_f / 2f64.powi(t.prefix_bits as i32))
            .sum::<f64>();
        let per_table = estimated_table_bytes_per_key(n);
        PlanCost {
            shape: self.shape,
            tables: self.tables.len(),
            radius: self.radius,
            min_prefix_bits: self.tables.iter().map(|t| t.prefix_bits).min().unwrap_or(0),
            max_prefix_bits: self.tables.iter().map(|t| t.prefix_bits).max().unwrap_or(0),
            probes,
            expected_candidates,
            expected_cost: expected_candidates + probes * PROBE_COST,
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

    /// The radius each table's prefix is probed at (0: the plan permutes only).
    pub fn radius(&self) -> u32 {
        self.radius
    }

    /// The radius a search at distance `k` needs (at most
    /// [`radius`](Self::radius), the one of the plan's own k): a probed
    /// plan whose prefixes take `c` of its `m` blocks finds every pair
    /// within `k` among the prefix values within `r` bits of the query's,
    /// where `r` is the most bits `k` differing bits spread as evenly as
    /// possible put in `c` blocks. A plan of k = 6 probed at radius 2 with
    /// one of three blocks per prefix needs radius 1 at `k` = 3 to 5, and
    /// no probe besides the query's own prefix at `k` <= 2. 0 for a plan
    /// that does not probe.
    #[inline]
    pub fn radius_for(&self, k: u32) -> u32 {
        self.radii.get(k as usize).copied().unwrap_or(self.radius)
    }

    /// The probes of table `t` worth making at distance `k`, by weight
    /// (the number of prefix bits a probe flips): bit `w` set when the
    /// probes of weight `w` may find a match that table `t` reports
    /// ([`reports`](Self::reports)). Every weight up to
    /// [`radius_for(k)`](Self::radius_for), but when each table's prefix
    /// is one block (table `t` block `t`, disjoint): a match reported by
    /// table `t` differs in more than the radius `r` bits of each earlier
    /// table's block, so in `w + t·(r + 1)` bits at least for a probe of
    /// weight `w`, and the weights for which that exceeds `k` are left
    /// out. The default plan at k = 6 for ten million (4 blocks, radius 1)
    /// probes its last table at the query's own prefix only: 52 probes
    /// instead of 68.
    #[inline]
    pub fn probe_weights(&self, t: usize, k: u32) -> u64 {
        let r = self.radius_for(k);
        let every = u64::MAX >> (63 - r.min(63));
        if !self.single_block_prefixes {
            return every;
        }
        // Each earlier table's block takes r + 1 bits of the k at least;
        // a block too narrow for them is always within the radius, and
        // then no later table reports anything.
        let earlier = self.tables.get(..t).unwrap_or_default();
        if earlier.iter().any(|e| e.prefix_bits() <= r) {
            return 0;
        }
        let needed = (t as u64).saturating_mul(u64::from(r) + 1);
        match u64::from(k).checked_sub(needed) {
            Some(left) => every & (u64::MAX >> (63 - left.min(63))),
            None => 0,
        }
    }

    /// The prefix values a search at distance `k` probes in table `t`:
    /// those of the weights [`probe_weights`](Self::probe_weights) keeps.
    fn probes_made(&self, t: usize, k: u32) -> usize {
        let weights = self.probe_weights(t, k);
        self.tables[t]
            .probes
            .iter()
            .filter(|m| weights.checked_shr(m.count_ones()).unwrap_or(0) & 1 == 1)
            .count()
    }

    /// Prefix values looked up per query, over all tables.
    pub fn probes_per_query(&self) -> usize {
        self.tables.iter().map(Table::probe_count).sum()
    }

    /// The rule every search applies to a candidate: whether one whose XOR
    /// with the query is `diff`, met while probing table `t`, is a match
    /// within `k` to report there. A match is reported by the first table
    /// whose prefix it reaches (differs in at most the plan's radius bits),
    /// so each is reported exactly once without a set; a candidate that
    /// merely shares a hash bucket with the query (as in the memtable) is
    /// refused by the same test.
    #[inline]
    pub fn reports(&self, t: usize, diff: u64, k: u32) -> bool {
        let r = self.radius_for(k);
        diff.count_ones() <= k
            && self.tables[t].prefix_within(diff, r)
            && !self.tables[..t].iter().any(|e| e.prefix_within(diff, r))
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
        )?;
        if self.radius > 0 {
            write!(f, ", {} probes per query", self.probes_per_query())?;
        }
        Ok(())
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
    /// Probing radius (0: each table is looked up at the query's prefix only).
    pub radius: u32,
    /// Shortest table prefix, in bits.
    pub min_prefix_bits: u32,
    /// Longest table prefix, in bits.
    pub max_prefix_bits: u32,
    /// Prefix values looked up per query, over all tables.
    pub probes: f64,
    /// Expected fingerprints examined per query: the sum over tables and
    /// probes of `n / 2^prefix`.
    pub expected_candidates: f64,
    /// Expected work per query in candidate checks: candidates plus
    /// [`PROBE_COST`] per probe.
    pub expected_cost: f64,
    /// Estimated table bytes per fingerprint over all tables (compressed).
    pub bytes_per_fingerprint: f64,
    /// Estimated table bytes for all `n` fingerprints.
    pub total_bytes: f64,
}

/// What [`Plan::choose`] may spend: tables (space) or work per query (latency).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Budget {
    /// At most this many tables; among them, the lowest expected cost per
    /// query, then the fewest tables. When no plan is that small, the
    /// plan with the fewest tables.
    Space(usize),
    /// An expected cost per query ([`PlanCost::expected_cost`]: candidates
    /// plus [`PROBE_COST`] per probe) of at most this; among such plans, the
    /// fewest tables, then the lowest cost. When none meets it, the plan
    /// minimising `cost + tables × budget`.
    Latency(f64),
    /// Permuted tables only, never probed: the fewest tables whose expected
    /// candidates per query stay within [`CANDIDATE_BUDGET`] (the only rule
    /// before probed plans), else the plan minimising
    /// `candidates + tables × CANDIDATE_BUDGET`. The budget for
    /// [`batch::find_all`](crate::batch::find_all), which cannot probe.
    Unprobed,
}

impl Default for Budget {
    /// `Latency(DEFAULT_LATENCY_BUDGET)`: see docs/ARCHITECTURE.md, "Plans".
    fn default() -> Budget {
        Budget::Latency(DEFAULT_LATENCY_BUDGET)
    }
}

impl fmt::Display for Budget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Budget::Space(tables) => write!(f, "space: at most {tables} tables"),
            Budget::Latency(cost) => write!(f, "latency: expected cost at most {cost}"),
            Budget::Unprobed => write!(
                f,
                "unprobed: expected candidates at most {CANDIDATE_BUDGET}"
            ),
        }
    }
}

/// The plans [`Plan::choose`] weighed, and its choice.
#[derive(Debug, Clone, PartialEq)]
pub struct PlanChoice {
    /// The corpus size the costs are estimated for.
    pub expected_n: u64,
    /// The distance the plans answer.
    pub k: u32,
    /// The budget the choice was made within.
    pub budget: Budget,
    /// Whether the chosen plan meets the budget.
    pub within_budget: bool,
    /// Index of the chosen plan in `alternatives`.
    pub chosen: usize,
    /// Every plan considered, ordered by number of tables, then expected cost.
    pub alternatives: Vec<PlanCost>,
}

impl PlanChoice {
    /// The chosen plan's costs.
    pub fn chosen(&self) -> &PlanCost {
        &self.alternatives[self.chosen]
    }

    /// Indexes into `alternatives` of the plans worth showing: those no other
    /// plan beats on both tables and expected cost (the space/time
    /// frontier), and the chosen one, in the order of `alternatives`.
    pub fn frontier(&self) -> Vec<usize> {
        let mut out = Vec::new();
        let mut best_cost = f64::INFINITY;
        for (i, c) in self.alternatives.iter().enumerate() {
            // Ordered by tables, then cost: the first of each table count that
            // is cheaper than every plan with fewer tables.
            let first_of_count = i == 0 || self.alternatives[i - 1].tables != c.tables;
            if (first_of_count && c.expected_cost < best_cost) || i == self.chosen {
                out.push(i);
            }
            if first_of_count {
                best_cost = best_cost.min(c.expected_cost);
            }
        }
        out
    }

    /// One sentence saying why the choice was made.
    pub fn reason(&self) -> String {
        let c = self.chosen();
        let (n, k) = (self.expected_n, self.k);
        match (self.budget, self.within_budget) {
            (Budget::Unprobed, true) => format!(
                "{} ({} tables) is the smallest unprobed plan that keeps the expected candidates \
                 per query ({:.3}) within the budget of {CANDIDATE_BUDGET} for n = {n}, k = {k}",
                c.shape, c.tables, c.expected_candidates
            ),
            (Budget::Unprobed, false) => format!(
                "no unprobed plan of at most {MAX_AUTO_TABLES} tables keeps the expected \
                 candidates per query within {CANDIDATE_BUDGET} for n = {n}, k = {k}; {} ({} \
                 tables, {:.0} candidates) has the lowest combined cost",
                c.shape, c.tables, c.expected_candidates
            ),
            (Budget::Latency(max), true) => format!(
                "{} ({} tables) is the smallest plan whose expected cost per query ({:.0}: {:.0} \
                 probes, {:.3} candidates) is within the budget of {max} for n = {n}, k = {k}",
                c.shape, c.tables, c.expected_cost, c.probes, c.expected_candidates
            ),
            (Budget::Latency(max), false) => format!(
                "no plan of at most {MAX_AUTO_TABLES} tables keeps the expected cost per query \
                 within {max} for n = {n}, k = {k}; {} ({} tables, cost {:.0}) has the lowest \
                 cost plus {max} per table",
                c.shape, c.tables, c.expected_cost
            ),
            (Budget::Space(max), true) => format!(
                "{} has the lowest expected cost per query ({:.0}) of the plans of at most {max} \
                 tables for n = {n}, k = {k}",
                c.shape, c.expected_cost
            ),
            (Budget::Space(max), false) => format!(
                "no plan has at most {max} tables for k = {k}; {} has the fewest ({})",
                c.shape, c.tables
            ),
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
    fn unprobed_budget_matches_the_papers_choices() {
        // Tens of millions at k = 3: 10 tables of 26-bit prefixes.
        let c = Plan::alternatives(50_000_000, 3, Budget::Unprobed).unwrap();
        assert!(c.within_budget);
        assert_eq!(c.chosen().shape, Shape::Flat { blocks: 5 });
        // Eight billion (the paper's corpus): 20 tables.
        let c = Plan::alternatives(8_000_000_000, 3, Budget::Unprobed).unwrap();
        assert_eq!(c.chosen().tables, 20);
        // Small corpora need only k + 1 tables.
        let small = Plan::choose(100_000, 3, Budget::Unprobed).unwrap();
        assert_eq!(small.tables().len(), 4);
        assert_eq!(Plan::auto(1000, 0).unwrap().tables().len(), 1);
        // A large k falls back to the combined cost, never an error.
        let c = Plan::alternatives(1_000_000, 12, Budget::Unprobed).unwrap();
        assert!(!c.within_budget);
        assert!(c.chosen().tables <= MAX_AUTO_TABLES);
        assert!(c.reason().contains("no unprobed plan"));
        // Never a probed plan.
        for k in 0..12 {
            let c = Plan::alternatives(10_000_000, k, Budget::Unprobed).unwrap();
            assert!(c.alternatives.iter().all(|p| p.radius == 0), "k = {k}");
        }
    }

    #[test]
    fn default_budget_serves_large_k_with_few_tables() {
        // k = 3 by 4 tables at ten million (was 10), and by 10 where 4 would
        // examine thousands of candidates; k = 8 without the 45 tables an
        // unprobed plan needs.
        assert_eq!(Plan::auto(10_000_000, 3).unwrap().tables().len(), 4);
        assert_eq!(Plan::auto(50_000_000, 3).unwrap().tables().len(), 10);
        let eight = Plan::auto(10_000_000, 8).unwrap();
        assert!(eight.tables().len() <= 5 && eight.radius() > 0, "{eight}");
        // The space budget reaches 2 tables at k = 3.
        let two = Plan::choose(10_000_000, 3, Budget::Space(2)).unwrap();
        assert_eq!(
            two.shape(),
            Shape::Probed {
                blocks: 2,
                radius: 1
            }
        );
        assert_eq!(two.probes_per_query(), 66);
        assert_eq!(
            Plan::choose(10_000_000, 8, Budget::Unprobed)
                .unwrap()
                .tables()
                .len(),
            45
        );
        for k in 0..=10 {
            let c = Plan::alternatives(10_000_000, k, Budget::default()).unwrap();
            assert!(c.chosen().tables <= 16, "k = {k}: {}", c.reason());
            assert!(c.chosen().probes <= MAX_AUTO_PROBES as f64);
        }
    }

    #[test]
    fn space_budget_caps_tables_and_latency_budget_caps_cost() {
        for k in [3, 6, 8] {
            for max in [1, 2, 3, 4, 10, 20] {
                let c = Plan::alternatives(10_000_000, k, Budget::Space(max)).unwrap();
                let chosen = c.chosen();
                if c.within_budget {
                    assert!(chosen.tables <= max);
                    // Nothing as small is cheaper.
                    assert!(
                        c.alternatives
                            .iter()
                            .filter(|p| p.tables <= max)
                            .all(|p| p.expected_cost >= chosen.expected_cost)
                    );
                } else {
                    let fewest = c.alternatives.iter().map(|p| p.tables).min().unwrap();
                    assert_eq!(chosen.tables, fewest);
                }
            }
            for max in [200.0, 2000.0, 20_000.0] {
                let c = Plan::alternatives(10_000_000, k, Budget::Latency(max)).unwrap();
                if c.within_budget {
                    let chosen = c.chosen();
                    assert!(chosen.expected_cost <= max);
                    assert!(
                        c.alternatives
                            .iter()
                            .filter(|p| p.expected_cost <= max)
                            .all(|p| p.tables >= chosen.tables)
                    );
                }
            }
        }
        // The chosen plan is always on the frontier the CLI shows.
        let c = Plan::alternatives(10_000_000, 3, Budget::Space(10)).unwrap();
        assert!(c.frontier().contains(&c.chosen));
        assert!(c.frontier().len() < c.alternatives.len());
    }

    #[test]
    fn worst_prefix_diff_is_the_most_even_spread() {
        // Every way of spreading k differing bits over m blocks: the c least
        // different blocks hold at most worst_prefix_diff(m, c, k) of them,
        // and some spread reaches it.
        fn spreads(m: u32, k: u32) -> Vec<Vec<u32>> {
            if m == 1 {
                return vec![vec![k]];
            }
            (0..=k)
                .flat_map(|first| {
                    spreads(m - 1, k - first).into_iter().map(move |mut rest| {
                        rest.push(first);
                        rest
                    })
                })
                .collect()
        }
        for m in 1..=6 {
            for k in 0..=9 {
                let all = spreads(m, k);
                for c in 1..=m {
                    let worst = all
                        .iter()
                        .map(|s| {
                            let mut s = s.clone();
                            s.sort_unstable();
                            s[..c as usize].iter().sum::<u32>()
                        })
                        .max()
                        .unwrap();
                    assert_eq!(worst_prefix_diff(m, c, k), worst, "m {m} c {c} k {k}");
                }
            }
        }
    }

    #[test]
    fn probed_plans_take_the_longest_exact_prefix() {
        let p = Plan::probed(2, 1, 3).unwrap();
        assert_eq!(p.tables().len(), 2);
        assert_eq!(p.radius(), 1);
        assert!(p.tables().iter().all(|t| t.prefix_bits() == 32));
        assert!(p.tables().iter().all(|t| t.probe_count() == 33));
        // 5 blocks at radius 2 for k = 8: prefixes of 2 blocks (10 tables).
        let p = Plan::probed(5, 2, 8).unwrap();
        assert_eq!(p.tables().len(), 10);
        assert_eq!(p.tables()[0].probe_count(), 1 + 26 + 325);
        // Radius 0 is the permuted plan.
        assert_eq!(Plan::probed(5, 0, 3).unwrap(), Plan::new(5, 3).unwrap());
        assert_eq!(
            Plan::from_shape(
                Shape::Probed {
                    blocks: 2,
                    radius: 1
                },
                3
            )
            .unwrap(),
            Plan::probed(2, 1, 3).unwrap()
        );
        assert!(
            Plan::from_shape(
                Shape::Probed {
                    blocks: 2,
                    radius: 0
                },
                3
            )
            .is_err()
        );
        assert!(matches!(
            Plan::probed(2, 1, 4),
            Err(PlanError::RadiusTooSmall { .. })
        ));
        assert!(matches!(
            Plan::probed(2, 8, 16),
            Err(PlanError::TooManyProbes { .. })
        ));
        assert!(matches!(
            Plan::probed(0, 1, 1),
            Err(PlanError::BadBlocks { .. })
        ));
        assert!(
            Plan::probed(2, 1, 4)
                .unwrap_err()
                .to_string()
                .contains("radius + 1")
        );
    }

    #[test]
    fn probe_ranges_cover_the_prefix_ball_once() {
        let p = Plan::probed(4, 1, 7).unwrap();
        let q = 0x0123_4567_89ab_cdef;
        for t in p.tables() {
            let pq = t.permute(q);
            let ranges: Vec<(u64, u64)> = t.probe_ranges(pq).collect();
            assert_eq!(
                ranges[0],
                t.prefix_range(pq),
                "the query's own prefix first"
            );
            let mut starts: Vec<u64> = ranges.iter().map(|r| r.0).collect();
            starts.sort_unstable();
            starts.dedup();
            assert_eq!(starts.len() as u128, ball(t.prefix_bits(), 1));
            for (lo, hi) in ranges {
                assert_eq!(hi, lo | !t.prefix_mask());
                assert!(((lo ^ pq) & t.prefix_mask()).count_ones() <= 1);
            }
        }
    }

    /// No probe that can find a match its table reports is left out: for
    /// every spread of up to `d` differing bits over a plan's blocks (the
    /// weights of a diff in each prefix are all that matters), the table
    /// that reports it has the diff's weight in its prefix among its
    /// probe weights at `d`; and the default plans at k = 6 leave out
    /// what the argument of `probe_weights` says.
    #[test]
    fn probe_weights_keep_every_probe_that_can_report() {
        fn spreads(widths: &[u32], d: u32) -> Vec<Vec<u32>> {
            let Some((&first, rest)) = widths.split_first() else {
                return vec![Vec::new()];
            };
            (0..=d.min(first))
                .flat_map(|x| {
                    spreads(rest, d - x).into_iter().map(move |mut tail| {
                        tail.insert(0, x);
                        tail
                    })
                })
                .collect()
        }
        let plans = [
            (Plan::probed(4, 1, 6).unwrap(), 4),
            (Plan::probed(3, 2, 6).unwrap(), 3),
            (Plan::probed(3, 2, 8).unwrap(), 3),
            (Plan::probed(2, 1, 3).unwrap(), 2),
            (Plan::probed(4, 1, 7).unwrap(), 4),
            (Plan::probed(5, 2, 8).unwrap(), 5),
            (Plan::new(4, 3).unwrap(), 4),
            (Plan::new(5, 3).unwrap(), 5),
            (Plan::new(8, 6).unwrap(), 8),
            (Plan::probed(6, 1, 8).unwrap(), 6),
        ];
        for (plan, blocks) in &plans {
            let widths = block_widths(64, *blocks);
            for d in 0..=plan.k().min(9) {
                let mut needed = vec![0u64; plan.tables().len()];
                for spread in spreads(&widths, d) {
                    // The top `x` bits of each block differ.
                    let mut diff = 0u64;
                    let mut top = 64u32;
                    for (&w, &x) in widths.iter().zip(&spread) {
                        for i in 0..x {
                            diff |= 1 << (top - 1 - i);
                        }
                        top -= w;
                    }
                    for (t, table) in plan.tables().iter().enumerate() {
                        if plan.reports(t, diff, d) {
                            let w = (diff & table.prefix_source_mask()).count_ones();
                            needed[t] |= 1 << w;
                        }
                    }
                }
                for (t, &need) in needed.iter().enumerate() {
                    let kept = plan.probe_weights(t, d);
                    assert_eq!(need & !kept, 0, "{plan}, d = {d}, table {t}");
                    assert_eq!(kept & !(u64::MAX >> (63 - plan.radius_for(d))), 0);
                    if plan.single_block_prefixes {
                        // Exactly what can report, when prefixes are blocks.
                        assert_eq!(kept, need, "{plan}, d = {d}, table {t}");
                    }
                }
            }
        }
        let probes = |plan: &Plan, d: u32| -> usize {
            (0..plan.tables().len())
                .map(|t| {
                    let weights = plan.probe_weights(t, d);
                    plan.tables()[t].probe_ranges_of_weights(0, weights).count()
                })
                .sum()
        };
        let ten_million = Plan::probed(4, 1, 6).unwrap();
        assert_eq!(ten_million.probes_per_query(), 68);
        assert_eq!(probes(&ten_million, 6), 52);
        assert_eq!(probes(&ten_million, 5), 51);
        assert_eq!(probes(&ten_million, 4), 35);
        assert_eq!(probes(&ten_million, 3), 4);
        let fifty_million = Plan::probed(3, 2, 6).unwrap();
        // Blocks of 22, 21 and 21 bits: 254 + 232 probes, then 1 of 232.
        assert_eq!(probes(&fifty_million, 6), 254 + 232 + 1);
        // Unprobed plans of k + 1 blocks skip the tables d cannot reach.
        assert_eq!(probes(&Plan::new(4, 3).unwrap(), 2), 3);
        assert_eq!(probes(&Plan::new(5, 3).unwrap(), 2), 10);
    }

    /// A plan's cost counts the probes its search makes, those
    /// `probe_weights` keeps, and their candidates: 52 probes for the
    /// default plan at k = 6 for ten million (not the 68 prefix values of
    /// its radius), 487 for fifty million's; a plan that leaves out none
    /// counts them all. The choices at k = 3 and 6 stay what they were.
    #[test]
    fn costs_count_the_probes_the_search_makes() {
        let made = |plan: &Plan| -> usize {
            (0..plan.tables().len())
                .map(|t| {
                    let weights = plan.probe_weights(t, plan.k());
                    plan.tables()[t].probe_ranges_of_weights(0, weights).count()
                })
                .sum()
        };
        for plan in [
            Plan::probed(4, 1, 6).unwrap(),
            Plan::probed(3, 2, 6).unwrap(),
            Plan::probed(3, 2, 8).unwrap(),
            Plan::probed(2, 1, 3).unwrap(),
            Plan::probed(5, 2, 8).unwrap(),
            Plan::new(4, 3).unwrap(),
            Plan::new(8, 6).unwrap(),
            Plan::nested(4, 4, 3).unwrap(),
        ] {
            for n in [1_000_000u64, 10_000_000] {
                let cost = plan.cost(n);
                assert_eq!(cost.probes, made(&plan) as f64, "{plan}");
                let candidates: f64 = (0..plan.tables().len())
                    .map(|t| {
                        let table = &plan.tables()[t];
                        let weights = plan.probe_weights(t, plan.k());
                        table.probe_ranges_of_weights(0, weights).count() as f64 * n as f64
                            / 2f64.powi(table.prefix_bits() as i32)
                    })
                    .sum();
                assert!(
                    (cost.expected_candidates - candidates).abs() < 1e-6,
                    "{plan}"
                );
                assert_eq!(cost.expected_cost, candidates + cost.probes * PROBE_COST);
            }
        }
        let ten_million = Plan::probed(4, 1, 6).unwrap().cost(10_000_000);
        assert_eq!(ten_million.probes, 52.0);
        assert_eq!(
            Plan::probed(3, 2, 6).unwrap().cost(50_000_000).probes,
            487.0
        );
        assert_eq!(Plan::new(8, 6).unwrap().cost(10_000_000).probes, 28.0);
        for n in [1_000_000, 10_000_000] {
            assert_eq!(
                Plan::auto(n, 6).unwrap().shape(),
                Shape::Probed {
                    blocks: 4,
                    radius: 1
                }
            );
        }
        assert_eq!(
            Plan::auto(50_000_000, 6).unwrap().shape(),
            Shape::Probed {
                blocks: 3,
                radius: 2
            }
        );
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
            (1u32..10)
                .prop_flat_map(|k| (Just(k), 1u32..=3, 1u32..=k.min(6)))
                .prop_filter_map("an exact probed plan", |(k, r, m)| Plan::probed(m, r, k)
                    .ok()),
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
            prop_assert!(plan.tables().iter().any(|t| t.prefix_within(a ^ b, plan.radius())));
        }

        /// The worst case for a probed plan: the differing bits packed into
        /// as few blocks as possible, or spread one per block.
        #[test]
        fn exactly_one_table_reports_every_close_pair(
            plan in arb_plan(), a in any::<u64>(), spread in any::<bool>(), start in 0u32..64
        ) {
            let k = plan.k();
            let mut b = a;
            for i in 0..k {
                let bit = if spread { (start + i * 64 / k.max(1)) % 64 } else { (start + i) % 64 };
                b ^= 1 << bit;
            }
            let reporting = (0..plan.tables().len()).filter(|&t| plan.reports(t, a ^ b, k)).count();
            prop_assert_eq!(reporting, 1);
        }
    }
}
