//! The ground truth: pairs by exact Jaccard similarity of word shingles.

use std::collections::HashMap;

use simhashdb::Simhasher;
use simhashdb::fingerprint::Tokenizer;
use simhashdb::recheck::ShingleSet;

use crate::configs::builder;

pub(crate) fn words_hasher() -> Simhasher {
    builder(Tokenizer::Words, 1).build().expect("valid")
}

/// All pairs `(i, j)`, `i < j`, with Jaccard >= `tmin`, exactly: prefix
/// filtering over shingles ordered rarest first, then an exact merge.
pub(crate) fn similar_pairs(sets: &[ShingleSet], tmin: f64) -> HashMap<(u32, u32), f64> {
    let mut df: HashMap<u64, u32> = HashMap::new();
    for s in sets {
        for &h in s.hashes() {
            *df.entry(h).or_default() += 1;
        }
    }
    let mut index: HashMap<u64, Vec<u32>> = HashMap::new();
    let mut out = HashMap::new();
    let mut seen: Vec<u32> = vec![u32::MAX; sets.len()];
    for (i, s) in sets.iter().enumerate() {
        if s.is_empty() {
            continue;
        }
        let mut order: Vec<u64> = s.hashes().to_vec();
        order.sort_by_key(|h| (df[h], *h));
        let n = order.len();
        let prefix = n - (tmin * n as f64).ceil() as usize + 1;
        for &h in &order[..prefix.min(n)] {
            let list = index.entry(h).or_default();
            for &j in list.iter() {
                if seen[j as usize] != i as u32 {
                    seen[j as usize] = i as u32;
                    let jac = sets[j as usize].jaccard(s);
                    if jac >= tmin {
                        out.insert((j, i as u32), jac);
                    }
                }
            }
            list.push(i as u32);
        }
    }
    out
}
