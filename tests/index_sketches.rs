//! Documents inserted with a verification value (`Sketch`) keep it through
//! the WAL, the memtable, a flush, merges, a reopen and a compaction, and
//! documents inserted without one stay without (docs/FORMAT.md, "Doc map
//! entry block"). Every answer is checked against a brute-force model.

use std::collections::BTreeMap;

use simhashdb::sketch::Sketch;
use simhashdb::{Index, Match, Options, hamming};

/// id -> (fingerprint, sketch, name).
type Model = BTreeMap<u64, (u64, Option<Sketch>, Option<String>)>;

fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn sketch_of(state: &mut u64) -> Sketch {
    let (a, b) = (splitmix(state), splitmix(state));
    let mut bytes = [0u8; Sketch::BYTES];
    bytes[..8].copy_from_slice(&a.to_le_bytes());
    bytes[8..].copy_from_slice(&b.to_le_bytes());
    Sketch::from_bytes(bytes)
}

/// Checks every document and the queries of every fingerprint (and of
/// each with two bits flipped) against the model.
fn check(index: &Index, model: &Model, what: &str) {
    let mut seen = BTreeMap::new();
    index
        .for_each_doc(|d| {
            seen.insert(d.id, (d.fingerprint, d.sketch, d.name.clone()));
        })
        .unwrap();
    assert_eq!(&seen, model, "{what}: documents");
    for (&id, (fp, sketch, name)) in model {
        let doc = index.get_doc(id).unwrap().expect("live");
        assert_eq!(
            (doc.fingerprint, doc.sketch, &doc.name),
            (*fp, *sketch, name),
            "{what}: {id}"
        );
    }
    let k = index.plan().k();
    for (i, &(fp, _, _)) in model.values().enumerate() {
        for q in [fp, fp ^ (0b11 << (i % 62))] {
            let got = index.query(q, k).unwrap();
            let mut want: Vec<Match> = model
                .iter()
                .filter(|(_, (f, _, _))| hamming(*f, q) <= k)
                .map(|(&id, (f, sketch, name))| Match {
                    id,
                    fingerprint: *f,
                    distance: hamming(*f, q),
                    name: name.clone(),
                    sketch: *sketch,
                })
                .collect();
            want.sort_by_key(|m| (m.distance, m.id));
            assert_eq!(got, want, "{what}: query {q:016x}");
        }
    }
}

#[test]
fn sketches_come_back_identical_after_flush_merge_reopen_and_compaction() {
    let temp = tempfile::tempdir().unwrap();
    let dir = temp.path().join("index");
    let options = || Options::default().merge_policy(None).flush_thread(false);
    let index = Index::open(&dir, options()).unwrap();
    let mut model = Model::new();
    let mut state = 38;
    // Clusters of near-duplicates: some sketched, some not, some named.
    let mut centres = Vec::new();
    for round in 0..4u64 {
        let mut batch = Vec::new();
        for j in 0..150u64 {
            let id = round * 1000 + j;
            let fp = if j % 3 == 0 || centres.is_empty() {
                let c = splitmix(&mut state);
                centres.push(c);
                c
            } else {
                let c = centres[(splitmix(&mut state) % centres.len() as u64) as usize];
                c ^ (1 << (splitmix(&mut state) % 64))
            };
            let sketch = (j % 4 != 0).then(|| sketch_of(&mut state));
            let name = (j % 5 == 0).then(|| format!("doc-{id}"));
            batch.push((id, fp, sketch, name.clone()));
            model.insert(id, (fp, sketch, name));
        }
        index.insert_batch_sketched(batch).unwrap();
        // Single inserts too: plain, named, sketched.
        let id = round * 1000 + 500;
        let sketch = sketch_of(&mut state);
        index
            .insert_sketched(id, centres[0], sketch, Some("one".into()))
            .unwrap();
        model.insert(id, (centres[0], Some(sketch), Some("one".into())));
        index.insert(id + 1, centres[1]).unwrap();
        model.insert(id + 1, (centres[1], None, None));
        // A replacement drops the old sketch; a delete drops the document.
        if round > 0 {
            let old = (round - 1) * 1000 + 7;
            index.insert(old, centres[2]).unwrap();
            model.insert(old, (centres[2], None, None));
            let old = (round - 1) * 1000 + 8;
            let sketch = sketch_of(&mut state);
            index
                .insert_sketched(old, centres[3], sketch, None)
                .unwrap();
            model.insert(old, (centres[3], Some(sketch), None));
            index.delete((round - 1) * 1000 + 9).unwrap();
            model.remove(&((round - 1) * 1000 + 9));
        }
        check(&index, &model, &format!("round {round} in the memtable"));
        if round < 3 {
            index.flush().unwrap();
            check(&index, &model, &format!("round {round} flushed"));
        }
    }
    index.close().unwrap();
    // Reopened: the last round is replayed from the WAL.
    let index = Index::open(&dir, options()).unwrap();
    check(&index, &model, "reopened");
    index.flush().unwrap();
    index.compact().unwrap();
    assert_eq!(index.stats().segments, 1);
    check(&index, &model, "compacted");
    index.verify().unwrap();
    drop(index);
    let index = Index::open_read_only(&dir).unwrap();
    check(&index, &model, "read-only after compaction");
}

#[test]
fn insert_if_new_many_sketched_stores_the_sketches_of_what_it_inserts() {
    let temp = tempfile::tempdir().unwrap();
    let index = Index::open(temp.path().join("index"), Options::default()).unwrap();
    let mut state = 7;
    let (a, b) = (sketch_of(&mut state), sketch_of(&mut state));
    let fp = splitmix(&mut state);
    let answers = index
        .insert_if_new_many_sketched(
            [
                (1, fp, Some(a), Some("a")),
                (2, fp ^ 1, Some(b), None),
                (3, !fp, None, None),
            ],
            3,
            10,
        )
        .unwrap();
    assert_eq!(answers[0], Ok(()));
    assert_eq!(answers[2], Ok(()));
    // The second is a duplicate of the first, reported with its sketch.
    let dup = answers[1].as_ref().unwrap_err();
    assert_eq!(dup.len(), 1);
    assert_eq!((dup[0].id, dup[0].sketch), (1, Some(a)));
    assert_eq!(index.get_doc(1).unwrap().unwrap().sketch, Some(a));
    assert_eq!(index.get_doc(2).unwrap(), None);
    assert_eq!(index.get_doc(3).unwrap().unwrap().sketch, None);
    index.flush().unwrap();
    assert_eq!(index.get_doc(1).unwrap().unwrap().sketch, Some(a));
    assert_eq!(index.get_doc(3).unwrap().unwrap().sketch, None);
}
