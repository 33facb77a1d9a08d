//! `find_all`, `clusters` and `PermutedTables::query` against brute-force scans.

use proptest::prelude::*;
use simhashdb::batch::{clusters, find_all, find_all_in_table};
use simhashdb::hamming;
use simhashdb::plan::Plan;
use simhashdb::search::{Hit, PermutedTables};

fn brute_pairs(fps: &[u64], k: u32) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    for i in 0..fps.len() {
        for j in i + 1..fps.len() {
            if hamming(fps[i], fps[j]) <= k {
                out.push((i, j));
            }
        }
    }
    out
}

fn brute_query(fps: &[u64], q: u64, k: u32) -> Vec<Hit> {
    let mut values = fps.to_vec();
    values.sort_unstable();
    values.dedup();
    let mut hits: Vec<Hit> = values
        .into_iter()
        .map(|fp| Hit {
            distance: hamming(fp, q),
            fingerprint: fp,
        })
        .filter(|h| h.distance <= k)
        .collect();
    hits.sort_unstable();
    hits
}

/// Connected components by brute force: repeated relaxation of labels.
fn brute_clusters(fps: &[u64], k: u32) -> Vec<Vec<usize>> {
    let mut label: Vec<usize> = (0..fps.len()).collect();
    let pairs = brute_pairs(fps, k);
    loop {
        let mut changed = false;
        for &(i, j) in &pairs {
            let m = label[i].min(label[j]);
            if label[i] != m || label[j] != m {
                label[i] = m;
                label[j] = m;
                changed = true;
            }
        }
        if !changed {
            break;
        }
    }
    let mut groups: std::collections::BTreeMap<usize, Vec<usize>> = Default::default();
    for (i, &l) in label.iter().enumerate() {
        groups.entry(l).or_default().push(i);
    }
    groups.into_values().filter(|g| g.len() >= 2).collect()
}

fn arb_plan() -> impl Strategy<Value = Plan> {
    prop_oneof![
        4 => (0u32..=5).prop_flat_map(|k| (Just(k), k + 1..=k + 4))
            .prop_map(|(k, b)| Plan::new(b, k).unwrap()),
        1 => Just(Plan::nested(4, 4, 3).unwrap()),
        1 => Just(Plan::nested(3, 4, 2).unwrap()),
        1 => Just(Plan::new(1, 0).unwrap()),
    ]
}

/// Flips `count` distinct random bits chosen by `seed`.
fn flip(fp: u64, count: u32, mut seed: u64) -> u64 {
    let mut out = fp;
    let mut flipped = 0;
    while flipped < count {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let bit = 1u64 << (seed >> 58);
        if (out ^ fp) & bit == 0 {
            out ^= bit;
            flipped += 1;
        }
    }
    out
}

