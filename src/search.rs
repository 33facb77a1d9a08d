//! Exact search over sorted permuted tables held in memory.
//!
//! [`probe`] is the one search loop over sorted permuted tables, whatever holds
//! them ([`SortedTables`]): the in-memory [`PermutedTables`] here and the
//! engine's segments. In every table it looks at the runs of keys whose prefix
//! is within the radius the query's distance needs of the query's
//! ([`Plan::radius_for`], at most the plan's radius;
//! [`Table::probe_ranges_within`](crate::plan::Table::probe_ranges_within); only
//! the query's own prefix when the plan does not probe), leaving out those
//! that cannot hold a match the table reports ([`Plan::probe_weights`]), and
//! reports each candidate that [`Plan::reports`]: within distance `k`, from
//! the first table whose prefix reaches it, so results need no
//! deduplication. A table's runs are searched in key order, adjacent ones
//! as one, with one cursor ([`SortedTables::keys_in_each`]).

use std::fmt;

use crate::plan::Plan;

/// A fingerprint found by a query, with its distance from the query.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Hit {
    /// Hamming distance from the query (the first field, so hits sort by distance).
    pub distance: u32,
    /// The fingerprint found.
    pub fingerprint: u64,
}

/// A query asked for a distance the plan cannot answer exactly.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DistanceError {
    /// The distance asked for.
    pub requested: u32,
    /// The largest distance the plan answers exactly.
    pub plan_k: u32,
}

impl fmt::Display for DistanceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "distance {} exceeds the plan's k = {}: the answer could be incomplete, \
             so it is refused (build the tables with a plan for k >= {})",
            self.requested, self.plan_k, self.requested
        )
    }
}

impl std::error::Error for DistanceError {}

/// Checks that `k` is within what `plan` answers exactly.
pub fn check_distance(plan: &Plan, k: u32) -> Result<(), DistanceError> {
    if k > plan.k() {
        return Err(DistanceError {
            requested: k,
            plan_k: plan.k(),
        });
    }
    Ok(())
}

/// Sorted permuted keys, one table per table of a [`Plan`], that [`probe`] searches.
pub trait SortedTables {
    /// What reading a table can fail with.
    type Error;
    /// One opened table.
    type Table<'a>
    where
        Self: 'a;

    /// Opens table `t` (plan order) for probing.
    fn table(&self, t: usize) -> Result<Self::Table<'_>, Self::Error>;

    /// Calls `visit` with every key of `table` in `lo..=hi`, ascending.
    fn keys_in(
        table: &Self::Table<'_>,
        lo: u64,
        hi: u64,
        visit: impl FnMut(u64),
    ) -> Result<(), Self::Error>;

    /// Calls `visit` with every key of `table` in each of `ranges`, in
    /// order: the ranges are sorted and disjoint (each `lo` above the
    /// previous range's `hi`), the probes of one query into one table.
    /// The default searches each range on its own
    /// ([`keys_in`](Self::keys_in)); a table that can go on from where one
    /// range ended to the next one nearby shares one cursor between them.
    fn keys_in_each(
        table: &Self::Table<'_>,
        ranges: impl Iterator<Item = (u64, u64)>,
        mut visit: impl FnMut(u64),
    ) -> Result<(), Self::Error> {
        for (lo, hi) in ranges {
            Self::keys_in(table, lo, hi, &mut visit)?;
        }
        Ok(())
    }

