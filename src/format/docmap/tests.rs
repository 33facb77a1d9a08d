#![allow(clippy::unwrap_used, clippy::indexing_slicing, clippy::panic)]

use super::*;
use crate::sketch::Sketch;

/// A document as the model holds it: fingerprint, id, sequence number,
/// timestamp, name, sketch.
type Row = (u64, u64, u64, u64, Option<String>, Option<Sketch>);

fn doc(fingerprint: u64, id: u64, name: Option<&str>) -> DocEntry<'_> {
    DocEntry {
        fingerprint,
        id,
        seq: id * 10,
        timestamp: 1_700_000_000_000 + id,
        name,
        sketch: None,
    }
}

fn sample() -> (Vec<DocEntry<'static>>, Vec<Tombstone>) {
    let docs = vec![
        doc(50, 3, Some("https://example.com/a")),
        doc(10, 9, None),
        doc(50, 1, Some("")),
        doc(u64::MAX, 2, Some("naïve/路径")),
        doc(0, 4, None),
        doc(50, 7, Some("x")),
    ];
    let tombs = vec![
        Tombstone {
            id: 100,
            seq: 5,
            timestamp: 6,
        },
        Tombstone {
            id: 3,
            seq: 1,
            timestamp: 2,
        },
    ];
    (docs, tombs)
}

