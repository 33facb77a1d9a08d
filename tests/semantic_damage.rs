//! Files whose checksums are valid but whose contents are wrong: written by
//! a faulty release, restored from a mismatched backup, copied in from
//! another index, or crafted. Each file is rebuilt with the crate's own
//! encoders (so every checksum holds), and the engine must refuse it clearly,
//! `verify` must name it, and nothing may be overwritten, aborted or
//! laundered by compaction.

mod common;

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use common::cli::run;
use common::live_docs;
use simhashdb::format::{
    DocEntry, DocMapReader, DocMapWriter, FileKind, Manifest, Record, SegmentMeta, SegmentReader,
    SegmentWriter, Tombstone, WalReader, encode_frame, encode_wal_header_with_flags,
};
use simhashdb::plan::Plan;
use simhashdb::{Durability, Error, Index, Options};

fn options(durability: Durability) -> Options {
    Options::new()
        .plan(Plan::new(5, 3).unwrap())
        .durability(durability)
        .merge_policy(None)
}

fn fp(i: u64) -> u64 {
    i.wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

/// 400 documents in a first segment, deletes and upserts in a second, and
/// a few writes left in the WAL.
fn build(dir: &Path, durability: Durability) {
    let index = Index::open(dir, options(durability)).unwrap();
    for i in 0..400u64 {
        if i % 3 == 0 {
            index.insert_named(i, fp(i), format!("doc {i}")).unwrap();
        } else {
            index.insert(i, fp(i)).unwrap();
        }
    }
    index.flush().unwrap();
    for i in 0..20u64 {
        index.delete(i * 7).unwrap();
    }
    index.insert(5, fp(5) ^ 1).unwrap();
    index.flush().unwrap();
    index.insert(1000, fp(1000)).unwrap();
    index.insert(1001, fp(1001)).unwrap();
}

/// A temporary directory holding what [`build`] writes.
fn built(durability: Durability) -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    build(tmp.path(), durability);
    tmp
}

fn manifest_path(dir: &Path) -> PathBuf {
    dir.join("MANIFEST")
}

fn read_manifest(dir: &Path) -> Manifest {
    Manifest::decode(&fs::read(manifest_path(dir)).unwrap()).unwrap()
}

fn write_manifest(dir: &Path, m: &Manifest) {
    fs::write(manifest_path(dir), m.encode().unwrap()).unwrap();
}

/// Every engine file of `dir` with the CRC of its bytes.
fn contents(dir: &Path) -> BTreeMap<String, u32> {
    fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| !e.file_name().to_string_lossy().starts_with("LOCK"))
        .map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            (name, crc32fast::hash(&fs::read(e.path()).unwrap()))
        })
        .collect()
}

/// The id of the segment with the most documents (the first flush's).
fn big_segment(dir: &Path) -> SegmentMeta {
    *read_manifest(dir)
        .segments
        .iter()
        .max_by_key(|s| s.doc_count)
        .unwrap()
}

fn seg_path(dir: &Path, id: u64) -> PathBuf {
    dir.join(FileKind::Segment.file_name(id))
}

fn ids_path(dir: &Path, id: u64) -> PathBuf {
    dir.join(FileKind::DocMap.file_name(id))
}

/// The tables of segment `id`, decoded.
fn tables_of(dir: &Path, id: u64) -> (simhashdb::format::SegmentInfo, Vec<Vec<u64>>) {
    let bytes = fs::read(seg_path(dir, id)).unwrap();
    let reader = SegmentReader::new(&bytes[..]).unwrap();
    let tables = (0..reader.table_count())
        .map(|t| reader.keys(t).unwrap().map(|k| k.unwrap()).collect())
        .collect();
    (reader.info(), tables)
}

/// The directory bits of segment `id`'s flat tables, if they are flat.
fn flat_bits_of(dir: &Path, id: u64) -> Option<u32> {
    let bytes = fs::read(seg_path(dir, id)).unwrap();
    let reader = SegmentReader::new(&bytes[..]).unwrap();
    reader.flat_table(0).unwrap().map(|t| t.bits())
}

/// Writes segment `id`'s tables with the segment encoder and records the new
/// file in the manifest (length and footer checksum), as a faulty writer
/// would have.
fn rewrite_tables(dir: &Path, id: u64, tables: &[Vec<u64>]) {
    let (info, _) = tables_of(dir, id);
    let bits = flat_bits_of(dir, id);
    let mut writer = SegmentWriter::new(info).unwrap();
    for table in tables {
        match bits {
            Some(bits) => writer.push_flat_table(table.iter().copied(), bits),
            None => writer.push_table(table.iter().copied()),
        }
        .unwrap();
    }
    let bytes = writer.finish().unwrap();
    let footer_crc = SegmentReader::new(&bytes[..]).unwrap().footer_crc();
    fs::write(seg_path(dir, id), &bytes).unwrap();
    let mut m = read_manifest(dir);
    for s in m.segments.iter_mut().filter(|s| s.id == id) {
        s.seg_file_len = bytes.len() as u64;
        s.seg_footer_crc = footer_crc;
    }
    write_manifest(dir, &m);
}

type Entries = Vec<(u64, u64, u64, u64, Option<String>)>;

fn doc_map_of(dir: &Path, id: u64) -> (u64, Entries, Vec<Tombstone>) {
    let bytes = fs::read(ids_path(dir, id)).unwrap();
    let reader = DocMapReader::new(&bytes[..]).unwrap();
    let entries = reader
        .entries()
        .map(|e| e.unwrap())
        .map(|e| {
            (
                e.fingerprint,
                e.id,
                e.seq,
                e.timestamp,
                e.name.map(str::to_owned),
            )
        })
        .collect();
    let tombstones = reader.tombstones().map(|t| t.unwrap()).collect();
    (reader.index_id(), entries, tombstones)
}

