//! `Index::verify` and the checks it shares with recovery: the manifest's
//! counters, a WAL's header and its sequence numbers.

use std::path::Path;
use std::sync::PoisonError;

use crate::error::{Error, Result};
use crate::fingerprint::FingerprintConfig;
use crate::format::{
    FileKind, Manifest, SegmentMeta, WalEnd, WalFrame, WalReader, holds_whole_frame,
};

use super::core::{lock, read_lock};
use super::files::{corrupted, foreign, named_file_error};
use super::index::Index;
use super::recovery::open_segments;
use super::types::{VerifyReport, WalTail};

impl Index {
    /// Reads every file the index consists of and checks every checksum and
    /// structural invariant: the manifest, each WAL (a torn tail is not
    /// damage: it is what a crash mid-append leaves, and recovery drops it),
    /// and each segment's tables (every block decoded) and doc map. The first
    /// damage found is returned as [`Error::Corrupted`] with its file and
    /// offset.
    pub fn verify(&self) -> Result<VerifyReport> {
        let _writer = if self.read_only {
            None
        } else {
            // Hold off flushes so the files stay as the manifest says.
            Some(self.writer.lock().unwrap_or_else(PoisonError::into_inner))
        };
        if let Some(flusher) = &self.flusher {
            flusher.wait_idle();
        }
        // And merges.
        let _merging = lock(&self.core.merging);
        if self.read_only {
            // A writer in another process may commit and remove files
            // meanwhile: the files of the manifest read are verified, and
            // a file found gone means a newer manifest to start over from.
            let fs = self.core.fs.clone();
            return super::reader::retry_while_changed(&self.core.dir, fs.as_ref(), || {
                self.verify_files()
            });
        }
        self.verify_files()
    }

    /// `verify` of the files the manifest names now.
    fn verify_files(&self) -> Result<VerifyReport> {
        let mut report = VerifyReport::default();
        let manifest_path = self.core.dir.join(FileKind::Manifest.file_name(0));
        let bytes = self
            .core
            .fs
            .read(&manifest_path)
            .map_err(named_file_error(&manifest_path, "read"))?;
        let manifest = Manifest::decode(&bytes).map_err(|e| corrupted(&manifest_path, &e))?;
        report.files += 1;
        report.bytes += bytes.len() as u64;
        check_manifest(&manifest_path, &manifest)?;
        // Only the engine writes it, from a configuration that parsed: one
        // that does not parse was written by no release of this format
        // (`add` would refuse to fingerprint with it).
        if let Err(e) = manifest.fingerprint_config.parse::<FingerprintConfig>() {
            return Err(Error::Corrupted {
                path: manifest_path,
                offset: 0,
                reason: format!(
                    "the fingerprint configuration `{}` is not one this format records: {e}",
                    manifest.fingerprint_config.escape_debug()
                ),
            });
        }
        let segments_max = segments_max_seq(&manifest);
        for &wal_id in &manifest.wal_ids {
            let path = self.core.dir.join(FileKind::Wal.file_name(wal_id));
            let bytes = self
                .core
                .fs
                .read(&path)
                .map_err(named_file_error(&path, "read"))?;
            let reader = open_wal(&path, wal_id, manifest.index_id, &bytes)?;
            let unsynced_appends = reader.unsynced_appends();
            let (frames, end) = reader.read_all();
            check_wal_seqs(&path, &frames, segments_max)?;
            match end {
                WalEnd::Clean => {}
                WalEnd::TornTail { offset } => report.wal_tails.push(WalTail {
                    path: path.clone(),
                    offset,
                    bytes: bytes.len() as u64 - offset,
                    unsynced_appends,
                    complete_frame: holds_whole_frame(&bytes, offset),
                }),
                WalEnd::Corrupted { error, .. } | WalEnd::Unparsable { error } => {
                    return Err(corrupted(&path, &error));
                }
            }
            report.files += 1;
            report.bytes += bytes.len() as u64;
        }
        // The segments' list, not the lock: queries go on meanwhile (nothing
        // else changes it while this holds the writer and merge locks). A
        // reader's list is the one of its open or last refresh: the
        // manifest's own segments are opened, reusing those it holds.
        let mut segments = read_lock(&self.core.state).segments.clone();
        if self.read_only {
            segments = open_segments(
                &self.core.dir,
                &self.core.fs,
                &manifest,
                self.core.plan.k(),
                &segments,
            )?;
        }
        for segment in &segments {
            segment.verify()?;
            report.files += 2;
            report.bytes += segment.meta.seg_file_len + segment.meta.ids_file_len;
        }
        Ok(report)
    }
}

