//! Segments of one index in different plans: a small segment gets the plan
//! with fewer tables the cost model prefers for its size
//! (`Options::small_segment_plans`), merges turn inputs of one plan into an
//! output of another, and queries stay exactly what a brute-force scan of
//! the live documents returns throughout.

mod common;

use std::collections::BTreeMap;
use std::path::Path;

use common::mix;
use simhashdb::format::{FileKind, Manifest, SegmentReader};
use simhashdb::plan::Plan;
use simhashdb::{Index, Options};

/// The index's plan: 10 tables (5 blocks, k = 3).
fn plan() -> Plan {
    Plan::new(5, 3).unwrap()
}

fn options(small_segment_plans: bool) -> Options {
    Options::new()
        .plan(plan())
        .merge_policy(None)
        .small_segment_plans(small_segment_plans)
}

/// Live documents: id → fingerprint.
type Model = BTreeMap<u64, u64>;

/// A fingerprint near one of 64 centres (so queries find several), or one
/// in `random_one_in` random (`1`: all random but one in 64).
fn fingerprint(r: u64, random_one_in: u64) -> u64 {
    let random = if random_one_in == 1 {
        !r.is_multiple_of(64)
    } else {
        r.is_multiple_of(random_one_in)
    };
    if random {
        mix(r)
    } else {
        let centre = mix((r >> 8) % 64 + 1_000_000);
        centre ^ (1 << (r >> 58)) ^ ((r >> 20) & (r >> 40) & 0x0101)
    }
}

/// Inserts `count` documents with ids drawn from `0..id_space` (so some
/// replace earlier ones) and fingerprints from [`fingerprint`], deletes
/// every eleventh drawn id instead, and updates the model.
fn write(
    index: &Index,
    model: &mut Model,
    seed: u64,
    count: u64,
    id_space: u64,
    random_one_in: u64,
) {
    let mut batch = Vec::new();
    for i in 0..count {
        let r = mix(seed * 1_000_003 + i);
        let id = r % id_space;
        if r.is_multiple_of(11) {
            index.insert_batch(batch.drain(..)).unwrap();
            index.delete(id).unwrap();
            model.remove(&id);
        } else {
            let fp = fingerprint(mix(r), random_one_in);
            batch.push((id, fp, None::<String>));
            model.insert(id, fp);
            if batch.len() == 1000 {
                index.insert_batch(batch.drain(..)).unwrap();
            }
        }
    }
    index.insert_batch(batch.drain(..)).unwrap();
}

/// Compares `queries` queries at every distance up to 3 with a brute-force
/// scan of the model; returns how many matches were compared.
fn check(index: &Index, model: &Model, queries: u64, what: &str) -> usize {
    let mut compared = 0;
    for q in 0..queries {
        let fp = fingerprint(mix(q ^ 0xabcd), 1_000) ^ (1 << (q % 64));
        for k in 0..=3 {
            let got: Vec<(u32, u64, u64)> = index
                .query(fp, k)
                .unwrap()
                .iter()
                .map(|m| (m.distance, m.id, m.fingerprint))
                .collect();
            let mut want: Vec<(u32, u64, u64)> = model
                .iter()
                .map(|(&id, &f)| ((f ^ fp).count_ones(), id, f))
                .filter(|&(d, _, _)| d <= k)
                .collect();
            want.sort_unstable();
            assert_eq!(got, want, "{what}: query {fp:016x} at k = {k}");
            compared += got.len();
        }
    }
    compared
}

/// The table count of every segment file in `dir`, sorted.
/// The table counts of the segments the manifest names. Files of segments a
/// merge replaced may still be in the directory right after `compact`, until
/// no thread of the index holds them (`Index::close` removes them).
fn table_counts(dir: &Path) -> Vec<usize> {
    let manifest = Manifest::decode(&std::fs::read(dir.join("MANIFEST")).unwrap()).unwrap();
    let mut counts: Vec<usize> = manifest
        .segments
        .iter()
        .map(|s| dir.join(FileKind::Segment.file_name(s.id)))
        .map(|p| {
            let reader = SegmentReader::new(std::fs::read(&p).unwrap()).unwrap();
            assert_eq!(reader.info().k, 3, "{}", p.display());
            // Segments of unprobed plans have flat tables (format version
            // 5; docs/FORMAT.md, "Flat table section") unless told
            // otherwise; Rice-coded ones of this size, 32-key blocks.
            for t in 0..reader.table_count() {
                match reader.flat_table(t).unwrap() {
                    Some(_) => {}
                    None => assert_eq!(reader.table(t).unwrap().block_len(), 32),
                }
            }
            reader.table_count()
        })
        .collect();
    counts.sort_unstable();
    counts
}

