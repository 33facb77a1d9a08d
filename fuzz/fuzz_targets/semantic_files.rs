//! Checksum-valid but wrong files: a small index (two segments, a WAL with
//! unflushed writes) is built once; each input picks a file kind (or
//! `SIMHASHDB_FUZZ_KIND` = `manifest`, `seg`, `ids`, `wal` or `stray` fixes
//! it), decodes that file into its structure with the crate's readers,
//! mutates the structure (fields, keys, entries, records, tables exchanged,
//! counts, counters at and near their limit of 2^63, WAL records numbered
//! at or below the segments' sequence numbers), and re-encodes it with the
//! crate's encoders, so every checksum is valid. For a segment or doc map
//! the manifest is usually re-encoded too, with the new file's length and
//! footer checksum, so the damage reaches past the open-time checks.
//! `stray` copies a segment's files or the WAL under an extreme or nearby id
//! instead.
//!
//! Then the index is opened on the fault-injecting file system. Nothing may
//! panic, abort, hang or allocate without bound. If it opens and `verify`
//! passes, its answers must agree with each other: every document that
//! `for_each_doc` lists once is what `get` returns and what `query` finds,
//! queries equal a brute-force scan of that listing; and if `compact`
//! succeeds, `verify` passes again and the documents are the same
//! (compaction never launders damage into a file `verify` accepts). A write
//! either succeeds, and the index opens again after it, or is refused
//! (a counter at its limit) without changing a file. And `repair`, run on
//! the same files, either refuses or leaves an index that opens for writing
//! and passes `verify`.

#![no_main]

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, OnceLock};

use libfuzzer_sys::fuzz_target;
use simhashdb::engine::fault::FaultFs;
use simhashdb::engine::fs::FileSystem;
use simhashdb::format::{
    DocEntry, DocMapReader, DocMapWriter, FileKind, Manifest, Record, SegmentInfo, SegmentReader,
    SegmentWriter, Tombstone, WAL_UNSYNCED_APPENDS, WalReader, encode_frame,
    encode_wal_header_with_flags,
};
use simhashdb::plan::Plan;
use simhashdb::{Durability, Index, Options, hamming};

const DIR: &str = "/index";
const CENTRES: [u64; 3] = [0x0123_4567_89ab_cdef, 0xdead_beef_cafe_f00d, 0];

type Files = BTreeMap<String, Vec<u8>>;

fn options(fs: &FaultFs) -> Options {
    Options::new()
        .plan(Plan::new(5, 3).unwrap())
        .durability(Durability::Sync)
        .memtable_bytes(1 << 20)
        .file_system(Arc::new(fs.clone()) as Arc<dyn FileSystem>)
        .merge_policy(None)
        .merge_thread(false)
}

/// The files of a small index: two segments (the second with tombstones and
/// an upsert) and a WAL holding writes not yet flushed.
fn base() -> &'static Files {
    static BASE: OnceLock<Files> = OnceLock::new();
    BASE.get_or_init(|| {
        let fs = FaultFs::new();
        let index = Index::open(DIR, options(&fs)).unwrap();
        let fp = |i: u64| CENTRES[(i % 3) as usize] ^ (1 << (i % 7)) ^ ((i % 5) << 20);
        for i in 0..40 {
            if i % 4 == 0 {
                index.insert_named(i, fp(i), format!("doc {i}")).unwrap();
            } else {
                index.insert(i, fp(i)).unwrap();
            }
        }
        index.flush().unwrap();
        for i in 0..8 {
            index.delete(i * 5).unwrap();
        }
        index.insert(3, fp(3) ^ 0x10).unwrap();
        index.insert(100, fp(1)).unwrap();
        index.flush().unwrap();
        index.insert(101, fp(2)).unwrap();
        index.delete(2).unwrap();
        drop(index);
        let mut files = Files::new();
        for name in fs.list(Path::new(DIR)).unwrap() {
            let name = name.to_str().unwrap().to_owned();
            if FileKind::parse_file_name(&name).is_some() {
                let bytes = fs.read(&Path::new(DIR).join(&name)).unwrap();
                files.insert(name, bytes);
            }
        }
        files
    })
}