/// Writes segment `id`'s doc map with the doc map encoder and records it in
/// the manifest (length, footer checksum and counts).
fn rewrite_doc_map(dir: &Path, id: u64, entries: &Entries, tombstones: &[Tombstone]) {
    let (index_id, _, _) = doc_map_of(dir, id);
    let mut writer = DocMapWriter::new(index_id, id);
    for (fingerprint, doc, seq, timestamp, name) in entries {
        writer
            .push(DocEntry {
                fingerprint: *fingerprint,
                id: *doc,
                seq: *seq,
                timestamp: *timestamp,
                name: name.as_deref(),
                sketch: None,
            })
            .unwrap();
    }
    for t in tombstones {
        writer.push_tombstone(*t);
    }
    let bytes = writer.finish().unwrap();
    let reader = DocMapReader::new(&bytes[..]).unwrap();
    let mut m = read_manifest(dir);
    for s in m.segments.iter_mut().filter(|s| s.id == id) {
        s.ids_file_len = bytes.len() as u64;
        s.ids_footer_crc = reader.footer_crc();
        s.doc_count = reader.len() as u64;
        s.tombstone_count = reader.tombstone_count() as u64;
    }
    fs::write(ids_path(dir, id), &bytes).unwrap();
    write_manifest(dir, &m);
}

fn expect_corrupted<T: std::fmt::Debug>(result: simhashdb::Result<T>, file: &Path, says: &str) {
    match result {
        Err(Error::Corrupted { path, reason, .. }) => {
            assert_eq!(path, file, "{reason}");
            assert!(reason.contains(says), "{reason:?} does not say {says:?}");
        }
        other => panic!(
            "expected Corrupted naming {}, got {other:?}",
            file.display()
        ),
    }
}

#[test]
fn a_manifest_whose_next_segment_id_is_not_above_a_segment_is_refused_and_nothing_is_overwritten() {
    let tmp = built(Durability::Buffered);
    let dir = tmp.path();
    let mut m = read_manifest(dir);
    let lowest = m.segments.iter().map(|s| s.id).min().unwrap();
    m.next_segment_id = lowest;
    write_manifest(dir, &m);
    let before = contents(dir);
    expect_corrupted(
        Index::open(dir, options(Durability::Buffered)),
        &manifest_path(dir),
        "next segment id",
    );
    expect_corrupted(
        Index::open_read_only(dir),
        &manifest_path(dir),
        "next segment id",
    );
    // The CLI's writing commands refuse it as damage too, and write nothing.
    let db = dir.to_str().unwrap();
    let out = run(&["add", "--db", db, "-"], b"doc\tsome text\n");
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    let out = run(&["compact", "--db", db], b"");
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    assert_eq!(contents(dir), before);
}

#[test]
fn manifest_counters_below_what_the_manifest_names_are_refused() {
    let tmp = built(Durability::Buffered);
    let dir = tmp.path();
    let good = read_manifest(dir);
    let newest_seq = good.segments.iter().map(|s| s.max_seq).max().unwrap();
    type Edit = Box<dyn Fn(&mut Manifest)>;
    let cases: [(&str, Edit); 6] = [
        (
            "next WAL id",
            Box::new(|m: &mut Manifest| m.next_wal_id = m.wal_ids[0]),
        ),
        (
            "next sequence number",
            Box::new(move |m: &mut Manifest| m.next_seq = newest_seq),
        ),
        // Counters that would overflow at the next allocation (found by
        // fuzzing: `compact` then panicked in debug builds, and wrapped to
        // id 0 in release builds).
        (
            "beyond 2^63",
            Box::new(|m: &mut Manifest| m.next_segment_id = u64::MAX),
        ),
        (
            "beyond 2^63",
            Box::new(|m: &mut Manifest| m.next_wal_id = u64::MAX),
        ),
        (
            "beyond 2^63",
            Box::new(|m: &mut Manifest| m.next_seq = 1 << 63),
        ),
        (
            "beyond 2^63",
            Box::new(|m: &mut Manifest| m.generation = u64::MAX),
        ),
    ];
    for (says, edit) in cases {
        let mut m = good.clone();
        edit(&mut m);
        write_manifest(dir, &m);
        expect_corrupted(
            Index::open(dir, options(Durability::Buffered)),
            &manifest_path(dir),
            says,
        );
    }
    write_manifest(dir, &good);
    Index::open(dir, options(Durability::Buffered)).unwrap();
}

#[test]
fn a_segment_level_at_its_limit_compacts() {
    // Found by fuzzing: the merged segment's level was the inputs' + 1,
    // which overflowed (a panic in debug builds).
    let tmp = built(Durability::Buffered);
    let dir = tmp.path();
    let mut m = read_manifest(dir);
    m.segments.iter_mut().for_each(|s| s.level = u32::MAX);
    write_manifest(dir, &m);
    let index = Index::open(dir, options(Durability::Buffered)).unwrap();
    let before = live_docs(&index);
    index.compact().unwrap();
    assert_eq!(live_docs(&index), before);
    drop(index);
    assert_eq!(read_manifest(dir).segments[0].level, u32::MAX);
}

