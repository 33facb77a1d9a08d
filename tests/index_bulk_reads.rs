//! `Index::len`, `Index::docs` and `Index::query_batch` on real files, with
//! documents in the memtable and in segments, replaced, deleted and
//! reopened, checked against a model and a brute-force scan.

mod common;

use common::{CENTRES, Model, Rng, brute_force};
use simhashdb::plan::Plan;
use simhashdb::{Error, Index, Options};

fn options() -> Options {
    // Small memtables: the workload leaves several segments and a memtable.
    Options::new()
        .plan(Plan::new(5, 3).unwrap())
        .memtable_bytes(4096)
}

/// Inserts, replaces and deletes `steps` times, with names on some
/// documents; returns the live documents.
fn churn(index: &Index, model: &mut Model, rng: &mut Rng, steps: usize) {
    for _ in 0..steps {
        let id = rng.below(400);
        match rng.below(10) {
            0 | 1 => {
                index.delete(id).unwrap();
                model.remove(&id);
            }
            2 | 3 => {
                let fp = rng.fingerprint();
                let name = format!("doc {id} {fp:x}");
                index.insert_named(id, fp, name.clone()).unwrap();
                model.insert(id, (fp, Some(name)));
            }
            _ => {
                let fp = rng.fingerprint();
                index.insert(id, fp).unwrap();
                model.insert(id, (fp, None));
            }
        }
    }
}

fn docs_as_model(index: &Index) -> Model {
    let docs: Vec<_> = index.docs().unwrap().collect();
    let model: Model = docs
        .iter()
        .map(|d| (d.id, (d.fingerprint, d.name.clone())))
        .collect();
    assert_eq!(model.len(), docs.len(), "docs() repeated a document");
    model
}

#[test]
fn len_and_docs_hold_exactly_the_live_documents() {
    let dir = tempfile::tempdir().unwrap();
    let mut model = Model::new();
    let mut rng = Rng(7);
    {
        let index = Index::open(dir.path(), options()).unwrap();
        assert_eq!(index.len().unwrap(), 0);
        assert!(index.is_empty().unwrap());
        for round in 0..4 {
            churn(&index, &mut model, &mut rng, 600);
            if round == 1 {
                index.flush().unwrap();
            }
            assert!(index.stats().segments > 0, "round {round}: no segment yet");
            assert_eq!(index.len().unwrap(), model.len() as u64, "round {round}");
            assert_eq!(docs_as_model(&index), model, "round {round}");
            assert!(!index.is_empty().unwrap());
        }
        index.compact().unwrap();
        assert_eq!(index.len().unwrap(), model.len() as u64, "after compact");
        assert_eq!(docs_as_model(&index), model, "after compact");
    }
    let index = Index::open(dir.path(), options()).unwrap();
    assert_eq!(index.len().unwrap(), model.len() as u64, "after reopening");
    assert_eq!(docs_as_model(&index), model, "after reopening");
    for id in model.keys().copied().collect::<Vec<_>>() {
        index.delete(id).unwrap();
    }
    assert_eq!(index.len().unwrap(), 0);
    assert!(index.is_empty().unwrap());
    assert_eq!(index.docs().unwrap().count(), 0);
}

#[test]
fn docs_is_a_snapshot_that_later_writes_do_not_change() {
    let dir = tempfile::tempdir().unwrap();
    let index = Index::open(dir.path(), options()).unwrap();
    let mut model = Model::new();
    churn(&index, &mut model, &mut Rng(11), 800);
    let docs = index.docs().unwrap();
    assert_eq!(docs.len(), model.len());
    // Delete everything the snapshot holds, and add new documents.
    for id in model.keys() {
        index.delete(*id).unwrap();
    }
    index.insert(10_000, 1).unwrap();
    let seen: Model = docs.map(|d| (d.id, (d.fingerprint, d.name))).collect();
    assert_eq!(seen, model);
    assert_eq!(index.len().unwrap(), 1);
}