struct Input<'a>(&'a [u8]);

impl Input<'_> {
    fn byte(&mut self) -> Option<u8> {
        let (&b, rest) = self.0.split_first()?;
        self.0 = rest;
        Some(b)
    }
    fn index(&mut self, len: usize) -> Option<usize> {
        (len > 0).then_some(())?;
        Some(usize::from(self.byte()?) % len)
    }
    /// A value that is often small or an edge, sometimes arbitrary.
    fn value(&mut self) -> Option<u64> {
        Some(match self.byte()? % 10 {
            // At and around the counters' limit, 2^63, and the headroom
            // below it within which writers are refused (2^32).
            8 => (1u64 << 63).wrapping_add(u64::from(self.byte()? % 5)).wrapping_sub(3),
            9 => ((1u64 << 63) - (1 << 32)).wrapping_add(u64::from(self.byte()? % 3)).wrapping_sub(1),
            0 => 0,
            1 => u64::MAX,
            2 => u64::from(self.byte()?),
            3 => 1 << (self.byte()? % 64),
            4 => 1_000_000_000_000_000,
            5 => u64::from(u32::MAX),
            _ => {
                let mut v = 0u64;
                for _ in 0..8 {
                    v = v << 8 | u64::from(self.byte()?);
                }
                v
            }
        })
    }
    /// A fingerprint near the base's, so mutations land among real keys.
    fn fingerprint(&mut self) -> Option<u64> {
        let c = self.byte()?;
        Some(CENTRES[usize::from(c % 3)] ^ (1 << (c % 64)))
    }
}

fn manifest_of(files: &Files) -> Manifest {
    Manifest::decode(&files["MANIFEST"]).unwrap()
}

/// Records a mutated segment or doc map's length and footer CRC in the
/// manifest, unless the input says to leave the manifest alone.
fn refresh_manifest(files: &mut Files, kind: FileKind, id: u64, fix: bool) {
    if !fix {
        return;
    }
    let mut m = manifest_of(files);
    let bytes = &files[&kind.file_name(id)];
    for s in m.segments.iter_mut().filter(|s| s.id == id) {
        if kind == FileKind::Segment {
            let r = SegmentReader::new(&bytes[..]).unwrap();
            s.seg_file_len = bytes.len() as u64;
            s.seg_footer_crc = r.footer_crc();
            s.key_count = r.key_count();
        } else {
            let r = DocMapReader::new(&bytes[..]).unwrap();
            s.ids_file_len = bytes.len() as u64;
            s.ids_footer_crc = r.footer_crc();
            s.doc_count = r.len() as u64;
            s.tombstone_count = r.tombstone_count() as u64;
        }
    }
    if let Ok(bytes) = m.encode() {
        files.insert("MANIFEST".to_owned(), bytes);
    }
}

fn mutate_manifest(files: &mut Files, input: &mut Input) -> Option<()> {
    let mut m = manifest_of(files);
    for _ in 0..1 + input.byte()? % 4 {
        match input.byte()? % 12 {
            0 => m.next_segment_id = input.value()?,
            1 => m.next_wal_id = input.value()?,
            2 => m.next_seq = input.value()?,
            3 => m.index_id = input.value()?,
            4 => m.generation = input.value()?,
            5 => {
                let i = input.index(m.segments.len())?;
                let v = input.value()?;
                let s = &mut m.segments[i];
                match input.byte()? % 9 {
                    0 => s.id = v,
                    1 => s.key_count = v,
                    2 => s.doc_count = v,
                    3 => s.tombstone_count = v,
                    4 => s.min_seq = v,
                    5 => s.max_seq = v,
                    6 => s.min_timestamp = v,
                    7 => s.max_timestamp = v,
                    _ => s.level = v as u32,
                }
            }
            6 => {
                let i = input.index(m.segments.len())?;
                m.segments.remove(i);
            }
            7 => m.segments.reverse(),
            8 => m.wal_ids.push(input.value()?),
            9 => {
                let i = input.index(m.wal_ids.len())?;
                m.wal_ids[i] = input.value()?;
            }
            10 => m.wal_ids.clear(),
            _ => {
                // Two segments exchange their records' counts and ranges.
                if m.segments.len() >= 2 {
                    let (a, b) = (m.segments[0], m.segments[1]);
                    m.segments[0] = simhashdb::format::SegmentMeta { id: a.id, ..b };
                    m.segments[1] = simhashdb::format::SegmentMeta { id: b.id, ..a };
                }
            }
        }
    }
    files.insert("MANIFEST".to_owned(), m.encode().ok()?);
    Some(())
}

