//! Opening an index: the directory lock, the manifest, replaying the WALs
//! (the three rules that end a replay early), logging what was replayed
//! again, removing orphans; and creating a new index.

use std::cmp::Reverse;
use std::collections::HashSet;
use std::ops::Range;
use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::error::{Error, Result};
use crate::format::{
    FileKind, MANIFEST_TEMP_FILE_NAME, Manifest, Record, WalEnd, encode_wal_header_with_flags,
    looks_like_lost_write_back,
};
use crate::plan::Plan;

use super::check::{
    COUNTER_HEADROOM, COUNTER_LIMIT, check_manifest, check_wal_seqs, counter_without_room,
    open_wal, segments_max_seq,
};
use super::compaction::Merger;
use super::core::{Core, State};
use super::files::{
    commit_manifest, corrupted, io_error, lock_error, manifest_names_wal, named_file_error,
    write_file,
};
use super::flush::Flusher;
use super::fs::{FileSystem, Mapped, RealFs, thread_disk_reads};
use super::index::Index;
use super::lock::DirLock;
use super::memtable::Memtable;
use super::options::{Durability, NewIndexSettings, Options};
use super::reader::Loaded;
use super::repair::check_without_manifest;
use super::schedule::Hooks;
use super::segment::{Segment, fits_in_memory};
use super::write::{Writer, apply, new_wal_file, wal_flags};

impl Index {
    pub(super) fn open_with(dir: &Path, options: Options, read_only: bool) -> Result<Index> {
        if !read_only || options.file_system.is_some() {
            return Index::open_attempt(dir, options, read_only);
        }
        // A reader takes no lock: a writer in another process may commit
        // and remove files while it opens (docs/ARCHITECTURE.md, "Readers
        // beside a writer").
        super::reader::retry_while_changed(dir, &RealFs, || {
            Index::open_attempt(dir, options.clone(), true)
        })
    }

    fn open_attempt(dir: &Path, options: Options, read_only: bool) -> Result<Index> {
        let (fs, lock): (Arc<dyn FileSystem>, Option<DirLock>) = match &options.file_system {
            Some(fs) => (fs.clone(), None),
            None => {
                if !read_only {
                    RealFs
                        .create_dir_all(dir)
                        .map_err(io_error(dir, "create directory"))?;
                }
                let manifest_path = dir.join(FileKind::Manifest.file_name(0));
                if !manifest_path.exists() {
                    // Before the lock file is created in a directory that
                    // may not be ours; checked again under the lock.
                    check_without_manifest(
                        dir,
                        &RealFs,
                        read_only || options.create_in_non_empty_dir,
                    )?;
                }
                if read_only && !manifest_path.exists() {
                    // Say so before the lock's own error about a missing LOCK.
                    return Err(Error::Io {
                        path: manifest_path,
                        op: "read",
                        source: std::io::Error::new(
                            std::io::ErrorKind::NotFound,
                            "no index here: the directory has no MANIFEST",
                        ),
                    });
                }
                let lock = if read_only {
                    None
                } else {
                    Some(DirLock::exclusive(dir).map_err(lock_error)?)
                };
                (Arc::new(RealFs), lock)
            }
        };
        if options.file_system.is_some() && !read_only {
            fs.create_dir_all(dir)
                .map_err(io_error(dir, "create directory"))?;
        }
        if !read_only {
            // A new directory's own entry must be durable too.
            if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
                fs.sync_dir(parent).map_err(io_error(parent, "sync"))?;
            }
        }
        let manifest_path = dir.join(FileKind::Manifest.file_name(0));
        let manifest = match fs.read(&manifest_path) {
            Ok(bytes) => Manifest::decode(&bytes).map_err(|e| corrupted(&manifest_path, &e))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && !read_only => {
                // Only an empty directory, or what an interrupted creation
                // left (no data), becomes a new index.
                let leftovers =
                    check_without_manifest(dir, fs.as_ref(), options.create_in_non_empty_dir)?;
                for path in leftovers {
                    fs.remove(&path).map_err(io_error(&path, "remove"))?;
                }
                Index::create(dir, fs.as_ref(), &options)?
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                check_without_manifest(dir, fs.as_ref(), true)?;
                return Err(io_error(&manifest_path, "read")(e));
            }
            Err(e) => return Err(io_error(&manifest_path, "read")(e)),
        };
        // The engine records only plans it built: one that cannot be built
        // is damage to the manifest, not a bad argument.
        let plan = Plan::from_shape(manifest.shape, manifest.k).map_err(|e| Error::Corrupted {
            path: manifest_path.clone(),
            offset: 12,
            reason: format!(
                "the recorded plan ({}, k = {}) cannot be built: {e}",
                manifest.shape, manifest.k
            ),
        })?;
        if let Some(given) = &options.plan
            && (given.shape() != plan.shape() || given.k() != plan.k())
        {
            return Err(Error::Mismatch {
                what: "plan",
                recorded: plan.to_string(),
                given: given.to_string(),
            });
        }
        if let Some(given) = &options.fingerprint
            && given.to_string() != manifest.fingerprint_config
        {
            return Err(Error::Mismatch {
                what: "fingerprint config",
                recorded: manifest.fingerprint_config.clone(),
                given: given.to_string(),
            });
        }