#[test]
fn debris_holding_the_next_ids_is_never_written_over() {
    let tmp = built(Durability::Buffered);
    let dir = tmp.path();
    let m = read_manifest(dir);
    // What a flush interrupted before its commit leaves: files with the ids
    // the manifest would hand out next.
    let debris_seg = seg_path(dir, m.next_segment_id);
    let debris_wal = dir.join(FileKind::Wal.file_name(m.next_wal_id));
    fs::write(&debris_seg, b"an interrupted flush").unwrap();
    fs::write(&debris_wal, b"an interrupted rotation").unwrap();
    let index = Index::open(dir, options(Durability::Buffered)).unwrap();
    index.insert(5000, fp(5000)).unwrap();
    index.flush().unwrap();
    index.compact().unwrap();
    drop(index);
    let after = read_manifest(dir);
    assert!(after.segments.iter().all(|s| s.id > m.next_segment_id));
    assert!(after.wal_ids.iter().all(|&w| w > m.next_wal_id));
    let index = Index::open_read_only(dir).unwrap();
    index.verify().unwrap();
    assert_eq!(index.get(5000).unwrap(), Some(fp(5000)));
    assert_eq!(index.get(1).unwrap(), Some(fp(1)));
}

#[test]
fn absurd_counts_in_the_manifest_are_refused_at_open_not_allocated() {
    let tmp = built(Durability::Buffered);
    let dir = tmp.path();
    let good = read_manifest(dir);
    let big = big_segment(dir);
    type Edit<'a> = (&'a str, fn(&mut SegmentMeta), &'a Path);
    let edits: [Edit; 3] = [
        (
            "tombstone count",
            |s| s.tombstone_count = 1_000_000_000_000_000,
            &ids_path(dir, big.id),
        ),
        (
            "entry count",
            |s| s.doc_count = u64::MAX,
            &ids_path(dir, big.id),
        ),
        (
            "key count",
            |s| s.key_count = 1 << 40,
            &seg_path(dir, big.id),
        ),
    ];
    let db = dir.to_str().unwrap();
    for (says, edit, file) in edits {
        let mut m = good.clone();
        m.segments
            .iter_mut()
            .filter(|s| s.id == big.id)
            .for_each(edit);
        write_manifest(dir, &m);
        expect_corrupted(Index::open(dir, options(Durability::Buffered)), file, says);
        for command in ["stats", "compact", "verify"] {
            let out = run(&[command, "--db", db], b"");
            assert_eq!(out.status.code(), Some(3), "{command}: {out:?}");
        }
    }
}

#[test]
fn verify_names_the_segment_file_when_two_tables_are_exchanged_and_compact_refuses_it() {
    let tmp = built(Durability::Buffered);
    let dir = tmp.path();
    let big = big_segment(dir);
    let (_, mut tables) = tables_of(dir, big.id);
    tables.swap(0, 1);
    rewrite_tables(dir, big.id, &tables);
    {
        let index = Index::open_read_only(dir).unwrap();
        expect_corrupted(index.verify(), &seg_path(dir, big.id), "table 0");
    }
    let before = contents(dir);
    {
        let index = Index::open(dir, options(Durability::Buffered)).unwrap();
        let before = contents(dir);
        expect_corrupted(index.compact(), &seg_path(dir, big.id), "table 0");
        // Nothing was written, and the refusal did not poison the writer.
        assert_eq!(contents(dir), before);
        index.insert(7777, 1).unwrap();
    }
    let db = dir.to_str().unwrap();
    let out = run(&["compact", "--db", db], b"");
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    let out = run(&["verify", "--db", db], b"");
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains(&FileKind::Segment.file_name(big.id)));
    assert_ne!(contents(dir), before, "the WAL took the insert");
}

#[test]
fn verify_names_the_segment_file_when_a_table_misses_a_key_and_holds_a_phantom() {
    let tmp = built(Durability::Buffered);
    let dir = tmp.path();
    let big = big_segment(dir);
    let (_, mut tables) = tables_of(dir, big.id);
    let t = 2;
    let missing = tables[t].remove(10);
    let phantom = (missing..).find(|k| tables[t].binary_search(k).is_err() && *k != missing);
    tables[t].push(phantom.unwrap());
    tables[t].sort_unstable();
    rewrite_tables(dir, big.id, &tables);
    let index = Index::open_read_only(dir).unwrap();
    expect_corrupted(index.verify(), &seg_path(dir, big.id), "table 2");
}

#[test]
fn verify_names_the_doc_map_when_an_entry_fingerprint_is_in_no_table() {
    let tmp = built(Durability::Buffered);
    let dir = tmp.path();
    let big = big_segment(dir);
    let (_, mut entries, tombstones) = doc_map_of(dir, big.id);
    // Fingerprints are distinct here, so the entry's old one leaves the set.
    entries[3].0 ^= 0xF0F0;
    rewrite_doc_map(dir, big.id, &entries, &tombstones);
    let index = Index::open_read_only(dir).unwrap();
    expect_corrupted(
        index.verify(),
        &ids_path(dir, big.id),
        "distinct fingerprints",
    );
    drop(index);
    let index = Index::open(dir, options(Durability::Buffered)).unwrap();
    expect_corrupted(
        index.compact(),
        &ids_path(dir, big.id),
        "distinct fingerprints",
    );
}

#[test]
fn verify_names_the_doc_map_when_a_key_of_every_table_is_missing_from_it() {
    let tmp = built(Durability::Buffered);
    let dir = tmp.path();
    let big = big_segment(dir);
    let (_, mut entries, tombstones) = doc_map_of(dir, big.id);
    entries.remove(17);
    rewrite_doc_map(dir, big.id, &entries, &tombstones);
    let index = Index::open_read_only(dir).unwrap();
    expect_corrupted(
        index.verify(),
        &ids_path(dir, big.id),
        "distinct fingerprints",
    );
}

