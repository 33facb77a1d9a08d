//! `Index::verify` reads every file and names the first damage it finds.

use std::fs;
use std::path::Path;

use simhashdb::plan::Plan;
use simhashdb::{Error, Index, Options};

fn build(dir: &Path) {
    let index = Index::open(
        dir,
        Options::new()
            .plan(Plan::new(5, 3).unwrap())
            .merge_policy(None),
    )
    .unwrap();
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
    build(tmp.path());
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