#[test]
fn query_batch_answers_each_fingerprint_as_brute_force_does() {
    let dir = tempfile::tempdir().unwrap();
    let index = Index::open(dir.path(), options()).unwrap();
    let mut model = Model::new();
    let mut rng = Rng(23);
    churn(&index, &mut model, &mut rng, 2_000);
    assert!(index.stats().segments > 0 && index.stats().memtable_docs > 0);
    // Stored fingerprints, fingerprints near the centres, and far ones, in
    // an order the answers must keep (with repeats).
    let mut queries: Vec<u64> = model.values().map(|(fp, _)| *fp).take(50).collect();
    queries.extend((0..50).map(|_| rng.fingerprint()));
    queries.extend((0..20).map(|_| rng.next()));
    queries.extend(CENTRES);
    queries.push(queries[0]);
    for k in [0, 2, 3] {
        let answers = index.query_batch(&queries, k).unwrap();
        assert_eq!(answers.len(), queries.len());
        let mut nonempty = 0;
        for (fp, answer) in queries.iter().zip(&answers) {
            assert_eq!(*answer, brute_force(&model, *fp, k), "k = {k}, {fp:#x}");
            nonempty += usize::from(!answer.is_empty());
        }
        assert!(
            nonempty >= 50,
            "k = {k}: only {nonempty} queries had answers"
        );
    }
    assert_eq!(index.query_batch(&[], 3).unwrap(), Vec::<Vec<_>>::new());
    // A distance above the plan's is refused, as for one query.
    assert!(matches!(
        index.query_batch(&queries, 4),
        Err(Error::DistanceTooLarge {
            requested: 4,
            plan_k: 3
        })
    ));
}

/// Segments written by this process once it has queried keep decoded
/// copies of their tables (`Options::decoded_tables_up_to`), searched
/// instead of their files; with copies off, the files are searched. Both answer every query as a
/// brute-force scan does, with the segments' own plans (4 tables: copied
/// table by table) and with the index's (10 tables: copied into 4).
#[test]
fn decoded_copies_and_mapped_tables_answer_alike() {
    for small_plans in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let mut model = Model::new();
        let mut rng = Rng(31);
        // Decoded copies are made of Rice-coded tables only.
        let with = |up_to: u64| {
            options()
                .flat_tables(false)
                .small_segment_plans(small_plans)
                .decoded_tables_up_to(up_to)
                .prefault(false)
        };
        let queries = |model: &Model, rng: &mut Rng| {
            let mut q: Vec<u64> = model.values().map(|(fp, _)| *fp).take(50).collect();
            q.extend((0..50).map(|_| rng.fingerprint()));
            q.extend((0..20).map(|_| rng.next()));
            q.extend(CENTRES);
            q
        };
        let check = |index: &Index, model: &Model, queries: &[u64]| {
            for k in [0, 1, 3] {
                let answers = index.query_batch(queries, k).unwrap();
                for (fp, answer) in queries.iter().zip(&answers) {
                    assert_eq!(*answer, brute_force(model, *fp, k), "k = {k}, {fp:#x}");
                    assert_eq!(index.query(*fp, k).unwrap(), *answer, "k = {k}, {fp:#x}");
                }
            }
        };
        {
            let index = Index::open(dir.path(), with(u64::MAX)).unwrap();
            // A load that has not queried yet writes no copies.
            churn(&index, &mut model, &mut rng, 500);
            index.flush().unwrap();
            assert!(index.stats().segments > 0);
            assert_eq!(index.stats().decoded_table_bytes, 0);
            assert!(index.query(0, 3).unwrap().len() <= model.len());
            churn(&index, &mut model, &mut rng, 2_000);
            index.flush().unwrap();
            let stats = index.stats();
            assert!(stats.segments > 1, "{} segments", stats.segments);
            assert!(stats.decoded_table_bytes > 0, "no segment was decoded");
            check(&index, &model, &queries(&model, &mut rng));
        }
        let index = Index::open(dir.path(), with(0)).unwrap();
        assert_eq!(index.stats().decoded_table_bytes, 0);
        check(&index, &model, &queries(&model, &mut rng));
        // Written without copies, none are made.
        churn(&index, &mut model, &mut rng, 500);
        index.flush().unwrap();
        assert_eq!(index.stats().decoded_table_bytes, 0);
        check(&index, &model, &queries(&model, &mut rng));
    }
}

