//! Damage in a large index: thousands of documents in two segments (the
//! second upserting and deleting documents of the first, so it holds
//! tombstones) and hundreds of frames in the WAL. One bit is flipped at
//! sampled offsets of every file (the first and last bytes of each file, and
//! random offsets in between), each time in a fresh copy; the index either
//! refuses to open with `Error::Corrupted` naming the damaged file, or opens
//! and answers every `get` and the queries around every cluster exactly like
//! the model, or reports `Error::Corrupted` naming the file from a read; and
//! `Index::verify` reports every flip in a segment, doc map or committed WAL
//! frame with the file and an offset inside it. Never a panic, never a wrong
//! answer.
//!
//! The small-file counterparts that flip every byte are in
//! tests/index_recovery.rs and tests/format_corruption.rs.

mod common;

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use common::{Model, Rng, brute_force};
use common::{copy_dir, dir};
use simhashdb::engine::fault::FaultFs;
use simhashdb::engine::fs::FileSystem;
use simhashdb::plan::Plan;
use simhashdb::{Durability, Error, Index, Match, Options};

const ID_SPACE: u64 = 8_000;
const CLUSTERS: u64 = 200;

fn options(fs: &FaultFs) -> Options {
    Options::new()
        .plan(Plan::new(5, 3).unwrap())
        .durability(Durability::Buffered)
        .memtable_bytes(256 << 20)
        .file_system(Arc::new(fs.clone()) as Arc<dyn FileSystem>)
        .merge_policy(None)
}

fn centre(c: u64) -> u64 {
    c.wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(17) ^ 0x5555_0000_aaaa_0000
}

/// A fingerprint within 3 bits of one of the cluster centres.
fn fingerprint(rng: &mut Rng) -> u64 {
    let mut fp = centre(rng.below(CLUSTERS));
    for _ in 0..rng.below(4) {
        fp ^= 1 << rng.below(64);
    }
    fp
}

/// The index: returns the model, the model before the last write, the WAL and
/// where its last frame starts.
fn setup(fs: &FaultFs) -> (Model, Model, PathBuf, u64) {
    let index = Index::open(dir(), options(fs)).unwrap();
    let mut model = Model::new();
    let mut rng = Rng(77);
    let mut batch = Vec::new();
    for id in 0..6_000 {
        let fp = fingerprint(&mut rng);
        let name = (id % 3 == 0).then(|| format!("https://example.com/{id}"));
        model.insert(id, (fp, name.clone()));
        batch.push((id, fp, name));
        if batch.len() == 500 {
            index.insert_batch(batch.drain(..)).unwrap();
        }
    }
    index.flush().unwrap();
    for _ in 0..3_000 {
        let id = rng.below(ID_SPACE);
        if rng.below(4) == 0 {
            index.insert_batch(batch.drain(..)).unwrap();
            index.delete(id).unwrap();
            model.remove(&id);
        } else {
            let fp = fingerprint(&mut rng);
            model.insert(id, (fp, None));
            batch.push((id, fp, None));
            if batch.len() == 50 {
                index.insert_batch(batch.drain(..)).unwrap();
            }
        }
    }
    index.insert_batch(batch.drain(..)).unwrap();
    index.flush().unwrap();
    let mut last = 0;
    let mut before_last = Model::new();
    for i in 0..400 {
        let id = rng.below(ID_SPACE);
        if i == 399 {
            last = wal(fs).1;
            before_last = model.clone();
        }
        if i % 5 == 0 {
            index.delete(id).unwrap();
            model.remove(&id);
        } else {
            let fp = fingerprint(&mut rng);
            index.insert_named(id, fp, format!("wal {id}")).unwrap();
            model.insert(id, (fp, Some(format!("wal {id}"))));
        }
    }
    drop(index);
    (model, before_last, wal(fs).0, last)
}

/// The (single) WAL and its length.
fn wal(fs: &FaultFs) -> (PathBuf, u64) {
    let wal = files(fs)
        .into_iter()
        .find(|p| p.extension().is_some_and(|e| e == "wal"))
        .unwrap();
    let len = fs.len(&wal).unwrap();
    (wal, len)
}

fn files(fs: &FaultFs) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = fs
        .list(dir())
        .unwrap()
        .into_iter()
        .map(|n| dir().join(n))
        .filter(|p| !p.ends_with("LOCK"))
        .collect();
    files.sort();
    files
}

