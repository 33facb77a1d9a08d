//! `Index::verify` reads every file and names the first damage it finds.

use std::fs;
use std::path::Path;

use simhashdb::plan::Plan;
use simhashdb::{Error, Index, Options};

fn build(dir: &Path) {
    build_with(dir, Plan::new(5, 3).unwrap(), true);
}

/// The index of [`build`] in `plan`: two flushed segments (whose tables
/// are flat, or Rice-coded when `flat` is false) and a WAL.
fn build_with(dir: &Path, plan: Plan, flat: bool) {
    let options = Options::new()
        .plan(plan)
        .merge_policy(None)
        .flat_tables(flat);
    let index = Index::open(dir, options).unwrap();
    for i in 0..5_000u64 {
        index
            .insert_named(i, i.wrapping_mul(0x9E37_79B9_7F4A_7C15), format!("n{i}"))
            .unwrap();
    }
    index.flush().unwrap();
    index.delete(7).unwrap();
    index.flush().unwrap();
    index.insert(9_999, 42).unwrap();
}

fn files_of(dir: &Path, suffix: &str) -> Vec<std::path::PathBuf> {
    let mut files: Vec<_> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with(suffix))
        .collect();
    files.sort();
    files
}

#[test]
fn a_healthy_index_verifies_and_counts_its_files() {
    let tmp = tempfile::tempdir().unwrap();
    build(tmp.path());
    let index = Index::open_read_only(tmp.path()).unwrap();
    let report = index.verify().unwrap();
    // Manifest, one WAL, two segments of two files each.
    assert_eq!(report.files, 6);
    let on_disk: u64 = fs::read_dir(tmp.path())
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| !e.file_name().to_string_lossy().starts_with("LOCK"))
        .map(|e| e.metadata().unwrap().len())
        .sum();
    assert_eq!(report.bytes, on_disk);
}

#[test]
fn a_flipped_byte_in_a_table_block_is_found_by_verify_with_file_and_offset() {
    let tmp = tempfile::tempdir().unwrap();
    // Rice-coded tables, of a probed plan.
    build_with(tmp.path(), Plan::probed(2, 1, 3).unwrap(), false);
    let segment = files_of(tmp.path(), ".seg").remove(0);
    let mut bytes = fs::read(&segment).unwrap();
    // Inside the last table's first block, which open does not read (it
    // checks the file's and each table's footer only).
    let at = {
        let reader = simhashdb::format::SegmentReader::new(&bytes[..]).unwrap();
        let last = reader.table_count() - 1;
        assert!(reader.table(last).unwrap().block_count() > 1);
        reader.table_offset(last).unwrap() as usize + 20
    };
    bytes[at] ^= 0x10;
    fs::write(&segment, &bytes).unwrap();
    let index = match Index::open_read_only(tmp.path()) {
        Ok(index) => index,
        Err(e) => panic!("open reads only footers, yet failed: {e}"),
    };
    match index.verify() {
        Err(Error::Corrupted { path, offset, .. }) => {
            assert_eq!(path, segment);
            assert!(
                offset <= at as u64,
                "offset {offset} is past the flip at {at}"
            );
        }
        other => panic!("expected Corrupted, got {other:?}"),
    }
}

/// The documents [`build`] leaves live: id and fingerprint.
fn live_docs() -> Vec<(u64, u64)> {
    (0..5_000u64)
        .filter(|&i| i != 7)
        .map(|i| (i, i.wrapping_mul(0x9E37_79B9_7F4A_7C15)))
        .chain([(9_999, 42)])
        .collect()
}

/// For an unprobed plan's flat tables and a probed plan's (whose queries
/// read a run of directory positions per probe), and a byte flipped in the
/// last table's keys or in its directory: `check(place, dir, segment,
/// offset)` on an index built by [`build_with`] with that byte flipped.
fn for_each_flipped_flat_table(mut check: impl FnMut(&str, &Path, &Path, usize)) {
    let plans = [Plan::new(5, 3).unwrap(), Plan::probed(2, 1, 3).unwrap()];
    for (plan, place) in plans
        .iter()
        .flat_map(|plan| ["keys", "directory"].map(|place| (plan, place)))
    {
        let place = format!("{place}, plan {plan:?}");
        let place = place.as_str();
        let tmp = tempfile::tempdir().unwrap();
        build_with(tmp.path(), plan.clone(), true);
        let segment = files_of(tmp.path(), ".seg").remove(0);
        let mut bytes = fs::read(&segment).unwrap();
        let at = {
            let reader = simhashdb::format::SegmentReader::new(&bytes[..]).unwrap();
            let last = reader.table_count() - 1;
            let table = reader.flat_table(last).unwrap().expect("a flat table");
            match place.split(',').next() {
                Some("keys") => reader.table_offset(last).unwrap() as usize + 20,
                _ => table.dir_range().start as usize + 41,
            }
        };
        bytes[at] ^= 0x10;
        fs::write(&segment, &bytes).unwrap();
        check(place, tmp.path(), &segment, at);
    }
}

