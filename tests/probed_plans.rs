//! Plans that probe as well as permute (multi-index hashing): every plan the
//! chooser can produce is exact against a brute-force scan, on fingerprints
//! crafted at distances k and k + 1 from a query with their differing bits
//! packed into one block or spread over all of them (the worst case for a
//! probed prefix), in memory and through an [`Index`] (memtable, segments,
//! merges, reopen).
// Options is set field by field, not by a struct expression, so that it can
// become #[non_exhaustive] without breaking this file.
#![allow(clippy::field_reassign_with_default)]

mod common;

use std::collections::BTreeSet;

use common::{Model, brute_force};
use simhashdb::plan::{Budget, Plan, Shape};
use simhashdb::search::{Hit, PermutedTables};
use simhashdb::{Index, Options, hamming};

/// splitmix64.
fn mix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Every plan some budget makes `Plan::choose` pick, for distances 0..=10:
/// each alternative the chooser weighs, at corpus sizes from a thousand to a
/// billion, under the default, space, latency and unprobed budgets.
fn choosable_plans() -> Vec<Plan> {
    let mut shapes: BTreeSet<(u32, Shape)> = BTreeSet::new();
    for k in 0..=10 {
        for n in [1_000u64, 100_000, 10_000_000, 1_000_000_000] {
            let budgets = [
                Budget::default(),
                Budget::Unprobed,
                Budget::Space(1),
                Budget::Space(2),
                Budget::Space(4),
                Budget::Space(10),
                Budget::Latency(100.0),
                Budget::Latency(10_000.0),
            ];
            for budget in budgets {
                let choice = Plan::alternatives(n, k, budget).unwrap();
                for alternative in &choice.alternatives {
                    shapes.insert((k, alternative.shape));
                }
                shapes.insert((k, choice.chosen().shape));
            }
        }
    }
    shapes
        .into_iter()
        .map(|(k, shape)| Plan::from_shape(shape, k).unwrap())
        .collect()
}

/// The bit positions (most significant first) of `blocks` near-equal
/// contiguous blocks, wider first: the split docs/FORMAT.md and `plan.rs`
/// describe (block 0 holds the most significant bits).
fn block_bits(blocks: u32) -> Vec<Vec<u32>> {
    let mut out = Vec::new();
    let mut top = 64u32;
    for i in 0..blocks {
        let width = 64 / blocks + u32::from(i < 64 % blocks);
        out.push((top - width..top).rev().collect());
        top -= width;
    }
    out
}

/// Fingerprints at distance `d` from `centre`: the `d` differing bits packed
/// into each block in turn (spilling into the next when a block is too
/// narrow), spread round-robin over all blocks starting at each block, and a
/// few at random positions.
fn crafted(centre: u64, d: u32, blocks: u32, seed: u64) -> Vec<u64> {
    let parts = block_bits(blocks);
    let mut out = Vec::new();
    for first in 0..blocks as usize {
        // Packed from block `first` on.
        let packed: Vec<u32> = parts[first..]
            .iter()
            .chain(&parts[..first])
            .flatten()
            .copied()
            .take(d as usize)
            .collect();
        out.push(packed.iter().fold(centre, |fp, &b| fp ^ (1 << b)));
        // Spread: one bit per block, round-robin, from block `first`.
        let mut fp = centre;
        let mut used = vec![0usize; parts.len()];
        for i in 0..d as usize {
            let mut b = (first + i) % parts.len();
            while used[b] >= parts[b].len() {
                b = (b + 1) % parts.len();
            }
            fp ^= 1 << parts[b][(used[b] + seed as usize) % parts[b].len()];
            used[b] += 1;
        }
        out.push(fp);
    }
    let mut state = seed;
    for _ in 0..4 {
        let mut fp = centre;
        while hamming(fp, centre) < d {
            state = mix(state);
            let bit = 1u64 << (state >> 58);
            if (fp ^ centre) & bit == 0 {
                fp ^= bit;
            }
        }
        out.push(fp);
    }
    for &fp in &out {
        assert_eq!(hamming(fp, centre), d);
    }
    out
}

/// The blocks a plan's adversarial cases should be packed into or spread
/// over: its own split.
fn blocks_of(plan: &Plan) -> u32 {
    match plan.shape() {
        Shape::Flat { blocks } | Shape::Probed { blocks, .. } => blocks,
        Shape::Nested { outer, .. } => outer,
    }
}