/// A durable copy of the index with one bit of `file` flipped at `offset`.
fn damaged_copy(src: &FaultFs, file: &Path, offset: usize, bit: u32) -> FaultFs {
    let target = file.file_name().unwrap().to_str().unwrap().to_owned();
    copy_dir(src, dir(), |name, bytes| {
        if name == target {
            bytes[offset] ^= 1 << bit;
        }
    })
}

#[derive(Debug, Default)]
struct Outcomes {
    refused_at_open: u64,
    reported_by_a_read: u64,
    harmless: u64,
    /// Opened, and `verify` found nothing.
    verified: u64,
}

struct Expected {
    model: Model,
    /// The answer to a distance-3 query at every cluster centre.
    answers: Vec<(u64, Vec<Match>)>,
}

impl Expected {
    fn new(model: Model) -> Expected {
        let answers = (0..CLUSTERS)
            .map(|c| (centre(c), brute_force(&model, centre(c), 3)))
            .collect();
        Expected { model, answers }
    }
}

/// Opens the damaged copy and reads everything; `alternatives` are the
/// states the index may legitimately hold.
fn read_damaged(fs: &FaultFs, damaged: &Path, alternatives: &[&Expected], ctx: &str) -> Outcomes {
    let mut outcomes = Outcomes::default();
    let check = |e: Error, what: &str| match e {
        Error::Corrupted { ref path, .. } if path == damaged => {}
        other => panic!("{ctx}: {what} failed with {other:?}, not Corrupted naming the file"),
    };
    let index = match Index::open(dir(), options(fs)) {
        Ok(index) => index,
        Err(e) => {
            check(e, "open");
            outcomes.refused_at_open += 1;
            return outcomes;
        }
    };
    // Which alternative the index holds is decided by the first answers.
    let mut candidates: Vec<&Expected> = alternatives.to_vec();
    let mut reported = false;
    for id in 0..ID_SPACE {
        match index.get(id) {
            Ok(fp) => {
                candidates.retain(|x| x.model.get(&id).map(|d| d.0) == fp);
                assert!(
                    !candidates.is_empty(),
                    "{ctx}: get({id}) = {fp:?}, a wrong answer"
                );
            }
            Err(e) => {
                check(e, "get");
                reported = true;
            }
        }
    }
    for c in 0..CLUSTERS as usize {
        let fp = alternatives[0].answers[c].0;
        match index.query(fp, 3) {
            Ok(found) => {
                candidates.retain(|x| x.answers[c].1 == found);
                assert!(
                    !candidates.is_empty(),
                    "{ctx}: query({fp:#x}, 3), a wrong answer"
                );
            }
            Err(e) => {
                check(e, "query");
                reported = true;
            }
        }
    }
    // A full check reads every byte: damage that the reads above did not
    // touch is reported here, naming the file and an offset inside it.
    match index.verify() {
        Ok(_) => outcomes.verified += 1,
        Err(Error::Corrupted { path, offset, .. }) => {
            assert_eq!(path, damaged, "{ctx}: verify named another file");
            let len = fs.len(damaged).unwrap();
            assert!(offset < len, "{ctx}: verify named offset {offset} of {len}");
        }
        Err(other) => panic!("{ctx}: verify failed with {other:?}"),
    }
    if reported {
        outcomes.reported_by_a_read += 1;
    } else {
        outcomes.harmless += 1;
    }
    outcomes
}

/// The offsets to damage in a file of `len` bytes: the first and last 48,
/// and `random` more.
fn offsets(len: usize, random: usize, rng: &mut Rng) -> Vec<usize> {
    let mut out: Vec<usize> = (0..len.min(48))
        .chain(len.saturating_sub(48)..len)
        .collect();
    out.extend((0..random).map(|_| rng.below(len as u64) as usize));
    out.sort_unstable();
    out.dedup();
    out
}

