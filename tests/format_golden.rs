//! Indexes of an earlier format version that this build still reads open,
//! answer as they did, and are rewritten in the current version by a
//! compaction (docs/FORMAT.md, "Versions").
//!
//! `tests/data/format-v3/index/` was written by the last build of format
//! version 3 with `cargo run --release --example make_fixture --
//! tests/data/format-v3` (examples/make_fixture.rs): two segments, a
//! tombstone, a replaced document and a WAL tail that was never flushed.
//! `tests/data/format-v3/docs.tsv` lists its live documents as that build
//! read them; every answer here is checked against a brute-force scan of
//! that listing. `tests/data/format-v4/` was written the same way by the
//! last build of format version 4 (whose tables are all Rice-coded; version
//! 5 writes flat ones).

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use simhashdb::format::{FORMAT_VERSION, SegmentReader};
use simhashdb::sketch::{Sketch, TextValues};
use simhashdb::{Doc, Index, Options, Rule, hamming};

/// Every file of `dir` but the lock file, with its bytes.
fn files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.file_name() != "LOCK")
        .map(|e| {
            (
                e.file_name().to_string_lossy().into_owned(),
                fs::read(e.path()).unwrap(),
            )
        })
        .collect()
}

fn fixture(version: u32) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/data/format-v{version}"))
}

/// A copy of the fixture's index in a fresh temporary directory.
fn copy(version: u32) -> (tempfile::TempDir, PathBuf) {
    let temp = tempfile::tempdir().unwrap();
    let dir = temp.path().join("index");
    fs::create_dir(&dir).unwrap();
    for (name, bytes) in files(&fixture(version).join("index")) {
        fs::write(dir.join(name), bytes).unwrap();
    }
    (temp, dir)
}

/// The fixture's listing (examples/make_fixture.rs gives the format).
fn listing(version: u32) -> Vec<Doc> {
    let text = fs::read_to_string(fixture(version).join("docs.tsv")).unwrap();
    text.lines()
        .map(|line| {
            let fields: Vec<&str> = line.splitn(4, '\t').collect();
            assert_eq!(fields.len(), 4, "{line}");
            let name = match fields[3] {
                "-" => None,
                n => Some(n.strip_prefix('=').expect(line).to_string()),
            };
            Doc {
                id: fields[0].parse().unwrap(),
                fingerprint: u64::from_str_radix(fields[1], 16).unwrap(),
                timestamp_ms: fields[2].parse().unwrap(),
                name,
                // The fixtures' documents have no sketches (version 3 has
                // none, and make_fixture.rs inserts none).
                sketch: None,
            }
        })
        .collect()
}

/// The format version in the header of every file of `dir`, by file name.
fn versions(dir: &Path) -> BTreeMap<String, u32> {
    files(dir)
        .into_iter()
        .map(|(name, bytes)| {
            let version = u32::from_le_bytes(bytes[8..12].try_into().unwrap());
            (name, version)
        })
        .collect()
}

/// The queries: every listed fingerprint, each with one and four bits
/// flipped, and fingerprints of removed documents.
fn queries(docs: &[Doc]) -> Vec<u64> {
    let mut out = Vec::new();
    for (i, doc) in docs.iter().enumerate() {
        out.push(doc.fingerprint);
        out.push(doc.fingerprint ^ (1 << (i % 64)));
        out.push(doc.fingerprint ^ (0b1111 << (i % 60)));
    }
    out.push(0);
    out.push(u64::MAX);
    out
}

/// Checks every document and every query answer of `index` against a
/// brute-force scan of `docs`.
fn check_answers(index: &Index, docs: &[Doc], what: &str) {
    let mut seen = Vec::new();
    index.for_each_doc(|doc| seen.push(doc.clone())).unwrap();
    seen.sort_by_key(|doc| doc.id);
    assert_eq!(seen, docs, "{what}: documents");
    assert_eq!(index.len().unwrap(), docs.len() as u64, "{what}: len");
    for doc in docs {
        assert_eq!(
            index.get_doc(doc.id).unwrap().as_ref(),
            Some(doc),
            "{what}: get_doc({})",
            doc.id
        );
    }
    for absent in [11, 250, 390, 400, 1 << 40] {
        assert_eq!(index.get_doc(absent).unwrap(), None, "{what}: {absent}");
    }
    let k = index.plan().k();
    for q in queries(docs) {
        let got: Vec<(u32, u64, Option<String>)> = index
            .query(q, k)
            .unwrap()
            .into_iter()
            .map(|m| (m.distance, m.id, m.name))
            .collect();
        let mut want: Vec<(u32, u64, Option<String>)> = docs
            .iter()
            .filter(|d| hamming(d.fingerprint, q) <= k)
            .map(|d| (hamming(d.fingerprint, q), d.id, d.name.clone()))
            .collect();
        want.sort();
        assert_eq!(got, want, "{what}: query {q:016x}");
    }
}

