//! The index's public operations, one behaviour at a time: upserts, deletes,
//! names, distance limits, recorded settings, check-and-insert, retention,
//! batches, statistics and poisoning after a failed write.

mod common;

use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use common::{dir, mix};
use simhashdb::engine::fault::{CrashMode, Fault, FaultFs, FaultKind, Op, Unsynced};
use simhashdb::engine::fs::FileSystem;
use simhashdb::format::{MAX_NAME_LEN, WalEnd, WalReader};
use simhashdb::plan::Plan;
use simhashdb::{Durability, Error, Index, Match, Options, Simhasher};

fn plan() -> Plan {
    Plan::new(5, 3).unwrap()
}

fn options(fs: &FaultFs) -> Options {
    Options::new()
        .plan(plan())
        .file_system(Arc::new(fs.clone()) as Arc<dyn FileSystem>)
}

fn open(fs: &FaultFs) -> Index {
    Index::open(dir(), options(fs)).unwrap()
}

fn ids(matches: &[Match]) -> Vec<u64> {
    matches.iter().map(|m| m.id).collect()
}

fn m(id: u64, fingerprint: u64, distance: u32, name: Option<&str>) -> Match {
    Match {
        id,
        fingerprint,
        distance,
        name: name.map(str::to_owned),
        sketch: None,
    }
}

const A: u64 = 0x0123_4567_89ab_cdef;
const B: u64 = 0xfedc_ba98_7654_3210;
const C: u64 = 0x0f0f_0f0f_0f0f_0f0f;

#[test]
fn upsert_replaces_the_fingerprint_wherever_the_old_one_lives() {
    let fs = FaultFs::new();
    let mut index = open(&fs);
    index.insert(1, A).unwrap();
    index.insert(1, B).unwrap();
    // In the memtable.
    assert_eq!(index.query(A, 3).unwrap(), vec![]);
    assert_eq!(index.query(B, 0).unwrap(), vec![m(1, B, 0, None)]);
    assert_eq!(index.get(1).unwrap(), Some(B));

    // The old version in a segment, the new one in the memtable.
    index.flush().unwrap();
    index.insert(1, C).unwrap();
    assert_eq!(index.query(B, 3).unwrap(), vec![]);
    assert_eq!(index.query(C ^ 0b101, 3).unwrap(), vec![m(1, C, 2, None)]);
    assert_eq!(index.get(1).unwrap(), Some(C));

    // Both in segments, then compacted, then reopened.
    index.flush().unwrap();
    index.insert(1, A).unwrap();
    index.flush().unwrap();
    for step in ["flushed", "compacted", "reopened"] {
        match step {
            "compacted" => index.compact().unwrap(),
            "reopened" => {
                drop(index);
                index = open(&fs);
            }
            _ => {}
        }
        assert_eq!(index.query(B, 3).unwrap(), vec![], "{step}");
        assert_eq!(index.query(C, 3).unwrap(), vec![], "{step}");
        assert_eq!(index.query(A, 0).unwrap(), vec![m(1, A, 0, None)], "{step}");
        assert_eq!(index.get(1).unwrap(), Some(A), "{step}");
    }
    assert_eq!(index.stats().segment_docs, 1);
}

#[test]
fn exact_duplicates_are_all_found_in_distance_then_id_order() {
    let fs = FaultFs::new();
    let index = open(&fs);
    for id in [9, 3, 7] {
        index.insert(id, A).unwrap();
    }
    index.flush().unwrap();
    for id in [1, 8] {
        index.insert(id, A).unwrap();
    }
    index.insert(5, A ^ 1).unwrap();
    index.insert(4, A ^ 0b11).unwrap();
    index.flush().unwrap();
    index.insert(2, A).unwrap();
    index.insert(6, A ^ 1 << 63).unwrap();
    let found = index.query(A, 3).unwrap();
    assert_eq!(ids(&found), vec![1, 2, 3, 7, 8, 9, 5, 6, 4]);
    assert!(
        found
            .windows(2)
            .all(|w| (w[0].distance, w[0].id) < (w[1].distance, w[1].id))
    );
    assert_eq!(ids(&index.query(A, 0).unwrap()), vec![1, 2, 3, 7, 8, 9]);
}

