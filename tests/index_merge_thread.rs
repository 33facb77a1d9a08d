//! Merges on the background thread: while a writer upserts and deletes with a
//! tiny memtable (a flush every few hundred writes, a merge every few
//! flushes), the state always equals the model, and survives reopening.

mod common;

use std::sync::Arc;

use common::mix;
use common::schedule::{Gates, without_hanging};
use common::{Model, brute_force};
use simhashdb::engine::policy::TieredMergePolicy;
use simhashdb::engine::schedule::Point;
use simhashdb::plan::Plan;
use simhashdb::{Index, Options};

fn options(merge_thread: bool) -> Options {
    Options::new()
        .plan(Plan::new(5, 3).unwrap())
        .memtable_bytes(24 << 10)
        .merge_policy(Some(Arc::new(TieredMergePolicy { fan_in: 3 })))
        .merge_thread(merge_thread)
}

/// Near a few centres, so queries have matches.
fn fingerprint(r: u64) -> u64 {
    let centre = mix(r % 16);
    centre ^ (1 << (r >> 58)) ^ ((r >> 30) & 0b11)
}

fn check(index: &Index, model: &Model, when: &str) {
    for c in 0..16 {
        let q = mix(c) ^ 0b100;
        assert_eq!(
            index.query(q, 3).unwrap(),
            brute_force(model, q, 3),
            "{when}: query near centre {c}"
        );
    }
    assert_eq!(&common::live_docs(index), model, "{when}: live documents");
}

fn run(merge_thread: bool) {
    let tmp = tempfile::tempdir().unwrap();
    let index = Index::open(tmp.path(), options(merge_thread)).unwrap();
    let mut model = Model::new();
    let mut most_segments = 0;
    for i in 0..12_000u64 {
        let r = mix(i);
        let id = r % 2_000;
        if r.is_multiple_of(7) {
            index.delete(id).unwrap();
            model.remove(&id);
        } else {
            let name = r.is_multiple_of(3).then(|| format!("doc {i}"));
            let fp = fingerprint(mix(r));
            match &name {
                Some(n) => index.insert_named(id, fp, n.clone()).unwrap(),
                None => index.insert(id, fp).unwrap(),
            }
            model.insert(id, (fp, name));
        }
        if i % 1_500 == 0 {
            check(&index, &model, &format!("after {i} writes"));
        }
        most_segments = most_segments.max(index.stats().segments);
    }
    check(&index, &model, "at the end");
    // Merges happened: far fewer segments remain than flushes were made.
    assert!(most_segments >= 3, "{most_segments} segments at most");
    drop(index);
    let index = Index::open(tmp.path(), options(merge_thread)).unwrap();
    check(&index, &model, "after reopening");
    index.compact().unwrap();
    assert!(index.stats().segments <= 1);
    check(&index, &model, "after compaction");
}

#[test]
fn background_merges_keep_the_state_equal_to_the_model() {
    run(true);
}

#[test]
fn merges_on_the_writing_thread_keep_the_state_equal_to_the_model() {
    run(false);
}

/// Merges everything once there are 4 segments, slowly (a merge thread
/// that cannot keep up with the flushes).
#[derive(Debug)]
struct SlowMergeAll;

impl simhashdb::engine::policy::MergePolicy for SlowMergeAll {
    fn merge_newest(&self, segments: &[simhashdb::format::SegmentMeta]) -> Option<usize> {
        std::thread::sleep(std::time::Duration::from_millis(20));
        (segments.len() >= 4).then_some(segments.len())
    }
}

/// The most segments seen after any write of a workload that flushes on
/// every write, with a merge thread that falls behind.
fn most_segments_seen(max_segments: usize) -> usize {
    let dir = tempfile::tempdir().unwrap();
    let index = Index::open(
        dir.path(),
        Options::new()
            .plan(Plan::new(5, 3).unwrap())
            .memtable_bytes(1)
            .merge_policy(Some(Arc::new(SlowMergeAll)))
            .max_segments(max_segments),
    )
    .unwrap();
    let mut most = 0;
    for i in 0..40u64 {
        let batch: Vec<(u64, u64, Option<String>)> = (0..20)
            .map(|j| (i * 20 + j, mix(i * 20 + j), None))
            .collect();
        index.insert_batch(batch).unwrap();
        most = most.max(index.stats().segments);
    }
    for i in 0..800 {
        assert_eq!(index.get(i).unwrap(), Some(mix(i)), "id {i}");
    }
    most
}