#[test]
fn the_version_3_fixture_is_what_its_listing_says() {
    fixture_is_what_its_listing_says(3);
}

#[test]
fn the_version_4_fixture_is_what_its_listing_says() {
    fixture_is_what_its_listing_says(4);
}

fn fixture_is_what_its_listing_says(version: u32) {
    let docs = listing(version);
    assert!(docs.len() >= 300, "{}", docs.len());
    assert!(docs.iter().any(|d| d.name.as_deref() == Some("")));
    assert!(docs.iter().any(|d| d.name.is_none()));
    let dir = fixture(version).join("index");
    let versions = versions(&dir);
    assert!(versions.values().all(|&v| v == version), "{versions:?}");
    assert!(versions.keys().filter(|n| n.ends_with(".ids")).count() >= 2);
    assert!(versions.keys().any(|n| n.ends_with(".wal")));
}

#[test]
fn a_version_3_index_opens_read_only_answers_as_listed_and_is_left_unchanged() {
    opens_read_only_answers_as_listed_and_is_left_unchanged(3);
}

#[test]
fn a_version_4_index_opens_read_only_answers_as_listed_and_is_left_unchanged() {
    opens_read_only_answers_as_listed_and_is_left_unchanged(4);
}

fn opens_read_only_answers_as_listed_and_is_left_unchanged(version: u32) {
    let docs = listing(version);
    let (_temp, dir) = copy(version);
    let before = files(&dir);
    let index = Index::open_read_only(&dir).unwrap();
    check_answers(&index, &docs, "read-only");
    index.verify().unwrap();
    drop(index);
    assert_eq!(files(&dir), before);
}

#[test]
fn a_version_3_index_opens_compacts_to_the_current_version_and_answers_the_same() {
    opens_compacts_to_the_current_version_and_answers_the_same(3);
}

/// A version 4 index (Rice-coded tables) takes new writes as it is: a
/// flush beside its segments writes a version 5 segment of flat tables,
/// both answer together, then a compaction rewrites everything in version 5.
#[test]
fn a_version_4_index_opens_compacts_to_the_current_version_and_answers_the_same() {
    let docs = listing(4);
    let (_temp, dir) = copy(4);
    let index = Index::open(&dir, Options::default()).unwrap();
    check_answers(&index, &docs, "opened");
    let mut after = docs.clone();
    for (i, doc) in docs.iter().take(50).enumerate() {
        let id = 2000 + i as u64;
        let fingerprint = doc.fingerprint ^ (1 << (i % 64));
        index.insert(id, fingerprint).unwrap();
        let mut written = None;
        index
            .for_each_doc(|d| {
                if d.id == id {
                    written = Some(d.clone());
                }
            })
            .unwrap();
        after.push(written.expect("the document just written"));
    }
    index.flush().unwrap();
    let versions_now = versions(&dir);
    assert!(versions_now.values().any(|&v| v == 4), "{versions_now:?}");
    assert!(
        versions_now
            .iter()
            .any(|(n, &v)| n.ends_with(".seg") && v == FORMAT_VERSION),
        "{versions_now:?}"
    );
    check_answers(&index, &after, "a version 5 segment beside version 4 ones");
    index.verify().unwrap();
    drop(index);
    opens_compacts_to_the_current_version_and_answers_the_same_in(&dir, &after);
}

fn opens_compacts_to_the_current_version_and_answers_the_same(version: u32) {
    let docs = listing(version);
    let (_temp, dir) = copy(version);
    opens_compacts_to_the_current_version_and_answers_the_same_in(&dir, &docs);
}