#[test]
fn a_deleted_document_is_gone_wherever_it_lives() {
    let fs = FaultFs::new();
    let mut index = open(&fs);
    // Deleted in the memtable.
    index.insert(5, A).unwrap();
    index.delete(5).unwrap();
    assert_eq!(index.get(5).unwrap(), None);
    assert_eq!(index.query(A, 3).unwrap(), vec![]);

    // In a segment, deleted in the memtable; then the tombstone in a
    // segment; then compacted away; then reopened.
    index.insert(6, B).unwrap();
    index.insert(7, B).unwrap();
    index.flush().unwrap();
    index.delete(6).unwrap();
    for step in ["memtable", "flushed", "compacted", "reopened"] {
        match step {
            "flushed" => index.flush().unwrap(),
            "compacted" => {
                index.compact().unwrap();
                assert_eq!(index.stats().tombstones, 0);
            }
            "reopened" => {
                drop(index);
                index = open(&fs);
            }
            _ => {}
        }
        assert_eq!(index.get(6).unwrap(), None, "{step}");
        assert_eq!(index.get(7).unwrap(), Some(B), "{step}");
        assert_eq!(ids(&index.query(B, 3).unwrap()), vec![7], "{step}");
    }

    // Deleting an id that never existed is fine; inserting after a delete
    // brings the id back.
    index.delete(1_000).unwrap();
    assert_eq!(index.get(1_000).unwrap(), None);
    index.insert(6, C).unwrap();
    assert_eq!(index.get(6).unwrap(), Some(C));
    index.flush().unwrap();
    assert_eq!(index.get(6).unwrap(), Some(C));
}

#[test]
fn names_come_back_with_matches() {
    let fs = FaultFs::new();
    let mut index = open(&fs);
    index.insert_named(1, A, "https://example.com/a").unwrap();
    index.insert(2, A).unwrap();
    index.insert_named(3, A ^ 1, "файл/文件.txt").unwrap();
    let longest = "n".repeat(MAX_NAME_LEN);
    index.insert_named(4, B, longest.clone()).unwrap();
    let expected = vec![
        m(1, A, 0, Some("https://example.com/a")),
        m(2, A, 0, None),
        m(3, A ^ 1, 1, Some("файл/文件.txt")),
    ];
    for step in ["memtable", "flushed", "reopened"] {
        match step {
            "flushed" => index.flush().unwrap(),
            "reopened" => {
                drop(index);
                index = open(&fs);
            }
            _ => {}
        }
        assert_eq!(index.query(A, 3).unwrap(), expected, "{step}");
        assert_eq!(
            index.query(B, 0).unwrap(),
            vec![m(4, B, 0, Some(&longest))],
            "{step}"
        );
    }
    // An upsert without a name drops the old name.
    index.insert(1, A).unwrap();
    assert_eq!(index.query(A, 0).unwrap()[0], m(1, A, 0, None));
}

#[test]
fn a_name_over_the_limit_is_refused_and_nothing_is_written() {
    let fs = FaultFs::new();
    let index = open(&fs);
    index.insert(1, A).unwrap();
    let too_long = "x".repeat(MAX_NAME_LEN + 1);
    let before = fs.op_count();
    assert!(matches!(
        index.insert_named(2, B, too_long.clone()),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        index.insert_batch([
            (3, C, Some("fine".to_owned())),
            (4, C, Some(too_long)),
            (5, C, None),
        ]),
        Err(Error::InvalidArgument(_))
    ));
    assert_eq!(fs.op_count(), before, "a refused write touched the disk");
    for id in 2..=5 {
        assert_eq!(index.get(id).unwrap(), None);
    }
    // Not a failure of the disk: the index still takes writes.
    index.insert(6, C).unwrap();
    drop(index);
    let index = open(&fs);
    assert_eq!(ids(&index.query(C, 3).unwrap()), vec![6]);
    assert_eq!(index.get(1).unwrap(), Some(A));
}

#[test]
fn a_distance_above_the_plans_k_is_refused() {
    let fs = FaultFs::new();
    let index = open(&fs);
    index.insert(1, A).unwrap();
    for k in 0..=3 {
        assert_eq!(ids(&index.query(A, k).unwrap()), vec![1]);
    }
    for k in [4, 64, u32::MAX] {
        match index.query(A, k) {
            Err(Error::DistanceTooLarge { requested, plan_k }) => {
                assert_eq!((requested, plan_k), (k, 3));
            }
            other => panic!("query at {k}: {other:?}"),
        }
        assert!(matches!(
            index.insert_if_new(2, A, k),
            Err(Error::DistanceTooLarge { .. })
        ));
    }
    assert_eq!(index.get(2).unwrap(), None);
}