/// Reads the header of WAL `wal_id`, whose bytes are `bytes`, and checks
/// that it names itself: a WAL renamed or copied from elsewhere is refused.
pub(super) fn open_wal<'a>(
    path: &Path,
    wal_id: u64,
    index_id: u64,
    bytes: &'a [u8],
) -> Result<WalReader<'a>> {
    let reader = WalReader::new(bytes).map_err(|e| corrupted(path, &e))?;
    if reader.index_id() != index_id {
        return Err(foreign(path, reader.index_id(), index_id));
    }
    if reader.wal_id() != wal_id {
        return Err(Error::Corrupted {
            path: path.to_path_buf(),
            offset: 16,
            reason: format!(
                "the WAL's header names WAL {}, not {wal_id} as its file name says",
                reader.wal_id()
            ),
        });
    }
    Ok(reader)
}

/// Checks what a manifest says against itself, at every open (read-only
/// too), in `verify`, and before every commit: the counters below
/// [`COUNTER_LIMIT`] and past everything the manifest names (the next
/// segment id above every segment's, the next WAL id above every WAL's, the
/// next sequence number above every segment's), and the segments' sequence
/// ranges disjoint. A manifest that fails would make the engine reuse a live
/// file's name or a sequence number, or take an older version of a document
/// for the newer, so it is refused as damage (docs/FORMAT.md, "Manifest
/// file").
pub(super) fn check_manifest(path: &Path, manifest: &Manifest) -> Result<()> {
    manifest_problem(manifest).map_or(Ok(()), |reason| {
        Err(Error::Corrupted {
            path: path.to_path_buf(),
            offset: 0,
            reason,
        })
    })
}

/// What [`check_manifest`] refuses in `manifest`, if anything.
pub(super) fn manifest_problem(manifest: &Manifest) -> Option<String> {
    for (what, value) in [
        ("next segment id", manifest.next_segment_id),
        ("next WAL id", manifest.next_wal_id),
        ("next sequence number", manifest.next_seq),
        ("generation", manifest.generation),
    ] {
        if value >= COUNTER_LIMIT {
            return Some(format!(
                "the {what} {value} is beyond 2^63, which no index reaches"
            ));
        }
    }
    for meta in &manifest.segments {
        if meta.id >= manifest.next_segment_id {
            return Some(format!(
                "the next segment id {} is not above segment {} that the manifest names",
                manifest.next_segment_id, meta.id
            ));
        }
        if holds_writes(meta) && meta.max_seq >= manifest.next_seq {
            return Some(format!(
                "the next sequence number {} is not above segment {}'s largest, {}",
                manifest.next_seq, meta.id, meta.max_seq
            ));
        }
        if holds_writes(meta) && meta.min_seq > meta.max_seq {
            return Some(format!(
                "segment {}'s sequence numbers run from {} down to {}",
                meta.id, meta.min_seq, meta.max_seq
            ));
        }
    }
    if let Some(&wal_id) = manifest
        .wal_ids
        .iter()
        .find(|&&id| id >= manifest.next_wal_id)
    {
        return Some(format!(
            "the next WAL id {} is not above WAL {} that the manifest names",
            manifest.next_wal_id, wal_id
        ));
    }
    // Recovery replays the WALs in the order named, and ends at a gap in
    // sequence numbers between two: WALs named out of the order the engine
    // started them would have the older one's writes dropped as if lost.
    if let Some(pair) = manifest.wal_ids.windows(2).find(|w| w[0] >= w[1]) {
        return Some(format!(
            "the WALs are not named in the order they were started (WAL {} before WAL {})",
            pair[0], pair[1]
        ));
    }
    // Queries take the newest version of an id from the segment with the
    // highest sequence numbers: the segments' ranges must not overlap (each
    // flush and merge covers a run of writes of its own).
    let mut ranges: Vec<&SegmentMeta> = manifest
        .segments
        .iter()
        .filter(|m| holds_writes(m))
        .collect();
    ranges.sort_by_key(|m| m.min_seq);
    for pair in ranges.windows(2) {
        if let [older, newer] = pair
            && newer.min_seq <= older.max_seq
        {
            return Some(format!(
                "segments {} and {} hold overlapping sequence numbers ({}..={} and {}..={}); \
                 `simhashdb repair` keeps the one with the larger id",
                older.id, newer.id, older.min_seq, older.max_seq, newer.min_seq, newer.max_seq
            ));
        }
    }
    None
}

