//! A directory without a manifest: refusing to open it, telling an
//! interrupted creation from lost data, and [`Index::repair`], which
//! rebuilds a manifest from the files that pass their checksums.
//!
//! The rule behind all three: the engine deletes only files it made
//! obsolete itself. A directory holding segments, doc maps or WALs but no
//! `MANIFEST` lost its commit point to something else (a bad restore, an
//! operator's `mv`); opening it is refused, and `repair` moves whatever it
//! cannot use to `lost+found/` rather than delete it
//! (docs/FORMAT.md#repair).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::fingerprint::FingerprintConfig;
use crate::format::{
    DocMapReader, FileKind, MANIFEST_TEMP_FILE_NAME, Manifest, Record, SegmentMeta, SegmentReader,
    WalEnd, WalReader, encode_frame,
};
use crate::plan::Plan;

use super::check::{COUNTER_HEADROOM, COUNTER_LIMIT, manifest_problem};
use super::files::{
    commit_manifest, corrupted, foreign, io_error, lock_error, unopenable, write_file,
};
use super::fs::{FileSystem, RealFs};
use super::lock::{DirLock, LOCK_FILE};
use super::recovery::new_index_id;
use super::segment::Segment;
use super::write::wal_flags;
use super::{Index, Options};

/// Where `repair` puts the files it does not use.
pub const LOST_AND_FOUND: &str = "lost+found";

/// The id of the WAL a new index starts with.
const FIRST_WAL_ID: u64 = 1;

/// What [`Index::repair`] did.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct RepairReport {
    /// Where the index's settings (plan, fingerprint configuration,
    /// retention) came from: `MANIFEST`, `MANIFEST.tmp`, or `options` when
    /// neither could be read.
    pub settings_from: String,
    /// The segments the new manifest names (their `.seg` and `.ids` files).
    pub kept_segments: Vec<u64>,
    /// The new WAL's file name.
    pub wal: String,
    /// WAL records copied into the new WAL (writes newer than every kept segment).
    pub wal_records: u64,
    /// WAL records not copied because they follow a gap in sequence numbers,
    /// or because their sequence numbers lie within 2^32 of 2^63, which no
    /// index hands out (their WALs are in `lost+found/`).
    pub wal_records_dropped: u64,
    /// WAL records not copied because their sequence numbers are not above
    /// the kept segments' largest: writes a segment already holds (a WAL
    /// whose removal a crash interrupted), or older ones that would
    /// otherwise override a newer version in a segment.
    pub wal_records_not_newer: u64,
    /// Files moved to `lost+found/`, each with the reason.
    pub set_aside: Vec<(String, String)>,
}

/// Names of the files of `dir` the engine would count as its own, and the others.
struct Listing {
    engine: Vec<String>,
    other: Vec<String>,
}

fn list(dir: &Path, fs: &dyn FileSystem) -> Option<Listing> {
    let names = fs.list(dir).ok()?;
    let mut listing = Listing {
        engine: Vec::new(),
        other: Vec::new(),
    };
    for path in names {
        let name = path.to_string_lossy().into_owned();
        if name == LOCK_FILE || name == LOST_AND_FOUND {
            continue;
        }
        let ours = name == MANIFEST_TEMP_FILE_NAME
            || FileKind::parse_file_name(&name).is_some_and(|(kind, _)| kind != FileKind::Manifest);
        if ours {
            listing.engine.push(name);
        } else {
            listing.other.push(name);
        }
    }
    listing.engine.sort();
    listing.other.sort();
    Some(listing)
}

/// Whether `name` is what an interrupted creation leaves: the first WAL
/// holding no frame, or a manifest written for a new, empty index.
fn creation_leftover(dir: &Path, fs: &dyn FileSystem, name: &str) -> bool {
    let Ok(bytes) = fs.read(&dir.join(name)) else {
        return false;
    };
    if name == MANIFEST_TEMP_FILE_NAME {
        return Manifest::decode(&bytes).map_or(true, |m| {
            m.generation == 0 && m.segments.is_empty() && m.wal_ids == [FIRST_WAL_ID]
        });
    }
    if name != FileKind::Wal.file_name(FIRST_WAL_ID) {
        return false;
    }
    match WalReader::new(&bytes) {
        Ok(reader) => reader.read_all().0.is_empty(),
        // A header not yet written whole: creation syncs it before anything else.
        Err(_) => bytes.len() < crate::format::wal::WAL_HEADER_LEN,
    }
}