#[test]
fn reopening_with_other_settings_is_a_mismatch() {
    let fs = FaultFs::new();
    drop(open(&fs));
    for other in [Plan::new(6, 3).unwrap(), Plan::new(5, 2).unwrap()] {
        let result = Index::open(dir(), options(&fs).plan(other));
        assert!(
            matches!(result, Err(Error::Mismatch { what: "plan", .. })),
            "{result:?}"
        );
    }
    let other_config = Simhasher::builder().shingle(3).build().unwrap().config();
    let result = Index::open(dir(), options(&fs).fingerprint(other_config));
    assert!(
        matches!(
            result,
            Err(Error::Mismatch {
                what: "fingerprint config",
                ..
            })
        ),
        "{result:?}"
    );
    // The recorded settings, given or not, open it.
    let index = Index::open(dir(), {
        let mut o = options(&fs).fingerprint(Simhasher::default().config());
        o.plan = None;
        o
    })
    .unwrap();
    assert_eq!(index.plan().shape(), plan().shape());
    assert_eq!(
        index.stats().fingerprint_config,
        Simhasher::default().config().to_string()
    );
    drop(index);

    // A custom configuration is recorded and kept by opens that give none.
    let fs = FaultFs::new();
    let custom = Simhasher::builder().shingle(2).build().unwrap().config();
    drop(Index::open(dir(), options(&fs).fingerprint(custom)).unwrap());
    assert_eq!(open(&fs).stats().fingerprint_config, custom.to_string());
    assert!(matches!(
        Index::open(
            dir(),
            options(&fs).fingerprint(Simhasher::default().config()),
        ),
        Err(Error::Mismatch { .. })
    ));
}

#[test]
fn the_simhasher_of_an_index_is_its_recorded_configuration() {
    let fs = FaultFs::new();
    let custom = Simhasher::builder()
        .tokenizer(simhashdb::Tokenizer::CharNgrams(4))
        .weighting(simhashdb::Weighting::Binary)
        .build()
        .unwrap();
    let text = "a page about storage engines, fetched twice";
    drop(Index::open(dir(), options(&fs).fingerprint(custom.config())).unwrap());
    // Reopened without naming the configuration: it is read back.
    let hasher = open(&fs).simhasher().unwrap();
    assert_eq!(hasher.config(), custom.config());
    assert_eq!(hasher.fingerprint(text), custom.fingerprint(text));
    assert_ne!(
        hasher.fingerprint(text),
        Simhasher::default().fingerprint(text)
    );
}

#[test]
fn insert_if_new_returns_the_near_duplicates_and_writes_nothing() {
    let fs = FaultFs::new();
    let index = open(&fs);
    assert_eq!(index.insert_if_new(1, A, 3).unwrap(), Ok(()));
    assert_eq!(index.get(1).unwrap(), Some(A));

    let before = fs.op_count();
    assert_eq!(
        index.insert_if_new(2, A ^ 0b11, 3).unwrap(),
        Err(vec![m(1, A, 2, None)])
    );
    assert_eq!(fs.op_count(), before, "a refused insert touched the disk");
    assert_eq!(index.get(2).unwrap(), None);

    // Farther than the given k: inserted.
    assert_eq!(index.insert_if_new(2, A ^ 0b11, 1).unwrap(), Ok(()));
    assert_eq!(index.get(2).unwrap(), Some(A ^ 0b11));

    // Every near-duplicate is returned, from segments too; deleted ones are not.
    index.flush().unwrap();
    index.insert(3, A ^ 1 << 40).unwrap();
    index.delete(1).unwrap();
    assert_eq!(
        ids(&index.insert_if_new(4, A, 3).unwrap().unwrap_err()),
        vec![3, 2]
    );
    index.delete(2).unwrap();
    index.delete(3).unwrap();
    assert_eq!(index.insert_if_new(4, A, 3).unwrap(), Ok(()));
    drop(index);
    let index = open(&fs);
    assert_eq!(ids(&index.query(A, 3).unwrap()), vec![4]);
}