#[test]
fn verify_refuses_a_doc_map_whose_sequence_numbers_differ_from_the_manifest() {
    let tmp = built(Durability::Buffered);
    let dir = tmp.path();
    let big = big_segment(dir);
    let (_, mut entries, tombstones) = doc_map_of(dir, big.id);
    // Newer than anything the manifest records for the segment: it would
    // change which segment queries take as the newer.
    entries[0].2 = 1 << 40;
    rewrite_doc_map(dir, big.id, &entries, &tombstones);
    let index = Index::open_read_only(dir).unwrap();
    expect_corrupted(index.verify(), &ids_path(dir, big.id), "sequence numbers");
}

#[test]
fn a_tombstone_newer_than_an_entry_in_the_same_doc_map_deletes_it_and_an_older_one_does_not() {
    let tmp = built(Durability::Buffered);
    let dir = tmp.path();
    let big = big_segment(dir);
    let (_, entries, mut tombstones) = doc_map_of(dir, big.id);
    // Two live documents of the segment, neither touched by later writes.
    let pick = |i: usize| {
        entries
            .iter()
            .filter(|e| e.1 % 7 != 0 && e.1 != 5)
            .nth(i)
            .unwrap()
            .clone()
    };
    let (newer, older) = (pick(0), pick(1));
    assert!(newer.2 > big.min_seq && older.2 > big.min_seq);
    tombstones.push(Tombstone {
        id: newer.1,
        seq: newer.2 + 1,
        timestamp: newer.3,
    });
    tombstones.push(Tombstone {
        id: older.1,
        seq: older.2 - 1,
        timestamp: older.3,
    });
    tombstones.sort_unstable_by_key(|t| t.id);
    rewrite_doc_map(dir, big.id, &entries, &tombstones);

    let index = Index::open(dir, options(Durability::Buffered)).unwrap();
    index.verify().unwrap();
    let check = |index: &Index| {
        assert_eq!(
            index.get(newer.1).unwrap(),
            None,
            "the newer tombstone wins"
        );
        assert!(
            index
                .query(newer.0, 0)
                .unwrap()
                .iter()
                .all(|m| m.id != newer.1)
        );
        assert_eq!(
            index.get(older.1).unwrap(),
            Some(older.0),
            "the entry is newer"
        );
        assert!(
            index
                .query(older.0, 0)
                .unwrap()
                .iter()
                .any(|m| m.id == older.1)
        );
        let live = live_docs(index);
        assert!(!live.contains_key(&newer.1) && live.contains_key(&older.1));
    };
    check(&index);
    index.compact().unwrap();
    check(&index);
    index.verify().unwrap();
}

/// The WAL named by the manifest (one after a writer's open).
fn wal_path(dir: &Path) -> PathBuf {
    let m = read_manifest(dir);
    dir.join(FileKind::Wal.file_name(*m.wal_ids.last().unwrap()))
}

/// The WAL's header fields and frames.
fn wal_of(dir: &Path) -> (u64, u64, u32, Vec<Vec<Record>>) {
    let bytes = fs::read(wal_path(dir)).unwrap();
    let reader = WalReader::new(&bytes).unwrap();
    let flags = u32::from(reader.unsynced_appends());
    let header = (reader.index_id(), reader.wal_id(), flags);
    let frames = reader.read_all().0.into_iter().map(|f| f.records).collect();
    (header.0, header.1, header.2, frames)
}

/// A frame whose checksums match but whose payload declares 2^32 - 1
/// records and holds one. No encoder writes such a frame, so it is framed
/// here by the rule of docs/FORMAT.md ("WAL file").
fn unparsable_frame() -> Vec<u8> {
    let one = encode_frame(&[Record::Delete {
        seq: 999_999,
        id: 1,
        timestamp: 0,
    }])
    .unwrap();
    let mut payload = one[12..].to_vec();
    payload[..4].copy_from_slice(&u32::MAX.to_le_bytes());
    let mut frame = Vec::new();
    frame.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    frame.extend_from_slice(&crc32fast::hash(&payload).to_le_bytes());
    let header_crc = crc32fast::hash(&frame);
    frame.extend_from_slice(&header_crc.to_le_bytes());
    frame.extend_from_slice(&payload);
    frame
}

#[test]
fn a_checksum_valid_last_wal_frame_that_does_not_parse_is_damage_not_a_torn_tail() {
    for durability in [Durability::Sync, Durability::Buffered] {
        let tmp = built(durability);
        let dir = tmp.path();
        let (index_id, wal_id, flags, frames) = wal_of(dir);
        let mut bytes = encode_wal_header_with_flags(index_id, wal_id, flags);
        for frame in &frames {
            bytes.extend(encode_frame(frame).unwrap());
        }
        let bad_at = bytes.len() as u64;
        bytes.extend(unparsable_frame());
        let path = wal_path(dir);
        fs::write(&path, &bytes).unwrap();
        let before = contents(dir);
        match Index::open(dir, options(durability)) {
            Err(Error::Corrupted {
                path: p,
                offset,
                reason,
            }) => {
                assert_eq!((p, offset), (path.clone(), bad_at), "{reason}");
            }
            other => panic!("{durability:?}: expected Corrupted, got {other:?}"),
        }
        let index = Index::open_read_only(dir).err();
        assert!(
            matches!(index, Some(Error::Corrupted { .. })),
            "{durability:?}: {index:?}"
        );
        assert_eq!(contents(dir), before);
    }
}