fn build(docs: &[DocEntry<'_>], tombs: &[Tombstone]) -> Vec<u8> {
    let mut w = DocMapWriter::new(0, 77);
    for d in docs {
        w.push(*d).unwrap();
    }
    for t in tombs {
        w.push_tombstone(*t);
    }
    w.finish().unwrap()
}

#[test]
fn round_trip_and_lookups() {
    let (docs, tombs) = sample();
    let bytes = build(&docs, &tombs);
    let r = DocMapReader::new(&bytes[..]).unwrap();
    r.verify().unwrap();
    assert_eq!((r.segment_id(), r.len(), r.tombstone_count()), (77, 6, 2));
    let mut sorted = docs.clone();
    sorted.sort_by_key(|d| (d.fingerprint, d.id));
    let all: Vec<DocEntry<'_>> = r.entries().map(Result::unwrap).collect();
    assert_eq!(all, sorted);
    let fifty: Vec<u64> = r.by_fingerprint(50).map(|e| e.unwrap().id).collect();
    assert_eq!(fifty, [1, 3, 7]);
    for fp in [1, 11, 49, 51, u64::MAX - 1] {
        assert_eq!(r.by_fingerprint(fp).count(), 0);
    }
    for d in &docs {
        assert_eq!(r.by_id(d.id).unwrap(), Some(*d));
    }
    for id in [0, 5, 8, 10, u64::MAX] {
        assert_eq!(r.by_id(id).unwrap(), None);
    }
    assert_eq!(r.tombstone(3).unwrap(), Some(tombs[1]));
    assert_eq!(r.tombstone(100).unwrap(), Some(tombs[0]));
    assert_eq!(r.tombstone(4).unwrap(), None);
    let ts: Vec<Tombstone> = r.tombstones().map(Result::unwrap).collect();
    assert_eq!(ts, [tombs[1], tombs[0]]);
    let ids: Vec<(u64, usize)> = r.ids().map(Result::unwrap).collect();
    assert_eq!(
        ids.iter().map(|&(id, _)| id).collect::<Vec<_>>(),
        [1, 2, 3, 4, 7, 9]
    );
    for (id, position) in ids {
        assert_eq!(all[position].id, id);
    }
}

#[test]
fn ranges_span_entries_and_tombstones() {
    let (docs, tombs) = sample();
    let mut w = DocMapWriter::new(0, 1);
    assert_eq!(w.ranges(), None);
    for d in &docs {
        w.push(*d).unwrap();
    }
    // Entries alone: seq = 10 * id for ids 1..=9, timestamps likewise.
    let entries = Ranges {
        min_seq: 10,
        max_seq: 90,
        min_timestamp: 1_700_000_000_001,
        max_timestamp: 1_700_000_000_009,
    };
    assert_eq!(w.ranges(), Some(entries));
    for t in &tombs {
        w.push_tombstone(*t);
    }
    // The tombstones' seq 1 and 5 and timestamps 2 and 6 are older.
    assert_eq!(
        w.ranges(),
        Some(Ranges {
            min_seq: 1,
            min_timestamp: 2,
            ..entries
        })
    );
}

#[test]
fn empty() {
    let bytes = build(&[], &[]);
    let r = DocMapReader::new(bytes).unwrap();
    r.verify().unwrap();
    assert!(r.is_empty());
    assert_eq!(r.by_fingerprint(0).count(), 0);
    assert_eq!(r.by_id(0).unwrap(), None);
    assert_eq!(r.tombstone(0).unwrap(), None);
}

#[test]
fn duplicates_and_long_names_are_refused() {
    let mut w = DocMapWriter::new(0, 1);
    w.push(doc(1, 5, None)).unwrap();
    w.push(doc(2, 5, None)).unwrap();
    assert!(matches!(
        w.finish(),
        Err(EncodeError::DuplicateId { id: 5 })
    ));
    let mut w = DocMapWriter::new(0, 1);
    let t = Tombstone {
        id: 4,
        seq: 1,
        timestamp: 1,
    };
    w.push_tombstone(t);
    w.push_tombstone(Tombstone { seq: 2, ..t });
    assert!(matches!(
        w.finish(),
        Err(EncodeError::DuplicateId { id: 4 })
    ));
    let long = "x".repeat(MAX_NAME_LEN + 1);
    let mut w = DocMapWriter::new(0, 1);
    assert!(matches!(
        w.push(doc(1, 1, Some(&long))),
        Err(EncodeError::NameTooLong { .. })
    ));
    w.push(doc(1, 1, Some(&long[1..]))).unwrap();
}

/// The sample's records in file order: entries by (fingerprint, id),
/// (id, position) by id, tombstones by id.
fn sample_in_file_order() -> (Vec<DocEntry<'static>>, Vec<(u64, u32)>, Vec<Tombstone>) {
    let (mut docs, mut tombs) = sample();
    docs.sort_by_key(|d| (d.fingerprint, d.id));
    let mut ids: Vec<(u64, u32)> = docs.iter().zip(0u32..).map(|(d, p)| (d.id, p)).collect();
    ids.sort_unstable();
    tombs.sort_unstable();
    (docs, ids, tombs)
}

#[test]
fn sorted_writer_streams_the_same_file() {
    let (docs, ids, tombs) = sample_in_file_order();
    let mut w = SortedDocMapWriter::new(Vec::new(), 0, 77, 6, 2).unwrap();
    for (d, expected) in docs.iter().zip(0u32..) {
        assert_eq!(w.push(*d).unwrap(), expected);
    }
    for &(id, position) in &ids {
        w.push_id(id, position).unwrap();
    }
    for t in &tombs {
        w.push_tombstone(*t).unwrap();
    }
    let streamed = w.finish().unwrap();
    let (unsorted_docs, unsorted_tombs) = sample();
    assert_eq!(streamed, build(&unsorted_docs, &unsorted_tombs));
    let r = DocMapReader::new(&streamed[..]).unwrap();
    r.verify().unwrap();
    for d in &docs {
        assert_eq!(r.by_id(d.id).unwrap(), Some(*d));
    }
}

#[test]
fn sorted_writer_refuses_what_would_not_be_a_valid_file() {
    let (docs, ids, tombs) = sample_in_file_order();
    let writer = || SortedDocMapWriter::new(Vec::new(), 0, 1, 6, 2).unwrap();
    let with_entries = || {
        let mut w = writer();
        for d in &docs {
            w.push(*d).unwrap();
        }
        w
    };
    fn invalid<T>(r: Result<T, EncodeError>) -> bool {
        matches!(r, Err(EncodeError::Invalid(_)))
    }

    // Entries out of order, or the same (fingerprint, id) twice.
    let mut w = writer();
    w.push(docs[1]).unwrap();
    assert!(invalid(w.push(docs[0])));
    let mut w = writer();
    w.push(docs[0]).unwrap();
    assert!(matches!(
        w.push(docs[0]),
        Err(EncodeError::DuplicateId { .. })
    ));
    // An id index record before every entry, or more entries than declared.
    let mut w = writer();
    w.push(docs[0]).unwrap();
    assert!(invalid(w.push_id(ids[0].0, ids[0].1)));
    let mut w = with_entries();
    assert!(invalid(w.push(doc(u64::MAX, 99, None))));
    // An entry after the id index has begun.
    let mut w = with_entries();
    w.push_id(ids[0].0, ids[0].1).unwrap();
    assert!(invalid(w.push(doc(u64::MAX, 99, None))));
    // Ids out of order, or a position past the entries.
    let mut w = with_entries();
    w.push_id(ids[1].0, ids[1].1).unwrap();
    assert!(invalid(w.push_id(ids[0].0, ids[0].1)));
    let mut w = with_entries();
    assert!(invalid(w.push_id(ids[0].0, 6)));
    // Two ids whose positions are swapped: each record is plausible, the
    // index as a whole is not.
    let mut w = with_entries();
    let mut swapped = ids.clone();
    let (p0, p1) = (swapped[0].1, swapped[1].1);
    swapped[0].1 = p1;
    swapped[1].1 = p0;
    for &(id, position) in &swapped {
        w.push_id(id, position).unwrap();
    }
    for t in &tombs {
        w.push_tombstone(*t).unwrap();
    }
    assert!(invalid(w.finish()));
    // Too few tombstones, too few entries.
    let mut w = with_entries();
    for &(id, position) in &ids {
        w.push_id(id, position).unwrap();
    }
    w.push_tombstone(tombs[0]).unwrap();
    assert!(invalid(w.finish()));
    let mut w = writer();
    w.push(docs[0]).unwrap();
    assert!(invalid(w.finish()));
    // More documents than a doc map can hold.
    assert!(invalid(SortedDocMapWriter::new(
        Vec::new(),
        0,
        1,
        1 << 32,
        0
    )));
}

#[test]
fn every_bit_flip_is_caught_or_harmless() {
    let (docs, tombs) = sample();
    let bytes = build(&docs, &tombs);
    let good = DocMapReader::new(&bytes[..]).unwrap();
    for bit in 0..bytes.len() * 8 {
        let mut bad = bytes.clone();
        bad[bit / 8] ^= 1 << (bit % 8);
        let Ok(r) = DocMapReader::new(&bad[..]) else {
            continue;
        };
        // Lookups either fail or agree with the undamaged file.
        for d in &docs {
            if let Ok(got) = r
                .by_fingerprint(d.fingerprint)
                .collect::<Result<Vec<_>, _>>()
            {
                let want: Vec<_> = good
                    .by_fingerprint(d.fingerprint)
                    .map(Result::unwrap)
                    .collect();
                assert_eq!(got, want, "bit {bit}");
            }
            if let Ok(got) = r.by_id(d.id) {
                assert_eq!(got, Some(*d), "bit {bit}");
            }
        }
        for t in &tombs {
            if let Ok(got) = r.tombstone(t.id) {
                assert_eq!(got, Some(*t), "bit {bit}");
            }
        }
        match r.verify() {
            Ok(()) => panic!("bit {bit}: verify accepted a damaged file"),
            Err(e) => assert!(e.offset < bad.len() as u64),
        }
    }
}

/// A doc map of `docs` (any order) and `tombs`, and the model it must
/// answer like: id -> entry.
fn build_owned(docs: &[Row], tombs: &[Tombstone]) -> Vec<u8> {
    let mut w = DocMapWriter::new(5, 6);
    for (fp, id, seq, ts, name, sketch) in docs {
        w.push(DocEntry {
            fingerprint: *fp,
            id: *id,
            seq: *seq,
            timestamp: *ts,
            name: name.as_deref(),
            sketch: *sketch,
        })
        .unwrap();
    }
    for t in tombs {
        w.push_tombstone(*t);
    }
    w.finish().unwrap()
}

/// Checks every lookup of `r` against the model, and `probes` that may be
/// absent.
fn check_against_model(r: &DocMapReader<&[u8]>, docs: &[Row], tombs: &[Tombstone], probes: &[u64]) {
    use std::collections::BTreeMap;
    let model: BTreeMap<u64, DocEntry<'_>> = docs
        .iter()
        .map(|(fp, id, seq, ts, name, sketch)| {
            (
                *id,
                DocEntry {
                    fingerprint: *fp,
                    id: *id,
                    seq: *seq,
                    timestamp: *ts,
                    name: name.as_deref(),
                    sketch: *sketch,
                },
            )
        })
        .collect();
    let mut sorted: Vec<DocEntry<'_>> = model.values().copied().collect();
    sorted.sort_by_key(|d| (d.fingerprint, d.id));
    let all: Vec<DocEntry<'_>> = r.entries().map(Result::unwrap).collect();
    assert_eq!(all, sorted);
    let ids: Vec<(u64, usize)> = r.ids().map(Result::unwrap).collect();
    assert_eq!(ids.len(), sorted.len());
    for (id, position) in ids {
        assert_eq!(sorted[position].id, id);
    }
    let keys = model.keys().copied().chain(probes.iter().copied());
    for id in keys {
        assert_eq!(r.by_id(id).unwrap(), model.get(&id).copied(), "id {id}");
    }
    let fps = sorted
        .iter()
        .map(|d| d.fingerprint)
        .chain(probes.iter().copied());
    for fp in fps {
        let got: Vec<_> = r.by_fingerprint(fp).map(Result::unwrap).collect();
        let want: Vec<_> = sorted
            .iter()
            .filter(|d| d.fingerprint == fp)
            .copied()
            .collect();
        assert_eq!(got, want, "fingerprint {fp}");
    }
    let tmodel: BTreeMap<u64, Tombstone> = tombs.iter().map(|t| (t.id, *t)).collect();
    for id in tmodel.keys().copied().chain(probes.iter().copied()) {
        assert_eq!(r.tombstone(id).unwrap(), tmodel.get(&id).copied());
    }
    r.verify().unwrap();
}

/// Ids drawn from a small pool with the extremes, so 0, `u64::MAX` and
/// neighbours meet; fingerprints from a small pool so runs of equal
/// fingerprints cross block boundaries.
fn doc_strategy() -> impl proptest::strategy::Strategy<Value = Row> {
    use proptest::prelude::*;
    (
        prop_oneof![Just(0u64), Just(u64::MAX), 0u64..8, any::<u64>()],
        prop_oneof![
            Just(0u64),
            Just(u64::MAX),
            Just(u64::MAX - 1),
            0u64..1000,
            any::<u64>()
        ],
        any::<u64>(),
        prop_oneof![Just(u64::MAX), 0u64..5000, any::<u64>()],
        proptest::option::of("[a-zé/]{0,6}"),
        proptest::option::of(any::<[u8; Sketch::BYTES]>().prop_map(Sketch::from_bytes)),
    )
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(96))]

    #[test]
    fn random_maps_round_trip_and_answer_like_a_btreemap(
        docs in proptest::collection::vec(doc_strategy(), 0..400),
        tomb_ids in proptest::collection::btree_set(proptest::prelude::any::<u64>(), 0..20),
        probes in proptest::collection::vec(proptest::prelude::any::<u64>(), 0..8),
    ) {
        // One entry per id (the last one wins, as an upsert).
        let mut by_id = std::collections::BTreeMap::new();
        for d in docs {
            by_id.insert(d.1, d);
        }
        let docs: Vec<_> = by_id.into_values().collect();
        let tombs: Vec<Tombstone> = tomb_ids
            .into_iter()
            .map(|id| Tombstone { id, seq: id ^ 1, timestamp: id / 3 })
            .collect();
        let bytes = build_owned(&docs, &tombs);
        let r = DocMapReader::new(&bytes[..]).unwrap();
        proptest::prop_assert_eq!(r.len(), docs.len());
        let mut probes = probes;
        probes.extend([0, 1, u64::MAX, u64::MAX - 1]);
        check_against_model(&r, &docs, &tombs, &probes);
    }
}

