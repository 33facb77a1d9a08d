//! An index larger than its memory budget (`Options::memory_budget`): its
//! segments are not prefaulted, and each query asks the kernel to read all
//! the blocks it needs before searching them. Answers must be the same as
//! with the index in memory: checked against a brute-force scan, on real
//! files, before and after reopening, with plans that probe one range per
//! table and many.

mod common;

use common::{CENTRES, Model, Rng, brute_force};
use simhashdb::plan::Plan;
use simhashdb::{Index, Options};

fn options(plan: &Plan, budget: Option<u64>) -> Options {
    // Small memtables: the workload leaves several segments and a memtable.
    let options = Options::new().plan(plan.clone()).memtable_bytes(8192);
    match budget {
        Some(bytes) => options.memory_budget(bytes),
        None => options,
    }
}

/// Writes documents `0..n` of random fingerprints into `index` and
/// `model`, one insert each (the small memtable then flushes often), named
/// by `name`.
fn write_one_by_one(
    index: &Index,
    model: &mut Model,
    rng: &mut Rng,
    n: u64,
    name: impl Fn(u64) -> Option<String>,
) {
    for id in 0..n {
        let fp = rng.fingerprint();
        let name = name(id);
        index.insert_batch([(id, fp, name.clone())]).unwrap();
        model.insert(id, (fp, name));
    }
}

/// Queries near every centre and at random, at every distance the plan
/// answers, against the model.
fn check(index: &Index, model: &Model, plan: &Plan, rng: &mut Rng, what: &str) {
    let mut queries: Vec<u64> = CENTRES.to_vec();
    queries.extend((0..150).map(|_| rng.fingerprint()));
    queries.extend((0..20).map(|_| rng.next()));
    let mut found = 0;
    for &fp in &queries {
        for k in 0..=plan.k() {
            let got = index.query(fp, k).unwrap();
            assert_eq!(got, brute_force(model, fp, k), "{what}: {fp:#x} at k = {k}");
            found += got.len();
        }
    }
    assert!(found > 0, "{what}: the queries found nothing to compare");
}

#[test]
fn an_index_over_its_memory_budget_answers_as_brute_force_does() {
    for plan in [Plan::new(5, 3).unwrap(), Plan::probed(2, 1, 3).unwrap()] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("index");
        let mut rng = Rng(plan.tables().len() as u64);
        let mut model = Model::new();
        {
            // One byte: no segment fits, so none is prefaulted whole.
            let index = Index::open(&path, options(&plan, Some(1))).unwrap();
            write_one_by_one(&index, &mut model, &mut rng, 4000, |id| {
                (id % 3 == 0).then(|| format!("doc-{id}"))
            });
            for id in (0..4000u64).step_by(7) {
                index.delete(id).unwrap();
                model.remove(&id);
            }
            index.flush().unwrap();
            assert!(index.stats().segments > 1, "the workload left one segment");
            check(&index, &model, &plan, &mut rng, "written over budget");
        }
        // Without the prefault, segments over budget are read the same way.
        let index = Index::open(&path, options(&plan, Some(1)).prefault(false)).unwrap();
        check(
            &index,
            &model,
            &plan,
            &mut rng,
            "reopened over budget, no prefault",
        );
        drop(index);
        let index = Index::open(&path, options(&plan, Some(1))).unwrap();
        check(&index, &model, &plan, &mut rng, "reopened over budget");
        // A merge reads segments out of memory through, then leaves them
        // (and its own) to be read at random.
        index.compact().unwrap();
        assert_eq!(index.stats().segments, 1);
        check(&index, &model, &plan, &mut rng, "compacted over budget");
        drop(index);
        // The same files within the default budget: prefaulted, same answers.
        let index = Index::open(&path, options(&plan, None)).unwrap();
        check(&index, &model, &plan, &mut rng, "reopened in memory");
    }
}

/// Whether every table of every segment file in `dir` is flat (format
/// version 5), or every one Rice-coded; panics on a mix.
fn tables_are_flat(dir: &std::path::Path) -> bool {
    let mut flat = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "seg") {
            let bytes = std::fs::read(&path).unwrap();
            let segment = simhashdb::format::SegmentReader::new(&bytes[..]).unwrap();
            for t in 0..segment.table_count() {
                flat.push(segment.flat_table(t).unwrap().is_some());
            }
        }
    }
    assert!(!flat.is_empty());
    assert!(flat.iter().all(|&f| f == flat[0]), "{flat:?}");
    flat[0]
}

