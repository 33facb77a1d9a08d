//! Flushes on the background thread: while a full memtable is written to its
//! segment, writes go on into a new memtable, and reads search both, the
//! newer one's versions (upserts, deletes) winning over the frozen one's.
//! Checked against a model searched by brute force, while a flush is running
//! (`Stats::flushing_docs` says when), after it, and after dropping the index
//! in the middle of one.

mod common;

use common::schedule::Gates;
use common::{Model, Rng, brute_force};
use simhashdb::engine::schedule::Point;
use simhashdb::plan::Plan;
use simhashdb::{Index, Options};

/// About 300,000 documents per memtable: a flush takes long enough that
/// reads made right after a write hands a memtable over find it still
/// running.
fn options() -> Options {
    Options::new()
        .plan(Plan::new(5, 3).unwrap())
        .memtable_bytes(32 << 20)
        .merge_policy(None)
        .flush_thread(true)
}

/// Within 2 of one of 16 centres, so queries have matches.
fn near_centre(rng: &mut Rng) -> u64 {
    let centre = common::CENTRES[rng.index(4)] ^ (rng.below(4) << 20);
    centre ^ (1 << rng.below(64)) ^ (1 << rng.below(64))
}

/// Ids divisible by 50 near a centre (those the test rewrites), the rest
/// anywhere, so that queries return a few thousand documents at most, and
/// the brute force during a flush can scan only those near a centre.
fn fingerprint(id: u64, rng: &mut Rng) -> u64 {
    if id.is_multiple_of(50) {
        near_centre(rng)
    } else {
        rng.next()
    }
}

fn queries() -> impl Iterator<Item = u64> {
    (0..16).map(|i| common::CENTRES[i % 4] ^ ((i as u64 / 4) << 20))
}

/// The documents of `model` near a centre, scanned by brute force: the
/// answers to [`queries`] while a flush runs, when a scan of every document
/// would take longer than the flush.
#[derive(Default)]
struct Models {
    all: Model,
    near: Model,
}

impl Models {
    fn insert(&mut self, id: u64, fp: u64, name: Option<String>) {
        if id.is_multiple_of(50) {
            self.near.insert(id, (fp, name.clone()));
        }
        self.all.insert(id, (fp, name));
    }

    fn remove(&mut self, id: u64) {
        self.near.remove(&id);
        self.all.remove(&id);
    }
}

fn check_queries(index: &Index, model: &Model, when: &str) {
    for q in queries() {
        assert_eq!(
            index.query(q, 3).unwrap(),
            brute_force(model, q, 3),
            "{when}: query {q:#x}"
        );
    }
}

fn check_all(index: &Index, models: &Models, when: &str) {
    let model = &models.all;
    check_queries(index, model, when);
    for q in queries() {
        // What the checks during flushes relied on.
        assert_eq!(brute_force(&models.near, q, 3), brute_force(model, q, 3));
    }
    assert_eq!(&common::live_docs(index), model, "{when}: live documents");
}

/// Inserts batches of new documents until a write hands the memtable over to
/// the flush thread; returns the ids of the last batch (all in the frozen
/// memtable).
fn fill_until_a_flush_starts(
    index: &Index,
    models: &mut Models,
    rng: &mut Rng,
    next_id: &mut u64,
) -> std::ops::Range<u64> {
    loop {
        let ids = *next_id..*next_id + 1_000;
        *next_id = ids.end;
        let batch: Vec<(u64, u64, Option<String>)> = ids
            .clone()
            .map(|id| {
                let name = (id.is_multiple_of(7)).then(|| format!("d{id}"));
                (id, fingerprint(id, rng), name)
            })
            .collect();
        for (id, fp, name) in &batch {
            models.insert(*id, *fp, name.clone());
        }
        index.insert_batch(batch).unwrap();
        if index.stats().flushing_docs > 0 {
            return ids;
        }
    }
}

#[test]
fn reads_during_a_background_flush_see_both_memtables() {
    let tmp = tempfile::tempdir().unwrap();
    // The flush thread waits at the start of each flush until the test has
    // read: every round's reads run while a flush is under way, whatever
    // the machine's speed.
    let gates = Gates::new();
    gates.hold(Point::FlushStarted);
    let index = Index::open(tmp.path(), options().schedule(gates.schedule())).unwrap();
    let mut models = Models::default();
    let mut rng = Rng(0x5eed);
    let mut next_id = 0;
    // Rounds whose reads all ran while the flush was still running (the
    // first ends the loop).
    let mut inside = 0;
    // Documents in a segment, which the frozen memtables will shadow.
    let old = fill_until_a_flush_starts(&index, &mut models, &mut rng, &mut next_id);
    for round in 0..10 {
        // Lets the previous round's flush run, waits for it, and flushes
        // its writes; then holds the next flush at its start again.
        gates.release(Point::FlushStarted);
        index.flush().unwrap();
        gates.hold(Point::FlushStarted);
        // Newer versions of documents near a centre in a segment, to be
        // frozen with the memtable.
        for id in old.clone().skip(50).step_by(100) {
            let fp = near_centre(&mut rng);
            index.insert(id, fp).unwrap();
            models.insert(id, fp, None);
        }
        for id in old.clone().skip(100 * (round % 10)).step_by(1_000) {
            index.delete(id).unwrap();
            models.remove(id);
        }
        let frozen = fill_until_a_flush_starts(&index, &mut models, &mut rng, &mut next_id);
        let flushing = index.stats().flushing_docs;
        // Newer versions of documents near a centre in the frozen memtable:
        // upserts to fingerprints near other centres, and deletes.
        for id in frozen.clone().skip(50).step_by(100) {
            let fp = near_centre(&mut rng);
            index.insert(id, fp).unwrap();
            models.insert(id, fp, None);
        }
        for id in frozen.clone().step_by(100) {
            index.delete(id).unwrap();
            models.remove(id);
        }
        check_queries(
            &index,
            &models.near,
            &format!("round {round}, during a flush"),
        );
        for id in frozen.clone().chain(old.clone()) {
            assert_eq!(
                index.get(id).unwrap(),
                models.all.get(&id).map(|&(fp, _)| fp),
                "round {round}: get({id})"
            );
        }
        let stats = index.stats();
        assert_eq!(stats.memtable_docs, 20, "round {round}: the new memtable");
        if stats.flushing_docs == flushing {
            inside += 1;
            break;
        }
    }
    assert!(inside >= 1, "no round read while a flush was running");

    gates.release(Point::FlushStarted);
    index.flush().unwrap();
    let stats = index.stats();
    assert_eq!((stats.flushing_docs, stats.memtable_docs), (0, 0));
    check_all(&index, &models, "after flush()");

    // Dropped while a flush runs: the flush finishes or the WALs replay.
    fill_until_a_flush_starts(&index, &mut models, &mut rng, &mut next_id);
    drop(index);
    let index = Index::open(tmp.path(), options()).unwrap();
    check_all(&index, &models, "reopened after a drop during a flush");
}