fn mutate_segment(files: &mut Files, input: &mut Input) -> Option<()> {
    let ids: Vec<u64> = manifest_of(files).segments.iter().map(|s| s.id).collect();
    let id = ids[input.index(ids.len())?];
    let name = FileKind::Segment.file_name(id);
    let reader = SegmentReader::new(&files[&name][..]).ok()?;
    let mut info = reader.info();
    let mut tables: Vec<Vec<u64>> = (0..reader.table_count())
        .map(|t| reader.keys(t).unwrap().map(|k| k.unwrap()).collect())
        .collect();
    // Flat tables (format version 5) are written flat again, with their
    // directory bits; Rice-coded ones Rice-coded.
    let flat_bits: Option<u32> = reader.flat_table(0).ok().flatten().map(|t| t.bits());
    drop(reader);
    for _ in 0..1 + input.byte()? % 3 {
        match input.byte()? % 9 {
            0 => {
                let (a, b) = (input.index(tables.len())?, input.index(tables.len())?);
                tables.swap(a, b);
            }
            1 => {
                // One key of one table replaced: missing one, holding a phantom.
                let t = input.index(tables.len())?;
                let i = input.index(tables[t].len())?;
                tables[t][i] = input.value()?;
            }
            2 => {
                // A key added to (or removed from) every table.
                let fp = input.fingerprint()?;
                let plan = Plan::from_shape(info.shape, info.k).ok()?;
                for (t, table) in plan.tables().iter().enumerate() {
                    tables.get_mut(t)?.push(table.permute(fp));
                }
            }
            3 => {
                let i = input.byte()? as usize;
                for table in &mut tables {
                    if !table.is_empty() {
                        let at = i % table.len();
                        table.remove(at);
                    }
                }
            }
            4 => info.segment_id = input.value()?,
            5 => info.index_id = input.value()?,
            6 => info.k = u32::from(input.byte()?) % 6,
            7 => {
                // Another plan shape; tables beyond its count are dropped.
                info.shape = simhashdb::plan::Shape::Flat { blocks: 1 + u32::from(input.byte()?) % 8 };
            }
            _ => {
                let t = input.index(tables.len())?;
                let copy = tables[t].clone();
                let u = input.index(tables.len())?;
                tables[u] = copy;
            }
        }
    }
    for table in &mut tables {
        table.sort_unstable();
        table.dedup();
    }
    let count = tables.first().map_or(0, Vec::len);
    tables.retain(|t| t.len() == count);
    info.key_count = count as u64;
    info.table_count = tables.len() as u32;
    let mut writer = SegmentWriter::new(SegmentInfo { ..info }).ok()?;
    for table in &tables {
        match flat_bits {
            Some(bits) => writer.push_flat_table(table.iter().copied(), bits).ok()?,
            None => writer.push_table(table.iter().copied()).ok()?,
        }
    }
    files.insert(name, writer.finish().ok()?);
    let fix = input.byte().is_none_or(|b| b % 8 != 0);
    refresh_manifest(files, FileKind::Segment, id, fix);
    Some(())
}