/// Whether a segment record holds any write (an empty one has no sequence
/// range).
fn holds_writes(meta: &SegmentMeta) -> bool {
    meta.doc_count > 0 || meta.tombstone_count > 0
}

/// The largest sequence number of the segments `manifest` names (0 if none
/// holds a write): every WAL record it names must lie above it.
pub(super) fn segments_max_seq(manifest: &Manifest) -> u64 {
    manifest
        .segments
        .iter()
        .filter(|m| holds_writes(m))
        .map(|m| m.max_seq)
        .max()
        .unwrap_or(0)
}

/// Ids and sequence numbers stay below this: at a billion a second, 2^63
/// takes 292 years. A larger counter in a file is damage, and the counters
/// can never overflow.
pub(super) const COUNTER_LIMIT: u64 = 1 << 63;

/// A writer's open is refused once the generation, the next segment id or
/// the next WAL id comes within this of [`COUNTER_LIMIT`]: far more than
/// the commits, segments and WALs one process can take (2^32 commits, one
/// a second, take 136 years), so that no commit ever takes a counter to the
/// limit, and no write is refused half-way for it. Only a manifest written
/// with such counters gets there. Sequence numbers, taken a document at a
/// time, are checked at each write instead ([`check_seq_room`]).
pub(super) const COUNTER_HEADROOM: u64 = 1 << 32;

/// The first of the generation, the next segment id and the next WAL id of
/// `manifest` that lies within [`COUNTER_HEADROOM`] of [`COUNTER_LIMIT`],
/// with its value.
pub(super) fn counter_without_room(manifest: &Manifest) -> Option<(&'static str, u64)> {
    [
        ("generation", manifest.generation),
        ("next segment id", manifest.next_segment_id),
        ("next WAL id", manifest.next_wal_id),
    ]
    .into_iter()
    .find(|&(_, value)| value >= COUNTER_LIMIT - COUNTER_HEADROOM)
}

/// [`Error::CounterLimit`] unless `records` sequence numbers from `next_seq`
/// on leave the next one below [`COUNTER_LIMIT`].
pub(super) fn check_seq_room(next_seq: u64, records: u64) -> Result<()> {
    match next_seq.checked_add(records) {
        Some(next) if next < COUNTER_LIMIT => Ok(()),
        _ => Err(Error::CounterLimit {
            what: "next sequence number",
            value: next_seq,
        }),
    }
}

/// Checks the sequence numbers of a WAL's records: each below
/// [`COUNTER_LIMIT`], increasing (every write takes a number above the
/// last), and above `segments_max`, the largest of the segments the
/// manifest names (a flush commits its segment and drops the WAL it came
/// from at once). A WAL that fails has checksum-valid frames written by no
/// writer of this index, reordered, or older than the segments: replaying
/// them would answer with an older version of a document than a segment
/// holds. `repair` drops such records.
pub(super) fn check_wal_seqs(path: &Path, frames: &[WalFrame], segments_max: u64) -> Result<()> {
    let mut last: Option<u64> = None;
    for frame in frames {
        for record in &frame.records {
            let seq = record.seq();
            let reason = if seq >= COUNTER_LIMIT || last.is_some_and(|l| seq <= l) {
                format!(
                    "a record's sequence number {seq} does not follow the previous one ({}) or is beyond 2^63",
                    last.map_or("none".to_owned(), |l| l.to_string())
                )
            } else if seq <= segments_max {
                format!(
                    "a record's sequence number {seq} is not above the segments' largest, \
                     {segments_max}: the WAL holds writes older than the segments; \
                     `simhashdb repair` drops them"
                )
            } else {
                last = Some(seq);
                continue;
            };
            return Err(Error::Corrupted {
                path: path.to_path_buf(),
                offset: frame.offset,
                reason,
            });
        }
    }
    Ok(())
}