#[test]
fn a_flipped_bit_in_the_last_frame_of_a_sync_wal_is_reported_by_verify() {
    let tmp = built(Durability::Sync);
    let dir = tmp.path();
    let path = wal_path(dir);
    let mut bytes = fs::read(&path).unwrap();
    let len = bytes.len();
    bytes[len - 3] ^= 0x08;
    fs::write(&path, &bytes).unwrap();
    let index = Index::open_read_only(dir).unwrap();
    let report = index.verify().unwrap();
    assert_eq!(report.wal_tails.len(), 1, "{report:?}");
    let tail = &report.wal_tails[0];
    assert_eq!(tail.path, path);
    assert!(tail.complete_frame && !tail.unsynced_appends, "{tail:?}");
    drop(index);
    let db = dir.to_str().unwrap();
    let out = run(&["verify", "--db", db], b"");
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("fails its checksum"), "{stderr}");

    // A torn append (the frame cut short) is only a warning.
    fs::write(&path, &bytes[..len - 5]).unwrap();
    let out = run(&["verify", "--db", db], b"");
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("interrupted append"));
}

#[test]
fn a_wal_whose_header_names_another_wal_is_refused() {
    let tmp = built(Durability::Buffered);
    let dir = tmp.path();
    let (index_id, wal_id, flags, frames) = wal_of(dir);
    let mut bytes = encode_wal_header_with_flags(index_id, wal_id + 7, flags);
    for frame in &frames {
        bytes.extend(encode_frame(frame).unwrap());
    }
    fs::write(wal_path(dir), &bytes).unwrap();
    expect_corrupted(
        Index::open(dir, options(Durability::Buffered)),
        &wal_path(dir),
        "header names WAL",
    );
}

#[test]
fn wal_records_whose_sequence_numbers_go_back_or_pass_2_pow_63_are_refused() {
    let tmp = built(Durability::Buffered);
    let dir = tmp.path();
    let (index_id, wal_id, flags, frames) = wal_of(dir);
    assert_eq!(frames.len(), 2);
    let edits: [fn(&mut Vec<Vec<Record>>); 3] = [
        // Found by fuzzing: replay computed seq + 1 and overflowed.
        |frames| {
            frames.push(
                frames[1]
                    .iter()
                    .cloned()
                    .map(|r| with_seq(r, u64::MAX))
                    .collect(),
            )
        },
        |frames| frames.reverse(),
        |frames| frames.push(frames[0].clone()),
    ];
    for edit in edits {
        let mut frames = frames.clone();
        edit(&mut frames);
        let mut bytes = encode_wal_header_with_flags(index_id, wal_id, flags);
        for frame in &frames {
            bytes.extend(encode_frame(frame).unwrap());
        }
        fs::write(wal_path(dir), &bytes).unwrap();
        expect_corrupted(
            Index::open_read_only(dir),
            &wal_path(dir),
            "sequence number",
        );
        expect_corrupted(
            Index::open(dir, options(Durability::Buffered)),
            &wal_path(dir),
            "sequence number",
        );
    }
}

fn with_seq(record: Record, seq: u64) -> Record {
    match record {
        Record::Insert {
            id,
            fingerprint,
            timestamp,
            name,
            sketch,
            ..
        } => Record::Insert {
            seq,
            id,
            fingerprint,
            timestamp,
            name,
            sketch,
        },
        Record::Delete { id, timestamp, .. } => Record::Delete { seq, id, timestamp },
    }
}

#[test]
fn a_wal_copied_in_from_another_index_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    build(&a, Durability::Buffered);
    build(&b, Durability::Buffered);
    // Same history, same file names: only the index id tells them apart.
    let (wal_a, wal_b) = (wal_path(&a), wal_path(&b));
    assert_eq!(wal_a.file_name(), wal_b.file_name());
    fs::copy(&wal_b, &wal_a).unwrap();
    expect_corrupted(
        Index::open(&a, options(Durability::Buffered)),
        &wal_a,
        "belongs to another index",
    );
    expect_corrupted(
        Index::open_read_only(&a),
        &wal_a,
        "belongs to another index",
    );
}

#[test]
fn a_segment_copied_in_from_another_index_is_refused_even_with_a_matching_manifest_record() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    build(&a, Durability::Buffered);
    build(&b, Durability::Buffered);
    let id = big_segment(&b).id;
    for path in [seg_path(&b, id), ids_path(&b, id)] {
        fs::copy(&path, a.join(path.file_name().unwrap())).unwrap();
    }
    // The manifest's record made to match the copied files, as a restore
    // of the wrong backup's manifest entry would.
    let record = *read_manifest(&b)
        .segments
        .iter()
        .find(|s| s.id == id)
        .unwrap();
    let mut m = read_manifest(&a);
    for s in m.segments.iter_mut().filter(|s| s.id == id) {
        *s = record;
    }
    write_manifest(&a, &m);
    expect_corrupted(
        Index::open(&a, options(Durability::Buffered)),
        &seg_path(&a, id),
        "belongs to another index",
    );
}