fn mutate_doc_map(files: &mut Files, input: &mut Input) -> Option<()> {
    let ids: Vec<u64> = manifest_of(files).segments.iter().map(|s| s.id).collect();
    let id = ids[input.index(ids.len())?];
    let name = FileKind::DocMap.file_name(id);
    let reader = DocMapReader::new(&files[&name][..]).ok()?;
    let (mut index_id, mut segment_id) = (reader.index_id(), reader.segment_id());
    let mut entries: Vec<(u64, u64, u64, u64, Option<String>)> = reader
        .entries()
        .map(|e| e.unwrap())
        .map(|e| (e.fingerprint, e.id, e.seq, e.timestamp, e.name.map(str::to_owned)))
        .collect();
    let mut tombstones: Vec<Tombstone> = reader.tombstones().map(|t| t.unwrap()).collect();
    drop(reader);
    for _ in 0..1 + input.byte()? % 3 {
        match input.byte()? % 10 {
            0 => {
                let i = input.index(entries.len())?;
                entries[i].0 = input.fingerprint()?;
            }
            1 => {
                let i = input.index(entries.len())?;
                entries[i].1 = input.value()?;
            }
            2 => {
                let i = input.index(entries.len())?;
                entries[i].2 = input.value()?;
            }
            3 => {
                let i = input.index(entries.len())?;
                entries[i].3 = input.value()?;
            }
            4 => {
                let i = input.index(entries.len())?;
                entries.remove(i);
            }
            5 => entries.push((input.fingerprint()?, input.value()?, input.value()?, input.value()?, None)),
            6 => tombstones.push(Tombstone { id: input.value()?, seq: input.value()?, timestamp: input.value()? }),
            7 => {
                // A tombstone for an id the doc map holds, newer or older.
                let i = input.index(entries.len())?;
                let (_, doc, seq, time, _) = entries[i];
                let newer = input.byte()? % 2 == 0;
                let seq = if newer { seq.saturating_add(1) } else { seq.saturating_sub(1) };
                tombstones.push(Tombstone { id: doc, seq, timestamp: time });
            }
            8 => segment_id = input.value()?,
            _ => index_id = input.value()?,
        }
    }
    let mut writer = DocMapWriter::new(index_id, segment_id);
    for (fingerprint, id, seq, timestamp, name) in &entries {
        let entry = DocEntry { fingerprint: *fingerprint, id: *id, seq: *seq, timestamp: *timestamp, name: name.as_deref(), sketch: None };
        writer.push(entry).ok()?;
    }
    for t in tombstones {
        writer.push_tombstone(t);
    }
    files.insert(name, writer.finish().ok()?);
    let fix = input.byte().is_none_or(|b| b % 8 != 0);
    refresh_manifest(files, FileKind::DocMap, id, fix);
    Some(())
}

fn mutate_wal(files: &mut Files, input: &mut Input) -> Option<()> {
    let m = manifest_of(files);
    let wal_id = *m.wal_ids.last()?;
    let name = FileKind::Wal.file_name(wal_id);
    let reader = WalReader::new(&files[&name]).ok()?;
    let (mut index_id, mut header_id) = (reader.index_id(), reader.wal_id());
    let mut flags = if reader.unsynced_appends() { WAL_UNSYNCED_APPENDS } else { 0 };
    let mut frames: Vec<Vec<Record>> = reader.read_all().0.into_iter().map(|f| f.records).collect();
    let segments_max = m.segments.iter().map(|s| s.max_seq).max().unwrap_or(0);
    for _ in 0..1 + input.byte()? % 4 {
        match input.byte()? % 12 {
            10 => {
                // A frame numbered at or below the segments' largest
                // sequence number, for a document they hold or another.
                let seq = segments_max.saturating_sub(u64::from(input.byte()?) % 4 * 13);
                let id = u64::from(input.byte()?) % 48;
                let record = if input.byte()? % 3 == 0 {
                    Record::Delete { seq, id, timestamp: 1 }
                } else {
                    Record::Insert { seq, id, fingerprint: input.fingerprint()?, timestamp: 1, name: None, sketch: None }
                };
                frames.insert(0, vec![record]);
            }
            11 => {
                // The last frame renumbered to end at the limit.
                let last = frames.last_mut()?;
                let end = (1u64 << 63) - u64::from(input.byte()? % 3);
                let n = last.len() as u64;
                for (i, r) in last.iter_mut().enumerate() {
                    match r {
                        Record::Insert { seq, .. } | Record::Delete { seq, .. } => *seq = end - n + i as u64,
                    }
                }
            }
            0 => {
                let f = input.index(frames.len())?;
                let r = input.index(frames[f].len())?;
                let v = input.value()?;
                match &mut frames[f][r] {
                    Record::Insert { seq, .. } | Record::Delete { seq, .. } => *seq = v,
                }
            }
            1 => {
                let f = input.index(frames.len())?;
                let r = input.index(frames[f].len())?;
                let v = input.value()?;
                match &mut frames[f][r] {
                    Record::Insert { id, .. } | Record::Delete { id, .. } => *id = v,
                }
            }
            2 => {
                let f = input.index(frames.len())?;
                let copy = frames[f].clone();
                frames.push(copy);
            }
            3 => {
                let f = input.index(frames.len())?;
                frames.remove(f);
            }
            4 => frames.reverse(),
            5 => frames.push(vec![Record::Insert {
                seq: input.value()?,
                id: input.value()?,
                fingerprint: input.fingerprint()?,
                timestamp: input.value()?,
                name: None,
                sketch: None,
            }]),
            6 => frames.push(vec![Record::Delete { seq: input.value()?, id: input.value()?, timestamp: input.value()? }]),
            7 => header_id = input.value()?,
            8 => index_id = input.value()?,
            _ => flags ^= WAL_UNSYNCED_APPENDS,
        }
    }
    let mut bytes = encode_wal_header_with_flags(index_id, header_id, flags);
    for frame in &frames {
        bytes.extend(encode_frame(frame).ok()?);
    }
    if input.byte().is_some_and(|b| b % 4 == 0) {
        // And a cut inside the last frame.
        let cut = usize::from(input.byte()?);
        bytes.truncate(bytes.len().saturating_sub(1 + cut % 16));
    }
    files.insert(name, bytes);
    Some(())
}