/// Checks a directory without a `MANIFEST` before an index is created in
/// it (or a read-only open reports it): engine files there mean an index
/// lost its manifest (refused, [`Error::ManifestMissing`]); other files mean
/// it is someone else's directory (refused unless `allow_other_files`,
/// [`Error::NotEmpty`]). Returns the files an interrupted creation left,
/// which hold no data and may be removed before creating.
pub(super) fn check_without_manifest(
    dir: &Path,
    fs: &dyn FileSystem,
    allow_other_files: bool,
) -> Result<Vec<PathBuf>> {
    let Some(listing) = list(dir, fs) else {
        return Ok(Vec::new());
    };
    let leftovers: Vec<&String> = listing
        .engine
        .iter()
        .filter(|name| creation_leftover(dir, fs, name))
        .collect();
    if leftovers.len() < listing.engine.len() {
        return Err(Error::ManifestMissing {
            dir: dir.to_path_buf(),
            found: listing.engine,
        });
    }
    if !listing.other.is_empty() && !allow_other_files {
        return Err(Error::NotEmpty {
            dir: dir.to_path_buf(),
            found: listing.other,
        });
    }
    Ok(leftovers.into_iter().map(|name| dir.join(name)).collect())
}

/// A segment that passed every check, with its manifest record.
struct Candidate {
    meta: SegmentMeta,
}