/// `n` documents with random fingerprints, ids `0..n` in insertion order,
/// sequence numbers following the ids and timestamps within one second:
/// what an ingest writes.
fn ingest_like(n: u64) -> Vec<Row> {
    let mut x = 0x1234_5678_9abc_def0u64;
    (0..n)
        .map(|i| {
            x = mix(x.wrapping_add(0x9e37_79b9_7f4a_7c15));
            (x, i, i + 1, 1_700_000_000_000 + i * 1000 / n, None, None)
        })
        .collect()
}

#[test]
fn block_boundaries_round_trip() {
    for n in [0u64, 1, 2, 127, 128, 129, 255, 256, 257, 1000] {
        let docs = ingest_like(n);
        let bytes = build_owned(&docs, &[]);
        let r = DocMapReader::new(&bytes[..]).unwrap();
        check_against_model(&r, &docs, &[], &[0, u64::MAX, n, n + 1]);
    }
    // One fingerprint shared by 300 documents: its run spans three blocks.
    let docs: Vec<_> = (0..300u64)
        .map(|i| {
            (
                42,
                i * 7,
                i,
                i,
                (i % 3 == 0).then(|| format!("n{i}")),
                (i % 2 == 0).then(|| Sketch::from_bytes([i as u8; Sketch::BYTES])),
            )
        })
        .chain([(41, 5000, 1, 1, None, None), (43, 5001, 1, 1, None, None)])
        .collect();
    let bytes = build_owned(&docs, &[]);
    let r = DocMapReader::new(&bytes[..]).unwrap();
    check_against_model(&r, &docs, &[], &[41, 42, 43, 44]);
}