#[test]
fn writers_wait_for_a_merge_thread_that_falls_behind() {
    // The policy merges at 4, so a writer waiting while there are more than
    // 3 never sees more than 3 after a write returns.
    assert!(most_segments_seen(3) <= 3);
    // Without the wait, segments pile up (40 flushes against merges that
    // each take at least 40 ms, two consultations of the policy): the bound
    // above is the wait's doing.
    assert!(most_segments_seen(usize::MAX) > 3);
}

/// A merge that takes as long as it likes (the merge thread held once it
/// has written its segment, its run claimed) does not hold up writes: the
/// writing thread, finding more than `max_segments` segments, merges runs
/// of the newer segments itself rather than wait (`Point::HelpMerge`), over
/// and over while the merge thread stays held. Every write returns with at
/// most `max_segments` segments; once the merge thread is released, the
/// documents equal the model, queries equal brute force, and both hold
/// after reopening.
#[test]
fn a_long_merge_does_not_hold_up_writes() {
    let gates = Arc::new(Gates::new());
    gates.hold_nth(Point::MergeWritten, 1);
    let tmp = tempfile::tempdir().unwrap();
    let options = |gates: &Gates| {
        Options::new()
            .plan(Plan::new(5, 3).unwrap())
            .memtable_bytes(1)
            .merge_policy(Some(Arc::new(TieredMergePolicy { fan_in: 3 })))
            .max_segments(6)
            .schedule(gates.schedule())
    };
    let index = Arc::new(Index::open(tmp.path(), options(&gates)).unwrap());
    let writes = 60u64;
    // Every write fills the memtable: one flush each. The first three, of
    // 1,000 documents each, make the merge thread's run (3 segments), large
    // enough against the runs of single documents after it that the writer
    // merges rather than wait.
    let mut model = Model::new();
    for i in 0..3 {
        let batch: Vec<(u64, u64, Option<String>)> = (0..1_000)
            .map(|j| (1_000 + i * 1_000 + j, fingerprint(mix(i << 20 | j)), None))
            .collect();
        for (id, fp, _) in &batch {
            model.insert(*id, (*fp, None));
        }
        index.insert_batch(batch).unwrap();
    }
    gates.wait_for(Point::MergeWritten);
    let writer = {
        let (index, gates) = (index.clone(), gates.clone());
        std::thread::spawn(move || {
            let mut most = 0;
            let mut helped_while_held = 0;
            for i in 3..writes {
                index.insert(i % 40, fingerprint(mix(i))).unwrap();
                most = most.max(index.stats().segments);
                if gates.is_waiting(Point::MergeWritten) {
                    helped_while_held = gates.reached(Point::HelpMerge);
                }
            }
            (most, helped_while_held)
        })
    };
    // The writes finish with the merge thread still held: the writer never
    // waited for it (a regression hangs here, and the detector fails it).
    let (most, helped) = without_hanging("the writer", move || writer.join().unwrap());
    assert!(
        gates.is_waiting(Point::MergeWritten),
        "the merge thread was not held"
    );
    assert!(most <= 6, "{most} segments after a write");
    assert!(helped >= 4, "the writer merged only {helped} runs itself");
    gates.release(Point::MergeWritten);
    for i in 3..writes {
        model.insert(i % 40, (fingerprint(mix(i)), None));
    }
    index.flush().unwrap();
    check(&index, &model, "after the long merge");
    let index = Arc::into_inner(index).expect("one owner");
    index.verify().unwrap();
    drop(index);
    let index = Index::open(tmp.path(), options(&gates)).unwrap();
    check(&index, &model, "reopened");
    index.verify().unwrap();
}