impl Index {
    /// Rebuilds the manifest of the index in `dir` from the files that pass
    /// their checksums, like RocksDB's `ldb repair`, and returns what it
    /// kept and what it set aside.
    ///
    /// The settings come from `MANIFEST` if it still decodes, else from a
    /// `MANIFEST.tmp` that does, else from `options` (plan or `k` and
    /// `expected_n`, fingerprint configuration, retention: give those the
    /// index was created with). Every segment whose `.seg` and `.ids` pass
    /// `verify`, agree with each other and have the index's `k` is kept,
    /// except one whose sequence numbers overlap a newer segment's (the input
    /// of a merge whose output is there). The writes of every WAL that are
    /// newer than the kept segments, up to the first gap in sequence numbers,
    /// go into one new WAL. Every other file of the engine (damaged or
    /// superseded segments, the old WALs, `MANIFEST.tmp`, and a copy of the
    /// old `MANIFEST`) is moved to `dir/lost+found/`, never deleted. Other
    /// files are left alone. Takes the writer's lock.
    pub fn repair(dir: impl AsRef<Path>, options: Options) -> Result<RepairReport> {
        let dir = dir.as_ref();
        let nothing_to_repair = |fs: &dyn FileSystem| {
            let found = list(dir, fs).is_some_and(|l| !l.engine.is_empty())
                || fs.len(&dir.join(FileKind::Manifest.file_name(0))).is_ok();
            if found {
                Ok(())
            } else {
                Err(Error::InvalidArgument(format!(
                    "{} holds no index files: nothing to repair",
                    dir.display()
                )))
            }
        };
        // Before the lock file is created in a directory that is not an index.
        nothing_to_repair(options.file_system.as_deref().unwrap_or(&RealFs))?;
        let (fs, _lock): (Arc<dyn FileSystem>, Option<DirLock>) = match &options.file_system {
            Some(fs) => (fs.clone(), None),
            None => (
                Arc::new(RealFs),
                Some(DirLock::exclusive(dir).map_err(lock_error)?),
            ),
        };
        let fs_arc = fs;
        let fs = fs_arc.as_ref();
        let listing = list(dir, fs).ok_or_else(|| Error::Io {
            path: dir.to_path_buf(),
            op: "list",
            source: std::io::Error::new(std::io::ErrorKind::NotFound, "cannot list the directory"),
        })?;
        let manifest_name = FileKind::Manifest.file_name(0);
        let has_manifest = fs.len(&dir.join(&manifest_name)).is_ok();
        nothing_to_repair(fs)?;
        let mut report = RepairReport::default();

        // The settings: from a manifest that decodes and whose plan and
        // fingerprint configuration this version can build (a damaged one
        // that decodes is no better than one that does not).
        let decode = |name: &str| {
            fs.read(&dir.join(name))
                .ok()
                .and_then(|bytes| Manifest::decode(&bytes).ok())
                .and_then(|m| {
                    let plan = Plan::from_shape(m.shape, m.k).ok()?;
                    m.fingerprint_config.parse::<FingerprintConfig>().ok()?;
                    Some((m, plan))
                })
        };
        let old = match decode(&manifest_name) {
            Some(m) => {
                report.settings_from = manifest_name.clone();
                Some(m)
            }
            None => decode(MANIFEST_TEMP_FILE_NAME).inspect(|_| {
                report.settings_from = MANIFEST_TEMP_FILE_NAME.to_string();
            }),
        };
        let (old, old_plan) = match old {
            Some((m, plan)) => (Some(m), Some(plan)),
            None => (None, None),
        };
        let (plan, fingerprint_config, retention_ms) = match (&old, old_plan) {
            (Some(m), Some(plan)) => (plan, m.fingerprint_config.clone(), m.retention_ms),
            _ => {
                report.settings_from = "options".to_string();
                let settings = options.new_index_settings()?;
                (
                    settings.plan,
                    settings.fingerprint.to_string(),
                    settings.retention_ms,
                )
            }
        };

        // Segments: both files present and sound.
        let mut seg_ids = BTreeSet::new();
        let mut wal_ids = BTreeSet::new();
        for name in &listing.engine {
            match FileKind::parse_file_name(name) {
                Some((FileKind::Segment | FileKind::DocMap, id)) => {
                    seg_ids.insert(id);
                }
                Some((FileKind::Wal, id)) => {
                    wal_ids.insert(id);
                }
                _ => {}
            }
        }
        // The index's id: the manifest's, else the one most of the files
        // name (a file copied in from another index is the odd one out),
        // else a new one.
        let index_id = match &old {
            Some(m) => m.index_id,
            None => most_named_index_id(dir, fs, &seg_ids, &wal_ids).unwrap_or_else(new_index_id),
        };
        if old.is_none() {
            // Settings given by the caller: a k the segments contradict
            // would set every segment aside. Refuse before moving anything.
            for &id in &seg_ids {
                let path = dir.join(FileKind::Segment.file_name(id));
                let Ok(map) = fs.map(&path) else { continue };
                let Ok(reader) = SegmentReader::new(map) else {
                    continue;
                };
                let k = reader.info().k;
                if k != plan.k() {
                    return Err(Error::InvalidArgument(format!(
                        "no manifest could be read, and {} was built for k = {k}, not the \
                         k = {} given: repair with the settings the index was created with \
                         (-d {k}, and its --expected-n, --retention and fingerprint options)",
                        path.display(),
                        plan.k()
                    )));
                }
            }
        }
        let mut set_aside: Vec<(String, String)> = Vec::new();
        let mut candidates = Vec::new();
        // The largest sequence number seen, for the next one: the old
        // manifest's counters, the kept segments' and the WALs' records,
        // where they lie below what the index hands out.
        let mut max_seq = old
            .as_ref()
            .and_then(|m| handed_out(m.next_seq.checked_sub(1)?))
            .unwrap_or(0);
        for &id in &seg_ids {
            let seg = FileKind::Segment.file_name(id);
            let ids = FileKind::DocMap.file_name(id);
            let checked = check_segment(dir, &fs_arc, id, &plan, index_id).map(|mut c| {
                if let Some(named) = old
                    .as_ref()
                    .and_then(|m| m.segments.iter().find(|s| s.id == id))
                {
                    c.meta.level = named.level;
                }
                c
            });
            match checked {
                Ok(c) => {
                    // `check_segment` refused larger ones.
                    max_seq = max_seq.max(c.meta.max_seq);
                    candidates.push(c);
                }
                Err(why) => {
                    for name in [&seg, &ids] {
                        if listing.engine.contains(name) {
                            set_aside.push((name.clone(), why.clone()));
                        }
                    }
                }
            }
        }
        // A merge's output covers the sequence numbers of its inputs, and
        // has a larger id: where ranges overlap, the newest segment wins.
        candidates.sort_by_key(|c| std::cmp::Reverse(c.meta.id));
        let mut kept: Vec<SegmentMeta> = Vec::new();
        for c in candidates {
            let m = c.meta;
            match kept
                .iter()
                .find(|k| m.min_seq <= k.max_seq && k.min_seq <= m.max_seq)
            {
                Some(newer) => {
                    let why = format!(
                        "superseded: its sequence numbers overlap those of segment {}, \
                         a merge of it",
                        newer.id
                    );
                    set_aside.push((FileKind::Segment.file_name(m.id), why.clone()));
                    set_aside.push((FileKind::DocMap.file_name(m.id), why));
                }
                None => kept.push(m),
            }
        }
        kept.sort_by_key(|m| m.id);
        let segments_max_seq = kept.iter().map(|m| m.max_seq).max().unwrap_or(0);

        // WALs: the valid frames of each, newer than every kept segment.
        let mut frames: Vec<Vec<Record>> = Vec::new();
        for &id in &wal_ids {
            let name = FileKind::Wal.file_name(id);
            let path = dir.join(&name);
            let why = match fs.read(&path) {
                Err(e) => format!("unreadable: {e}"),
                Ok(bytes) => match WalReader::new(&bytes) {
                    Err(e) => corrupted(&path, &e).to_string(),
                    Ok(reader) if reader.index_id() != index_id => {
                        foreign(&path, reader.index_id(), index_id).to_string()
                    }
                    Ok(reader) => {
                        let (valid, end) = reader.read_all();
                        let count = valid.len();
                        for frame in valid {
                            let seqs = frame.records.iter().map(Record::seq);
                            max_seq = max_seq.max(seqs.filter_map(handed_out).max().unwrap_or(0));
                            frames.push(frame.records);
                        }
                        match end {
                            WalEnd::Clean => format!("{count} valid frame(s) read"),
                            WalEnd::TornTail { offset } => format!(
                                "{count} valid frame(s) read; a torn tail at byte {offset} dropped"
                            ),
                            WalEnd::Unparsable { error } => format!(
                                "{count} valid frame(s) read; a frame whose checksums match \
                                 but which does not parse at byte {}, the rest dropped: {error}",
                                error.offset
                            ),
                            WalEnd::Corrupted { error, .. } => format!(
                                "{count} valid frame(s) read; damaged from byte {}, the rest \
                                 dropped: {error}",
                                error.offset
                            ),
                        }
                    }
                },
            };
            set_aside.push((name, why));
        }
        frames.sort_by_key(|records| records.first().map_or(0, Record::seq));
        let mut replay: Vec<Vec<Record>> = Vec::new();
        let mut last: Option<u64> = None;
        let mut dropped = 0u64;
        for records in frames {
            let count = records.len();
            let records: Vec<Record> = records
                .into_iter()
                .filter(|r| r.seq() > segments_max_seq)
                .collect();
            report.wal_records_not_newer += (count - records.len()) as u64;
            let count = records.len();
            let records: Vec<Record> = records
                .into_iter()
                .filter(|r| handed_out(r.seq()).is_some())
                .collect();
            dropped += (count - records.len()) as u64;
            let records: Vec<Record> = records
                .into_iter()
                .filter(|r| last.is_none_or(|l| r.seq() > l))
                .collect();
            let Some(first) = records.first().map(Record::seq) else {
                continue;
            };
            if dropped > 0 || last.is_some_and(|l| first != l + 1) {
                // A gap: what follows cannot be replayed without a hole.
                dropped += records.len() as u64;
                continue;
            }
            last = records.last().map(Record::seq);
            report.wal_records += records.len() as u64;
            replay.push(records);
        }
        report.wal_records_dropped = dropped;

        // The new manifest, checked as the next open will check it before
        // anything is written: its counters above every id and sequence
        // number seen that the index could have handed out (ids within the
        // headroom of 2^63 never were: their files are set aside, and
        // counting them would leave the index unable to write).
        let old_counter = |counter: fn(&Manifest) -> u64| {
            old.as_ref()
                .and_then(|m| handed_out(counter(m).checked_sub(1)?))
                .unwrap_or(0)
        };
        let wal_id = next_above(
            wal_ids
                .iter()
                .copied()
                .chain([old_counter(|m| m.next_wal_id)]),
        );
        // Past a WAL with an id not counted, which is set aside only after
        // the new one is written.
        let wal_id = (wal_id..COUNTER_LIMIT - 1)
            .find(|id| !wal_ids.contains(id))
            .unwrap_or(wal_id);
        let manifest = Manifest {
            index_id,
            shape: plan.shape(),
            k: plan.k(),
            fingerprint_config,
            retention_ms,
            generation: next_above([old.as_ref().map_or(0, |m| m.generation)]),
            next_segment_id: next_above(
                seg_ids
                    .iter()
                    .copied()
                    .chain([old_counter(|m| m.next_segment_id)]),
            ),
            // Below 2^63, as `manifest_problem` checks.
            next_wal_id: wal_id + 1,
            next_seq: max_seq + 1,
            wal_ids: vec![wal_id],
            segments: kept.clone(),
        };
        if let Some(reason) = manifest_problem(&manifest) {
            return Err(unopenable(&reason));
        }

        // The new WAL, written and synced before anything is moved.
        let wal_name = FileKind::Wal.file_name(wal_id);
        let mut bytes = crate::format::encode_wal_header_with_flags(
            index_id,
            wal_id,
            wal_flags(options.durability),
        );
        for records in &replay {
            bytes.extend(encode_frame(records).map_err(|e| Error::InvalidArgument(e.to_string()))?);
        }
        write_file(fs, &dir.join(&wal_name), &bytes)?;

        // Set aside, never delete.
        let lost = dir.join(LOST_AND_FOUND);
        fs.create_dir_all(&lost)
            .map_err(io_error(&lost, "create directory"))?;
        if has_manifest {
            let path = dir.join(&manifest_name);
            let old_bytes = fs.read(&path).map_err(io_error(&path, "read"))?;
            let copy = unused_name(fs, &lost, &manifest_name);
            write_file(fs, &copy, &old_bytes)?;
        }
        if listing.engine.iter().any(|n| n == MANIFEST_TEMP_FILE_NAME) {
            set_aside.push((
                MANIFEST_TEMP_FILE_NAME.to_string(),
                "an uncommitted manifest".to_string(),
            ));
        }
        for (name, _) in &set_aside {
            let from = dir.join(name);
            let to = unused_name(fs, &lost, name);
            fs.rename(&from, &to).map_err(io_error(&from, "rename"))?;
        }
        fs.sync_dir(&lost).map_err(io_error(&lost, "sync"))?;

        commit_manifest(dir, fs, &manifest)?;

        report.kept_segments = kept.iter().map(|m| m.id).collect();
        report.wal = wal_name;
        report.set_aside = set_aside;
        Ok(report)
    }
}