#[test]
fn racing_insert_if_new_of_near_duplicates_keeps_exactly_one() {
    let fs = FaultFs::new();
    let index = Arc::new(open(&fs));
    const ROUNDS: u64 = 200;
    let barrier = Arc::new(Barrier::new(2));
    let threads: Vec<_> = (0..2u64)
        .map(|t| {
            let index = Arc::clone(&index);
            let barrier = Arc::clone(&barrier);
            std::thread::spawn(move || {
                let mut outcomes = Vec::new();
                for round in 0..ROUNDS {
                    // Two fingerprints one bit apart, far from every other round's.
                    let fp = mix(round) ^ t << (round % 64);
                    barrier.wait();
                    outcomes.push(index.insert_if_new(round * 2 + t, fp, 3).unwrap());
                }
                outcomes
            })
        })
        .collect();
    let outcomes: Vec<Vec<_>> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    for round in 0..ROUNDS {
        let (a, b) = (&outcomes[0][round as usize], &outcomes[1][round as usize]);
        let (winner, loser) = match (a, b) {
            (Ok(()), Err(matches)) => (round * 2, matches),
            (Err(matches), Ok(())) => (round * 2 + 1, matches),
            other => panic!("round {round}: {other:?}"),
        };
        assert_eq!(ids(loser), vec![winner], "round {round}");
        assert_eq!(
            ids(&index.query(mix(round), 3).unwrap()),
            vec![winner],
            "round {round}"
        );
    }
}

#[test]
fn expired_documents_disappear_and_compaction_drops_them() {
    const RETENTION: Duration = Duration::from_millis(150);
    let fs = FaultFs::new();
    let retained = || options(&fs).retention(RETENTION);
    let index = Index::open(dir(), retained()).unwrap();
    let start = Instant::now();
    for id in 0..5 {
        index.insert(id, A ^ 1 << id).unwrap();
    }
    index.flush().unwrap();
    for id in 5..10 {
        index.insert(id, A ^ 1 << id).unwrap();
    }
    if start.elapsed() < RETENTION {
        assert_eq!(index.query(A, 1).unwrap().len(), 10);
        assert_eq!(index.get(0).unwrap(), Some(A ^ 1));
    }
    std::thread::sleep(RETENTION + Duration::from_millis(100));
    assert_eq!(index.query(A, 3).unwrap(), vec![]);
    for id in 0..10 {
        assert_eq!(index.get(id).unwrap(), None, "id {id}");
    }
    // Expired documents do not block check-and-insert.
    assert_eq!(index.insert_if_new(10, A, 3).unwrap(), Ok(()));
    index.flush().unwrap();
    let stats = index.stats();
    assert_eq!((stats.segments, stats.segment_docs), (2, 11));
    index.compact().unwrap();
    let stats = index.stats();
    assert_eq!((stats.segments, stats.segment_docs), (1, 1));
    assert_eq!(ids(&index.query(A, 3).unwrap()), vec![10]);
    drop(index);

    // The window is recorded: an open that gives none keeps it.
    let index = open(&fs);
    assert_eq!(index.get(10).unwrap(), Some(A));
    std::thread::sleep(RETENTION + Duration::from_millis(100));
    assert_eq!(index.get(10).unwrap(), None);
    assert_eq!(index.query(A, 3).unwrap(), vec![]);
    index.compact().unwrap();
    assert_eq!(index.stats().segment_docs, 0);
}

#[test]
fn a_batch_in_sync_mode_shares_one_sync_and_survives_power_loss() {
    let fs = FaultFs::new();
    let sync = || options(&fs).durability(Durability::Sync);
    let index = Index::open(dir(), sync()).unwrap();
    let before = fs.op_count();
    index
        .insert_batch((0..100u64).map(|id| {
            (
                id,
                mix(id),
                id.is_multiple_of(2).then(|| format!("doc {id}")),
            )
        }))
        .unwrap();
    assert_eq!(fs.op_count() - before, 2, "one write and one sync");
    let before = fs.op_count();
    for id in 100..110 {
        index.insert(id, mix(id)).unwrap();
    }
    assert_eq!(fs.op_count() - before, 20, "a write and a sync each");
    // Duplicates within a batch: the last one wins.
    index
        .insert_batch([(200, A, None), (200, B, Some("second"))])
        .unwrap();

    fs.crash(CrashMode::PowerLoss(Unsynced::Lost));
    drop(index);
    let index = Index::open(dir(), sync()).unwrap();
    for id in 0..110 {
        assert_eq!(index.get(id).unwrap(), Some(mix(id)), "id {id}");
    }
    assert_eq!(
        index.query(mix(4), 0).unwrap()[0].name.as_deref(),
        Some("doc 4")
    );
    assert_eq!(index.get(200).unwrap(), Some(B));
    assert_eq!(
        index.query(B, 0).unwrap(),
        vec![m(200, B, 0, Some("second"))]
    );
}