/// Data with structure: clusters around centres at distances 0..=k+2, values
/// that differ only in their low bits (dense prefix runs), exact duplicates,
/// and plain random values.
fn arb_fingerprints() -> impl Strategy<Value = Vec<u64>> {
    let clustered = (
        proptest::collection::vec(any::<u64>(), 1..6),
        proptest::collection::vec(
            (any::<prop::sample::Index>(), 0u32..=8, any::<u64>()),
            0..120,
        ),
    )
        .prop_map(|(centres, members)| {
            let mut out = centres.clone();
            for (c, d, seed) in members {
                out.push(flip(*c.get(&centres), d, seed));
            }
            out
        });
    let dense = (
        any::<u64>(),
        1u32..=20,
        proptest::collection::vec(any::<u64>(), 2..300),
    )
        .prop_map(|(base, low_bits, noise)| {
            let mask = (1u64 << low_bits) - 1;
            noise
                .into_iter()
                .map(|n| (base & !mask) | (n & mask))
                .collect()
        });
    let random = proptest::collection::vec(any::<u64>(), 0..200);
    (
        prop_oneof![clustered, dense, random],
        proptest::collection::vec(any::<prop::sample::Index>(), 0..10),
    )
        .prop_map(|(mut fps, dups)| {
            if !fps.is_empty() {
                for d in dups {
                    let v = *d.get(&fps);
                    fps.push(v);
                }
            }
            fps
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn find_all_equals_brute_force(fps in arb_fingerprints(), plan in arb_plan()) {
        prop_assert_eq!(find_all(&fps, &plan), brute_pairs(&fps, plan.k()));
    }

    /// The partitioned search a cluster job runs: each table's fingerprints
    /// split into parts by some leading bits of the table's prefix (here the
    /// top `key_bits`), each part searched alone; the union over tables and
    /// parts is the exact answer, with no pair reported twice.
    #[test]
    fn find_all_in_table_over_prefix_parts_equals_brute_force(
        fps in arb_fingerprints(),
        plan in arb_plan(),
        key_bits in 1u32..=8,
    ) {
        let mut found: Vec<(usize, usize)> = Vec::new();
        for (t, table) in plan.tables().iter().enumerate() {
            let bits = key_bits.min(table.prefix_bits());
            let mut parts: std::collections::BTreeMap<u64, Vec<usize>> = Default::default();
            for (i, &fp) in fps.iter().enumerate() {
                parts.entry(table.permute(fp) >> (64 - bits)).or_default().push(i);
            }
            for members in parts.values() {
                let part: Vec<u64> = members.iter().map(|&i| fps[i]).collect();
                for (a, b) in find_all_in_table(&part, &plan, t) {
                    let (i, j) = (members[a], members[b]);
                    found.push((i.min(j), i.max(j)));
                }
            }
        }
        found.sort_unstable();
        let reported = found.len();
        found.dedup();
        prop_assert_eq!(reported, found.len(), "a pair was reported twice");
        prop_assert_eq!(found, brute_pairs(&fps, plan.k()));
    }

    #[test]
    fn clusters_equal_brute_force(fps in arb_fingerprints(), plan in arb_plan()) {
        prop_assert_eq!(clusters(&fps, &plan), brute_clusters(&fps, plan.k()));
    }

    /// Probed plans (multi-index hashing) answer queries exactly too.
    #[test]
    fn probed_query_equals_brute_force(
        fps in arb_fingerprints(),
        (k, blocks, radius) in (1u32..=8).prop_flat_map(|k| (Just(k), 1u32..=6, 1u32..=3)),
        probe in any::<prop::sample::Index>(),
        flips in 0u32..=9,
        seed in any::<u64>(),
    ) {
        let Ok(plan) = Plan::probed(blocks, radius, k) else {
            // Not exact (blocks × (radius + 1) <= k): refused, never built.
            prop_assert!(blocks * (radius + 1) <= k);
            return Ok(());
        };
        let tables = PermutedTables::new(&fps, &plan);
        let q = if fps.is_empty() { seed } else { flip(*probe.get(&fps), flips, seed) };
        prop_assert_eq!(tables.query(q, k).unwrap(), brute_query(&fps, q, k));
    }

    #[test]
    fn query_equals_brute_force(
        fps in arb_fingerprints(),
        plan in arb_plan(),
        probe in any::<prop::sample::Index>(),
        flips in 0u32..=6,
        seed in any::<u64>(),
        below in 0u32..=2,
    ) {
        let tables = PermutedTables::new(&fps, &plan);
        let k = plan.k().saturating_sub(below);
        let q = if fps.is_empty() { seed } else { flip(*probe.get(&fps), flips, seed) };
        prop_assert_eq!(tables.query(q, k).unwrap(), brute_query(&fps, q, k));
    }
}

/// Planted neighbours at every distance 0..=k+1 of one centre, for each plan:
/// 0..=k are found with their distance, k+1 never is.
#[test]
fn planted_neighbours_at_every_distance() {
    for plan in [
        Plan::new(6, 3).unwrap(),
        Plan::new(4, 3).unwrap(),
        Plan::nested(4, 4, 3).unwrap(),
        Plan::new(3, 0).unwrap(),
    ] {
        let k = plan.k();
        let centre = 0x9e37_79b9_7f4a_7c15u64;
        for seed in 0..200u64 {
            let fps: Vec<u64> = (0..=k + 1)
                .map(|d| flip(centre, d, seed * 31 + u64::from(d)))
                .collect();
            let hits = PermutedTables::new(&fps, &plan).query(centre, k).unwrap();
            let distances: Vec<u32> = hits.iter().map(|h| h.distance).collect();
            assert_eq!(
                distances,
                (0..=k).collect::<Vec<_>>(),
                "plan {plan}, seed {seed}"
            );
            let pairs = find_all(&fps, &plan);
            if k > 0 {
                assert!(
                    pairs.contains(&(0, k as usize)),
                    "distance exactly k missed by {plan}"
                );
            }
            assert!(
                !pairs.contains(&(0, k as usize + 1)),
                "distance k+1 reported by {plan}"
            );
            assert_eq!(pairs, brute_pairs(&fps, k));
        }
    }
}

/// The dense case: 20,000 fingerprints sharing their top 48 bits.
#[test]
fn dense_low_bits_equal_brute_force() {
    let base = 0xdead_beef_0000_0000u64;
    let mut state = 42u64;
    let fps: Vec<u64> = (0..20_000)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            base | (state & 0xffff)
        })
        .collect();
    let plan = Plan::new(6, 3).unwrap();
    let got = find_all(&fps, &plan);
    assert!(
        got.len() > 100_000,
        "expected many pairs, got {}",
        got.len()
    );
    assert_eq!(got, brute_pairs(&fps, 3));
}

/// At large distances the plans' prefixes are a few bits and `find_all`
/// scans all pairs instead: the answer is the same.
#[test]
fn find_all_at_large_distances_equals_brute_force() {
    let mut state = 11u64;
    let mut next = move || {
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let z = (state ^ (state >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        let z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    };
    let mut fps: Vec<u64> = Vec::new();
    while fps.len() < 4000 {
        let r = next();
        if fps.len() % 3 == 2 {
            // A near copy of an earlier fingerprint, 1 to 40 bits away.
            let base = fps[(r % fps.len() as u64) as usize];
            fps.push(flip(base, 1 + (r >> 40) as u32 % 40, next()));
        } else {
            fps.push(r);
        }
    }
    for k in [12u32, 16, 32, 63] {
        let plan = Plan::choose(fps.len() as u64, k, simhashdb::plan::Budget::Unprobed).unwrap();
        assert_eq!(
            find_all(&fps, &plan),
            brute_pairs(&fps, k),
            "k = {k}, {plan}"
        );
        assert_eq!(clusters(&fps, &plan), brute_clusters(&fps, k), "k = {k}");
    }
}