#[test]
fn an_index_of_the_previous_format_version_is_refused_with_what_to_do() {
    let tmp = built(Durability::Buffered);
    let dir = tmp.path();
    // No encoder of version 1 remains: mark the manifest as version 1 and
    // seal it with its checksum (docs/FORMAT.md, "Manifest file").
    let mut bytes = fs::read(manifest_path(dir)).unwrap();
    bytes[8..12].copy_from_slice(&1u32.to_le_bytes());
    let end = bytes.len() - 4;
    let crc = crc32fast::hash(&bytes[..end]);
    bytes[end..].copy_from_slice(&crc.to_le_bytes());
    fs::write(manifest_path(dir), &bytes).unwrap();
    let before = contents(dir);
    for result in [
        Index::open(dir, options(Durability::Buffered)).err(),
        Index::open_read_only(dir).err(),
    ] {
        let message = result.expect("refused").to_string();
        assert!(message.contains("version 1"), "{message}");
        assert!(message.contains("rebuild the index"), "{message}");
    }
    assert_eq!(contents(dir), before);
}

// Checksum-valid damage II: sequence numbers and counters
// (docs/RELIABILITY.md, "Checksum-valid damage II").

const LIMIT: u64 = 1 << 63;

/// Replaces the WAL named by the manifest with one of the same header
/// holding `frames`.
fn write_wal(dir: &Path, frames: &[Vec<Record>]) {
    let (index_id, wal_id, flags, _) = wal_of(dir);
    let mut bytes = encode_wal_header_with_flags(index_id, wal_id, flags);
    for frame in frames {
        bytes.extend(encode_frame(frame).unwrap());
    }
    fs::write(wal_path(dir), &bytes).unwrap();
}

/// The documents of the index in `dir`, opened read-only.
fn docs_in(dir: &Path) -> common::Model {
    let index = Index::open_read_only(dir).unwrap();
    index.verify().unwrap();
    live_docs(&index)
}

fn expect_counter_limit<T: std::fmt::Debug>(result: simhashdb::Result<T>, counter: &str) {
    match result {
        Err(e @ Error::CounterLimit { what, .. }) => {
            assert_eq!(what, counter, "{e}");
            assert!(e.to_string().contains("read-only"), "{e}");
        }
        other => panic!("expected CounterLimit for the {counter}, got {other:?}"),
    }
}

#[test]
fn a_wal_record_not_newer_than_the_segments_is_refused_and_repair_drops_it() {
    for below in [true, false] {
        let tmp = built(Durability::Buffered);
        let dir = tmp.path();
        let db = dir.to_str().unwrap();
        let newest = read_manifest(dir)
            .segments
            .iter()
            .map(|s| s.max_seq)
            .max()
            .unwrap();
        let (_, _, _, mut frames) = wal_of(dir);
        // Document 5 was upserted into the second segment; this older
        // version of it, in the WAL, must never win over it.
        let stale = fp(5) ^ 0xFF00;
        let timestamp = match &frames[0][0] {
            Record::Insert { timestamp, .. } | Record::Delete { timestamp, .. } => *timestamp,
        };
        frames.insert(
            0,
            vec![Record::Insert {
                seq: if below { 1 } else { newest },
                id: 5,
                fingerprint: stale,
                timestamp,
                name: None,
                sketch: None,
            }],
        );
        write_wal(dir, &frames);
        let wal = wal_path(dir);
        let before = contents(dir);
        for result in [
            Index::open_read_only(dir).err(),
            Index::open(dir, options(Durability::Buffered)).err(),
        ] {
            expect_corrupted::<()>(
                Err(result.expect("refused")),
                &wal,
                "older than the segments",
            );
        }
        for command in [
            vec!["verify", "--db", db],
            vec!["get", "--db", db, "--id", "5"],
            vec!["compact", "--db", db],
        ] {
            let out = run(&command, b"");
            assert_eq!(out.status.code(), Some(3), "{command:?}: {out:?}");
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(
                stderr.contains(&FileKind::Wal.file_name(wal_of(dir).1)),
                "{stderr}"
            );
        }
        assert_eq!(contents(dir), before);

        let report = Index::repair(dir, options(Durability::Buffered)).unwrap();
        assert_eq!(
            (report.wal_records_not_newer, report.wal_records),
            (1, 2),
            "{report:?}"
        );
        let index = Index::open(dir, options(Durability::Buffered)).unwrap();
        index.verify().unwrap();
        let check = |index: &Index| {
            assert_eq!(index.get(5).unwrap(), Some(fp(5) ^ 1));
            assert!(index.query(stale, 0).unwrap().is_empty());
            assert_eq!(index.get(1001).unwrap(), Some(fp(1001)));
        };
        check(&index);
        index.compact().unwrap();
        check(&index);
        index.verify().unwrap();
    }
}

#[test]
fn an_open_for_writing_is_refused_when_a_counter_is_at_its_limit_and_the_index_stays_readable() {
    type Edit = fn(&mut Manifest);
    let cases: [(&str, Edit); 3] = [
        ("generation", |m| m.generation = LIMIT - 1),
        ("next segment id", |m| m.next_segment_id = LIMIT - 1),
        ("next WAL id", |m| m.next_wal_id = LIMIT - 1),
    ];
    for (counter, edit) in cases {
        let tmp = built(Durability::Buffered);
        let dir = tmp.path();
        let db = dir.to_str().unwrap();
        let docs = docs_in(dir);
        let mut m = read_manifest(dir);
        edit(&mut m);
        write_manifest(dir, &m);
        let before = contents(dir);
        expect_counter_limit(Index::open(dir, options(Durability::Buffered)), counter);
        for command in [
            vec!["add", "--db", db, "-"],
            vec!["delete", "--db", db, "--id", "1"],
            vec!["compact", "--db", db],
        ] {
            let out = run(&command, b"doc\tsome text\n");
            assert_eq!(out.status.code(), Some(1), "{command:?}: {out:?}");
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(stderr.contains("limit of 2^63"), "{stderr}");
        }
        assert_eq!(contents(dir), before, "{counter}");
        // Readable, in the library and the CLI.
        assert_eq!(docs_in(dir), docs);
        let out = run(&["get", "--db", db, "--id", "1001"], b"");
        assert_eq!(out.status.code(), Some(0), "{out:?}");
        let out = run(&["verify", "--db", db], b"");
        assert_eq!(out.status.code(), Some(0), "{out:?}");
        assert_eq!(contents(dir), before, "{counter}");
    }
}