fn brute_hits(fps: &[u64], q: u64, k: u32) -> Vec<Hit> {
    let mut hits: Vec<Hit> = fps
        .iter()
        .copied()
        .collect::<BTreeSet<u64>>()
        .into_iter()
        .filter(|&fp| hamming(fp, q) <= k)
        .map(|fp| Hit {
            distance: hamming(fp, q),
            fingerprint: fp,
        })
        .collect();
    hits.sort_unstable();
    hits
}

#[test]
fn every_choosable_plan_finds_distance_k_and_never_k_plus_one_in_memory() {
    let plans = choosable_plans();
    assert!(
        plans.iter().filter(|p| p.radius() > 0).count() >= 20,
        "the chooser offers probed plans"
    );
    let mut compared = 0usize;
    for plan in &plans {
        let k = plan.k();
        for seed in 0..3u64 {
            let centre = mix(seed ^ u64::from(k) << 32);
            let mut fps = crafted(centre, k, blocks_of(plan), seed);
            let at_k = fps.len();
            fps.extend(crafted(centre, k + 1, blocks_of(plan), seed + 7));
            // Unrelated fingerprints sharing the centre's prefixes.
            fps.extend((0..50).map(|i| mix(seed * 1000 + i)));
            let tables = PermutedTables::new(&fps, plan);
            let hits = tables.query(centre, k).unwrap();
            assert_eq!(
                hits,
                brute_hits(&fps, centre, k),
                "plan {plan}, seed {seed}"
            );
            let found: BTreeSet<u64> = hits.iter().map(|h| h.fingerprint).collect();
            assert!(
                fps[..at_k].iter().all(|fp| found.contains(fp)),
                "plan {plan}: a fingerprint at distance k missed"
            );
            assert!(
                hits.iter().all(|h| h.distance <= k),
                "plan {plan}: distance k + 1 reported"
            );
            // Every stored fingerprint as a query, at k and below.
            for &q in fps.iter().step_by(5) {
                for d in [k, k.saturating_sub(1)] {
                    let got = tables.query(q, d).unwrap();
                    assert_eq!(got, brute_hits(&fps, q, d), "plan {plan}, query {q:016x}");
                    compared += got.len();
                }
            }
        }
    }
    assert!(compared > 10_000, "only {compared} hits compared");
}

/// A probed plan searched at a distance `d` below its k probes only the
/// prefixes within `Plan::radius_for(d)` (fewer than the plan's radius):
/// still exact, on fingerprints crafted at `d` and `d + 1` with their bits
/// packed into blocks or spread over all of them, for every `d` of every
/// choosable probed plan.
#[test]
fn every_probed_plan_searched_below_its_k_finds_exactly_the_distance_asked() {
    let mut narrowed = 0usize;
    let mut compared = 0usize;
    for plan in choosable_plans().iter().filter(|p| p.radius() > 0) {
        let k = plan.k();
        assert_eq!(plan.radius_for(k), plan.radius(), "plan {plan}");
        for d in 0..k {
            let r = plan.radius_for(d);
            assert!(
                r <= plan.radius_for(d + 1),
                "plan {plan}: radius grows with d"
            );
            narrowed += usize::from(r < plan.radius());
            for seed in 0..2u64 {
                let centre = mix(seed ^ u64::from(d) << 32 ^ u64::from(k) << 40);
                let mut fps = crafted(centre, d, blocks_of(plan), seed);
                let at_d = fps.len();
                fps.extend(crafted(centre, d + 1, blocks_of(plan), seed + 7));
                fps.extend((0..20).map(|i| mix(seed * 1000 + i)));
                let tables = PermutedTables::new(&fps, plan);
                let hits = tables.query(centre, d).unwrap();
                assert_eq!(hits, brute_hits(&fps, centre, d), "plan {plan}, d {d}");
                let found: BTreeSet<u64> = hits.iter().map(|h| h.fingerprint).collect();
                assert!(
                    fps[..at_d].iter().all(|fp| found.contains(fp)),
                    "plan {plan}: a fingerprint at distance {d} missed at radius {r}"
                );
                compared += hits.len();
            }
        }
    }
    assert!(narrowed >= 10, "only {narrowed} narrower searches");
    assert!(compared > 1_000, "only {compared} hits compared");
}

