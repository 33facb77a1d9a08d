//! `Index::insert_if_new_many`: a batch of check-and-inserts answers exactly
//! as the same `insert_if_new` calls made one after another (each document
//! sees those inserted before it, in the index and earlier in the batch),
//! every answer agrees with brute force, and the batch's inserts are one
//! write: after a crash, all of them or none.

mod common;

use std::path::Path;
use std::sync::Arc;

use simhashdb::engine::fault::{CrashMode, Fault, FaultFs, FaultKind, Op, Unsynced};
use simhashdb::engine::fs::FileSystem;
use simhashdb::plan::Plan;
use simhashdb::{Durability, Index, Match, Options};

use common::{Model, Rng, brute_force, live_docs};

type Answer = Result<(), Vec<Match>>;

/// Fingerprints far from each other (splitmix64 of `i`).
fn spread(i: u64) -> u64 {
    Rng(i).next()
}

fn dir() -> &'static Path {
    Path::new("/index")
}

// Field by field: `Options` is to become `#[non_exhaustive]`.
#[allow(clippy::field_reassign_with_default)]
fn options(fs: &FaultFs, durability: Durability) -> Options {
    let mut o = Options::default();
    o.plan = Some(Plan::new(5, 3).expect("plan"));
    o.file_system = Some(Arc::new(fs.clone()) as Arc<dyn FileSystem>);
    o.durability = durability;
    // Small memtables: batches meet segments and frozen memtables too.
    o.memtable_bytes = 16 << 10;
    o
}

/// A batch of documents: near-duplicates of each other and of what the
/// index holds, ids repeated within the batch and of documents already
/// stored (replacements), some named.
fn batch(rng: &mut Rng, len: usize, ids: u64) -> Vec<(u64, u64, Option<String>)> {
    (0..len)
        .map(|_| {
            let id = rng.below(ids);
            let name = rng.below(3).eq(&0).then(|| format!("doc {id}"));
            (id, rng.fingerprint(), name)
        })
        .collect()
}

/// What `insert_if_new` answers for each document in turn, checked
/// against brute force over `model`, which it updates.
fn sequential(
    index: &Index,
    model: &mut Model,
    docs: &[(u64, u64, Option<String>)],
    k: u32,
) -> Vec<Answer> {
    docs.iter()
        .map(|(id, fp, name)| {
            let expected = brute_force(model, *fp, k);
            let answer = index
                .insert_if_new_named(*id, *fp, name.clone(), k)
                .expect("insert_if_new");
            match &answer {
                Ok(()) => {
                    assert!(expected.is_empty(), "inserted despite {expected:?}");
                    model.insert(*id, (*fp, name.clone()));
                }
                Err(found) => assert_eq!(found, &expected),
            }
            answer
        })
        .collect()
}

#[test]
fn a_batch_answers_as_sequential_insert_if_new_calls_and_brute_force() {
    let (one, many) = (FaultFs::new(), FaultFs::new());
    let a = Index::open(dir(), options(&one, Durability::Buffered)).expect("open");
    let b = Index::open(dir(), options(&many, Durability::Buffered)).expect("open");
    let mut model = Model::new();
    let mut rng = Rng(11);
    let (mut inserted, mut duplicates) = (0, 0);
    // Batches of 32 or more query the index in parallel, smaller ones in turn.
    let (mut small, mut large) = (0, 0);
    for round in 0..60 {
        let k = [3, 2, 0, 1][round % 4];
        let len = 1 + rng.index(120);
        if len < 32 {
            small += 1;
        } else {
            large += 1;
        }
        let docs = batch(&mut rng, len, 400);
        let expected = sequential(&a, &mut model, &docs, k);
        let answers = b.insert_if_new_many(docs.clone(), k).expect("batch");
        assert_eq!(answers, expected, "round {round}, k {k}");
        inserted += answers.iter().filter(|a| a.is_ok()).count();
        duplicates += answers.iter().filter(|a| a.is_err()).count();
        // Deletes and plain inserts between batches, on both.
        for _ in 0..rng.below(5) {
            let id = rng.below(400);
            a.delete(id).expect("delete");
            b.delete(id).expect("delete");
            model.remove(&id);
        }
        if round % 7 == 3 {
            a.flush().expect("flush");
            b.flush().expect("flush");
        }
        if round % 13 == 5 {
            b.compact().expect("compact");
        }
    }
    assert_eq!(live_docs(&b), model);
    assert_eq!(live_docs(&a), model);
    assert!(b.stats().segments > 0);
    // The workload exercised both answers.
    assert!(
        inserted > 100 && duplicates > 100,
        "{inserted} {duplicates}"
    );
    assert!(
        small >= 5 && large >= 5,
        "{small} small, {large} large batches"
    );
}