#[test]
fn an_empty_batch_is_a_no_op() {
    let fs = FaultFs::new();
    let index = open(&fs);
    let before = fs.op_count();
    index
        .insert_batch(std::iter::empty::<(u64, u64, Option<String>)>())
        .unwrap();
    assert_eq!(fs.op_count(), before);
    index.insert(1, A).unwrap();
    drop(index);
    assert_eq!(open(&fs).get(1).unwrap(), Some(A));
}

#[test]
fn stats_count_segments_documents_and_tombstones() {
    let fs = FaultFs::new();
    let index = open(&fs);
    const N: u64 = 5_000;
    let docs = |ids: std::ops::Range<u64>, salt: u64| {
        ids.map(move |id| (id, mix(id ^ salt), None::<String>))
    };
    index.insert_batch(docs(0..N, 0)).unwrap();
    let stats = index.stats();
    assert_eq!(stats.plan, plan());
    assert_eq!((stats.segments, stats.segment_docs), (0, 0));
    assert_eq!(stats.memtable_docs, N as usize);
    assert!(stats.memtable_bytes > 0);

    index.flush().unwrap();
    let stats = index.stats();
    assert_eq!(stats.segments, 1);
    assert_eq!(stats.segment_docs, N);
    assert_eq!(stats.segment_keys, N);
    assert_eq!(stats.tombstones, 0);
    assert_eq!(stats.memtable_docs, 0);
    assert!(
        stats.table_bytes_per_key > 0.0 && stats.table_bytes_per_key < 8.0,
        "{} bytes per key",
        stats.table_bytes_per_key
    );
    assert!(stats.disk_bytes > N * 8);

    // 100 deletes and 50 upserts in a second segment.
    for id in 0..100 {
        index.delete(id).unwrap();
    }
    index.insert_batch(docs(100..150, 1)).unwrap();
    assert_eq!(index.stats().memtable_docs, 150);
    index.flush().unwrap();
    let stats = index.stats();
    assert_eq!(stats.segments, 2);
    assert_eq!(stats.tombstones, 100);
    assert_eq!(stats.segment_docs, N + 50);
    assert_eq!(stats.segment_keys, N + 50);

    index.compact().unwrap();
    let stats = index.stats();
    assert_eq!(stats.segments, 1);
    assert_eq!(stats.tombstones, 0);
    assert_eq!(stats.segment_docs, N - 100);
    assert_eq!(stats.segment_keys, N - 100);
    assert!(stats.table_bytes_per_key < 8.0);
    assert_eq!(index.get(120).unwrap(), Some(mix(120 ^ 1)));
    assert_eq!(index.get(50).unwrap(), None);

    // Compacting a compacted index changes nothing.
    index.compact().unwrap();
    assert_eq!(index.stats(), stats);
}