        check_manifest(&manifest_path, &manifest)?;
        let mut manifest = manifest;
        if !read_only {
            skip_ids_of_debris(dir, fs.as_ref(), &mut manifest)?;
            // A writer commits manifests, each taking a generation, flushes
            // a segment id and a WAL id: refused before anything is written
            // when a counter has too little room left (no process that
            // opens with room commits 2^32 times). Readers need none.
            if let Some((what, value)) = counter_without_room(&manifest) {
                return Err(Error::CounterLimit { what, value });
            }
        }
        let segments = open_segments(dir, &fs, &manifest, plan.k(), &[])?;
        // An index that does not fit in memory with room to spare has its
        // segments marked to be read a query's blocks at a time
        // (`Segment::in_memory`), prefaulted or not. What to prefault once
        // the open is otherwise done, in this order: the block indexes of
        // every table and doc map (every query reads an entry of each
        // table's; a query that finds a document, of a doc map's), then, if
        // the index fits, the tables' files and the doc maps'.
        let size: u64 = segments
            .iter()
            .map(|s| s.meta.seg_file_len + s.meta.ids_file_len)
            .sum();
        let fits = fits_in_memory(size, 2, options.memory_budget);
        if !fits {
            for segment in &segments {
                segment.set_out_of_memory();
            }
        }
        let prefault: Vec<(Mapped, Range<usize>)> =
            if options.prefault && options.file_system.is_none() {
                let indexes = segments.iter().flat_map(|s| s.index_ranges());
                let whole = |map: &Mapped| (map.clone(), 0..map.len());
                let files = segments
                    .iter()
                    .map(|s| whole(&s.tables_map))
                    .chain(segments.iter().map(|s| whole(&s.docs_map)));
                if fits {
                    indexes.chain(files).collect()
                } else {
                    indexes.collect()
                }
            } else {
                Vec::new()
            };
        // Segments out of memory are told once their block indexes are read.
        let out_of_memory: Vec<Arc<Segment>> = if fits { Vec::new() } else { segments.clone() };
        // Then, on the same thread, the decoded copies of the small
        // segments' tables (`Segment::decode_tables`), if they fit too.
        let decode: Vec<Arc<Segment>> = if fits && !prefault.is_empty() {
            segments.clone()
        } else {
            Vec::new()
        };

        let Replayed {
            memtable,
            next_seq,
            logged,
            torn,
            last_unsynced,
            last_older,
            wal_lens,
            tail,
        } = replay_wals(dir, fs.as_ref(), &manifest, &plan, !read_only)?;