#[test]
fn the_index_ranges_hold_one_record_per_block() {
    for n in [0u64, 1, 128, 129, 1000] {
        let docs = ingest_like(n);
        let bytes = build_owned(&docs, &[]);
        let r = DocMapReader::new(&bytes[..]).unwrap();
        let blocks = (n as usize).div_ceil(super::block::BLOCK_LEN);
        for range in r.index_ranges() {
            assert_eq!(range.len(), blocks * 16, "n {n}");
            assert!(range.end <= bytes.len());
            // A block index's first record points at the start of its blocks.
            if blocks > 0 {
                assert_eq!(
                    crate::format::bytes::u64_at(&bytes, range.start + 8),
                    Some(0),
                    "n {n}"
                );
            }
        }
        let [entries, ids] = r.index_ranges();
        assert!(entries.end <= ids.start, "n {n}");
    }
}

#[test]
fn an_ingest_like_doc_map_takes_at_most_16_bytes_per_document() {
    for n in [10_000u64, 100_000] {
        let bytes = build_owned(&ingest_like(n), &[]);
        let per_doc = bytes.len() as f64 / n as f64;
        assert!(per_doc <= 16.0, "{n} documents: {per_doc:.2} bytes each");
    }
}

#[test]
fn every_byte_of_a_multi_block_file_damaged_is_caught_or_harmless() {
    let mut docs = ingest_like(300);
    for (i, d) in docs.iter_mut().enumerate() {
        if i % 5 == 0 {
            d.4 = Some(format!("https://example.com/{i}"));
        }
        if i % 3 == 0 || i >= 256 {
            d.5 = Some(Sketch::from_bytes([(i % 251) as u8; Sketch::BYTES]));
        }
        if i % 50 == 0 {
            d.0 = docs_fp_shared();
        }
    }
    let tombs = [Tombstone {
        id: 7,
        seq: 1000,
        timestamp: 3,
    }];
    let bytes = build_owned(&docs, &tombs);
    let good = DocMapReader::new(&bytes[..]).unwrap();
    let want_all: Vec<_> = good.entries().map(Result::unwrap).collect();
    for at in 0..bytes.len() {
        for flip in [0x01u8, 0xff] {
            let mut bad = bytes.clone();
            bad[at] ^= flip;
            let Ok(r) = DocMapReader::new(&bad[..]) else {
                continue;
            };
            // Every seventh document: a lookup of each block, with and
            // without names, and of the shared fingerprint's run.
            for d in want_all.iter().step_by(7) {
                if let Ok(got) = r
                    .by_fingerprint(d.fingerprint)
                    .collect::<Result<Vec<_>, _>>()
                {
                    let want: Vec<_> = good
                        .by_fingerprint(d.fingerprint)
                        .map(Result::unwrap)
                        .collect();
                    assert_eq!(got, want, "byte {at} ^ {flip:#x}");
                }
                if let Ok(got) = r.by_id(d.id) {
                    assert_eq!(got, Some(*d), "byte {at} ^ {flip:#x}");
                }
            }
            if let Ok(got) = r.entries().collect::<Result<Vec<_>, _>>() {
                assert_eq!(got, want_all, "byte {at} ^ {flip:#x}");
            }
            if let Ok(got) = r.tombstone(7) {
                assert_eq!(got, Some(tombs[0]), "byte {at} ^ {flip:#x}");
            }
            assert!(
                r.verify().is_err(),
                "byte {at} ^ {flip:#x}: verify accepted it"
            );
        }
    }
}

