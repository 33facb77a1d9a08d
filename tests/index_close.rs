//! `Index::close`: the threads stopped and the lock released as a drop does,
//! and a failure a drop would swallow (a background flush that failed)
//! reported with its cause.

mod common;

use std::path::Path;
use std::sync::Arc;

use common::schedule::Gates;
use common::{Model, Rng, brute_force};
use simhashdb::engine::fault::{Fault, FaultFs, FaultKind, Op};
use simhashdb::engine::fs::FileSystem;
use simhashdb::engine::schedule::Point;
use simhashdb::plan::Plan;
use simhashdb::{Error, Index, Options};

fn dir() -> &'static Path {
    Path::new("/index")
}

/// A process over `fs` (background threads allowed), with the flush thread
/// on and a memtable of about 20 documents.
fn options(fs: &FaultFs, gates: &Gates) -> Options {
    Options::new()
        .plan(Plan::new(5, 3).unwrap())
        .memtable_bytes(2_000)
        .file_system(Arc::new(fs.process()) as Arc<dyn FileSystem>)
        .merge_policy(None)
        .flush_thread(true)
        .schedule(gates.schedule())
}

#[test]
fn close_reports_a_background_flush_that_failed_with_its_cause() {
    let fs = FaultFs::new();
    let gates = Gates::new();
    gates.hold(Point::FlushStarted);
    let index = Index::open(dir(), options(&fs, &gates)).unwrap();
    let mut model = Model::new();
    let mut id = 0;
    // Writes until one hands the memtable over to the flush thread, which
    // stops at the gate.
    while index.stats().flushing_docs == 0 {
        let fp = Rng(id).next();
        index.insert(id, fp).unwrap();
        model.insert(id, (fp, None));
        id += 1;
        assert!(id < 10_000, "the memtable never filled");
    }
    gates.wait_for(Point::FlushStarted);
    // The flush thread's first call, creating the segment's doc map, fails.
    fs.inject(Fault::new(FaultKind::Eio).on(&[Op::Create]));
    gates.release(Point::FlushStarted);
    match index.close() {
        Err(Error::Poisoned { cause }) => {
            assert!(cause.contains(".ids"), "the cause names the file: {cause}")
        }
        other => panic!("close after a failed background flush: {other:?}"),
    }
    assert_eq!(fs.faults_fired(), 1, "the fault never fired");

    // Every acknowledged write is in the WAL: the next open has them all.
    let gates = Gates::new();
    let index = Index::open(dir(), options(&fs, &gates)).unwrap();
    for (&id, &(fp, _)) in &model {
        assert_eq!(index.get(id).unwrap(), Some(fp), "{id} after reopening");
    }
    let fp = model[&0].0;
    assert_eq!(index.query(fp, 3).unwrap(), brute_force(&model, fp, 3));
    index.close().unwrap();
}

#[test]
fn close_of_a_healthy_index_waits_for_its_threads_and_releases_the_lock() {
    let dir = tempfile::tempdir().unwrap();
    let options = || {
        Options::new()
            .plan(Plan::new(5, 3).unwrap())
            .memtable_bytes(4096)
            .flush_thread(true)
            .merge_thread(true)
    };
    let index = Index::open(dir.path(), options()).unwrap();
    let mut model = Model::new();
    let mut rng = Rng(5);
    for id in 0..3_000 {
        let fp = rng.fingerprint();
        index.insert(id, fp).unwrap();
        model.insert(id, (fp, None));
    }
    index.close().unwrap();
    // The lock is released: the directory opens at once, read-write.
    let index = Index::open(dir.path(), options()).unwrap();
    assert_eq!(index.len().unwrap(), model.len() as u64);
    for fp in common::CENTRES {
        assert_eq!(index.query(fp, 3).unwrap(), brute_force(&model, fp, 3));
    }
    index.close().unwrap();
    let read_only = Index::open_read_only(dir.path()).unwrap();
    assert_eq!(read_only.len().unwrap(), model.len() as u64);
    read_only.close().unwrap();
}