#[test]
fn a_write_that_would_number_a_record_2_pow_63_is_refused_before_anything_is_written() {
    let tmp = built(Durability::Buffered);
    let dir = tmp.path();
    let db = dir.to_str().unwrap();
    let mut m = read_manifest(dir);
    m.next_seq = LIMIT - 2;
    write_manifest(dir, &m);
    {
        let index = Index::open(dir, options(Durability::Buffered)).unwrap();
        let before = contents(dir);
        // Two records would take LIMIT - 2 and LIMIT - 1, leaving the next
        // sequence number at 2^63.
        expect_counter_limit(
            index.insert_batch([(7000u64, 1u64, None::<String>), (7001, 2, None)]),
            "next sequence number",
        );
        assert_eq!(contents(dir), before);
        index.insert(7000, fp(7000)).unwrap();
        let before = contents(dir);
        expect_counter_limit(index.insert(7001, 2), "next sequence number");
        expect_counter_limit(index.delete(1), "next sequence number");
        assert_eq!(
            index.insert_if_new(7002, 3, 0).err().map(|e| e.to_string()),
            Some(
                Error::CounterLimit {
                    what: "next sequence number",
                    value: LIMIT - 1
                }
                .to_string()
            )
        );
        assert_eq!(contents(dir), before);
        assert_eq!(index.get(7000).unwrap(), Some(fp(7000)));
    }
    let out = run(&["add", "--db", db, "-"], b"doc\tsome text\n");
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    // Every open still accepts it, and it flushes and compacts.
    let index = Index::open(dir, options(Durability::Buffered)).unwrap();
    assert_eq!(index.get(7000).unwrap(), Some(fp(7000)));
    index.flush().unwrap();
    index.compact().unwrap();
    index.verify().unwrap();
    drop(index);
    assert_eq!(docs_in(dir).get(&7000).map(|d| d.0), Some(fp(7000)));
}

#[test]
fn repair_never_derives_a_counter_past_2_pow_63() {
    type Damage = fn(&Path);
    let cases: [(&str, bool, Damage); 5] = [
        ("a WAL record numbered 2^64 - 1", true, |dir| {
            let (_, _, _, mut frames) = wal_of(dir);
            let last = frames[1].clone();
            frames.push(last.into_iter().map(|r| with_seq(r, u64::MAX)).collect());
            write_wal(dir, &frames);
        }),
        ("a doc map entry numbered 2^64 - 1", false, |dir| {
            let small = read_manifest(dir)
                .segments
                .iter()
                .min_by_key(|s| s.doc_count)
                .unwrap()
                .id;
            let (_, mut entries, tombstones) = doc_map_of(dir, small);
            entries[0].2 = u64::MAX;
            rewrite_doc_map(dir, small, &entries, &tombstones);
        }),
        ("a next WAL id of 2^64 - 1", true, |dir| {
            let mut m = read_manifest(dir);
            m.next_wal_id = u64::MAX;
            write_manifest(dir, &m);
        }),
        ("a next segment id of 2^64 - 1", true, |dir| {
            let mut m = read_manifest(dir);
            m.next_segment_id = u64::MAX;
            write_manifest(dir, &m);
        }),
        (
            "stray copies of a segment named with id 2^64 - 1",
            true,
            |dir| {
                let big = big_segment(dir).id;
                fs::copy(seg_path(dir, big), seg_path(dir, u64::MAX)).unwrap();
                fs::copy(ids_path(dir, big), ids_path(dir, u64::MAX)).unwrap();
            },
        ),
    ];
    for (what, keeps_every_doc, damage) in cases {
        let tmp = built(Durability::Buffered);
        let dir = tmp.path();
        let db = dir.to_str().unwrap();
        let docs = docs_in(dir);
        damage(dir);
        let out = run(&["repair", "--db", db], b"");
        assert_eq!(out.status.code(), Some(0), "{what}: {out:?}");
        let m = read_manifest(dir);
        for counter in [m.generation, m.next_segment_id, m.next_wal_id, m.next_seq] {
            assert!((1..LIMIT - (1 << 32)).contains(&counter), "{what}: {m:?}");
        }
        if keeps_every_doc {
            assert_eq!(docs_in(dir), docs, "{what}");
        }
        // It takes writes again, and opens after them.
        let index = Index::open(dir, options(Durability::Buffered)).unwrap();
        index.insert(9000, fp(9000)).unwrap();
        index.flush().unwrap();
        index.compact().unwrap();
        drop(index);
        assert_eq!(
            docs_in(dir).get(&9000).map(|d| d.0),
            Some(fp(9000)),
            "{what}"
        );
    }
}