fn sweep(ext: &str, random: usize) -> Outcomes {
    let src = FaultFs::new();
    let (model, before_last, wal_path, last_frame) = setup(&src);
    let expected = Expected::new(model);
    let expected_before_last = Expected::new(before_last);
    let mut rng = Rng(ext.len() as u64 * 1000 + random as u64);
    let mut total = Outcomes::default();
    let targets: Vec<PathBuf> = files(&src)
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == ext) || p.ends_with(ext))
        .collect();
    assert!(!targets.is_empty(), "no {ext} file");
    let mut flipped = 0;
    for file in &targets {
        let len = src.len(file).unwrap() as usize;
        for offset in offsets(len, random, &mut rng) {
            let bit = rng.below(8) as u32;
            let fs = damaged_copy(&src, file, offset, bit);
            let ctx = format!(
                "{} ({len} bytes), bit {bit} of byte {offset} flipped",
                file.display()
            );
            let in_last_frame = *file == wal_path && offset as u64 >= last_frame;
            // Damage inside the WAL's last frame cannot be told from a torn
            // append: the state without the last write is acceptable too.
            let alternatives: &[&Expected] = if in_last_frame {
                &[&expected, &expected_before_last]
            } else {
                &[&expected]
            };
            let outcome = catch_unwind(AssertUnwindSafe(|| {
                read_damaged(&fs, file, alternatives, &ctx)
            }))
            .unwrap_or_else(|_| panic!("{ctx}: panicked (see above)"));
            if *file == wal_path && !in_last_frame {
                // Acknowledged data is never dropped silently.
                assert_eq!(outcome.refused_at_open, 1, "{ctx}: not refused at open");
            }
            total.refused_at_open += outcome.refused_at_open;
            total.reported_by_a_read += outcome.reported_by_a_read;
            total.harmless += outcome.harmless;
            total.verified += outcome.verified;
            flipped += 1;
        }
    }
    eprintln!(
        "{ext}: {flipped} offsets flipped in {} files: {total:?}",
        targets.len()
    );
    total
}

#[test]
fn flipped_bits_in_large_segments_are_reported_or_harmless() {
    let outcomes = sweep("seg", 150);
    assert!(outcomes.refused_at_open > 0 && outcomes.reported_by_a_read > 0);
    assert_eq!(outcomes.verified, 0, "a flip went unnoticed by verify");
}

#[test]
fn flipped_bits_in_large_doc_maps_are_reported_or_harmless() {
    let outcomes = sweep("ids", 150);
    assert!(outcomes.refused_at_open > 0 && outcomes.reported_by_a_read > 0);
    assert_eq!(outcomes.verified, 0, "a flip went unnoticed by verify");
}

#[test]
fn flipped_bits_in_a_long_wal_are_refused_or_a_torn_tail() {
    let outcomes = sweep("wal", 150);
    assert!(outcomes.refused_at_open > 0);
}

#[test]
fn flipped_bits_in_the_manifest_of_a_large_index_are_refused() {
    let outcomes = sweep("MANIFEST", 100);
    assert_eq!(outcomes.reported_by_a_read + outcomes.harmless, 0);
}

/// Real files cut short (as a full disk or a careless copy leaves them): a
/// segment, doc map or manifest shorter than recorded is refused before
/// anything is mapped, by a writer and by a reader. (A read past the end of a
/// mapped file would be SIGBUS, not an error.)
#[test]
fn real_files_cut_short_are_refused_before_mapping() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    let real = || Options::new().plan(Plan::new(5, 3).unwrap());
    let index = Index::open(&src, real()).unwrap();
    let mut rng = Rng(5);
    for id in 0..3_000 {
        index.insert(id, fingerprint(&mut rng)).unwrap();
    }
    index.flush().unwrap();
    drop(index);
    let names: Vec<String> = std::fs::read_dir(&src)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".seg") || n.ends_with(".ids") || n == "MANIFEST")
        .collect();
    assert_eq!(names.len(), 3, "{names:?}");
    let mut cuts = 0;
    for name in &names {
        let len = std::fs::metadata(src.join(name)).unwrap().len();
        for cut in [0, 1, 11, 12, 40, 100, len / 2, len - 41, len - 1] {
            let copy = tmp.path().join(format!("{name}-{cut}"));
            std::fs::create_dir(&copy).unwrap();
            for entry in std::fs::read_dir(&src).unwrap() {
                let entry = entry.unwrap();
                std::fs::copy(entry.path(), copy.join(entry.file_name())).unwrap();
            }
            let damaged = copy.join(name);
            std::fs::OpenOptions::new()
                .write(true)
                .open(&damaged)
                .unwrap()
                .set_len(cut)
                .unwrap();
            for read_only in [true, false] {
                let result = if read_only {
                    Index::open_read_only(&copy)
                } else {
                    Index::open(&copy, real())
                };
                match result {
                    Err(Error::Corrupted { path, offset, .. }) => {
                        assert_eq!(path, damaged, "{name} cut to {cut}");
                        assert!(offset <= len, "{name} cut to {cut}: offset {offset}");
                    }
                    other => panic!("{name} cut to {cut} (read-only {read_only}): {other:?}"),
                }
            }
            cuts += 1;
        }
    }
    assert_eq!(cuts, 27);
}
