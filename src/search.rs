//! Exact search over sorted permuted tables held in memory.
//!
//! [`PermutedTables`] is the in-memory form of a [`Plan`]: one sorted vector of
//! permuted keys per table. A query looks at the run of keys sharing its prefix
//! in every table and reports each candidate within distance `k` from the first
//! table whose prefix it shares ([`Plan::first_table_sharing`]), so results need
//! no deduplication.

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
        let tables = self
            .plan
            .tables()
            .iter()
            .zip(&self.tables)
            .zip(&self.directories);
        for (t, ((table, keys), directory)) in tables.enumerate() {
            let q = table.permute(fp);
            let (lo, hi) = table.prefix_range(q);
            // Keys in [lo, hi] lie between the directory entries of lo and hi.
            let from = directory[top_bits(lo, self.directory_bits)] as usize;
            let to = directory[top_bits(hi, self.directory_bits) + 1] as usize;
            let run = &keys[from..to];
            let start = from + run.partition_point(|&key| key < lo);
            for &key in keys[start..to].iter().take_while(|&&key| key <= hi) {
                let distance = (key ^ q).count_ones();
                if distance <= k {
                    let fingerprint = table.unpermute(key);
                    if self.plan.first_table_sharing(t, fingerprint ^ fp) {
                        hits.push(Hit {
                            distance,
                            fingerprint,
                        });
                    }
                }
            }
        }
        hits.sort_unstable();
        Ok(hits)
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