/// A fingerprint near one of 32 centres (so queries find several at every
/// distance up to 8), or a random one.
fn fingerprint(r: u64) -> u64 {
    if r.is_multiple_of(5) {
        return mix(r);
    }
    let centre = mix(r % 32 + 1_000_000);
    let flips = (r >> 8) % 9;
    (0..flips).fold(centre, |fp, i| fp ^ (1 << (mix(r + i) >> 58)))
}

fn write(index: &Index, model: &mut Model, seed: u64, count: u64, id_space: u64) {
    let mut batch = Vec::new();
    for i in 0..count {
        let r = mix(seed * 1_000_003 + i);
        let id = r % id_space;
        if r.is_multiple_of(13) {
            index.insert_batch(batch.drain(..)).unwrap();
            index.delete(id).unwrap();
            model.remove(&id);
        } else {
            let fp = fingerprint(r >> 3);
            batch.push((id, fp, None::<String>));
            model.insert(id, (fp, None));
        }
    }
    index.insert_batch(batch).unwrap();
}

/// Queries near stored centres at every distance up to the plan's k,
/// against the brute-force scan of the model; returns the matches compared.
fn check(index: &Index, model: &Model, what: &str) -> usize {
    let k = index.plan().k();
    let mut compared = 0;
    for q in 0..120u64 {
        let fp = fingerprint(mix(q ^ 0x5eed)) ^ (1 << (q % 64));
        for d in 0..=k {
            let got = index.query(fp, d).unwrap();
            assert_eq!(got, brute_force(model, fp, d), "{what}: {fp:016x} at {d}");
            compared += got.len();
        }
    }
    compared
}

/// `query_batch` of 200 queries near stored centres (drawn from `seed`) at
/// every distance up to the plan's k, against the brute-force scan.
fn check_batch(index: &Index, model: &Model, seed: u64, what: &str) {
    let queries: Vec<u64> = (0..200u64)
        .map(|q| fingerprint(mix(q ^ seed)) ^ (1 << (q % 64)))
        .collect();
    for d in 0..=index.plan().k() {
        let answers = index.query_batch(&queries, d).unwrap();
        for (fp, answer) in queries.iter().zip(&answers) {
            assert_eq!(
                *answer,
                brute_force(model, *fp, d),
                "{what}: {fp:016x} at {d}"
            );
        }
    }
}

fn options(plan: Plan, small_segment_plans: bool) -> Options {
    let mut o = Options::default();
    o.k = plan.k();
    o.plan = Some(plan);
    o.small_segment_plans = small_segment_plans;
    o.merge_policy = None;
    o
}

/// Through the index: the memtable, a flushed segment, several segments in
/// different plans (small segments get their own), their merge, and a
/// reopen, for the 2-table plan a space budget gives at k = 3, the plan
/// `Plan::auto` gives at k = 8 and a hand-made one.
#[test]
fn probed_index_plans_answer_like_brute_force_through_flush_merge_and_reopen() {
    for plan in [
        Plan::choose(10_000_000, 3, Budget::Space(2)).unwrap(),
        Plan::auto(10_000_000, 8).unwrap(),
        Plan::probed(3, 1, 5).unwrap(),
    ] {
        assert!(plan.radius() > 0, "{plan}");
        let dir = tempfile::tempdir().unwrap();
        let mut model = Model::new();
        let mut compared = 0;
        let index = Index::open(dir.path(), options(plan.clone(), true)).unwrap();
        write(&index, &mut model, 1, 3_000, 4_000);
        compared += check(&index, &model, "memtable");
        index.flush().unwrap();
        compared += check(&index, &model, "one segment");
        write(&index, &mut model, 2, 3_000, 4_000);
        index.flush().unwrap();
        drop(index);
        // A segment in the index's own plan beside the small-segment ones.
        let index = Index::open(dir.path(), options(plan.clone(), false)).unwrap();
        write(&index, &mut model, 3, 3_000, 4_000);
        index.flush().unwrap();
        write(&index, &mut model, 4, 500, 4_000);
        compared += check(&index, &model, "three segments and a memtable");
        index.compact().unwrap();
        compared += check(&index, &model, "merged");
        index.verify().unwrap();
        drop(index);
        // The recorded plan (radius included) comes back without being given.
        let mut reopen = Options::default();
        reopen.k = plan.k();
        let index = Index::open(dir.path(), reopen).unwrap();
        assert_eq!(index.plan(), &plan);
        compared += check(&index, &model, "reopened");
        assert!(compared > 2_000, "{plan}: only {compared} matches compared");
    }
}

