//! Merges combine their inputs' id indexes and tables, each sorted, into one
//! (docs/ARCHITECTURE.md, "A merge keeps the newest version of each id"):
//! inputs that share fingerprints, ids replaced or deleted in a newer input,
//! an input of tombstones only, an input none of whose versions survive,
//! runs of 3 and 2 segments that leave older ones (tombstones kept) and a
//! compaction of 9. After every merge, the index answers as a brute-force
//! scan of the model, lists exactly the model's documents, and does so again
//! after reopening.

mod common;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use common::{Model, brute_force, live_docs, mix};
use simhashdb::engine::policy::MergePolicy;
use simhashdb::format::SegmentMeta;
use simhashdb::plan::Plan;
use simhashdb::{Index, Options};

/// Merges the newest `n` segments once, when asked to (n ≥ 2).
#[derive(Debug, Default)]
struct Requested(AtomicUsize);

impl MergePolicy for Requested {
    fn merge_newest(&self, segments: &[SegmentMeta]) -> Option<usize> {
        let n = self.0.load(Ordering::SeqCst);
        (n >= 2 && segments.len() >= n).then(|| {
            self.0.store(0, Ordering::SeqCst);
            n
        })
    }
}

/// 300 fingerprints that many documents share, in every segment.
fn shared(r: u64) -> u64 {
    mix(r % 300)
}

fn check(index: &Index, model: &Model, when: &str) {
    for c in 0..300 {
        let q = shared(c) ^ (1 << (c % 64));
        assert_eq!(
            index.query(q, 3).unwrap(),
            brute_force(model, q, 3),
            "{when}: query near shared fingerprint {c}"
        );
    }
    for (&id, &(fp, _)) in model.iter().step_by(97) {
        assert_eq!(
            index.query(fp, 3).unwrap(),
            brute_force(model, fp, 3),
            "{when}: query at id {id}'s fingerprint"
        );
    }
    assert_eq!(&live_docs(index), model, "{when}: live documents");
}

fn run(small_segment_plans: bool) {
    let tmp = tempfile::tempdir().unwrap();
    let policy = Arc::new(Requested::default());
    let options = || {
        Options::new()
            .plan(Plan::new(5, 3).unwrap())
            .small_segment_plans(small_segment_plans)
            .merge_policy(Some(policy.clone()))
            .merge_thread(false)
    };
    let index = Index::open(tmp.path(), options()).unwrap();
    let mut model = Model::new();
    let mut next_id = 0u64;
    let mut touched = BTreeSet::new();
    for segment in 0..12u64 {
        let r = |i: u64| mix(segment << 32 | i);
        let previous = std::mem::take(&mut touched);
        match segment {
            // Tombstones only.
            4 => {
                for i in 0..400 {
                    let id = r(i) % next_id;
                    index.delete(id).unwrap();
                    touched.insert(id);
                    model.remove(&id);
                }
            }
            // Writes again every id segment 5 wrote or deleted, so none of
            // that input's versions survives the merge of both.
            6 => {
                for &id in &previous {
                    let fp = shared(r(id));
                    index.insert(id, fp).unwrap();
                    touched.insert(id);
                    model.insert(id, (fp, None));
                }
            }
            _ => {
                // New ids: a third at shared fingerprints, others a few bits
                // from one, the rest random; sizes that differ by segment.
                for i in 0..(segment % 4 + 1) * 1_000 {
                    let fp = match r(i) % 3 {
                        0 => shared(r(i) >> 8),
                        1 => shared(r(i) >> 8) ^ (0b101 << (r(i) % 60)),
                        _ => r(i | (1 << 40)),
                    };
                    let name = (i % 5 == 0).then(|| format!("doc {next_id}"));
                    match &name {
                        Some(n) => index.insert_named(next_id, fp, n.clone()).unwrap(),
                        None => index.insert(next_id, fp).unwrap(),
                    }
                    model.insert(next_id, (fp, name));
                    touched.insert(next_id);
                    next_id += 1;
                }
                // Older ids replaced, some at the fingerprint they had.
                for i in 0..300 {
                    let id = r(i ^ 0xabc) % next_id;
                    let fp = match (i % 2, model.get(&id)) {
                        (0, Some(&(old, _))) => old,
                        _ => shared(r(i)),
                    };
                    index.insert(id, fp).unwrap();
                    touched.insert(id);
                    model.insert(id, (fp, None));
                }
                // Older ids deleted, a few of them put back in the same
                // memtable, and a few new ids inserted then deleted.
                for i in 0..100 {
                    let id = r(i ^ 0xdef) % next_id;
                    index.delete(id).unwrap();
                    touched.insert(id);
                    model.remove(&id);
                    if i % 4 == 0 {
                        let fp = shared(r(i));
                        index.insert(id, fp).unwrap();
                        touched.insert(id);
                        model.insert(id, (fp, None));
                    }
                }
                for _ in 0..20 {
                    index.insert(next_id, shared(next_id)).unwrap();
                    index.delete(next_id).unwrap();
                    touched.insert(next_id);
                    next_id += 1;
                }
            }
        }
        // Runs that leave older segments (tombstones kept), of 3 then of 2.
        let merge = match segment {
            6 => 3,
            9 => 2,
            _ => 0,
        };
        policy.0.store(merge, Ordering::SeqCst);
        let before = index.stats().segments;
        index.flush().unwrap();
        let after = index.stats().segments;
        if merge > 0 {
            assert_eq!(after, before + 2 - merge, "segment {segment}: merged");
            check(
                &index,
                &model,
                &format!("after merging {merge} at segment {segment}"),
            );
        } else {
            assert_eq!(after, before + 1, "segment {segment}: flushed");
        }
    }
    assert!(
        index.stats().segments > 8,
        "{} segments",
        index.stats().segments
    );
    check(&index, &model, "before the compaction");
    index.compact().unwrap();
    assert_eq!(index.stats().segments, 1);
    check(&index, &model, "after the compaction");
    drop(index);
    let index = Index::open(tmp.path(), options()).unwrap();
    check(&index, &model, "after reopening");
}

#[test]
fn merges_of_inputs_with_the_index_s_plan_answer_as_brute_force() {
    run(false);
}

#[test]
fn merges_of_inputs_with_smaller_plans_answer_as_brute_force() {
    run(true);
}