/// A copy of a segment's two files, or of the WAL, under another id: an
/// extreme one, one at the counters' limit, or the next one the manifest
/// would hand out. The manifest is left as it is.
fn add_stray(files: &mut Files, input: &mut Input) -> Option<()> {
    let m = manifest_of(files);
    let id = match input.byte()? % 6 {
        0 => u64::MAX,
        1 => (1 << 63) - 1,
        2 => (1 << 63) - 2,
        // Around the edge of the headroom below 2^63.
        3 => (1u64 << 63) - (1 << 32) - u64::from(input.byte()? % 4),
        4 => m.next_segment_id.max(m.next_wal_id),
        _ => input.value()?,
    };
    if input.byte()? % 3 == 0 {
        let wal = FileKind::Wal.file_name(*m.wal_ids.last()?);
        let bytes = files[&wal].clone();
        files.insert(FileKind::Wal.file_name(id), bytes);
    } else {
        let from = m.segments[input.index(m.segments.len())?].id;
        for kind in [FileKind::Segment, FileKind::DocMap] {
            let bytes = files[&kind.file_name(from)].clone();
            files.insert(kind.file_name(id), bytes);
        }
    }
    Some(())
}

fn install(files: &Files) -> FaultFs {
    let fs = FaultFs::new();
    let dir = Path::new(DIR);
    fs.create_dir_all(dir).unwrap();
    fs.sync_dir(Path::new("/")).unwrap();
    for (name, bytes) in files {
        let mut file = fs.create_new(&dir.join(name)).unwrap();
        file.write_all(bytes).unwrap();
        file.sync().unwrap();
    }
    fs.sync_dir(dir).unwrap();
    fs
}

type Docs = BTreeMap<u64, (u64, Option<String>)>;

/// Every live document, checked to be listed once; `None` if the index
/// reports damage (a clean refusal).
fn docs_of(index: &Index) -> Option<Docs> {
    let mut docs = Docs::new();
    let mut twice = None;
    index
        .for_each_doc(|d| {
            if docs.insert(d.id, (d.fingerprint, d.name.clone())).is_some() {
                twice = Some(d.id);
            }
        })
        .ok()?;
    assert_eq!(twice, None, "a verified index lists a document twice");
    Some(docs)
}

