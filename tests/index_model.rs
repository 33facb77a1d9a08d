//! The persistent index against a model (a map of live documents, searched by
//! brute force), over random sequences of writes, flushes, compactions and
//! reopens.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use common::{Model, brute_force};
use proptest::prelude::*;
use simhashdb::engine::fault::FaultFs;
use simhashdb::engine::fs::FileSystem;
use simhashdb::engine::policy::{MergePolicy, TieredMergePolicy};
use simhashdb::plan::Plan;
use simhashdb::{Index, Options};

#[derive(Debug, Clone)]
enum Op {
    Insert(u64, u64),
    InsertNamed(u64, u64),
    Batch(Vec<(u64, u64)>),
    Delete(u64),
    Query(u64, u32),
    Get(u64),
    Flush,
    Compact,
    Reopen,
}

/// Fingerprints near a few centres, so queries have answers.
fn fingerprint() -> impl Strategy<Value = u64> {
    (0usize..4, any::<u64>(), 0u32..6).prop_map(|(c, noise, flips)| {
        const CENTRES: [u64; 4] = [0, u64::MAX, 0x0123_4567_89ab_cdef, 0xdead_beef_cafe_f00d];
        let mut fp = CENTRES[c];
        for i in 0..flips {
            fp ^= 1 << ((noise >> (6 * i)) & 63);
        }
        fp
    })
}

fn op() -> impl Strategy<Value = Op> {
    let id = 0u64..24;
    prop_oneof![
        8 => (id.clone(), fingerprint()).prop_map(|(i, f)| Op::Insert(i, f)),
        2 => (id.clone(), fingerprint()).prop_map(|(i, f)| Op::InsertNamed(i, f)),
        2 => proptest::collection::vec((id.clone(), fingerprint()), 1..6).prop_map(Op::Batch),
        3 => id.clone().prop_map(Op::Delete),
        6 => (fingerprint(), 0u32..=3).prop_map(|(f, k)| Op::Query(f, k)),
        2 => id.prop_map(Op::Get),
        2 => Just(Op::Flush),
        1 => Just(Op::Compact),
        2 => Just(Op::Reopen),
    ]
}

fn name(id: u64) -> String {
    format!("https://example.com/doc/{id}")
}

/// Where the index runs, and which threads it has.
#[derive(Debug, Clone, Copy)]
enum Threads {
    /// A plain `FaultFs` handle: flushes and merges on the writing thread.
    None,
    /// A `FaultFs` process handle: merges on the merge thread, and flushes
    /// on the flush thread if `flush_thread`, whatever the core count.
    FaultFs { flush_thread: bool },
    /// Real files: the same threads.
    RealFiles { flush_thread: bool },
}

fn options(
    fs: Option<&FaultFs>,
    threads: Threads,
    memtable_bytes: usize,
    fan_in: Option<usize>,
) -> Options {
    let (file_system, flush_thread) = match (threads, fs) {
        (Threads::None, Some(fs)) => (Some(Arc::new(fs.clone()) as Arc<dyn FileSystem>), false),
        (Threads::FaultFs { flush_thread }, Some(fs)) => (
            Some(Arc::new(fs.process()) as Arc<dyn FileSystem>),
            flush_thread,
        ),
        (Threads::RealFiles { flush_thread }, None) => (None, flush_thread),
        other => unreachable!("{other:?}"),
    };
    let mut o = Options::new()
        .plan(Plan::new(5, 3).unwrap())
        .memtable_bytes(memtable_bytes)
        .merge_policy(
            fan_in.map(|fan_in| Arc::new(TieredMergePolicy { fan_in }) as Arc<dyn MergePolicy>),
        )
        .flush_thread(flush_thread);
    o.file_system = file_system;
    o
}

fn run(ops: Vec<Op>, memtable_bytes: usize, fan_in: Option<usize>) -> Result<(), TestCaseError> {
    run_with(Threads::None, ops, memtable_bytes, fan_in)
}

/// [`run`] with `threads`, on a `FaultFs` or in a temporary directory.
fn run_with(
    threads: Threads,
    ops: Vec<Op>,
    memtable_bytes: usize,
    fan_in: Option<usize>,
) -> Result<(), TestCaseError> {
    match threads {
        Threads::RealFiles { .. } => {
            let tmp = tempfile::tempdir().unwrap();
            run_on(None, tmp.path(), threads, ops, memtable_bytes, fan_in)
        }
        _ => {
            let fs = FaultFs::with_seed(1);
            let dir = Path::new("/index");
            run_on(Some(&fs), dir, threads, ops, memtable_bytes, fan_in)
        }
    }
}