        let writer = if read_only {
            (None, manifest)
        } else {
            let mut manifest = manifest;
            manifest.next_seq = next_seq;
            let path = if logged.is_empty()
                && !torn
                && manifest.wal_ids.len() == 1
                && last_unsynced == (options.durability == Durability::Buffered)
                && !last_older
            {
                // A crash may have come between a rename and its directory
                // sync: make what was recovered durable before building on it.
                fs.sync_dir(dir).map_err(io_error(dir, "sync"))?;
                dir.join(FileKind::Wal.file_name(manifest.wal_ids[0]))
            } else {
                // The commit below takes a WAL id and a generation: refused
                // before anything is written or removed if either (or the
                // next sequence number) would reach 2^63.
                let limited = [
                    ("generation", manifest.generation, 1),
                    ("next WAL id", manifest.next_wal_id, 1),
                    ("next sequence number", manifest.next_seq, 0),
                ]
                .into_iter()
                .find(|&(_, value, taken)| {
                    value.checked_add(taken).is_none_or(|v| v >= COUNTER_LIMIT)
                });
                if let Some((what, value, _)) = limited {
                    return Err(Error::CounterLimit { what, value });
                }
                // Files of earlier failed or interrupted work first, so that
                // the copy below finds the space they held (a full disk).
                remove_orphans(dir, fs.as_ref(), &manifest);
                // What was replayed may be visible without being durable
                // (unsynced when the last process died, or lost to a failed
                // sync), so new writes must not be appended after it: log it
                // again in a new, synced WAL (dropping any torn tail), and
                // commit a manifest naming that one only.
                let wal_id = manifest.next_wal_id;
                manifest.next_wal_id += 1;
                manifest.wal_ids = vec![wal_id];
                manifest.generation += 1;
                let path = dir.join(FileKind::Wal.file_name(wal_id));
                let mut bytes = encode_wal_header_with_flags(
                    manifest.index_id,
                    wal_id,
                    wal_flags(options.durability),
                );
                bytes.extend_from_slice(&logged);
                write_file(fs.as_ref(), &path, &bytes)?;
                if let Err(e) = commit_manifest(dir, fs.as_ref(), &manifest) {
                    // Unless the rename went through (only the directory
                    // sync failed), nothing names the new WAL: remove it
                    // rather than leave a copy of the log on a full disk.
                    if !manifest_names_wal(dir, fs.as_ref(), wal_id) {
                        let _ = fs.remove(&path);
                    }
                    return Err(e);
                }
                path
            };
            let wal = fs.open_append(&path).map_err(io_error(&path, "open"))?;
            remove_orphans(dir, fs.as_ref(), &manifest);
            let wal_id = manifest.wal_ids.last().copied().unwrap_or(0);
            (
                Some(Writer {
                    wal,
                    wal_id,
                    frozen_wal: None,
                    next_seq,
                }),
                manifest,
            )
        };
        let (writer, manifest) = writer;