/// Segments of a probed plan keep decoded copies too (searched by each
/// table's sorted probes, walked forward once): with copies and without,
/// through `query` and `query_batch`, the default plan at k = 6 and the one
/// at k = 8 answer every distance as a brute-force scan does, and the
/// copies are made.
#[test]
fn probed_segments_searched_decoded_answer_like_brute_force() {
    for plan in [
        Plan::auto(10_000_000, 6).unwrap(),
        Plan::auto(50_000_000, 6).unwrap(),
        Plan::auto(10_000_000, 8).unwrap(),
    ] {
        assert!(plan.radius() > 0, "{plan}");
        for up_to in [u64::MAX, 0] {
            let dir = tempfile::tempdir().unwrap();
            let mut model = Model::new();
            let mut o = options(plan.clone(), false);
            o.decoded_tables_up_to = up_to;
            o.prefault = false;
            // Rice-coded tables, whose copies these are.
            o.flat_tables = false;
            let index = Index::open(dir.path(), o).unwrap();
            // Segments written once the index has queried get copies.
            assert!(index.query(0, plan.k()).unwrap().is_empty());
            write(&index, &mut model, 5, 3_000, 4_000);
            index.flush().unwrap();
            write(&index, &mut model, 6, 3_000, 4_000);
            index.flush().unwrap();
            let decoded = index.stats().decoded_table_bytes;
            assert_eq!(decoded > 0, up_to > 0, "{plan}: {decoded} bytes decoded");
            let what = format!("{plan}, copies up to {up_to} keys");
            let compared = check(&index, &model, &what);
            assert!(compared > 1_000, "{what}: only {compared} matches compared");
            check_batch(&index, &model, 0xbeef, &what);
        }
    }
}

/// Probed plans' segments of flat tables (format version 5), searched
/// where they are mapped by each table's sorted probes: directories of 6
/// to 16 bits, so keys of every width a flat table holds but the largest
/// directories' (8, 7 and 6 bytes), answer every distance as a brute-force
/// scan does, through `query` and `query_batch`, after a reopen too.
#[test]
fn probed_segments_of_flat_tables_answer_like_brute_force() {
    for (plan, count) in [
        (Plan::auto(10_000_000, 6).unwrap(), 3_000),
        (Plan::auto(10_000_000, 6).unwrap(), 150_000),
        (Plan::auto(50_000_000, 6).unwrap(), 3_000),
        (Plan::auto(10_000_000, 8).unwrap(), 3_000),
        (Plan::probed(2, 1, 3).unwrap(), 150_000),
        (Plan::probed(10, 1, 12).unwrap(), 3_000),
    ] {
        assert!(plan.radius() > 0, "{plan}");
        let dir = tempfile::tempdir().unwrap();
        let mut model = Model::new();
        let mut o = options(plan.clone(), false);
        o.flat_tables = true;
        let index = Index::open(dir.path(), o.clone()).unwrap();
        write(&index, &mut model, 7, count, count * 4 / 3);
        index.flush().unwrap();
        write(&index, &mut model, 8, 3_000, count * 4 / 3);
        index.flush().unwrap();
        assert_eq!(
            index.stats().decoded_table_bytes,
            0,
            "{plan}: flat tables get no copy"
        );
        let what = format!("{plan}, {count} fingerprints, flat tables");
        let compared = check(&index, &model, &what);
        assert!(compared > 1_000, "{what}: only {compared} matches compared");
        check_batch(&index, &model, 0xf1a7, &what);
        index.verify().unwrap();
        drop(index);
        let index = Index::open_read_only(dir.path()).unwrap();
        check(&index, &model, &format!("{what}, reopened"));
    }
}

#[test]
#[should_panic(expected = "probed plan")]
fn find_all_refuses_a_probed_plan() {
    simhashdb::batch::find_all(&[1, 2, 3], &Plan::probed(2, 1, 3).unwrap());
}
