//! Damaged bytes: every single-bit flip of a small file of each kind, every
//! truncation, and arbitrary garbage. Decoding never panics; it returns the
//! original data or an error naming an offset inside the file, never a wrong
//! answer. A full `verify` catches every flip.

use proptest::prelude::*;
use simhashdb::format::{
    DocEntry, DocMapReader, DocMapWriter, FileKind, FormatError, Manifest, Record, SegmentInfo,
    SegmentMeta, SegmentReader, SegmentWriter, TableReader, Tombstone, WalEnd, WalReader,
    encode_frame, encode_wal_header,
};
use simhashdb::plan::Shape;

fn xorshift(n: usize, mut s: u64) -> Vec<u64> {
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s
        })
        .collect()
}

fn flip(bytes: &[u8], bit: usize) -> Vec<u8> {
    let mut bad = bytes.to_vec();
    bad[bit / 8] ^= 1 << (bit % 8);
    bad
}

fn assert_inside(e: &FormatError, len: usize, what: &str) {
    assert!(
        e.offset < len as u64,
        "{what}: offset {} outside a {len}-byte file: {e}",
        e.offset
    );
}

fn segment_tables() -> Vec<Vec<u64>> {
    let mut a = xorshift(150, 1);
    a.sort_unstable();
    a.dedup();
    // The second table is clustered, the third dense.
    let mut b: Vec<u64> = a.iter().map(|&k| (k >> 40) | 0xabcd << 48).collect();
    b.sort_unstable();
    b.dedup();
    b.truncate(a.len());
    while b.len() < a.len() {
        b.push(b.last().unwrap() + 1);
    }
    let c: Vec<u64> = (0..a.len() as u64).map(|i| i * 3).collect();
    vec![a, b, c]
}

fn encode_segment(tables: &[Vec<u64>], block_len: u32) -> Vec<u8> {
    let info = SegmentInfo {
        index_id: 0,
        segment_id: 9,
        shape: Shape::Flat { blocks: 4 },
        k: 1,
        table_count: tables.len() as u32,
        key_count: tables[0].len() as u64,
    };
    let mut w = SegmentWriter::with_writer(Vec::new(), info, block_len).unwrap();
    for t in tables {
        w.push_table(t.iter().copied()).unwrap();
    }
    w.finish().unwrap()
}

#[test]
fn segment_bit_flips() {
    let tables = segment_tables();
    let bytes = encode_segment(&tables, 16);
    let probes: Vec<Vec<(u64, u64)>> = tables
        .iter()
        .map(|t| t.windows(3).step_by(7).map(|w| (w[0], w[2])).collect())
        .collect();
    for bit in 0..bytes.len() * 8 {
        let bad = flip(&bytes, bit);
        let segment = match SegmentReader::new(&bad[..]) {
            Ok(s) => s,
            Err(e) => {
                assert_inside(&e, bad.len(), "open");
                continue;
            }
        };
        // Queries without a verify pass: right answer or an error.
        for (i, keys) in tables.iter().enumerate() {
            let table = match segment.table(i) {
                Ok(t) => t,
                Err(e) => {
                    assert_inside(&e, bad.len(), "table");
                    continue;
                }
            };
            match table.iter().collect::<Result<Vec<u64>, _>>() {
                Ok(all) => assert_eq!(&all, keys, "bit {bit}, table {i}"),
                Err(e) => assert_inside(&e, bad.len(), "iter"),
            }
            for &(lo, hi) in &probes[i] {
                match table.range(lo, hi).collect::<Result<Vec<u64>, _>>() {
                    Ok(got) => {
                        let want: Vec<u64> = keys
                            .iter()
                            .copied()
                            .filter(|&k| lo <= k && k <= hi)
                            .collect();
                        assert_eq!(got, want, "bit {bit}, table {i}, {lo:#x}..={hi:#x}");
                    }
                    Err(e) => assert_inside(&e, bad.len(), "range"),
                }
            }
        }
        let e = segment
            .verify()
            .expect_err(&format!("verify missed bit {bit}"));
        assert_inside(&e, bad.len(), "verify");
        assert_eq!(e.file, FileKind::Segment);
    }
}

fn docs() -> (Vec<DocEntry<'static>>, Vec<Tombstone>) {
    let names = ["https://a.example/x", "", "/srv/doc/ü.txt"];
    let fps = xorshift(6, 3);
    let docs = (0..20u64)
        .map(|id| DocEntry {
            fingerprint: fps[(id % 6) as usize],
            id: id * 7 + 1,
            seq: 100 + id,
            timestamp: 1_700_000_000_000 + id,
            name: (id % 4 != 0).then(|| names[(id % 3) as usize]),
            sketch: None,
        })
        .collect();
    let tombs = (0..5u64)
        .map(|i| Tombstone {
            id: i * 11,
            seq: 50 + i,
            timestamp: 1_600_000_000_000 + i,
        })
        .collect();
    (docs, tombs)
}