/// Blocks whose entries all have a sketch, none has one and some have one
/// (the three sketch modes) round-trip, in every position of a run of one
/// fingerprint too.
#[test]
fn sketches_round_trip_in_every_mode() {
    let mut docs = ingest_like(128 * 4 + 5);
    docs.sort_by_key(|d| (d.0, d.1));
    for (i, d) in docs.iter_mut().enumerate() {
        let sketched = match i / 128 {
            0 => true,
            1 => false,
            2 => i % 7 == 0,
            3 => i % 7 != 0,
            _ => i % 2 == 1,
        };
        if sketched {
            d.5 = Some(Sketch::from_bytes(std::array::from_fn(|b| {
                (i as u8).wrapping_mul(31).wrapping_add(b as u8)
            })));
        }
        if i % 11 == 0 {
            d.4 = Some(format!("n{i}"));
        }
    }
    let bytes = build_owned(&docs, &[]);
    let r = DocMapReader::new(&bytes[..]).unwrap();
    assert_eq!(r.version(), crate::format::FORMAT_VERSION);
    check_against_model(&r, &docs, &[], &[0, u64::MAX]);
    // The same documents without sketches take 16 bytes less for each
    // sketch, plus the presence bits of the two mixed blocks and of the last.
    let plain: Vec<Row> = docs
        .iter()
        .cloned()
        .map(|mut d| {
            d.5 = None;
            d
        })
        .collect();
    let sketches = docs.iter().filter(|d| d.5.is_some()).count();
    let plain_len = build_owned(&plain, &[]).len();
    assert_eq!(bytes.len(), plain_len + 16 * sketches + 16 * 2 + 1);
}

