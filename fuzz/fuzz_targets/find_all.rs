//! `find_all`, `clusters` and `PermutedTables::query` against brute force on
//! arbitrary fingerprints and plans.

#![no_main]

use libfuzzer_sys::fuzz_target;
use simhashdb::batch::{clusters, find_all};
use simhashdb::hamming;
use simhashdb::plan::Plan;
use simhashdb::search::PermutedTables;

fuzz_target!(|data: &[u8]| {
    let Some((&[shape, k_byte, blocks_byte], rest)) = data.split_first_chunk::<3>() else {
        return;
    };
    let k = u32::from(k_byte % 6);
    let plan = match shape % 3 {
        0 => Plan::new(k + 1 + u32::from(blocks_byte % 5), k),
        1 if k > 0 => Plan::nested(k + 1 + u32::from(blocks_byte % 2), k + 1, k),
        _ => Plan::new(k + 1, k),
    };
    let Ok(plan) = plan else { return };
    // Values from the input, with a small alphabet of high bits so that
    // clusters and dense runs are common.
    let fps: Vec<u64> = rest
        .chunks(3)
        .take(400)
        .map(|c| {
            let lo = u64::from(c[0]) | u64::from(*c.get(1).unwrap_or(&0)) << 8;
            let hi = u64::from(*c.get(2).unwrap_or(&0) % 4).wrapping_mul(0x9e37_79b9_7f4a_0000);
            hi ^ lo
        })
        .collect();

    let mut brute = Vec::new();
    for i in 0..fps.len() {
        for j in i + 1..fps.len() {
            if hamming(fps[i], fps[j]) <= k {
                brute.push((i, j));
            }
        }
    }
    assert_eq!(find_all(&fps, &plan), brute);

    let groups = clusters(&fps, &plan);
    for &(i, j) in &brute {
        assert!(groups.iter().any(|g| g.contains(&i) && g.contains(&j)));
    }
    assert!(groups.iter().all(|g| g.len() >= 2));

    if let Some(&q) = fps.first() {
        let tables = PermutedTables::new(&fps, &plan);
        let mut expected: Vec<(u32, u64)> = fps.iter().map(|&f| (hamming(f, q), f)).filter(|&(d, _)| d <= k).collect();
        expected.sort_unstable();
        expected.dedup();
        let got: Vec<(u32, u64)> = tables.query(q, k).unwrap().into_iter().map(|h| (h.distance, h.fingerprint)).collect();
        assert_eq!(got, expected);
    }
});