fn encode_doc_map(docs: &[DocEntry<'_>], tombs: &[Tombstone]) -> Vec<u8> {
    let mut w = DocMapWriter::new(0, 9);
    for d in docs {
        w.push(*d).unwrap();
    }
    for t in tombs {
        w.push_tombstone(*t);
    }
    w.finish().unwrap()
}

#[test]
fn doc_map_bit_flips() {
    let (docs, tombs) = docs();
    let bytes = encode_doc_map(&docs, &tombs);
    let good = DocMapReader::new(&bytes[..]).unwrap();
    let absent = [0u64, 2, 3, 1000, u64::MAX];
    for bit in 0..bytes.len() * 8 {
        let bad = flip(&bytes, bit);
        let map = match DocMapReader::new(&bad[..]) {
            Ok(m) => m,
            Err(e) => {
                assert_inside(&e, bad.len(), "open");
                continue;
            }
        };
        for d in &docs {
            match map
                .by_fingerprint(d.fingerprint)
                .collect::<Result<Vec<_>, _>>()
            {
                Ok(got) => {
                    let want: Vec<_> = good
                        .by_fingerprint(d.fingerprint)
                        .map(Result::unwrap)
                        .collect();
                    assert_eq!(got, want, "bit {bit}");
                }
                Err(e) => assert_inside(&e, bad.len(), "by_fingerprint"),
            }
            match map.by_id(d.id) {
                Ok(got) => assert_eq!(got, Some(*d), "bit {bit}"),
                Err(e) => assert_inside(&e, bad.len(), "by_id"),
            }
        }
        for id in absent {
            if let Ok(got) = map.by_id(id) {
                assert_eq!(got, None, "bit {bit}");
            }
        }
        for t in &tombs {
            match map.tombstone(t.id) {
                Ok(got) => assert_eq!(got, Some(*t), "bit {bit}"),
                Err(e) => assert_inside(&e, bad.len(), "tombstone"),
            }
        }
        match map.entries().collect::<Result<Vec<_>, _>>() {
            Ok(all) => assert_eq!(all.len(), docs.len(), "bit {bit}"),
            Err(e) => assert_inside(&e, bad.len(), "entries"),
        }
        let e = map.verify().expect_err(&format!("verify missed bit {bit}"));
        assert_inside(&e, bad.len(), "verify");
    }
}

fn manifest() -> Manifest {
    Manifest {
        index_id: 0x5eed_0001,
        shape: Shape::Nested { outer: 4, inner: 4 },
        k: 3,
        fingerprint_config: "v1 tokenizer=words shingle=1 weighting=tf hash=fnv1a64-fmix64"
            .to_owned(),
        retention_ms: 172_800_000,
        generation: 3,
        next_segment_id: 4,
        next_wal_id: 2,
        next_seq: 99,
        wal_ids: vec![1],
        segments: vec![SegmentMeta {
            id: 3,
            level: 0,
            key_count: 10,
            doc_count: 11,
            tombstone_count: 1,
            min_seq: 1,
            max_seq: 98,
            min_timestamp: 5,
            max_timestamp: 6,
            seg_file_len: 1000,
            ids_file_len: 900,
            seg_footer_crc: 1,
            ids_footer_crc: 2,
        }],
    }
}

#[test]
fn manifest_bit_flips_and_truncations() {
    let bytes = manifest().encode().unwrap();
    for bit in 0..bytes.len() * 8 {
        let bad = flip(&bytes, bit);
        let e = Manifest::decode(&bad).expect_err(&format!("bit {bit} accepted"));
        assert_inside(&e, bad.len(), "manifest");
    }
    for len in 0..bytes.len() {
        assert!(Manifest::decode(&bytes[..len]).is_err());
    }
}

fn wal() -> (Vec<u8>, Vec<usize>, Vec<Vec<Record>>) {
    let batches = vec![
        vec![Record::Insert {
            seq: 1,
            id: 1,
            fingerprint: 0x1234,
            timestamp: 9,
            name: Some("a".to_owned()),
            sketch: None,
        }],
        vec![
            Record::Delete {
                seq: 2,
                id: 1,
                timestamp: 10,
            },
            Record::Insert {
                seq: 3,
                id: 2,
                fingerprint: 0,
                timestamp: 11,
                name: None,
                sketch: None,
            },
        ],
        vec![Record::Insert {
            seq: 4,
            id: 3,
            fingerprint: u64::MAX,
            timestamp: 12,
            name: Some("https://example.org/".to_owned()),
            sketch: None,
        }],
    ];
    let mut bytes = encode_wal_header(0, 7);
    let mut ends = vec![bytes.len()];
    for b in &batches {
        bytes.extend(encode_frame(b).unwrap());
        ends.push(bytes.len());
    }
    (bytes, ends, batches)
}

/// A flip in a frame followed by valid frames is corruption; in the last
/// frame it cannot be told from a torn append, so it is a torn tail; in the
/// header it is an error. Frames before the damage always come back intact.
#[test]
fn wal_bit_flips() {
    let (bytes, ends, batches) = wal();
    let last = ends.len() - 2;
    for bit in 0..bytes.len() * 8 {
        let bad = flip(&bytes, bit);
        let byte = bit / 8;
        let reader = match WalReader::new(&bad) {
            Ok(r) => r,
            Err(e) => {
                assert!(byte < ends[0], "bit {bit}: frame damage refused the header");
                assert_inside(&e, bad.len(), "header");
                continue;
            }
        };
        assert!(byte >= ends[0], "bit {bit}: header damage accepted");
        let frame = ends.iter().rposition(|&e| e <= byte).unwrap();
        let (frames, end) = reader.read_all();
        let records: Vec<Vec<Record>> = frames.into_iter().map(|f| f.records).collect();
        assert_eq!(records, batches[..frame], "bit {bit}");
        match end {
            WalEnd::TornTail { offset } => {
                assert_eq!(
                    frame, last,
                    "bit {bit}: damage before the last frame dropped"
                );
                assert_eq!(offset, ends[frame] as u64);
            }
            WalEnd::Corrupted { error, next_valid } => {
                assert!(frame < last, "bit {bit}");
                assert_eq!(error.offset, ends[frame] as u64);
                assert_eq!(next_valid, ends[frame + 1] as u64);
            }
            WalEnd::Clean => panic!("bit {bit}: damage not seen"),
            // A flipped bit fails a checksum; it never leaves a frame whose
            // checksums match.
            WalEnd::Unparsable { error } => panic!("bit {bit}: checksums matched: {error}"),
        }
    }
}

#[test]
fn truncated_files_are_refused() {
    let seg = encode_segment(&segment_tables(), 16);
    for len in 0..seg.len() {
        let e = SegmentReader::new(&seg[..len]).unwrap_err();
        assert!(e.offset <= len as u64, "{e}");
    }
    let (docs, tombs) = docs();
    let ids = encode_doc_map(&docs, &tombs);
    for len in 0..ids.len() {
        let e = DocMapReader::new(&ids[..len]).unwrap_err();
        assert!(e.offset <= len as u64, "{e}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(500))]

    /// Garbage after a valid magic and version reaches every parser.
    #[test]
    fn garbage_never_panics(body in prop::collection::vec(any::<u8>(), 0..400), kind in 0usize..4) {
        let kind = FileKind::ALL[kind];
        let mut bytes = kind.magic().to_vec();
        bytes.extend_from_slice(&1u32.to_le_bytes());
        bytes.extend_from_slice(&body);
        match kind {
            FileKind::Segment => {
                if let Ok(s) = SegmentReader::new(&bytes[..]) {
                    let _ = s.verify();
                    for i in 0..s.table_count() {
                        if let Ok(t) = s.table(i) {
                            let _ = t.range(0, u64::MAX).count();
                        }
                    }
                }
            }
            FileKind::DocMap => {
                if let Ok(m) = DocMapReader::new(&bytes[..]) {
                    let _ = m.verify();
                    let _ = m.by_fingerprint(0).count();
                    let _ = m.by_id(0);
                }
            }
            FileKind::Wal => {
                if let Ok(r) = WalReader::new(&bytes) {
                    let _ = r.read_all();
                }
            }
            FileKind::Manifest => {
                let _ = Manifest::decode(&bytes);
            }
        }
        if let Ok(t) = TableReader::new(&body) {
            let _ = t.verify();
            let _ = t.iter().count();
        }
    }

    /// Random single-byte damage anywhere in a larger segment: verify finds
    /// it, and a full read is right or an error.
    #[test]
    fn segment_byte_damage(at in any::<prop::sample::Index>(), value in any::<u8>()) {
        let mut keys = xorshift(3000, 17);
        keys.sort_unstable();
        keys.dedup();
        let bytes = encode_segment(&[keys.clone()], 128);
        let mut bad = bytes.clone();
        let i = at.index(bad.len());
        prop_assume!(bad[i] != value);
        bad[i] = value;
        if let Ok(s) = SegmentReader::new(&bad[..]) {
            prop_assert!(s.verify().is_err());
            if let Ok(t) = s.table(0)
                && let Ok(all) = t.iter().collect::<Result<Vec<_>, _>>()
            {
                prop_assert_eq!(all, keys);
            }
        }
    }
}
