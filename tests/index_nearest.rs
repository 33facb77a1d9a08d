//! Queries and checks that keep only their nearest matches
//! (`Index::query_nearest`, `query_batch_nearest`,
//! `insert_if_new_many_nearest`): the first `limit` of what brute force
//! finds, however many documents lie within `k`, wherever they are stored.

mod common;

use simhashdb::{Index, Options};

use common::{Model, Rng, brute_force};

/// Many copies of a few fingerprints and documents near them, spread over
/// two segments and the memtable, some replaced and deleted.
fn crowded(dir: &std::path::Path) -> (Index, Model, Vec<u64>) {
    let index = Index::open(dir, Options::new()).expect("open");
    let mut model = Model::new();
    let mut rng = Rng(37);
    let centres: Vec<u64> = (0..4).map(|_| rng.fingerprint()).collect();
    let mut id = 0u64;
    for round in 0..3 {
        let mut batch = Vec::new();
        for _ in 0..1500 {
            // Ids in no order: the nearest is not the first stored.
            id += 1;
            let doc = id.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 40;
            let mut fp = centres[(rng.next() % 4) as usize];
            if rng.next().is_multiple_of(3) {
                fp ^= 1 << (rng.next() % 64);
            }
            let name = doc.is_multiple_of(2).then(|| format!("doc {doc}"));
            batch.push((doc, fp, name.clone()));
            model.insert(doc, (fp, name));
        }
        index.insert_batch(batch).expect("insert");
        // Deletes and replacements of documents stored before.
        for doc in model.keys().copied().step_by(97).collect::<Vec<_>>() {
            index.delete(doc).expect("delete");
            model.remove(&doc);
        }
        if round < 2 {
            index.flush().expect("flush");
        }
    }
    (index, model, centres)
}

#[test]
fn nearest_queries_return_the_first_of_brute_force() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (index, model, centres) = crowded(dir.path());
    let mut queries: Vec<u64> = centres.clone();
    queries.extend(centres.iter().map(|c| c ^ 0b11));
    queries.push(0);
    for limit in [1, 2, 7, 100, 5000] {
        for k in [0, 1, 3] {
            let batch = index
                .query_batch_nearest(&queries, k, limit)
                .expect("batch");
            for (&fp, got) in queries.iter().zip(&batch) {
                let want: Vec<_> = brute_force(&model, fp, k).into_iter().take(limit).collect();
                assert_eq!(got, &want, "fp {fp:#x} k {k} limit {limit}");
                assert_eq!(
                    index.query_nearest(fp, k, limit).expect("query"),
                    want,
                    "fp {fp:#x} k {k} limit {limit}"
                );
            }
        }
    }
    assert!(index.query_nearest(1, 3, 0).is_err());
    assert!(index.query_nearest(1, 4, 1).is_err());
}

/// A batch check with a limit answers as without one, cut to the limit:
/// also where the batch itself replaces the nearest documents of the index,
/// so that the next nearest count.
#[test]
fn a_limited_batch_check_answers_the_first_matches_of_an_unlimited_one() {
    let a = tempfile::tempdir().expect("tempdir");
    let b = tempfile::tempdir().expect("tempdir");
    let (limited, model, centres) = crowded(a.path());
    let (unlimited, _, _) = crowded(b.path());
    // Replace the documents nearest each centre (by id, far away), then
    // check near the centres and elsewhere.
    let mut batch = Vec::new();
    for &c in &centres {
        for m in brute_force(&model, c, 3).into_iter().take(3) {
            batch.push((m.id, !c, None::<String>));
        }
    }
    for &c in &centres {
        batch.push((1 << 50 | c >> 20, c ^ 0b100, Some("near".to_string())));
        batch.push((2 << 50 | c >> 20, c, None));
    }
    batch.push((3 << 50, 0x5555, None));
    batch.push((3 << 50 | 1, 0x5557, None));
    for limit in [1, 2] {
        let got = limited
            .insert_if_new_many_nearest(batch.clone(), 3, limit)
            .expect("limited");
        let want = unlimited
            .insert_if_new_many(batch.clone(), 3)
            .expect("unlimited");
        assert_eq!(got.len(), want.len());
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            match (g, w) {
                (Ok(()), Ok(())) => {}
                (Err(g), Err(w)) => {
                    assert_eq!(g[..], w[..limit.min(w.len())], "document {i}");
                }
                _ => panic!("document {i}: {g:?} against {w:?}"),
            }
        }
    }
    assert!(limited.insert_if_new_many_nearest(batch, 3, 0).is_err());
}