    /// A hint before [`keys_in`](Self::keys_in) from `lo`: load what its
    /// search reads first (a block index entry, say). [`probe`] calls it for
    /// a stage of ranges, then [`warm_keys`](Self::warm_keys) for the same
    /// ranges, then `keys_in`, so that tables in memory that is not in the
    /// processor's caches wait for it once per stage rather than once per
    /// range. Does nothing unless implemented.
    fn warm_index(_table: &Self::Table<'_>, _lo: u64) {}

    /// The second hint, between [`warm_index`](Self::warm_index) and
    /// [`warm_keys`](Self::warm_keys): load what the search reads next
    /// (the index entries its first read points it to). Does nothing unless
    /// implemented.
    fn warm_near(_table: &Self::Table<'_>, _lo: u64) {}

    /// The last hint (see [`warm_index`](Self::warm_index)): load the
    /// keys a search from `lo` starts with. Does nothing unless implemented.
    fn warm_keys(_table: &Self::Table<'_>, _lo: u64) {}

    /// [`warm_keys`](Self::warm_keys) for the whole range `lo..=hi`: load
    /// the keys the search reads, not only the first. By default the
    /// `warm_keys` of `lo`.
    fn warm_run(table: &Self::Table<'_>, lo: u64, _hi: u64) {
        Self::warm_keys(table, lo);
    }
}

/// Ranges [`probe`] warms together (see [`SortedTables::warm_index`]): enough
/// for every table of a plan that does not probe at k = 3 (10 tables), few
/// enough that what one stage loads stays in the processor's caches.
const STAGE: usize = 16;

/// Calls `found` with every fingerprint of `tables` (laid out by `plan`)
/// within distance `k` of `fp`, each once, in no particular order.
///
/// The ranges to search (each table's, or each table's probes) go in stages
/// of up to 16: for every range of a stage, its index is warmed, then the
/// index entries its first read points to, then its first keys, then it is
/// searched.
///
/// The caller has checked `k` against the plan ([`check_distance`]).
pub fn probe<S: SortedTables>(
    plan: &Plan,
    tables: &S,
    fp: u64,
    k: u32,
    mut found: impl FnMut(Hit),
) -> Result<(), S::Error> {
    debug_assert!(k <= plan.k());
    let layouts = plan.tables();
    let opened = (0..layouts.len())
        .map(|t| tables.table(t))
        .collect::<Result<Vec<_>, _>>()?;
    // (table, permuted query, lo, hi), in plan order, each table's sorted.
    let mut all: Vec<Job> = Vec::new();
    for t in 0..layouts.len() {
        push_ranges(&mut all, plan, t, fp, k);
    }
    let mut ranges = all.into_iter();
    let mut stage: [Job; STAGE] = [(0, 0, 0, 0); STAGE];
    loop {
        // `zip` asks `stage` first, so no range is taken and lost.
        let n = stage
            .iter_mut()
            .zip(&mut ranges)
            .map(|(s, r)| *s = r)
            .count();
        let Some(jobs) = stage.get(..n).filter(|jobs| !jobs.is_empty()) else {
            return Ok(());
        };
        warm::<S>(&opened, jobs, S::warm_index);
        warm::<S>(&opened, jobs, S::warm_near);
        warm_runs::<S>(&opened, jobs);
        search::<S>(plan, &opened, fp, jobs, k, &mut found)?;
    }
}

/// A range to search: (table, permuted query, lo, hi).
type Job = (usize, u64, u64, u64);

/// Appends to `out` the ranges a search of `fp` at distance `k` probes in
/// table `t` of `plan` ([`Plan::probe_weights`]): sorted, with adjacent ones merged into one (the
/// prefixes that differ from another only in the lowest prefix bit), so
/// that [`SortedTables::keys_in_each`] can walk the table forward once.
fn push_ranges(out: &mut Vec<Job>, plan: &Plan, t: usize, fp: u64, k: u32) {
    let Some(table) = plan.tables().get(t) else {
        return;
    };
    let q = table.permute(fp);
    let start = out.len();
    out.extend(
        table
            .probe_ranges_of_weights(q, plan.probe_weights(t, k))
            .map(|(lo, hi)| (t, q, lo, hi)),
    );
    let Some(added) = out.get_mut(start..) else {
        return;
    };
    added.sort_unstable_by_key(|job| job.2);
    let mut kept = 0;
    for i in 1..added.len() {
        let (prev, next) = (added[kept], added[i]);
        if prev.3 != u64::MAX && prev.3 + 1 == next.2 {
            added[kept].3 = next.3;
        } else {
            kept += 1;
            added[kept] = next;
        }
    }
    let merged = (kept + 1).min(added.len());
    out.truncate(start + merged);
}

/// Gives `hint` each of `jobs`' tables and the start of its range.
#[inline]
fn warm<S: SortedTables>(opened: &[S::Table<'_>], jobs: &[Job], hint: impl Fn(&S::Table<'_>, u64)) {
    for &(t, _, lo, _) in jobs {
        if let Some(keys) = opened.get(t) {
            hint(keys, lo);
        }
    }
}

/// Gives [`SortedTables::warm_run`] each of `jobs`' ranges.
#[inline]
fn warm_runs<S: SortedTables>(opened: &[S::Table<'_>], jobs: &[Job]) {
    for &(t, _, lo, hi) in jobs {
        if let Some(keys) = opened.get(t) {
            S::warm_run(keys, lo, hi);
        }
    }
}

/// Searches `jobs`, the ranges of query `fp`: calls `found` with each key
/// within `k` that the plan reports from its table.
#[inline]
fn search<S: SortedTables>(
    plan: &Plan,
    opened: &[S::Table<'_>],
    fp: u64,
    jobs: &[Job],
    k: u32,
    found: &mut impl FnMut(Hit),
) -> Result<(), S::Error> {
    let layouts = plan.tables();
    // The jobs of one table are consecutive and sorted: one pass each.
    for same in jobs.chunk_by(|a, b| a.0 == b.0) {
        let Some(&(t, q, _, _)) = same.first() else {
            continue;
        };
        let (Some(keys), Some(table)) = (opened.get(t), layouts.get(t)) else {
            continue;
        };
        let ranges = same.iter().map(|&(_, _, lo, hi)| (lo, hi));
        S::keys_in_each(keys, ranges, |key| {
            let distance = (key ^ q).count_ones();
            if distance <= k {
                let fingerprint = table.unpermute(key);
                if plan.reports(t, fingerprint ^ fp, k) {
                    found(Hit {
                        distance,
                        fingerprint,
                    });
                }
            }
        })?;
    }
    Ok(())
}

/// Fingerprints whose memory [`probe_many`] warms ahead of the one it
/// searches: the first hint for the fingerprint `PIPELINE` places ahead,
/// the second for the next, and so on, so that each hint's memory has
/// arrived when the step after reads it.
const PIPELINE: usize = 3;

/// [`probe`] for each of `fps`: calls `found(i, hit)` with every fingerprint
/// of `tables` within distance `k` of `fps[i]`, each once per query, queries
/// in order and a query's hits in no particular order.
///
/// The same searches as `probe` runs for each fingerprint alone, overlapped:
/// while the ranges of one fingerprint are searched, the memory of the next
/// three is warmed, each a hint further along ([`SortedTables::warm_index`],
/// then [`warm_near`](SortedTables::warm_near), then
/// [`warm_keys`](SortedTables::warm_keys)). `probe` waits for each hint's
/// memory before the next hint of the same stage; here the waits of one
/// fingerprint pass while the others are searched. The tables are opened
/// once for the whole batch.
///
/// The caller has checked `k` against the plan ([`check_distance`]).
pub fn probe_many<S: SortedTables>(
    plan: &Plan,
    tables: &S,
    fps: &[u64],
    k: u32,
    mut found: impl FnMut(usize, Hit),
) -> Result<(), S::Error> {
    debug_assert!(k <= plan.k());
    let layouts = plan.tables();
    let opened = (0..layouts.len())
        .map(|t| tables.table(t))
        .collect::<Result<Vec<_>, _>>()?;
    // The ranges of the fingerprints in the pipeline, by position modulo
    // its length: (table, permuted query, lo, hi).
    let mut ring: [Vec<Job>; PIPELINE + 1] = Default::default();
    // The fingerprint `behind` places behind `step`, if there is one, and
    // its ranges.
    let behind = |step: usize, behind: usize| {
        step.checked_sub(behind)
            .filter(|&i| i < fps.len())
            .map(|i| (i, i % (PIPELINE + 1)))
    };
    for step in 0..fps.len() + PIPELINE {
        if let Some(&fp) = fps.get(step) {
            let ranges = &mut ring[step % (PIPELINE + 1)];
            ranges.clear();
            for t in 0..layouts.len() {
                push_ranges(ranges, plan, t, fp, k);
            }
            warm::<S>(&opened, ranges, S::warm_index);
        }
        if let Some((_, slot)) = behind(step, 1) {
            warm::<S>(&opened, &ring[slot], S::warm_near);
        }
        if let Some((_, slot)) = behind(step, 2) {
            warm_runs::<S>(&opened, &ring[slot]);
        }
        if let Some((i, slot)) = behind(step, PIPELINE) {
            search::<S>(plan, &opened, fps[i], &ring[slot], k, &mut |hit| {
                found(i, hit)
            })?;
        }
    }
    Ok(())
}

/// A set of distinct fingerprints in sorted permuted tables.
#[derive(Debug, Clone)]
pub struct PermutedTables {
    plan: Plan,
    tables: Vec<Vec<u64>>,
    /// Per table, where each value of the top `directory_bits` bits of the
    /// permuted keys starts: a probe reads two entries instead of binary
    /// searching the whole table.
    directories: Vec<Vec<u32>>,
    directory_bits: u32,
}

impl PermutedTables {
    /// Builds the tables of `plan` over the distinct values of `fingerprints`.
    ///
    /// # Panics
    ///
    /// If `fingerprints` holds more than `u32::MAX` values.
    pub fn new(fingerprints: &[u64], plan: &Plan) -> PermutedTables {
        assert!(
            u32::try_from(fingerprints.len()).is_ok(),
            "at most u32::MAX fingerprints"
        );
        let tables: Vec<Vec<u64>> = plan
            .tables()
            .iter()
            .map(|t| {
                let mut keys: Vec<u64> = fingerprints.iter().map(|&fp| t.permute(fp)).collect();
                keys.sort_unstable();
                keys.dedup();
                keys
            })
            .collect();
        // About one directory entry per key, at most 2^20 (4 MiB) per table.
        let directory_bits = (usize::BITS - fingerprints.len().leading_zeros()).min(20);
        let directories = tables
            .iter()
            .map(|keys| {
                let mut starts = vec![0u32; (1 << directory_bits) + 1];
                for &key in keys {
                    starts[top_bits(key, directory_bits) + 1] += 1;
                }
                for d in 0..1 << directory_bits {
                    starts[d + 1] += starts[d];
                }
                starts
            })
            .collect();
        PermutedTables {
            plan: plan.clone(),
            tables,
            directories,
            directory_bits,
        }
    }

    /// The plan the tables follow.
    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// Number of distinct fingerprints held.
    pub fn len(&self) -> usize {
        self.tables.first().map_or(0, Vec::len)
    }

    /// Whether no fingerprint is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every held fingerprint within distance `k` of `fp`, each once, sorted by
    /// (distance, fingerprint). `k` above the plan's `k` is refused.
    pub fn query(&self, fp: u64, k: u32) -> Result<Vec<Hit>, DistanceError> {
        check_distance(&self.plan, k)?;
        let mut hits = Vec::new();
        match probe(&self.plan, self, fp, k, |hit| hits.push(hit)) {
            Ok(()) => {}
            Err(never) => match never {},
        }
        hits.sort_unstable();
        Ok(hits)
    }
}

impl SortedTables for PermutedTables {
    type Error = std::convert::Infallible;
    /// The keys, the directory and its width.
    type Table<'a> = (&'a [u64], &'a [u32], u32);

    fn table(&self, t: usize) -> Result<Self::Table<'_>, Self::Error> {
        Ok((&self.tables[t], &self.directories[t], self.directory_bits))
    }

    #[inline]
    fn keys_in(
        &(keys, directory, bits): &Self::Table<'_>,
        lo: u64,
        hi: u64,
        mut visit: impl FnMut(u64),
    ) -> Result<(), Self::Error> {
        // Keys in [lo, hi] lie between the directory entries of lo and hi.
        let from = directory[top_bits(lo, bits)] as usize;
        let to = directory[top_bits(hi, bits) + 1] as usize;
        let run = &keys[from..to];
        let start = from + run.partition_point(|&key| key < lo);
        for &key in keys[start..to].iter().take_while(|&&key| key <= hi) {
            visit(key);
        }
        Ok(())
    }
}

/// The top `bits` bits of `key` (0 when `bits` is 0).
#[inline]
fn top_bits(key: u64, bits: u32) -> usize {
    key.checked_shr(64 - bits).unwrap_or(0) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_distances_above_the_plan() {
        let plan = Plan::new(4, 3).unwrap();
        let tables = PermutedTables::new(&[1, 2, 3], &plan);
        let err = tables.query(1, 4).unwrap_err();
        assert_eq!(err.plan_k, 3);
        assert!(err.to_string().contains("exceeds"));
    }

    /// `probe_many` answers each fingerprint as `probe` does, whatever the
    /// batch's length against the pipeline's depth, for a plan with one
    /// range per table and for one that probes several.
    #[test]
    fn probing_many_answers_as_probing_each() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let stored: Vec<u64> = (0..3000).map(|_| next()).collect();
        for plan in [Plan::new(5, 3).unwrap(), Plan::probed(4, 1, 4).unwrap()] {
            let tables = PermutedTables::new(&stored, &plan);
            // Stored fingerprints, near ones (a few bits flipped) and far
            // ones, with a repeat.
            let mut queries: Vec<u64> = Vec::new();
            for i in 0..40 {
                let s = stored[i * 7];
                queries.extend([s, s ^ (1 << (i % 64)) ^ (1 << ((i * 5) % 64)), next()]);
            }
            queries.push(queries[0]);
            for len in [0, 1, 2, 3, 4, queries.len()] {
                let batch = &queries[..len];
                for k in 0..=plan.k() {
                    let mut together = vec![Vec::new(); batch.len()];
                    match probe_many(&plan, &tables, batch, k, |i, hit| together[i].push(hit)) {
                        Ok(()) => {}
                        Err(never) => match never {},
                    }
                    for (i, &q) in batch.iter().enumerate() {
                        together[i].sort_unstable();
                        let mut want: Vec<Hit> = stored
                            .iter()
                            .filter(|&&s| (s ^ q).count_ones() <= k)
                            .map(|&s| Hit {
                                distance: (s ^ q).count_ones(),
                                fingerprint: s,
                            })
                            .collect();
                        want.sort_unstable();
                        want.dedup();
                        assert_eq!(together[i], want, "query {i} of {len}, k {k}");
                        assert_eq!(together[i], tables.query(q, k).unwrap());
                    }
                }
            }
        }
    }

    #[test]
    fn finds_itself_and_neighbours_once() {
        let plan = Plan::new(6, 3).unwrap();
        let tables = PermutedTables::new(&[0, 0, 1, 0b111, 0b1111], &plan);
        assert_eq!(tables.len(), 4);
        let hits = tables.query(0, 3).unwrap();
        let got: Vec<(u32, u64)> = hits.iter().map(|h| (h.distance, h.fingerprint)).collect();
        assert_eq!(got, vec![(0, 0), (1, 1), (3, 0b111)]);
    }
}