        let core = Arc::new(Core {
            dir: dir.to_path_buf(),
            index_id: manifest.index_id,
            fs,
            plan,
            small_segment_plans: options.small_segment_plans,
            flat_tables: options.flat_tables,
            memory_budget: options.memory_budget,
            decoded_tables_up_to: options.decoded_tables_up_to,
            fingerprint_config: manifest.fingerprint_config.clone(),
            retention_ms: manifest.retention_ms,
            merge_policy: options.merge_policy.clone(),
            state: RwLock::new(State {
                memtable: Arc::new(memtable),
                frozen: None,
                segments,
            }),
            manifest: Mutex::new(manifest),
            merging: Mutex::new(()),
            merge_claims: Mutex::default(),
            poisoned: AtomicBool::new(false),
            queried: AtomicBool::new(false),
            poison_cause: Mutex::new(None),
            activity: Default::default(),
            threads: Default::default(),
            retired: Mutex::default(),
            recent_writes: Mutex::default(),
            spare_memtable: Mutex::default(),
            flush_buffers: Mutex::default(),
            #[cfg(feature = "schedule-hooks")]
            hooks: Hooks::new(options.schedule.clone()),
            #[cfg(not(feature = "schedule-hooks"))]
            hooks: Hooks::default(),
        });
        let merger = if !read_only
            && options.merge_thread
            && core.fs.background_threads()
            && core.merge_policy.is_some()
        {
            let merger =
                Merger::start(core.clone()).map_err(io_error(dir, "start the merge thread"))?;
            // A close skips the merges its last flush called for (it waits
            // for a merge in progress only): the policy is asked again now,
            // so that they are not left until the next flush.
            merger.wake();
            Some(merger)
        } else {
            None
        };
        let flusher = if !read_only
            && options.flush_thread
            && options.merge_thread
            && core.fs.background_threads()
        {
            let merge = merger.as_ref().map(|m| m.signal.clone());
            Some(
                Flusher::start(core.clone(), merge)
                    .map_err(io_error(dir, "start the flush thread"))?,
            )
        } else {
            None
        };
        if !prefault.is_empty() {
            // First, if the index fits in memory (`decode` is empty
            // otherwise), the flat tables' chunks are checked here, which
            // maps their pages while they come from the page cache: the
            // first queries then neither check chunks nor take page faults
            // (0.1-0.4 s for a 50 M segment's 2.9 GB on a loaded 2-core
            // machine; docs/BENCHMARKS.md, "Issue 41: 2 MiB folios and the
            // open's check"). Then the doc maps are mapped the same way,
            // their block indexes first: a query that finds a document
            // reads a block of one, and the prefault thread would come to
            // them only after the tables, while the first 10,000 queries
            // ran (docs/BENCHMARKS.md, "The open maps the doc maps too").
            // Once this thread has read more than `OPEN_DISK_READS` from
            // the disk (files not in the page cache, say after a reboot)
            // the rest is left to the prefault thread and the queries, as
            // without this: the open never waits for the disk to read
            // gigabytes.
            let mut mapped = false;
            if let Some(before) = thread_disk_reads() {
                let read_from_disk = || {
                    thread_disk_reads().is_none_or(|now| now - before.min(now) > OPEN_DISK_READS)
                };
                mapped = !decode.is_empty()
                    && decode
                        .iter()
                        .all(|segment| segment.check_at_open(&core, read_from_disk))
                    && decode
                        .iter()
                        .all(|segment| segment.map_doc_map_at_open(read_from_disk));
            }
            // Then map the rest (above all the doc maps) in the background,
            // started last so that nothing above waits for the
            // address-space lock it takes: queries soon stop taking a page
            // fault per first touch. If the open mapped it all, only
            // Rice-coded tables are left (which the thread then decodes).
            // `close` and `drop` stop and join it.
            let prefault = if mapped {
                decode
                    .iter()
                    .flat_map(|s| s.tables_left_after_open())
                    .collect()
            } else {
                prefault
            };
            core.start_prefault(prefault, out_of_memory, decode);
        }
        Ok(Index {
            core,
            durability: options.durability,
            memtable_budget: options.memtable_bytes,
            max_segments: options.max_segments,
            read_only,
            writer: Mutex::new(writer),
            loaded: Mutex::new(Loaded { wal_lens, tail }),
            merger,
            flusher,
            text_hasher: std::sync::OnceLock::new(),
            _lock: lock,
        })
    }

    /// Creates a new index: an empty WAL and the first manifest.
    fn create(dir: &Path, fs: &dyn FileSystem, options: &Options) -> Result<Manifest> {
        let NewIndexSettings {
            plan,
            fingerprint: config,
            retention_ms,
        } = options.new_index_settings()?;
        let manifest = Manifest {
            index_id: new_index_id(),
            shape: plan.shape(),
            k: plan.k(),
            fingerprint_config: config.to_string(),
            retention_ms,
            generation: 0,
            next_segment_id: 1,
            next_wal_id: 1,
            next_seq: 1,
            wal_ids: Vec::new(),
            segments: Vec::new(),
        };
        // A creation interrupted before its manifest was committed may have
        // left a WAL behind: never create a file over it.
        let mut manifest = manifest;
        skip_ids_of_debris(dir, fs, &mut manifest)?;
        let wal_id = manifest.next_wal_id;
        manifest.next_wal_id += 1;
        manifest.wal_ids = vec![wal_id];
        new_wal_file(dir, fs, manifest.index_id, wal_id, options.durability)?;
        if let Err(e) = commit_manifest(dir, fs, &manifest) {
            // Unless the rename went through, the new WAL holds nothing and
            // nothing names it.
            if !manifest_names_wal(dir, fs, wal_id) {
                let _ = fs.remove(&dir.join(FileKind::Wal.file_name(wal_id)));
            }
            return Err(e);
        }
        Ok(manifest)
    }
}

/// A random id for a new index: keyed hashes of the clock, drawn from the
/// standard library's per-process random keys.
pub(super) fn new_index_id() -> u64 {
    use std::hash::BuildHasher;
    let state = std::collections::hash_map::RandomState::new();
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    state.hash_one((nanos, std::process::id()))
}