#[test]
fn a_small_segment_gets_four_tables_and_the_option_off_gives_the_index_plan() {
    let dir = tempfile::tempdir().unwrap();
    let mut model = Model::new();
    let index = Index::open(dir.path(), options(true)).unwrap();
    write(&index, &mut model, 1, 3_000, 2_000, 4);
    index.flush().unwrap();
    assert_eq!(table_counts(dir.path()), vec![4]);
    assert!(check(&index, &model, 200, "one small segment") > 200);
    drop(index);

    let index = Index::open(dir.path(), options(false)).unwrap();
    write(&index, &mut model, 2, 3_000, 2_000, 4);
    index.flush().unwrap();
    assert_eq!(table_counts(dir.path()), vec![4, 10]);
    assert!(check(&index, &model, 200, "a segment in each plan") > 200);
    assert_eq!(index.stats().segments, 2);
    // Stats count each segment's own tables.
    let per_key = index.stats().table_bytes_per_key;
    assert!(per_key > 4.0 && per_key < 8.0, "{per_key} bytes per key");
}

/// Merges of every mix: inputs all in the other plan (the output's tables
/// are built from the survivors' fingerprints), inputs in both plans (the
/// output's plan's tables are reused, the others' fingerprints join as one
/// run), and the index's plan as the output of small inputs.
#[test]
fn merges_between_plans_keep_every_answer() {
    let dir = tempfile::tempdir().unwrap();
    let mut model = Model::new();

    // Two segments in the index's plan, merged into a small-plan segment.
    let index = Index::open(dir.path(), options(false)).unwrap();
    write(&index, &mut model, 3, 4_000, 3_000, 4);
    index.flush().unwrap();
    write(&index, &mut model, 4, 2_000, 3_000, 4);
    index.flush().unwrap();
    drop(index);
    assert_eq!(table_counts(dir.path()), vec![10, 10]);
    let index = Index::open(dir.path(), options(true)).unwrap();
    index.compact().unwrap();
    assert_eq!(table_counts(dir.path()), vec![4]);
    let mut compared = check(&index, &model, 150, "no input in the output's plan");

    // One small-plan input and one in the index's plan; replacements and
    // deletes across them drop fingerprints from both.
    drop(index);
    let index = Index::open(dir.path(), options(false)).unwrap();
    write(&index, &mut model, 5, 3_000, 3_000, 4);
    index.flush().unwrap();
    drop(index);
    let index = Index::open(dir.path(), options(true)).unwrap();
    write(&index, &mut model, 6, 2_000, 3_000, 4);
    index.flush().unwrap();
    assert_eq!(table_counts(dir.path()), vec![4, 4, 10]);
    compared += check(&index, &model, 150, "three segments, two plans");
    index.compact().unwrap();
    assert_eq!(table_counts(dir.path()), vec![4]);
    compared += check(&index, &model, 150, "inputs in both plans, small output");

    // The same with the index's plan as the output.
    write(&index, &mut model, 7, 2_000, 3_000, 4);
    index.flush().unwrap();
    drop(index);
    let index = Index::open(dir.path(), options(false)).unwrap();
    write(&index, &mut model, 8, 2_000, 3_000, 4);
    index.flush().unwrap();
    assert_eq!(table_counts(dir.path()), vec![4, 4, 10]);
    index.compact().unwrap();
    assert_eq!(table_counts(dir.path()), vec![10]);
    compared += check(
        &index,
        &model,
        150,
        "inputs in both plans, the index's plan out",
    );
    index.verify().unwrap();
    drop(index);
    let index = Index::open(dir.path(), options(true)).unwrap();
    compared += check(&index, &model, 150, "reopened");
    assert!(compared > 1_000, "only {compared} matches compared");
}

/// The default setting end to end: flushes of 250,000 documents (under the
/// default memtable budget of about 400,000) get 4
/// tables, and their merge, over a million fingerprints, keeps 4 flat
/// tables (a probe compares about 16 keys); with Rice-coded tables it gets
/// the index's 10.
#[test]
fn a_merge_past_a_million_fingerprints_keeps_four_flat_tables_or_writes_the_index_plan() {
    for flat in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let mut model = Model::new();
        let index = Index::open(dir.path(), options(true).flat_tables(flat)).unwrap();
        for round in 0..5 {
            write(&index, &mut model, 10 + round, 250_000, 1 << 40, 1);
            index.flush().unwrap();
        }
        assert_eq!(table_counts(dir.path()), vec![4, 4, 4, 4, 4]);
        let compared = check(&index, &model, 40, "five small segments");
        index.compact().unwrap();
        assert!(model.len() > 1_050_000, "{} documents", model.len());
        assert_eq!(
            table_counts(dir.path()),
            vec![if flat { 4 } else { 10 }],
            "flat: {flat}"
        );
        assert_eq!(check(&index, &model, 40, "one segment"), compared);
        assert!(compared > 100, "only {compared} matches compared");
    }
}