/// Ids and sequence numbers from here on are not counted: a writer's open
/// is refused once a counter reaches the headroom below 2^63
/// (`check::COUNTER_HEADROOM`), and a counter derived from a larger one (the
/// new WAL's id, and the next after it) would land there, leaving the index
/// unable to write.
const HANDED_OUT_BELOW: u64 = COUNTER_LIMIT - COUNTER_HEADROOM - 2;

/// `value`, if the index could have handed it out.
fn handed_out(value: u64) -> Option<u64> {
    (value < HANDED_OUT_BELOW).then_some(value)
}

/// One more than the largest of `values` that the index could have handed
/// out (1 if none): a counter above them, which cannot overflow.
fn next_above(values: impl IntoIterator<Item = u64>) -> u64 {
    let max = values.into_iter().filter_map(handed_out).max().unwrap_or(0);
    max + 1
}

/// `dir/name`, or `dir/name.N` for the first N not taken.
fn unused_name(fs: &dyn FileSystem, dir: &Path, name: &str) -> PathBuf {
    let taken = |p: &Path| fs.len(p).is_ok();
    let first = dir.join(name);
    if !taken(&first) {
        return first;
    }
    (1u64..)
        .map(|n| dir.join(format!("{name}.{n}")))
        .find(|p| !taken(p))
        .unwrap_or(first)
}