/// Moves the manifest's next segment and WAL ids past any file in `dir`
/// that already has them: the debris of a flush or merge interrupted before
/// its commit (its ids were allocated after the last commit). New files are
/// created exclusively, so without this such debris would make the next
/// flush fail; it is removed after recovery (see [`remove_orphans`]).
fn skip_ids_of_debris(dir: &Path, fs: &dyn FileSystem, manifest: &mut Manifest) -> Result<()> {
    for path in fs.list(dir).map_err(io_error(dir, "list"))? {
        let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        // Ids within the headroom of 2^63 are never handed out (writes
        // are refused first), so files with them never collide with a new
        // one; moving past them would leave the index unable to write.
        let handed_out = |id: u64| id < COUNTER_LIMIT - COUNTER_HEADROOM;
        match FileKind::parse_file_name(name) {
            Some((FileKind::Segment | FileKind::DocMap, id))
                if id >= manifest.next_segment_id && handed_out(id) =>
            {
                manifest.next_segment_id = id + 1;
            }
            Some((FileKind::Wal, id)) if id >= manifest.next_wal_id && handed_out(id) => {
                manifest.next_wal_id = id + 1;
            }
            _ => {}
        }
    }
    Ok(())
}

/// Removes files the manifest does not name (left by a crash mid-flush or
/// mid-compaction). Best effort.
fn remove_orphans(dir: &Path, fs: &dyn FileSystem, manifest: &Manifest) {
    let Ok(files) = fs.list(dir) else { return };
    let segments: HashSet<u64> = manifest.segments.iter().map(|m| m.id).collect();
    let wals: HashSet<u64> = manifest.wal_ids.iter().copied().collect();
    for path in files {
        let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        let orphan = match FileKind::parse_file_name(name) {
            Some((FileKind::Segment | FileKind::DocMap, id)) => !segments.contains(&id),
            Some((FileKind::Wal, id)) => !wals.contains(&id),
            _ => name == MANIFEST_TEMP_FILE_NAME,
        };
        if orphan {
            let _ = fs.remove(&dir.join(name));
        }
    }
}

/// What replaying an index's WALs found.
pub(super) struct Replayed {
    /// Every replayed record, applied.
    pub(super) memtable: Memtable,
    /// The next sequence number: above the manifest's and every replayed record's.
    pub(super) next_seq: u64,
    /// The valid frames of every WAL, in order.
    pub(super) logged: Vec<u8>,
    /// Whether a WAL ended in a torn tail (or the replay ended early).
    pub(super) torn: bool,
    /// Whether the last WAL read says its frames were acknowledged unsynced.
    pub(super) last_unsynced: bool,
    /// Whether the last WAL read is of an older format version, which a
    /// writer does not append to (docs/FORMAT.md, "Versions").
    pub(super) last_older: bool,
    /// The length of each WAL read, in the manifest's order.
    pub(super) wal_lens: Vec<u64>,
    /// Where the replay of the last WAL ended, if every WAL was read to its
    /// end (clean, or a torn tail): what a reader's refresh reads on from.
    pub(super) tail: Option<WalTailPos>,
}

/// The end of the last complete frame of the last WAL a replay read.
#[derive(Debug, Clone)]
pub(super) struct WalTailPos {
    pub(super) wal_id: u64,
    /// The WAL's header, to read frames after `end` with.
    pub(super) header: Vec<u8>,
    /// The offset after its last complete frame.
    pub(super) end: u64,
    /// The sequence number of the last record replayed.
    pub(super) last_seq: Option<u64>,
}

/// The most an open reads from the disk while it checks the flat tables
/// of an index that fits in memory: a few pages evicted since they were
/// written are read back; files that are not in the page cache are left
/// to the prefault thread.
const OPEN_DISK_READS: u64 = 16 << 20;

/// Opens the segments `manifest` names, newest first; a segment of
/// `reuse` with the same id is taken as it is (a published segment's
/// files never change).
pub(super) fn open_segments(
    dir: &Path,
    fs: &Arc<dyn FileSystem>,
    manifest: &Manifest,
    k: u32,
    reuse: &[Arc<Segment>],
) -> Result<Vec<Arc<Segment>>> {
    let mut segments = Vec::with_capacity(manifest.segments.len());
    for meta in &manifest.segments {
        match reuse.iter().find(|s| s.meta == *meta) {
            Some(open) => segments.push(open.clone()),
            None => segments.push(Arc::new(Segment::open(
                dir,
                fs,
                *meta,
                k,
                manifest.index_id,
            )?)),
        }
    }
    // Newest first.
    segments.sort_by_key(|s| Reverse(s.meta.max_seq));
    Ok(segments)
}