fn run_on(
    fs: Option<&FaultFs>,
    dir: &Path,
    threads: Threads,
    ops: Vec<Op>,
    memtable_bytes: usize,
    fan_in: Option<usize>,
) -> Result<(), TestCaseError> {
    let options = |memtable_bytes, fan_in| options(fs, threads, memtable_bytes, fan_in);
    let mut index = Index::open(dir, options(memtable_bytes, fan_in)).unwrap();
    let mut model: Model = BTreeMap::new();
    for op in ops {
        match op {
            Op::Insert(id, fp) => {
                index.insert(id, fp).unwrap();
                model.insert(id, (fp, None));
            }
            Op::InsertNamed(id, fp) => {
                index.insert_named(id, fp, name(id)).unwrap();
                model.insert(id, (fp, Some(name(id))));
            }
            Op::Batch(docs) => {
                index
                    .insert_batch(docs.iter().map(|&(id, fp)| (id, fp, None::<String>)))
                    .unwrap();
                for (id, fp) in docs {
                    model.insert(id, (fp, None));
                }
            }
            Op::Delete(id) => {
                index.delete(id).unwrap();
                model.remove(&id);
            }
            Op::Query(fp, k) => {
                prop_assert_eq!(index.query(fp, k).unwrap(), brute_force(&model, fp, k));
            }
            Op::Get(id) => {
                prop_assert_eq!(index.get(id).unwrap(), model.get(&id).map(|(fp, _)| *fp));
            }
            Op::Flush => index.flush().unwrap(),
            Op::Compact => index.compact().unwrap(),
            Op::Reopen => {
                drop(index);
                index = Index::open(dir, options(memtable_bytes, fan_in)).unwrap();
            }
        }
    }
    // Everything, one last time, after a reopen.
    drop(index);
    let index = Index::open(dir, options(memtable_bytes, fan_in)).unwrap();
    for id in 0..24 {
        prop_assert_eq!(index.get(id).unwrap(), model.get(&id).map(|(fp, _)| *fp));
    }
    for fp in [0, u64::MAX, 0x0123_4567_89ab_cdef, 0xdead_beef_cafe_f00d] {
        prop_assert_eq!(index.query(fp, 3).unwrap(), brute_force(&model, fp, 3));
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn index_equals_model(ops in proptest::collection::vec(op(), 1..80)) {
        run(ops, 64 << 20, Some(8))?;
    }

    /// A tiny memtable budget: most writes trigger a flush.
    #[test]
    fn index_equals_model_with_frequent_flushes(ops in proptest::collection::vec(op(), 1..60)) {
        run(ops, 600, None)?;
    }

    /// Frequent flushes, and a merge of the newest segments whenever two of
    /// one level exist: partial merges that must keep their tombstones.
    #[test]
    fn index_equals_model_with_frequent_partial_merges(ops in proptest::collection::vec(op(), 1..60)) {
        run(ops, 600, Some(2))?;
    }
}

// The same with the background threads, in both configurations (the flush
// thread is on by default with more than two cores, off with two), whatever
// the core count here.
proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Real files, flushes on the flush thread and merges on the merge
    /// thread: most writes hand a memtable over, and the reads that follow
    /// often find it still being written (both memtables searched, the
    /// newer one's versions winning) or a merge running.
    #[test]
    fn index_equals_model_with_background_flushes_and_merges(
        ops in proptest::collection::vec(op(), 1..80)
    ) {
        run_with(Threads::RealFiles { flush_thread: true }, ops, 600, Some(2))?;
    }

    /// Real files, flushes on the writing thread and merges on the merge
    /// thread.
    #[test]
    fn index_equals_model_with_background_merges_only(
        ops in proptest::collection::vec(op(), 1..80)
    ) {
        run_with(Threads::RealFiles { flush_thread: false }, ops, 600, Some(2))?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(150))]

    /// The simulated file system, with the flush and merge threads.
    #[test]
    fn index_equals_model_with_background_flushes_and_merges_on_fault_fs(
        ops in proptest::collection::vec(op(), 1..80)
    ) {
        run_with(Threads::FaultFs { flush_thread: true }, ops, 600, Some(2))?;
    }

    /// The simulated file system, with the merge thread only.
    #[test]
    fn index_equals_model_with_background_merges_only_on_fault_fs(
        ops in proptest::collection::vec(op(), 1..80)
    ) {
        run_with(Threads::FaultFs { flush_thread: false }, ops, 600, Some(2))?;
    }
}