fn opens_compacts_to_the_current_version_and_answers_the_same_in(dir: &Path, docs: &[Doc]) {
    let dir = dir.to_path_buf();
    let index = Index::open(&dir, Options::default()).unwrap();
    check_answers(&index, docs, "opened");
    index.compact().unwrap();
    check_answers(&index, docs, "compacted");
    index.verify().unwrap();
    index.close().unwrap();
    let versions = versions(&dir);
    assert!(
        versions.values().all(|&v| v == FORMAT_VERSION),
        "{versions:?}"
    );
    assert_eq!(
        versions.keys().filter(|n| n.ends_with(".ids")).count(),
        1,
        "{versions:?}"
    );
    // The compacted segment's tables are flat (docs/FORMAT.md, "Flat
    // table section").
    for name in versions.keys().filter(|n| n.ends_with(".seg")) {
        let segment = SegmentReader::new(fs::read(dir.join(name)).unwrap()).unwrap();
        for t in 0..segment.table_count() {
            assert!(
                segment.flat_table(t).unwrap().is_some(),
                "{name}: table {t}"
            );
        }
    }
    let index = Index::open(&dir, Options::default()).unwrap();
    check_answers(&index, docs, "reopened");
    index.verify().unwrap();
    // New writes go on top of the converted index, with a sketch too.
    let sketch = Sketch::from_bytes([0x5a; Sketch::BYTES]);
    index
        .insert_sketched(1000, docs[0].fingerprint, sketch, Some("new".into()))
        .unwrap();
    index.delete(docs[1].id).unwrap();
    index.flush().unwrap();
    index.compact().unwrap();
    let mut after: Vec<Doc> = docs
        .iter()
        .filter(|d| d.id != docs[1].id)
        .cloned()
        .collect();
    let mut written = None;
    index
        .for_each_doc(|d| {
            if d.id == 1000 {
                written = Some(d.clone());
            }
        })
        .unwrap();
    let written = written.expect("document 1000");
    assert_eq!(written.sketch, Some(sketch));
    after.push(written);
    after.sort_by_key(|d| d.id);
    check_answers(&index, &after, "written after");
}

/// Verified answers on an index of the previous format: its documents have
/// no sketch, so a text's query and check accept them on their fingerprint
/// alone, as `query` does ([`Rule::Fingerprint`], no similarity), before and
/// after compaction.
#[test]
fn a_version_3_index_answers_texts_on_fingerprints_alone() {
    let docs = listing(3);
    let (_temp, dir) = copy(3);
    let index = Index::open(&dir, Options::default()).unwrap();
    let k = index.plan().k();
    let values = |fingerprint: u64| TextValues {
        fingerprint: Some(fingerprint),
        sketch: Sketch::from_bytes([0xa5; Sketch::BYTES]),
        tokens: 20,
        threshold: Sketch::THRESHOLD,
    };
    for stage in ["opened", "compacted"] {
        if stage == "compacted" {
            index.compact().unwrap();
        }
        let mut found = 0;
        for q in queries(&docs) {
            let got: Vec<(u32, u64, Rule, Option<f64>)> = index
                .query_verified(&values(q), k)
                .unwrap()
                .into_iter()
                .map(|m| (m.doc.distance, m.doc.id, m.rule, m.similarity))
                .collect();
            let mut want: Vec<(u32, u64, Rule, Option<f64>)> = docs
                .iter()
                .filter(|d| hamming(d.fingerprint, q) <= k)
                .map(|d| (hamming(d.fingerprint, q), d.id, Rule::Fingerprint, None))
                .collect();
            want.sort_by_key(|w| (w.0, w.1));
            found += want.len();
            assert_eq!(got, want, "{stage}: query {q:016x}");
        }
        assert!(found > 0);
    }
    // A check of a text: a duplicate exactly when a document lies within
    // k, and nothing written then.
    let near = docs[0].fingerprint ^ 1;
    let answer = index
        .insert_if_new_many_verified([(5000, values(near), None::<String>)], k, usize::MAX)
        .unwrap()
        .pop()
        .unwrap();
    let matches = answer.expect_err("a duplicate of document 0");
    assert!(matches.iter().all(|m| m.rule == Rule::Fingerprint));
    assert!(matches.iter().any(|m| m.doc.id == docs[0].id));
    assert_eq!(index.get(5000).unwrap(), None);
}