/// Checks segment `id`'s two files in full and builds its manifest record.
fn check_segment(
    dir: &Path,
    fs_arc: &Arc<dyn FileSystem>,
    id: u64,
    plan: &Plan,
    index_id: u64,
) -> std::result::Result<Candidate, String> {
    let fs = fs_arc.as_ref();
    let seg_path = dir.join(FileKind::Segment.file_name(id));
    let ids_path = dir.join(FileKind::DocMap.file_name(id));
    let seg_len = fs
        .len(&seg_path)
        .map_err(|_| "its segment file is missing".to_string())?;
    let ids_len = fs
        .len(&ids_path)
        .map_err(|_| "its doc map file is missing".to_string())?;
    let bad = |path: &Path, e| corrupted(path, &e).to_string();
    let seg_map = fs
        .map(&seg_path)
        .map_err(|e| format!("cannot map {}: {e}", seg_path.display()))?;
    let ids_map = fs
        .map(&ids_path)
        .map_err(|e| format!("cannot map {}: {e}", ids_path.display()))?;
    let tables = SegmentReader::new(seg_map).map_err(|e| bad(&seg_path, e))?;
    tables.verify().map_err(|e| bad(&seg_path, e))?;
    let docs = DocMapReader::new(ids_map).map_err(|e| bad(&ids_path, e))?;
    docs.verify().map_err(|e| bad(&ids_path, e))?;
    if tables.segment_id() != id || docs.segment_id() != id {
        return Err(format!(
            "the files record segment ids {} and {}, not {id}",
            tables.segment_id(),
            docs.segment_id()
        ));
    }
    let info = tables.info();
    let table_plan = Plan::from_shape(info.shape, info.k).map_err(|e| e.to_string())?;
    if table_plan.k() != plan.k() || table_plan.tables().len() != tables.table_count() {
        return Err(format!(
            "its plan (k = {}) is not the index's (k = {})",
            table_plan.k(),
            plan.k()
        ));
    }
    let mut meta = SegmentMeta {
        id,
        seg_file_len: seg_len,
        ids_file_len: ids_len,
        seg_footer_crc: tables.footer_crc(),
        ids_footer_crc: docs.footer_crc(),
        min_seq: u64::MAX,
        min_timestamp: u64::MAX,
        ..SegmentMeta::default()
    };
    let mut last_fp = None;
    let seen = |seq: u64, timestamp: u64, meta: &mut SegmentMeta| {
        meta.min_seq = meta.min_seq.min(seq);
        meta.max_seq = meta.max_seq.max(seq);
        meta.min_timestamp = meta.min_timestamp.min(timestamp);
        meta.max_timestamp = meta.max_timestamp.max(timestamp);
    };
    for entry in docs.entries() {
        let entry = entry.map_err(|e| bad(&ids_path, e))?;
        meta.doc_count += 1;
        if last_fp != Some(entry.fingerprint) {
            meta.key_count += 1;
            last_fp = Some(entry.fingerprint);
        }
        seen(entry.seq, entry.timestamp, &mut meta);
    }
    for tombstone in docs.tombstones() {
        let tombstone = tombstone.map_err(|e| bad(&ids_path, e))?;
        meta.tombstone_count += 1;
        seen(tombstone.seq, tombstone.timestamp, &mut meta);
    }
    if meta.doc_count + meta.tombstone_count == 0 {
        return Err("it holds no documents and no tombstones".to_string());
    }
    if handed_out(id).is_none() || handed_out(meta.max_seq).is_none() {
        return Err(format!(
            "its id ({id}) or its largest sequence number ({}) lies within 2^32 of 2^63, \
             which no index hands out",
            meta.max_seq
        ));
    }
    if meta.key_count != tables.key_count() {
        return Err(format!(
            "its tables hold {} fingerprints; its doc map {}",
            tables.key_count(),
            meta.key_count
        ));
    }
    // The full check of an open index's segment: the files name this index,
    // and every table holds the doc map's key set.
    let segment =
        Segment::open(dir, fs_arc, meta, plan.k(), index_id).map_err(|e| e.to_string())?;
    segment.verify().map_err(|e| e.to_string())?;
    Ok(Candidate { meta })
}

/// The index id that most of the segment and WAL files in `dir` name in
/// their headers, if any can be read.
fn most_named_index_id(
    dir: &Path,
    fs: &dyn FileSystem,
    seg_ids: &BTreeSet<u64>,
    wal_ids: &BTreeSet<u64>,
) -> Option<u64> {
    let mut votes: std::collections::BTreeMap<u64, usize> = std::collections::BTreeMap::new();
    for &id in seg_ids {
        let path = dir.join(FileKind::Segment.file_name(id));
        if let Some(reader) = fs.map(&path).ok().and_then(|m| SegmentReader::new(m).ok()) {
            *votes.entry(reader.index_id()).or_default() += 1;
        }
    }
    for &id in wal_ids {
        let path = dir.join(FileKind::Wal.file_name(id));
        if let Ok(bytes) = fs.read(&path)
            && let Ok(reader) = WalReader::new(&bytes)
        {
            *votes.entry(reader.index_id()).or_default() += 1;
        }
    }
    votes.into_iter().max_by_key(|&(_, n)| n).map(|(id, _)| id)
}
