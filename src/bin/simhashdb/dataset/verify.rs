//! The exact re-check of candidate pairs in bounded memory.
//!
//! Only fingerprints and record positions are in memory after the first
//! read; a pair's texts are read again to check it. Each check pass streams
//! every input once, in order, and keeps the shingle set of a record only
//! while it still has an unchecked pair with a later record. A record is
//! admitted when the shingle sets already held plus its own fit in the
//! budget (or when none is held), so the pass holds at most `budget` bytes
//! of shingle sets plus those of the chunk of records being worked on
//! (`Inputs::scan_texts`: the chunk's sets are made in parallel while the
//! next chunk is read); pairs whose earlier record was not admitted wait
//! for the next pass. Every pass checks all pairs of the first record it
//! admits, so the passes end.

use std::collections::HashMap;

use rayon::prelude::*;
use simhashdb::Simhasher;
use simhashdb::recheck::ShingleSet;

use super::Inputs;
use crate::error::CliError;

/// A pair whose similarity is below every threshold in use can skip the
/// exact merge when the sizes alone bound its Jaccard below this.
const NO_BOUND: f64 = 0.0;

/// What the check reads and how much it may hold.
pub struct Checker<'a> {
    pub inputs: &'a Inputs,
    pub hasher: &'a Simhasher,
    /// Shingle width in tokens.
    pub width: usize,
    /// Bytes of shingle sets a pass may hold.
    pub budget: usize,
    /// Number of records.
    pub n: usize,
}

/// The Jaccard similarity of the `width`-token shingle sets of each pair's
/// two texts (pairs of global record numbers below `n`, each as (smaller,
/// larger)), and
/// how many passes over the inputs it took. A pair whose Jaccard cannot
/// reach `floor` (its sets' sizes alone bound it below) gets the size bound
/// instead of the exact value, which is also below `floor`.
pub fn jaccards(
    checker: &Checker<'_>,
    pairs: &[(u32, u32)],
    floor: f64,
    what: &'static str,
) -> Result<(Vec<f64>, usize), CliError> {
    let Checker {
        inputs,
        hasher,
        width,
        budget,
        n,
    } = *checker;
    debug_assert!(
        pairs.iter().all(|&(a, b)| a <= b),
        "pairs come as (smaller, larger)"
    );
    let mut result = vec![f64::NAN; pairs.len()];
    for (p, &(i, j)) in pairs.iter().enumerate() {
        if i == j {
            result[p] = 1.0;
        }
    }
    let mut passes = 0;
    loop {
        let unresolved: Vec<u32> = (0..pairs.len() as u32)
            .filter(|&p| result[p as usize].is_nan())
            .collect();
        if unresolved.is_empty() {
            break;
        }
        passes += 1;
        // The unchecked pairs by their later record (compressed rows), and
        // how many each earlier record has.
        let mut later_start = vec![0u32; n + 1];
        let mut earlier_count = vec![0u32; n];
        for &p in &unresolved {
            let (i, j) = pairs[p as usize];
            later_start[j as usize + 1] += 1;
            earlier_count[i as usize] += 1;
        }
        for r in 0..n {
            later_start[r + 1] += later_start[r];
        }
        let mut fill = later_start.clone();
        let mut by_later = vec![0u32; unresolved.len()];
        for &p in &unresolved {
            let j = pairs[p as usize].1 as usize;
            by_later[fill[j] as usize] = p;
            fill[j] += 1;
        }
        drop(fill);

        let mut resident: HashMap<u32, (ShingleSet, u32)> = HashMap::new();
        let mut held = 0usize;
        let want = |g: u64| {
            let g = g as usize;
            earlier_count[g] > 0 || later_start[g + 1] > later_start[g]
        };
        inputs.scan_texts(what, &want, &mut |chunk| {
            // The chunk's shingle sets in parallel; then, in input order,
            // each record's pairs with the resident earlier records, and
            // its admission.
            let sets: Vec<ShingleSet> = chunk
                .par_iter()
                .map(|(_, text)| ShingleSet::from_text(hasher, text, width))
                .collect();
            for ((g, _), set) in chunk.iter().zip(sets) {
                let r = *g as usize;
                let list = &by_later[later_start[r] as usize..later_start[r + 1] as usize];
                let check = |&p: &u32| {
                    let i = pairs[p as usize].0;
                    let (earlier, _) = resident.get(&i)?;
                    Some((p, similarity(&set, earlier, floor)))
                };
                let checked: Vec<(u32, f64)> = if list.len() > 64 {
                    list.par_iter().filter_map(check).collect()
                } else {
                    list.iter().filter_map(check).collect()
                };
                for (p, j) in checked {
                    result[p as usize] = j;
                    let i = pairs[p as usize].0;
                    if let Some((earlier, remaining)) = resident.get_mut(&i) {
                        *remaining -= 1;
                        if *remaining == 0 {
                            held -= bytes(earlier);
                            resident.remove(&i);
                        }
                    }
                }
                let n_later = earlier_count[r];
                if n_later > 0 {
                    let size = bytes(&set);
                    if resident.is_empty() || held + size <= budget {
                        held += size;
                        resident.insert(r as u32, (set, n_later));
                    }
                }
            }
            Ok(())
        })?;
    }
    Ok((result, passes))
}

/// The Jaccard similarity of `a` and `b`, or, when their sizes alone bound
/// it below `floor`, that bound.
fn similarity(a: &ShingleSet, b: &ShingleSet, floor: f64) -> f64 {
    let (small, large) = (a.len().min(b.len()), a.len().max(b.len()));
    if floor > NO_BOUND && large > 0 {
        let bound = small as f64 / large as f64;
        if bound < floor {
            return bound;
        }
    }
    a.jaccard(b)
}

fn bytes(set: &ShingleSet) -> usize {
    set.len() * 8 + 64
}