/// Segments written over the memory budget get Rice-coded tables, whose
/// queries read ahead what they need; within it, flat tables. Both answer
/// as a brute-force scan does, flushed and compacted.
#[test]
fn segments_over_the_memory_budget_are_rice_coded_and_others_flat() {
    let plan = Plan::new(5, 3).unwrap();
    for (budget, flat) in [(Some(1), false), (None, true)] {
        let dir = tempfile::tempdir().unwrap();
        let mut rng = Rng(9);
        let mut model = Model::new();
        let index = Index::open(dir.path(), options(&plan, budget)).unwrap();
        write_one_by_one(&index, &mut model, &mut rng, 3000, |_| None);
        index.flush().unwrap();
        assert_eq!(tables_are_flat(dir.path()), flat, "budget {budget:?}");
        check(&index, &model, &plan, &mut rng, "flushed");
        index.compact().unwrap();
        assert_eq!(tables_are_flat(dir.path()), flat, "budget {budget:?}");
        check(&index, &model, &plan, &mut rng, "compacted");
    }
}

/// The open of an index that fits in its memory budget checks the chunks
/// of its flat tables itself, reading (and so mapping) them whole, so that
/// the first queries neither check nor fault; the open of one over the
/// budget must not: it would read from the disk, at every open, an index
/// that does not fit, evicting what it had just read (docs/BENCHMARKS.md,
/// "An index larger than memory"). The same files answer as a brute-force
/// scan does either way.
#[test]
fn the_open_reads_flat_tables_whole_only_within_the_memory_budget() {
    use common::schedule::Gates;
    use simhashdb::engine::schedule::Point;

    let plan = Plan::new(5, 3).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng(17);
    let mut model = Model::new();
    let index = Index::open(dir.path(), options(&plan, None)).unwrap();
    write_one_by_one(&index, &mut model, &mut rng, 3000, |_| None);
    index.flush().unwrap();
    drop(index);
    assert!(tables_are_flat(dir.path()));
    for (budget, checked_by_the_open) in [(None, true), (Some(1), false), (None, true)] {
        // Counts the segments whose checks start on the opening thread.
        let gates = Gates::new();
        gates.only_on(Point::DecodeStarted, "opener");
        let options = options(&plan, budget).schedule(gates.schedule());
        let path = dir.path().to_path_buf();
        let index = std::thread::Builder::new()
            .name("opener".into())
            .spawn(move || Index::open(&path, options).unwrap())
            .unwrap()
            .join()
            .unwrap();
        let segments = index.stats().segments;
        assert!(segments > 0);
        let expected = if checked_by_the_open { segments } else { 0 };
        assert_eq!(
            gates.reached(Point::DecodeStarted),
            expected,
            "budget {budget:?}: segments checked by the open, of {segments}"
        );
        check(&index, &model, &plan, &mut rng, "reopened");
    }
}

/// An index over its budget opened with the prefault thread: the thread
/// reads the segments' block indexes ahead (in large reads, not a page per
/// fault), then tells the segments, whose queries stop asking the kernel
/// for a table's index entry before reading it; each matching query asks
/// for its doc map block as soon as its tables find the fingerprint. One
/// query at a time and batches answer as a brute-force scan does once the
/// thread has stopped, and without the thread (entries asked for).
#[test]
fn an_index_over_its_budget_answers_as_brute_force_does_once_its_block_indexes_are_read() {
    use common::schedule::Gates;
    use simhashdb::engine::schedule::Point;

    let plan = Plan::new(5, 3).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng(23);
    let mut model = Model::new();
    let index = Index::open(dir.path(), options(&plan, Some(1))).unwrap();
    write_one_by_one(&index, &mut model, &mut rng, 6000, |id| {
        (id % 5 == 0).then(|| format!("doc-{id}"))
    });
    index.compact().unwrap();
    assert_eq!(index.stats().segments, 1);
    drop(index);
    assert!(!tables_are_flat(dir.path()));
    for prefault in [true, false] {
        let gates = Gates::new();
        let options = options(&plan, Some(1))
            .prefault(prefault)
            .schedule(gates.schedule());
        let index = Index::open(dir.path(), options).unwrap();
        if prefault {
            gates.wait_reached(Point::PrefaultThreadStopped, 1);
        }
        let what = format!("prefault {prefault}");
        check(&index, &model, &plan, &mut rng, &what);
        let near: Vec<u64> = model.values().map(|&(fp, _)| fp ^ 1).take(500).collect();
        for (fp, got) in near.iter().zip(index.query_batch(&near, 3).unwrap()) {
            assert_eq!(got, brute_force(&model, *fp, 3), "{what}: batch, {fp:#x}");
        }
    }
}