#[test]
fn an_ingest_like_doc_map_with_sketches_takes_at_most_16_more_bytes_per_document() {
    let n = 10_000u64;
    let plain = ingest_like(n);
    let sketched: Vec<Row> = plain
        .iter()
        .cloned()
        .map(|mut d| {
            d.5 = Some(Sketch::from_bytes(
                d.0.to_le_bytes().repeat(2).try_into().unwrap(),
            ));
            d
        })
        .collect();
    let (a, b) = (
        build_owned(&plain, &[]).len(),
        build_owned(&sketched, &[]).len(),
    );
    assert!(b - a <= 16 * n as usize, "{a} -> {b}");
}

fn docs_fp_shared() -> u64 {
    0x5555_5555_5555_5555
}

/// Lookups check a block's CRC the first time they read it, not on every
/// read; `verify` and iterations check every block whatever lookups did.
/// The file is mapped shared and damaged after the first lookups: later
/// lookups of the same blocks skip the CRC (the damage is in a name, which
/// only the CRC covers), a block read for the first time is checked, and
/// `verify` and `entries` report the damage.
#[test]
fn lookups_check_each_block_once_and_verify_checks_every_time() {
    use std::io::{Seek, SeekFrom, Write};
    let names: Vec<String> = (0..600)
        .map(|i| format!("https://example.com/{i:04}"))
        .collect();
    let docs: Vec<DocEntry<'_>> = (0..600u64)
        .map(|i| doc(i * 1000, i, Some(names[i as usize].as_str())))
        .collect();
    let bytes = build(&docs, &[]);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("map");
    std::fs::write(&path, &bytes).unwrap();
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .unwrap();
    // SAFETY: the test owns the file; it changes it only through `file`,
    // and the mapping reads what is written.
    let map = unsafe { memmap2::Mmap::map(&file) }.unwrap();
    let r = DocMapReader::new(map).unwrap();
    // The first block read by both lookups.
    let first = r.by_fingerprint(0).next().unwrap().unwrap();
    assert_eq!(first.name, Some("https://example.com/0000"));
    assert_eq!(r.by_id(0).unwrap().unwrap().fingerprint, 0);
    // Damage the name of document 5 (first block) and of document 500
    // (block 3, not read yet).
    for id in [5usize, 500] {
        let needle = names[id].as_bytes();
        let at = bytes
            .windows(needle.len())
            .position(|w| w == needle)
            .unwrap();
        let mut f = &file;
        f.seek(SeekFrom::Start((at + needle.len() - 1) as u64))
            .unwrap();
        f.write_all(b"X").unwrap();
    }
    let got = r.by_fingerprint(5000).next().unwrap().unwrap();
    assert_eq!(got.name, Some("https://example.com/000X"));
    assert!(r.by_fingerprint(500_000).next().unwrap().is_err());
    assert!(r.verify().is_err());
    assert!(r.entries().any(|e| e.is_err()));
    // A fresh reader of the same bytes checks the first block again.
    let fresh = DocMapReader::new(std::fs::read(&path).unwrap()).unwrap();
    assert!(fresh.by_fingerprint(5000).next().unwrap().is_err());
}