/// A bulk load that does not query writes no copies; its first query has
/// the segments written so far decoded on a thread of their own, and the
/// answers stay those of a brute-force scan throughout.
#[test]
fn the_first_query_has_a_bulk_load_decoded() {
    let dir = tempfile::tempdir().unwrap();
    let index = Index::open(dir.path(), options().flat_tables(false).prefault(false)).unwrap();
    let mut model = Model::new();
    let mut rng = Rng(41);
    churn(&index, &mut model, &mut rng, 3_000);
    index.compact().unwrap();
    assert_eq!(index.stats().segments, 1);
    assert_eq!(index.stats().decoded_table_bytes, 0);
    let queries: Vec<u64> = model.values().map(|(fp, _)| *fp).take(40).collect();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    loop {
        for &fp in &queries {
            assert_eq!(index.query(fp, 3).unwrap(), brute_force(&model, fp, 3));
        }
        if index.stats().decoded_table_bytes > 0 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the compacted segment was not decoded within 120 s of the first query"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    for &fp in &queries {
        assert_eq!(index.query(fp, 3).unwrap(), brute_force(&model, fp, 3));
    }
}

/// Segments of flat tables (format version 5) answer as a brute-force scan
/// does, take no decoded copy, and mix with Rice-coded segments in one
/// index: flushed flat, then Rice-coded beside them, merged into a
/// Rice-coded segment, then into a flat one, answering exactly throughout,
/// and `verify` passes at each step.
#[test]
fn flat_and_rice_coded_segments_answer_alike_and_merge_into_each_other() {
    let dir = tempfile::tempdir().unwrap();
    let mut model = Model::new();
    let mut rng = Rng(57);
    let check = |index: &Index, model: &Model, rng: &mut Rng, what: &str| {
        let mut queries: Vec<u64> = model.values().map(|(fp, _)| *fp).take(60).collect();
        queries.extend(model.values().map(|(fp, _)| fp ^ 0b1001).take(60));
        queries.extend((0..40).map(|_| rng.fingerprint()));
        queries.extend(CENTRES);
        for k in [0, 1, 3] {
            let answers = index.query_batch(&queries, k).unwrap();
            for (fp, answer) in queries.iter().zip(&answers) {
                let want = brute_force(model, *fp, k);
                assert_eq!(*answer, want, "{what}: k = {k}, {fp:#x}");
                assert_eq!(index.query(*fp, k).unwrap(), want, "{what}: k = {k}");
            }
        }
        index.verify().unwrap();
    };
    {
        let index = Index::open(dir.path(), options()).unwrap();
        churn(&index, &mut model, &mut rng, 2_000);
        index.flush().unwrap();
        assert!(index.stats().segments > 1);
        check(&index, &model, &mut rng, "flat");
        assert_eq!(
            index.stats().decoded_table_bytes,
            0,
            "a flat segment was copied"
        );
    }
    {
        let index = Index::open(dir.path(), options().flat_tables(false)).unwrap();
        churn(&index, &mut model, &mut rng, 1_000);
        index.flush().unwrap();
        check(&index, &model, &mut rng, "flat and Rice-coded");
        index.compact().unwrap();
        check(&index, &model, &mut rng, "compacted Rice-coded");
    }
    let index = Index::open(dir.path(), options()).unwrap();
    churn(&index, &mut model, &mut rng, 500);
    index.flush().unwrap();
    check(&index, &model, &mut rng, "Rice-coded and flat");
    index.compact().unwrap();
    check(&index, &model, &mut rng, "compacted flat");
    assert_eq!(index.stats().decoded_table_bytes, 0);
}