/// A byte flipped in a doc map entry block of a segment over the budget
/// (whose queries ask for a block as soon as their tables find its
/// fingerprint): a query that reads the block fails with `Corrupted`
/// naming the doc map file and an offset inside it, never with a wrong
/// answer; the other queries answer as a brute-force scan does; `verify`
/// reports it.
#[test]
fn a_damaged_doc_map_block_of_a_segment_over_the_budget_is_reported_not_answered() {
    let plan = Plan::new(5, 3).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng(29);
    let mut model = Model::new();
    let index = Index::open(dir.path(), options(&plan, Some(1))).unwrap();
    write_one_by_one(&index, &mut model, &mut rng, 3000, |_| None);
    index.compact().unwrap();
    drop(index);
    let ids = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "ids"))
        .unwrap();
    let mut bytes = std::fs::read(&ids).unwrap();
    let entries_index = simhashdb::format::DocMapReader::new(&bytes[..])
        .unwrap()
        .index_ranges()[0]
        .clone();
    // Inside the entry blocks, which come before their index.
    let at = entries_index.start / 2;
    bytes[at] ^= 0x10;
    std::fs::write(&ids, &bytes).unwrap();

    let index = Index::open(dir.path(), options(&plan, Some(1))).unwrap();
    let mut reported = 0;
    for &(fp, _) in model.values() {
        match index.query(fp, 1) {
            Ok(got) => assert_eq!(got, brute_force(&model, fp, 1), "{fp:#x}"),
            Err(simhashdb::Error::Corrupted { path, offset, .. }) => {
                assert_eq!(path, ids, "{fp:#x}");
                assert!(offset < bytes.len() as u64, "{fp:#x}: offset {offset}");
                reported += 1;
            }
            Err(other) => panic!("{fp:#x}: {other:?}"),
        }
    }
    assert!(reported > 0, "no query read the damaged block");
    match index.verify() {
        Err(simhashdb::Error::Corrupted { path, .. }) => assert_eq!(path, ids),
        other => panic!("verify: {other:?}"),
    }
}

/// Bytes of the pages of files in `dir` with extension `ext` that this
/// process has mapped now (`Rss` of their mappings in `/proc/self/smaps`),
/// and the bytes of those files' pages.
#[cfg(target_os = "linux")]
fn mapped_and_whole(dir: &std::path::Path, ext: &str) -> (u64, u64) {
    let dir = dir.canonicalize().unwrap();
    let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
    let (mut mapped, mut ours) = (0u64, false);
    for line in smaps.lines() {
        let mut words = line.split_whitespace();
        let first = words.next().unwrap_or("");
        if !first.ends_with(':') {
            // A mapping's first line: address range, permissions, offset,
            // device, inode, then the path if a file is mapped.
            let path = words.nth(4).map(std::path::Path::new);
            ours = path
                .is_some_and(|p| p.starts_with(&dir) && p.extension().is_some_and(|e| e == ext));
        } else if ours && first == "Rss:" {
            mapped += words.next().unwrap().parse::<u64>().unwrap() * 1024;
        }
    }
    let mut whole = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == ext) {
            whole += std::fs::metadata(&path).unwrap().len().div_ceil(4096) * 4096;
        }
    }
    (mapped, whole)
}

/// The open of an index that fits in its memory budget maps its doc maps
/// whole before it returns (a query that finds a document reads a block
/// of one, which would otherwise take a page fault until the prefault
/// thread came to it, after the tables); the open of one over the budget
/// maps less than half of them, and its prefault thread only their block
/// indexes. Held at its start here, the prefault thread maps nothing
/// before the pages are counted. The same files answer as a brute-force
/// scan does either way.
#[cfg(target_os = "linux")]
#[test]
fn the_open_maps_the_doc_maps_whole_only_within_the_memory_budget() {
    use common::schedule::Gates;
    use simhashdb::engine::schedule::Point;

    let plan = Plan::new(5, 3).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng(23);
    let mut model = Model::new();
    let index = Index::open(dir.path(), Options::new().plan(plan.clone())).unwrap();
    // One segment whose doc map (named documents) takes about 10 MB, over
    // twice the large folios (up to 2 MiB each) that the open's reads of
    // its head and tail may map whole, the file having just been written
    // in 2 MiB pieces; some documents near the centres the checks query.
    let docs: Vec<(u64, u64, Option<String>)> = (0..40_000u64)
        .map(|id| {
            let fp = if id < 1000 {
                rng.fingerprint()
            } else {
                rng.next()
            };
            (id, fp, Some(format!("{id:0>250}")))
        })
        .collect();
    for (id, fp, name) in &docs {
        model.insert(*id, (*fp, name.clone()));
    }
    index.insert_batch(docs).unwrap();
    index.flush().unwrap();
    drop(index);
    let (_, whole) = mapped_and_whole(dir.path(), "ids");
    assert!(whole >= 8 << 20, "the doc maps take {whole} bytes");
    for (budget, mapped_by_the_open) in [(Some(1), false), (None, true)] {
        let gates = Gates::new();
        gates.hold(Point::PrefaultThreadStarted);
        let options = options(&plan, budget).schedule(gates.schedule());
        let index = Index::open(dir.path(), options).unwrap();
        gates.wait_for(Point::PrefaultThreadStarted);
        let (mapped, whole) = mapped_and_whole(dir.path(), "ids");
        // Released before asserting: a failed assertion then drops the
        // index without waiting for a held thread.
        gates.release(Point::PrefaultThreadStarted);
        let what = format!("budget {budget:?}: {mapped} bytes of the doc maps mapped, of {whole}");
        if mapped_by_the_open {
            assert!(mapped >= whole, "{what}");
        } else {
            assert!(mapped < whole / 2, "{what}");
        }
        check(&index, &model, &plan, &mut rng, "reopened");
    }
}