/// A verified index answers consistently: `get` and `query` agree with the
/// listing, and queries with a brute-force scan of it.
fn check_consistent(index: &Index, docs: &Docs) {
    for (&id, (fp, _)) in docs {
        assert_eq!(index.get(id).unwrap(), Some(*fp), "get({id})");
        let found = index.query(*fp, 3).unwrap();
        assert!(found.iter().any(|m| m.id == id), "query({fp:#x}) misses {id}");
    }
    for probe in CENTRES.into_iter().chain(docs.values().map(|(fp, _)| fp ^ 0b101).take(8)) {
        let mut expected: Vec<(u32, u64)> = docs
            .iter()
            .filter(|(_, (fp, _))| hamming(*fp, probe) <= 3)
            .map(|(&id, (fp, _))| (hamming(*fp, probe), id))
            .collect();
        expected.sort_unstable();
        let got: Vec<(u32, u64)> = index.query(probe, 3).unwrap().iter().map(|m| (m.distance, m.id)).collect();
        assert_eq!(got, expected, "query({probe:#x})");
    }
}

/// Every file of the index directory.
fn snapshot(fs: &FaultFs) -> Files {
    let dir = Path::new(DIR);
    let mut names: Vec<String> = fs
        .list(dir)
        .unwrap()
        .into_iter()
        .map(|n| n.to_str().unwrap().to_owned())
        .collect();
    names.sort();
    names
        .into_iter()
        .filter_map(|name| Some((name.clone(), fs.read(&dir.join(&name)).ok()?)))
        .collect()
}

/// A write either succeeds, or is refused for a counter at its limit
/// without changing a file; then the index is closed.
fn check_write(fs: &FaultFs, index: Index) {
    let before = snapshot(fs);
    match index.insert(7777, CENTRES[1] ^ 0b11) {
        Ok(()) => {}
        Err(e @ simhashdb::Error::CounterLimit { .. }) => {
            assert!(snapshot(fs) == before, "a write refused for its counters changed a file: {e}");
        }
        // Damage found by the flush the write started, say.
        Err(_) => {}
    }
    drop(index);
}

/// `repair` on `files` either refuses or commits a manifest that opens for
/// writing and passes `verify`.
fn check_repair(files: &Files) {
    let fs = install(files);
    let options = options(&fs);
    let Ok(report) = Index::repair(DIR, options.clone()) else { return };
    let index = Index::open(DIR, options)
        .unwrap_or_else(|e| panic!("repair ({report:?}) left an index that does not open: {e}"));
    index
        .verify()
        .unwrap_or_else(|e| panic!("repair ({report:?}) left an index that verify refuses: {e}"));
}

fuzz_target!(|data: &[u8]| {
    let mut input = Input(data);
    let Some(pick) = input.byte() else { return };
    let kind = match std::env::var("SIMHASHDB_FUZZ_KIND").as_deref() {
        Ok("manifest") => 0,
        Ok("seg") => 1,
        Ok("ids") => 2,
        Ok("wal") => 3,
        Ok("stray") => 4,
        _ => pick % 5,
    };
    let mut files = base().clone();
    let mutated = match kind {
        0 => mutate_manifest(&mut files, &mut input),
        1 => mutate_segment(&mut files, &mut input),
        2 => mutate_doc_map(&mut files, &mut input),
        3 => mutate_wal(&mut files, &mut input),
        _ => add_stray(&mut files, &mut input),
    };
    if mutated.is_none() {
        return;
    }
    check_repair(&files);
    let fs = install(&files);
    let Ok(index) = Index::open(DIR, options(&fs)) else { return };
    check_write(&fs, index);
    let index = match Index::open(DIR, options(&fs)) {
        Ok(index) => index,
        // The open's own commit took a counter into the headroom.
        Err(simhashdb::Error::CounterLimit { .. }) => return,
        Err(e) => panic!("an index that opened does not open again after a write: {e}"),
    };
    if index.verify().is_err() {
        // A refusal; queries may fail but must not panic.
        let _ = index.query(CENTRES[0], 3);
        let _ = index.get(3);
        let _ = index.compact();
        return;
    }
    let Some(before) = docs_of(&index) else { return };
    check_consistent(&index, &before);
    if index.compact().is_ok() {
        index.verify().unwrap_or_else(|e| panic!("compaction wrote what verify refuses: {e}"));
        let after = docs_of(&index).expect("a compacted index lists its documents");
        assert_eq!(after, before, "compaction changed the documents");
        check_consistent(&index, &after);
    }
});