/// The bytes a lookup of a fingerprint is asked ahead for
/// ([`DocMapReader::fingerprint_block_span`]) are the entry blocks the
/// lookup reads: they start at a block and hold the first entry of the
/// fingerprint (for a fingerprint that is the first key of its block, the
/// block before, where the lookup starts, and that one), inside the entry
/// blocks; there are none in an empty doc map; and damage never makes the
/// span point outside the file.
#[test]
fn the_span_asked_ahead_for_a_fingerprint_holds_the_blocks_its_lookup_reads() {
    assert_eq!(
        DocMapReader::new(&build_owned(&[], &[])[..])
            .unwrap()
            .fingerprint_block_span(7),
        None
    );
    let mut docs = ingest_like(1000);
    // A fingerprint stored 200 times: its run spans two or three blocks.
    for d in docs.iter_mut().step_by(5) {
        d.0 = docs_fp_shared();
    }
    let bytes = build_owned(&docs, &[]);
    let r = DocMapReader::new(&bytes[..]).unwrap();
    let index = r.index_ranges()[0].clone();
    // Where block `i` starts in the entry blocks, from its index record.
    let block_offset =
        |i: usize| crate::format::bytes::u64_at(&bytes, index.start + 16 * i + 8).unwrap() as usize;
    let blocks = index.len() / 16;
    let sorted: Vec<DocEntry<'_>> = r.entries().map(Result::unwrap).collect();
    // The entry blocks start where the span of the lowest fingerprint does.
    let blocks_at = r.fingerprint_block_span(0).unwrap().start;
    let block_starts: Vec<usize> = (0..blocks).map(|i| blocks_at + block_offset(i)).collect();
    for (position, entry) in sorted.iter().enumerate() {
        if position > 0 && sorted[position - 1].fingerprint == entry.fingerprint {
            continue;
        }
        let span = r.fingerprint_block_span(entry.fingerprint).unwrap();
        let holding = blocks_at + block_offset(position / super::block::BLOCK_LEN);
        assert!(block_starts.contains(&span.start), "{position}: {span:?}");
        assert!(
            span.start <= holding && holding < span.end,
            "{position}: {span:?}"
        );
        assert!(span.end <= index.start, "{position}: {span:?}");
        let lookup: Vec<u64> = r
            .by_fingerprint(entry.fingerprint)
            .map(|e| e.unwrap().id)
            .collect();
        assert!(!lookup.is_empty());
    }
    for fp in [0, 1, u64::MAX, docs_fp_shared() + 1] {
        let span = r.fingerprint_block_span(fp).unwrap();
        assert!(block_starts.contains(&span.start) && span.end <= index.start);
    }
    for at in 0..bytes.len() {
        let mut bad = bytes.clone();
        bad[at] ^= 0xff;
        let Ok(damaged) = DocMapReader::new(&bad[..]) else {
            continue;
        };
        for fp in [
            sorted[0].fingerprint,
            docs_fp_shared(),
            sorted[999].fingerprint,
        ] {
            if let Some(span) = damaged.fingerprint_block_span(fp) {
                assert!(span.start < span.end && span.end <= bad.len(), "byte {at}");
            }
        }
    }
}