/// After a write fails, every later write is refused as poisoned while
/// reads go on; a reopen recovers everything acknowledged before.
/// `cause` is the failed write's error, which the refusals name.
fn check_poisoned(fs: &FaultFs, index: Index, acknowledged: &[(u64, u64)], cause: &Error) {
    match index.insert(900, 1) {
        Err(e @ Error::Poisoned { .. }) => {
            assert!(matches!(&e, Error::Poisoned { cause: c } if *c == cause.to_string()));
            assert!(e.to_string().contains(&cause.to_string()), "{e}");
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        index.insert_named(900, 1, "n"),
        Err(Error::Poisoned { .. })
    ));
    assert!(matches!(
        index.insert_batch([(900, 1, None::<String>)]),
        Err(Error::Poisoned { .. })
    ));
    assert!(matches!(index.delete(0), Err(Error::Poisoned { .. })));
    assert!(matches!(
        index.insert_if_new(900, 1, 0),
        Err(Error::Poisoned { .. })
    ));
    assert!(matches!(index.flush(), Err(Error::Poisoned { .. })));
    assert!(matches!(index.compact(), Err(Error::Poisoned { .. })));
    assert!(matches!(index.sync(), Err(Error::Poisoned { .. })));
    for &(id, fp) in acknowledged {
        assert_eq!(index.get(id).unwrap(), Some(fp));
        assert!(ids(&index.query(fp, 0).unwrap()).contains(&id));
    }
    assert_eq!(index.get(900).unwrap(), None);
    let _ = index.stats();
    drop(index);

    let index = open(fs);
    for &(id, fp) in acknowledged {
        assert_eq!(index.get(id).unwrap(), Some(fp), "id {id} after reopening");
    }
    assert_eq!(index.get(900).unwrap(), None);
    index.insert(901, 2).unwrap();
    index.flush().unwrap();
    index.insert(902, 3).unwrap();
    drop(index);
    // No trace of the failed write is left in the log.
    for name in fs.list(dir()).unwrap() {
        if name.extension().is_some_and(|e| e == "wal") {
            let bytes = fs.read(&dir().join(name)).unwrap();
            let (frames, end) = WalReader::new(&bytes).unwrap().read_all();
            assert_eq!((frames.len(), end), (1, WalEnd::Clean));
        }
    }
    let index = open(fs);
    assert_eq!(index.get(902).unwrap(), Some(3));
    assert_eq!(index.get(901).unwrap(), Some(2));
    for &(id, fp) in acknowledged {
        assert_eq!(index.get(id).unwrap(), Some(fp));
    }
}

fn acknowledged_writes(index: &Index) -> Vec<(u64, u64)> {
    let docs: Vec<(u64, u64)> = (0..20).map(|id| (id, mix(id))).collect();
    for &(id, fp) in &docs[..10] {
        index.insert(id, fp).unwrap();
    }
    index.flush().unwrap();
    for &(id, fp) in &docs[10..] {
        index.insert(id, fp).unwrap();
    }
    docs
}

#[test]
fn a_failed_wal_write_poisons_the_writer() {
    for kind in [FaultKind::Eio, FaultKind::ShortWrite, FaultKind::NoSpace] {
        let fs = FaultFs::with_seed(kind as u64 + 1);
        let index = open(&fs);
        let docs = acknowledged_writes(&index);
        fs.inject(Fault::new(kind).on(&[Op::Write]));
        let err = index.insert(20, 20).unwrap_err();
        match &err {
            Error::Io { op, .. } => assert_eq!(*op, "write", "{kind:?}"),
            other => panic!("{kind:?}: {other:?}"),
        }
        assert_eq!(index.get(20).unwrap(), None);
        check_poisoned(&fs, index, &docs, &err);
        let index = open(&fs);
        assert_eq!(index.get(20).unwrap(), None, "{kind:?}");
    }
}

#[test]
fn a_failed_wal_sync_poisons_the_writer() {
    let fs = FaultFs::new();
    let sync = || options(&fs).durability(Durability::Sync);
    let index = Index::open(dir(), sync()).unwrap();
    let docs = acknowledged_writes(&index);
    fs.inject(Fault::new(FaultKind::SyncFails).on(&[Op::Sync]));
    let err = index.insert(20, 20).unwrap_err();
    match &err {
        Error::Io { op, .. } => assert_eq!(*op, "sync"),
        other => panic!("{other:?}"),
    }
    check_poisoned(&fs, index, &docs, &err);

    // The same for an explicit sync in Buffered mode.
    let fs = FaultFs::new();
    let index = open(&fs);
    let docs = acknowledged_writes(&index);
    fs.inject(Fault::new(FaultKind::SyncFails).on(&[Op::Sync]));
    let err = index.sync().unwrap_err();
    assert!(matches!(err, Error::Io { op: "sync", .. }));
    check_poisoned(&fs, index, &docs, &err);
}