/// Replays the WALs `manifest` names into a new memtable, ending early by
/// the three rules (a torn tail, a gap in sequence numbers between two
/// WALs, damage that looks like a lost write-back of unsynced appends).
/// `logged` collects the frames' bytes (a writer logs them again); a
/// reader passes `false`.
pub(super) fn replay_wals(
    dir: &Path,
    fs: &dyn FileSystem,
    manifest: &Manifest,
    plan: &Plan,
    keep_logged: bool,
) -> Result<Replayed> {
    let mut memtable = Memtable::new(plan);
    let mut next_seq = manifest.next_seq;
    let mut logged: Vec<u8> = Vec::new();
    let mut torn = false;
    let mut last_unsynced = false;
    let mut last_older = false;
    // The sequence number of the last record replayed.
    let mut last_seq: Option<u64> = None;
    let mut wal_lens = Vec::with_capacity(manifest.wal_ids.len());
    let mut tail = None;
    let segments_max = segments_max_seq(manifest);
    for (i, &wal_id) in manifest.wal_ids.iter().enumerate() {
        if torn {
            // A later WAL's frames came after the ones lost.
            break;
        }
        let path = dir.join(FileKind::Wal.file_name(wal_id));
        let bytes = fs.read(&path).map_err(named_file_error(&path, "read"))?;
        wal_lens.push(bytes.len() as u64);
        let reader = open_wal(&path, wal_id, manifest.index_id, &bytes)?;
        last_unsynced = reader.unsynced_appends();
        last_older = reader.version() < crate::format::FORMAT_VERSION;
        let (frames, end) = reader.read_all();
        // Sequence numbers run on from one WAL to the next (a WAL is
        // started only after a write to the one before). A gap means a
        // power cut took the end of the earlier WAL, whose appends were
        // not synced, but not the start of this one, written after: a
        // Buffered WAL's unsynced tail can be cut at a frame boundary,
        // leaving no torn tail to see. Replaying this one would leave a
        // hole, so recovery keeps the prefix before the gap.
        check_wal_seqs(&path, &frames, segments_max)?;
        let first_seq = frames
            .first()
            .and_then(|frame| frame.records.first())
            .map(Record::seq);
        if i > 0 && first_seq.is_some() && first_seq != last_seq.map(|s| s + 1) {
            torn = true;
            break;
        }
        let frames_end = frames
            .last()
            .map_or(crate::format::wal::WAL_HEADER_LEN as u64, |f| f.end);
        for frame in frames {
            if keep_logged {
                logged.extend_from_slice(
                    bytes
                        .get(frame.offset as usize..frame.end as usize)
                        .unwrap_or_default(),
                );
            }
            for record in frame.records {
                let seq = apply(&mut memtable, record);
                last_seq = Some(seq);
                next_seq = next_seq.max(seq + 1);
            }
        }
        match end {
            WalEnd::Clean => {}
            WalEnd::TornTail { .. } => torn = true,
            // Frames acknowledged without a sync may be lost in any
            // order by a power cut (pages written back out of order): if
            // the damage looks like such a lost page, keep the prefix
            // before it and drop the rest, later WALs included
            // (docs/FORMAT.md, "WAL torn tail").
            WalEnd::Corrupted { error, next_valid }
                if last_unsynced
                    && looks_like_lost_write_back(&bytes, error.offset, next_valid) =>
            {
                torn = true;
                break;
            }
            WalEnd::Corrupted { error, .. } | WalEnd::Unparsable { error } => {
                return Err(corrupted(&path, &error));
            }
        }
        if i + 1 == manifest.wal_ids.len() {
            tail = Some(WalTailPos {
                wal_id,
                header: bytes
                    .get(..crate::format::wal::WAL_HEADER_LEN)
                    .unwrap_or_default()
                    .to_vec(),
                end: frames_end,
                last_seq,
            });
        }
    }

    Ok(Replayed {
        memtable,
        next_seq,
        logged,
        torn,
        last_unsynced,
        last_older,
        wal_lens,
        tail,
    })
}
