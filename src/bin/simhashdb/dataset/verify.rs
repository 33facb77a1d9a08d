//! The exact re-check of candidate pairs in bounded memory.
//!
//! Only fingerprints and record positions are in memory after the first
//! read; a pair's texts are read again to check it. Each check pass streams
//! every input once, in order, and keeps the shingle set of a record only
//! while it still has an unchecked pair with a later record. A record is
//! admitted when the shingle sets already held plus its own fit in the
//! budget (or when none is held), so the pass holds at most `budget` bytes
//! of shingle sets plus one record's; pairs whose earlier record was not
//! admitted wait for the next pass. Every pass checks all pairs of the
//! first record it admits, so the passes end.

use std::collections::HashMap;

use simhashdb::Simhasher;
use simhashdb::verify::ShingleSet;

use super::Inputs;
use crate::error::CliError;

/// The Jaccard similarity of the `width`-token shingle sets of each pair's
/// two texts (pairs of global record numbers, in any order), and how many
/// passes over the inputs it took.
pub fn jaccards(
    inputs: &Inputs,
    hasher: &Simhasher,
    width: usize,
    budget: usize,
    pairs: &[(u32, u32)],
    what: &'static str,
) -> Result<(Vec<f64>, usize), CliError> {
    let pairs: Vec<(u32, u32)> = pairs.iter().map(|&(a, b)| (a.min(b), a.max(b))).collect();
    let mut result = vec![f64::NAN; pairs.len()];
    let mut unresolved: Vec<usize> = (0..pairs.len()).collect();
    let mut passes = 0;
    while !unresolved.is_empty() {
        passes += 1;
        let mut by_later: HashMap<u32, Vec<usize>> = HashMap::new();
        let mut later_count: HashMap<u32, u32> = HashMap::new();
        for &p in &unresolved {
            let (i, j) = pairs[p];
            if i == j {
                result[p] = 1.0;
                continue;
            }
            by_later.entry(j).or_default().push(p);
            *later_count.entry(i).or_default() += 1;
        }
        let mut resident: HashMap<u32, (ShingleSet, u32)> = HashMap::new();
        let mut held = 0usize;
        inputs.scan_all(
            what,
            &mut |g| by_later.contains_key(&(g as u32)) || later_count.contains_key(&(g as u32)),
            &mut |g, rec| {
                let r = g as u32;
                let set = ShingleSet::from_text(hasher, &rec.text, width);
                if let Some(list) = by_later.get(&r) {
                    for &p in list {
                        let i = pairs[p].0;
                        if let Some((earlier, remaining)) = resident.get_mut(&i) {
                            result[p] = set.jaccard(earlier);
                            *remaining -= 1;
                            if *remaining == 0 {
                                held -= bytes(earlier);
                                resident.remove(&i);
                            }
                        }
                    }
                }
                if let Some(&n) = later_count.get(&r) {
                    let size = bytes(&set);
                    if resident.is_empty() || held + size <= budget {
                        held += size;
                        resident.insert(r, (set, n));
                    }
                }
                Ok(())
            },
        )?;
        unresolved.retain(|&p| result[p].is_nan());
    }
    Ok((result, passes))
}

fn bytes(set: &ShingleSet) -> usize {
    set.len() * 8 + 64
}