#[test]
fn verify_refuses_a_manifest_naming_a_fingerprint_configuration_no_release_writes() {
    let tmp = built(Durability::Buffered);
    let dir = tmp.path();
    let db = dir.to_str().unwrap();
    let good = read_manifest(dir);
    for config in [
        "v1 tokenizer=runes shingle=1 weighting=tf hash=fnv1a64-fmix64",
        "v1 tokenizer=words",
        "not a configuration",
    ] {
        let mut m = good.clone();
        m.fingerprint_config = config.to_string();
        write_manifest(dir, &m);
        let index = Index::open_read_only(dir).unwrap();
        expect_corrupted(
            index.verify(),
            &manifest_path(dir),
            "fingerprint configuration",
        );
        drop(index);
        let out = run(&["verify", "--db", db], b"");
        assert_eq!(out.status.code(), Some(3), "{config}: {out:?}");
    }
}

/// Moves every sequence number of segment `id`'s doc map down by `by`, and
/// its manifest record's range with it.
fn shift_seqs_down(dir: &Path, id: u64, by: u64) {
    let (_, mut entries, mut tombstones) = doc_map_of(dir, id);
    entries.iter_mut().for_each(|e| e.2 -= by);
    tombstones.iter_mut().for_each(|t| t.seq -= by);
    rewrite_doc_map(dir, id, &entries, &tombstones);
    let mut m = read_manifest(dir);
    for s in m.segments.iter_mut().filter(|s| s.id == id) {
        s.min_seq -= by;
        s.max_seq -= by;
    }
    write_manifest(dir, &m);
}

#[test]
fn segments_whose_sequence_numbers_overlap_are_refused_at_open_and_never_compacted() {
    let tmp = built(Durability::Buffered);
    let dir = tmp.path();
    let db = dir.to_str().unwrap();
    let small = read_manifest(dir)
        .segments
        .iter()
        .min_by_key(|s| s.doc_count)
        .unwrap()
        .id;
    // Into the first segment's range: which of the two holds the newer
    // version of a document can no longer be told.
    shift_seqs_down(dir, small, 100);
    let before = contents(dir);
    expect_corrupted(
        Index::open_read_only(dir),
        &manifest_path(dir),
        "overlapping",
    );
    expect_corrupted(
        Index::open(dir, options(Durability::Buffered)),
        &manifest_path(dir),
        "overlapping",
    );
    for command in ["compact", "verify", "stats"] {
        let out = run(&[command, "--db", db], b"");
        assert_eq!(out.status.code(), Some(3), "{command}: {out:?}");
    }
    assert_eq!(contents(dir), before);
    // `repair` keeps the segment with the larger id, which verifies.
    let report = Index::repair(dir, options(Durability::Buffered)).unwrap();
    assert_eq!(report.kept_segments, vec![small], "{report:?}");
    docs_in(dir);
}

#[test]
fn a_manifest_whose_plan_cannot_be_built_is_damage_and_repair_takes_the_given_settings() {
    use simhashdb::plan::Shape;
    // A radius of 1 is too small for k = 6 at the block counts a plan
    // would choose.
    let blocks = (2..=16)
        .find(|&blocks| Plan::from_shape(Shape::Probed { blocks, radius: 1 }, 6).is_err())
        .unwrap();
    let cases = [
        (
            Shape::Probed {
                blocks: 5,
                radius: 255,
            },
            3,
        ),
        (Shape::Probed { blocks, radius: 1 }, 6),
    ];
    for (shape, k) in cases {
        let tmp = built(Durability::Buffered);
        let dir = tmp.path();
        let docs = docs_in(dir);
        let mut m = read_manifest(dir);
        assert!(Plan::from_shape(shape, k).is_err(), "{shape:?}, k = {k}");
        (m.shape, m.k) = (shape, k);
        write_manifest(dir, &m);
        expect_corrupted(
            Index::open_read_only(dir),
            &manifest_path(dir),
            "cannot be built",
        );
        expect_corrupted(
            Index::open(dir, options(Durability::Buffered)),
            &manifest_path(dir),
            "cannot be built",
        );
        let report = Index::repair(dir, options(Durability::Buffered)).unwrap();
        assert_eq!(report.settings_from, "options", "{report:?}");
        assert_eq!(docs_in(dir), docs);
        let index = Index::open_read_only(dir).unwrap();
        assert_eq!(index.stats().plan, Plan::new(5, 3).unwrap());
    }
}

#[test]
fn wals_named_out_of_the_order_they_were_started_are_refused_not_dropped_as_lost() {
    let tmp = built(Durability::Buffered);
    let dir = tmp.path();
    // The WAL's two frames split into two WALs, as a flush on the flush
    // thread leaves them (docs/FORMAT.md, "Manifest file").
    let (index_id, wal_id, flags, frames) = wal_of(dir);
    assert_eq!(frames.len(), 2);
    let second = wal_id + 1;
    for (id, frame) in [(wal_id, &frames[0]), (second, &frames[1])] {
        let mut bytes = encode_wal_header_with_flags(index_id, id, flags);
        bytes.extend(encode_frame(frame).unwrap());
        fs::write(dir.join(FileKind::Wal.file_name(id)), &bytes).unwrap();
    }
    let mut m = read_manifest(dir);
    m.wal_ids = vec![wal_id, second];
    m.next_wal_id = second + 1;
    write_manifest(dir, &m);
    let docs = docs_in(dir);
    assert!(docs.contains_key(&1000) && docs.contains_key(&1001));

    m.wal_ids.reverse();
    write_manifest(dir, &m);
    let before = contents(dir);
    expect_corrupted(Index::open_read_only(dir), &manifest_path(dir), "order");
    expect_corrupted(
        Index::open(dir, options(Durability::Buffered)),
        &manifest_path(dir),
        "order",
    );
    assert_eq!(contents(dir), before);
}