/// A batch of queries checks the chunks of all its queries before it
/// searches, eight queries' chunks at a time: with a byte flipped in a flat
/// table's keys or directory, a batch of 20 (the damaged chunk read by any
/// of them, in any group of eight) fails with `Corrupted` exactly when one
/// of its queries alone does on another open, and otherwise answers every
/// query as a brute-force scan does.
#[test]
fn a_batch_fails_on_a_damaged_flat_chunk_exactly_when_one_of_its_queries_alone_does() {
    for_each_flipped_flat_table(|place, dir, segment, at| {
        let docs = live_docs();
        let queries: Vec<u64> = docs
            .iter()
            .step_by(7)
            .flat_map(|&(_, fp)| [fp, fp ^ 0b101])
            .collect();
        let brute = |q: u64, k: u32| -> Vec<u64> {
            docs.iter()
                .filter(|&&(_, f)| (f ^ q).count_ones() <= k)
                .map(|&(id, _)| id)
                .collect()
        };
        // Which queries read the damaged chunk, one at a time.
        let alone = Index::open_read_only(dir).unwrap();
        let k = alone.plan().k();
        let fails: Vec<bool> = queries
            .iter()
            .map(|&q| match alone.query(q, k) {
                Ok(_) => false,
                Err(Error::Corrupted { .. }) => true,
                Err(other) => panic!("{place}: expected Corrupted, got {other:?}"),
            })
            .collect();
        drop(alone);
        assert!(
            fails.iter().any(|&f| f),
            "{place}: no query read the damaged chunk"
        );
        // The same queries in batches of 20, on a fresh open.
        let batched = Index::open_read_only(dir).unwrap();
        let mut failed_batches = 0;
        for (batch, fails) in queries.chunks(20).zip(fails.chunks(20)) {
            match batched.query_batch(batch, k) {
                Ok(found) => {
                    assert!(
                        !fails.iter().any(|&f| f),
                        "{place}: a batch answered though one of its queries reads the damage"
                    );
                    for (&q, matches) in batch.iter().zip(found) {
                        let mut got: Vec<u64> = matches.iter().map(|m| m.id).collect();
                        got.sort_unstable();
                        assert_eq!(got, brute(q, k), "{place}: query {q:016x}");
                    }
                }
                Err(Error::Corrupted { path, offset, .. }) => {
                    assert_eq!(path, segment, "{place}");
                    assert!(offset <= at as u64, "{place}: {offset} past {at}");
                    assert!(
                        fails.iter().any(|&f| f),
                        "{place}: a batch failed though none of its queries reads the damage"
                    );
                    failed_batches += 1;
                }
                Err(other) => panic!("{place}: expected Corrupted, got {other:?}"),
            }
        }
        assert!(failed_batches > 0, "{place}");
        // Some damaged query sits past the first eight of its batch.
        assert!(
            fails.chunks(20).any(|f| f.iter().skip(8).any(|&x| x)),
            "{place}: every damaged query is among the first eight of its batch"
        );
    });
}

/// A flat table (format version 5) is checked a 4 KiB chunk at a time, not
/// at the open: a flipped byte in its keys or its directory is found by
/// `verify`, naming the file and an offset at or before the flip, and a
/// query that reads the chunk gets the same error; every other query
/// answers as a brute-force scan does, never wrongly.
#[test]
fn a_flipped_byte_in_a_flat_table_is_found_by_verify_and_by_the_queries_reading_it() {
    for_each_flipped_flat_table(|place, dir, segment, at| {
        let index = match Index::open_read_only(dir) {
            Ok(index) => index,
            Err(e) => panic!("{place}: open reads only footers, yet failed: {e}"),
        };
        let docs = live_docs();
        let k = index.plan().k();
        let mut failed = 0;
        for &(_, fp) in docs.iter().step_by(7) {
            for q in [fp, fp ^ 0b101] {
                match index.query(q, k) {
                    Ok(found) => {
                        let mut got: Vec<u64> = found.iter().map(|m| m.id).collect();
                        got.sort_unstable();
                        let want: Vec<u64> = docs
                            .iter()
                            .filter(|&&(_, f)| (f ^ q).count_ones() <= k)
                            .map(|&(id, _)| id)
                            .collect();
                        assert_eq!(got, want, "{place}: query {q:016x}");
                    }
                    Err(Error::Corrupted { path, offset, .. }) => {
                        assert_eq!(path, segment, "{place}");
                        assert!(offset <= at as u64, "{place}: {offset} past {at}");
                        failed += 1;
                    }
                    Err(other) => panic!("{place}: expected Corrupted, got {other:?}"),
                }
            }
        }
        assert!(failed > 0, "{place}: no query read the damaged chunk");
        match index.verify() {
            Err(Error::Corrupted { path, offset, .. }) => {
                assert_eq!(path, segment, "{place}");
                assert!(
                    offset <= at as u64,
                    "{place}: offset {offset} is past the flip at {at}"
                );
            }
            other => panic!("{place}: expected Corrupted, got {other:?}"),
        }
    });
}
