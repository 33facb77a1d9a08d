//! The `serde` feature: the public result types serialize with their field
//! names, as the command line's `--json` output and embedders' logs use them.
#![cfg(feature = "serde")]

use serde_json::{Value, json};
use simhashdb::{Index, Options, hamming};

#[test]
fn results_serialize_with_their_field_names() {
    let dir = tempfile::tempdir().unwrap();
    let index = Index::open(dir.path(), Options::default()).unwrap();
    let (a, b) = (0x0123_4567_89ab_cdefu64, 0x0123_4567_89ab_cdeeu64);
    index.insert_named(1, a, "page one").unwrap();
    index.insert(2, b).unwrap();

    let matches = index.query(a, 3).unwrap();
    assert_eq!(
        serde_json::to_value(&matches).unwrap(),
        json!([
            {"id": 1, "fingerprint": a, "distance": 0, "name": "page one"},
            {"id": 2, "fingerprint": b, "distance": hamming(a, b), "name": null},
        ])
    );

    let doc = index.get_doc(1).unwrap().unwrap();
    assert_eq!(
        serde_json::to_value(&doc).unwrap(),
        json!({"id": 1, "fingerprint": a, "name": "page one", "timestamp_ms": doc.timestamp_ms})
    );

    index.flush().unwrap();
    let stats = index.stats();
    let value = serde_json::to_value(&stats).unwrap();
    // The plan as `simhashdb stats` prints it; every other field as a number.
    assert_eq!(value["plan"], Value::from(stats.plan.to_string()));
    assert_eq!(value["segments"], Value::from(stats.segments));
    assert_eq!(value["segment_docs"], Value::from(stats.segment_docs));
    assert_eq!(value["segment_docs"], Value::from(2));
    assert_eq!(value["memtable_docs"], Value::from(stats.memtable_docs));
    assert_eq!(
        value["fingerprint_config"],
        Value::from(stats.fingerprint_config.clone())
    );

    let report = index.verify().unwrap();
    let value = serde_json::to_value(&report).unwrap();
    assert_eq!(value["files"], Value::from(report.files));
    assert_eq!(value["bytes"], Value::from(report.bytes));
    assert!(report.files > 0 && value["wal_tails"].is_array());
}