#[test]
fn documents_of_one_batch_see_each_other_in_order() {
    let fs = FaultFs::new();
    let index = Index::open(dir(), options(&fs, Durability::Buffered)).expect("open");
    index.insert(1, 0).expect("insert");
    let answers = index
        .insert_if_new_many(
            [
                // Replaces document 1 far away: 0 is free again ...
                (1, u64::MAX, None),
                // ... so this one is new ...
                (2, 0b1, Some("two")),
                // ... and this one names it, not the replaced version.
                (3, 0b11, None),
                // Two near each other, the second a duplicate of the first.
                (4, 0xf0f0, None),
                (5, 0xf0f1, None),
                // The same id again, moved next to itself: a duplicate of itself.
                (4, 0xf0f2, None),
            ],
            3,
        )
        .expect("batch");
    let m = |id, fingerprint: u64, of: u64, name: Option<&str>| Match {
        id,
        fingerprint,
        distance: (fingerprint ^ of).count_ones(),
        name: name.map(str::to_owned),
        sketch: None,
    };
    assert_eq!(
        answers,
        vec![
            Ok(()),
            Ok(()),
            Err(vec![m(2, 0b1, 0b11, Some("two"))]),
            Ok(()),
            Err(vec![m(4, 0xf0f0, 0xf0f1, None)]),
            Err(vec![m(4, 0xf0f0, 0xf0f2, None)]),
        ]
    );
    assert_eq!(index.get(1).expect("get"), Some(u64::MAX));
    assert_eq!(index.get(3).expect("get"), None);
    assert_eq!(index.get(5).expect("get"), None);
    // A distance above the plan's k is refused; an empty batch writes nothing.
    assert!(
        index
            .insert_if_new_many([(9, 9, None::<String>)], 4)
            .is_err()
    );
    assert_eq!(index.get(9).expect("get"), None);
    let before = fs.op_count();
    assert_eq!(
        index
            .insert_if_new_many(std::iter::empty::<(u64, u64, Option<String>)>(), 3)
            .expect("empty"),
        vec![]
    );
    // Every document a duplicate: nothing to write either.
    assert_eq!(
        index
            .insert_if_new_many([(7, 0b1, None::<String>)], 3)
            .expect("dup")
            .len(),
        1
    );
    assert_eq!(fs.op_count(), before);
}

/// The new documents of a batch are one WAL frame: a power cut that tears
/// it anywhere keeps all of them or none; a write that fails midway keeps
/// none and poisons the index.
#[test]
fn a_batch_survives_a_crash_whole_or_not_at_all() {
    let mut kept_whole = 0;
    let mut lost_whole = 0;
    for seed in 0..40u64 {
        let fs = FaultFs::with_seed(seed);
        let index = Index::open(dir(), options(&fs, Durability::Buffered)).expect("open");
        index
            .insert_batch((0..50u64).map(|i| (i, i << 20, None::<String>)))
            .expect("insert");
        index.sync().expect("sync");
        let docs: Vec<(u64, u64, Option<String>)> = (100..160u64)
            .map(|i| (i, spread(i), Some(format!("batch {i}"))))
            .chain([(1000, 5 << 20, None)]) // a duplicate of document 5
            .collect();
        let answers = index.insert_if_new_many(docs, 3).expect("batch");
        assert_eq!(answers.iter().filter(|a| a.is_ok()).count(), 60);
        let mode = if seed % 2 == 0 {
            Unsynced::Torn
        } else {
            Unsynced::Kept
        };
        fs.crash(CrashMode::PowerLoss(mode));
        drop(index);
        let index = Index::open(dir(), options(&fs, Durability::Buffered)).expect("reopen");
        let present: Vec<bool> = (100..160u64)
            .map(|i| index.get(i).expect("get").is_some())
            .collect();
        assert!(
            present.iter().all(|&p| p) || present.iter().all(|&p| !p),
            "seed {seed}: part of a batch survived: {present:?}"
        );
        if present[0] {
            kept_whole += 1;
        } else {
            lost_whole += 1;
        }
        assert_eq!(index.get(1000).expect("get"), None);
        for i in 0..50u64 {
            assert_eq!(index.get(i).expect("get"), Some(i << 20));
        }
    }
    assert!(
        kept_whole > 0 && lost_whole > 0,
        "{kept_whole} {lost_whole}"
    );

    // A short write of the frame: the call fails, nothing of it is kept.
    let fs = FaultFs::with_seed(7);
    let index = Index::open(dir(), options(&fs, Durability::Sync)).expect("open");
    index.insert(1, 1).expect("insert");
    fs.inject(Fault::new(FaultKind::ShortWrite).on(&[Op::Write]));
    let docs = (100..140u64).map(|i| (i, spread(i), None::<String>));
    assert!(index.insert_if_new_many(docs, 3).is_err());
    assert!(
        index.insert(2, 2).is_err(),
        "a failed write poisons the index"
    );
    fs.clear_faults();
    fs.crash(CrashMode::ProcessKill);
    drop(index);
    let index = Index::open(dir(), options(&fs, Durability::Sync)).expect("reopen");
    assert_eq!(index.get(1).expect("get"), Some(1));
    for i in 100..140u64 {
        assert_eq!(index.get(i).expect("get"), None, "{i}");
    }
}

/// A document of a batch built with its answer known: (id, fingerprint,
/// the (id, fingerprint) it was made a near-duplicate of).
type Built = (u64, u64, Option<(u64, u64)>);