#[test]
fn a_failed_flush_or_compaction_poisons_the_writer_and_loses_nothing() {
    for op in [Op::Create, Op::Write, Op::Sync, Op::Rename, Op::SyncDir] {
        for compaction in [false, true] {
            let fs = FaultFs::new();
            let index = open(&fs);
            let docs = acknowledged_writes(&index);
            if compaction {
                index.flush().unwrap();
            }
            fs.inject(Fault::new(FaultKind::Eio).on(&[op]));
            let result = if compaction {
                index.compact()
            } else {
                index.flush()
            };
            assert!(
                matches!(result, Err(Error::Io { .. })),
                "{op:?}, compaction {compaction}: {result:?}"
            );
            check_poisoned(&fs, index, &docs, &result.unwrap_err());
        }
    }
}

#[test]
fn get_doc_and_check_and_insert_keep_names() {
    let fs = FaultFs::new();
    let index = open(&fs);
    index.insert_named(1, A, "https://a.example/").unwrap();
    assert_eq!(
        index
            .insert_if_new_named(2, B, Some("https://b.example/".into()), 3)
            .unwrap(),
        Ok(())
    );
    // A near duplicate of A is refused and its name is not stored.
    let refused = index
        .insert_if_new_named(3, A ^ 0b101, Some("https://c.example/".into()), 3)
        .unwrap();
    assert_eq!(refused, Err(vec![m(1, A, 2, Some("https://a.example/"))]));
    assert_eq!(index.get_doc(3).unwrap(), None);
    for flushed in [false, true] {
        if flushed {
            index.flush().unwrap();
        }
        let b = index.get_doc(2).unwrap().expect("document 2 is live");
        assert_eq!((b.id, b.fingerprint), (2, B));
        assert_eq!(b.name.as_deref(), Some("https://b.example/"));
        assert!(b.timestamp_ms > 1_600_000_000_000, "{}", b.timestamp_ms);
        assert_eq!(index.get(2).unwrap(), Some(B));
    }
    index.delete(2).unwrap();
    assert_eq!(index.get_doc(2).unwrap(), None);
}

#[test]
fn for_each_doc_visits_exactly_the_live_documents() {
    let fs = FaultFs::new();
    let index = Index::open(
        dir(),
        options(&fs).memtable_bytes(4 << 10).merge_policy(None),
    )
    .unwrap();
    let mut model = std::collections::BTreeMap::new();
    for i in 0..3_000u64 {
        let id = mix(i) % 700;
        match mix(i ^ 0x55) % 5 {
            0 => {
                index.delete(id).unwrap();
                model.remove(&id);
            }
            _ => {
                let fp = mix(i ^ 0xaa);
                index.insert_named(id, fp, format!("doc-{i}")).unwrap();
                model.insert(id, (fp, format!("doc-{i}")));
            }
        }
    }
    assert!(
        index.stats().segments > 2,
        "the sequence should span segments"
    );
    let mut seen = std::collections::BTreeMap::new();
    index
        .for_each_doc(|doc| {
            let previous = seen.insert(doc.id, (doc.fingerprint, doc.name.clone().unwrap()));
            assert!(previous.is_none(), "document {} visited twice", doc.id);
        })
        .unwrap();
    assert_eq!(seen, model);
}

#[test]
fn stats_count_flushes_merges_and_their_failures() {
    let fs = FaultFs::new();
    let index = open(&fs);
    let counts = |index: &Index| {
        let s = index.stats();
        (s.flushes, s.flush_failures, s.merges, s.merge_failures)
    };
    assert_eq!(counts(&index), (0, 0, 0, 0));
    index.insert(1, A).unwrap();
    index.flush().unwrap();
    // An empty memtable is not flushed.
    index.flush().unwrap();
    index.insert(2, B).unwrap();
    index.flush().unwrap();
    assert_eq!(counts(&index), (2, 0, 0, 0));
    index.compact().unwrap();
    assert_eq!(counts(&index), (2, 0, 1, 0));
    assert_eq!(index.stats().segments, 1);

    index.insert(3, C).unwrap();
    fs.inject(Fault::new(FaultKind::Eio).on(&[Op::Create]).sticky());
    assert!(index.flush().is_err());
    assert_eq!(counts(&index), (2, 1, 1, 0));
    fs.clear_faults();
    // Counts start again at each open.
    drop(index);
    let index = open(&fs);
    assert_eq!(counts(&index), (0, 0, 0, 0));
    assert_eq!(index.get(3).unwrap(), Some(C));
}
