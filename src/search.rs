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
}

impl PermutedTables {
    /// Builds the tables of `plan` over the distinct values of `fingerprints`.
    pub fn new(fingerprints: &[u64], plan: &Plan) -> PermutedTables {
        let tables = plan
            .tables()
            .iter()
            .map(|t| {
                let mut keys: Vec<u64> = fingerprints.iter().map(|&fp| t.permute(fp)).collect();
                keys.sort_unstable();
                keys.dedup();
                keys
            })
            .collect();
        PermutedTables {
            plan: plan.clone(),
            tables,
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
        for (t, (table, keys)) in self.plan.tables().iter().zip(&self.tables).enumerate() {
            let q = table.permute(fp);
            let (lo, hi) = table.prefix_range(q);
            let start = keys.partition_point(|&key| key < lo);
            for &key in keys[start..].iter().take_while(|&&key| key <= hi) {
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