/// Batches large enough that the memtables they fill are flushed with the
/// doc map and the tables written at once (from 16,384 versions, on two
/// threads): every answer is what the documents were built to get (a
/// fresh fingerprint is new; one within 2 bits of a live document, of an
/// earlier batch or earlier in its own, is its duplicate, found in the
/// memtable, the batch or a segment), one in 64 is also checked against
/// brute force, and the index holds the same documents after a reopen.
#[test]
fn batches_over_large_flushes_answer_as_brute_force() {
    let fs = FaultFs::new();
    let options = |fs: &FaultFs| {
        let mut o = options(fs, Durability::Buffered);
        // About 25,000 documents a memtable.
        o.memtable_bytes = 3 << 20;
        o
    };
    let index = Index::open(dir(), options(&fs)).expect("open");
    let mut model = Model::new();
    // The documents inserted, and the fresh ones of the batch being built.
    let mut live: Vec<(u64, u64)> = Vec::new();
    let mut rng = Rng(41);
    let (mut new, mut duplicates, mut within, mut checked) = (0, 0, 0, 0);
    for round in 0..150u64 {
        let mut fresh: Vec<(u64, u64)> = Vec::new();
        // Each document with the one it was made a near-duplicate of.
        let docs: Vec<Built> = (0..1000u64)
            .map(|j| {
                let id = round * 1000 + j;
                let source = match rng.below(10) {
                    0 | 1 if !live.is_empty() => Some(live[rng.index(live.len())]),
                    2 if !fresh.is_empty() => Some(fresh[rng.index(fresh.len())]),
                    _ => None,
                };
                match source {
                    Some((of, fp)) => (
                        id,
                        fp ^ (1 << rng.below(64)) ^ (1 << rng.below(64)),
                        Some((of, fp)),
                    ),
                    None => {
                        let fp = spread(id ^ 0x5eed);
                        fresh.push((id, fp));
                        (id, fp, None)
                    }
                }
            })
            .collect();
        let batch = docs.iter().map(|&(id, fp, _)| (id, fp, None::<String>));
        let answers = index.insert_if_new_many(batch, 3).expect("batch");
        for (&(id, fp, source), answer) in docs.iter().zip(&answers) {
            if id % 64 == 0 {
                assert_eq!(
                    answer.clone().err().unwrap_or_default(),
                    brute_force(&model, fp, 3),
                    "document {id}"
                );
                checked += 1;
            }
            let found: Option<Vec<(u64, u64, u32)>> = answer.as_ref().err().map(|found| {
                found
                    .iter()
                    .map(|m| (m.id, m.fingerprint, m.distance))
                    .collect()
            });
            match source {
                None => {
                    assert_eq!(found, None, "document {id}");
                    model.insert(id, (fp, None));
                    live.push((id, fp));
                    new += 1;
                }
                Some((of, of_fp)) => {
                    let distance = (of_fp ^ fp).count_ones();
                    assert_eq!(found, Some(vec![(of, of_fp, distance)]), "document {id}");
                    duplicates += 1;
                    if of >= round * 1000 {
                        within += 1;
                    }
                }
            }
        }
    }
    let stats = index.stats();
    assert!(stats.flushes >= 3, "{} flushes", stats.flushes);
    assert!(
        new > 100_000 && duplicates > 20_000 && within > 2_000,
        "{new} {duplicates} {within}"
    );
    assert!(checked > 1_000, "{checked} checked");
    assert_eq!(live_docs(&index), model);
    index.verify().expect("verify");
    drop(index);
    let index = Index::open(dir(), options(&fs)).expect("reopen");
    assert_eq!(live_docs(&index), model);
}

/// A flush of a memtable large enough to write its two files at once that
/// fails (a sync of either file): the write that started it has happened,
/// the index is poisoned, and after the process is killed every document
/// is recovered from the WAL.
#[test]
fn a_large_flush_that_fails_loses_nothing() {
    for skip in 0..2 {
        let fs = FaultFs::new();
        let options = |fs: &FaultFs| {
            let mut o = options(fs, Durability::Buffered);
            o.memtable_bytes = 64 << 20;
            o
        };
        let index = Index::open(dir(), options(&fs)).expect("open");
        let docs = (0..40_000u64).map(|i| (i, spread(i), None::<String>));
        let answers = index.insert_if_new_many(docs, 3).expect("batch");
        assert!(answers.iter().all(Result::is_ok));
        fs.inject(Fault::new(FaultKind::Eio).on(&[Op::Sync]).after(skip));
        assert!(index.flush().is_err(), "skip {skip}");
        assert!(
            index.insert(1 << 20, 1).is_err(),
            "a failed flush poisons the index"
        );
        fs.clear_faults();
        fs.crash(CrashMode::ProcessKill);
        drop(index);
        let index = Index::open(dir(), options(&fs)).expect("reopen");
        for i in (0..40_000u64).step_by(97).chain([39_999]) {
            assert_eq!(
                index.get(i).expect("get"),
                Some(spread(i)),
                "skip {skip}, {i}"
            );
        }
        assert_eq!(live_docs(&index).len(), 40_000);
        index.flush().expect("flush after the reopen");
        index.verify().expect("verify");
    }
}
