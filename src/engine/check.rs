//! `Index::verify` and the checks it shares with recovery: the manifest's
//! counters, a WAL's header and its sequence numbers.

use std::path::Path;
use std::sync::PoisonError;

use crate::error::{Error, Result};
use crate::format::{
    FileKind, Manifest, SegmentMeta, WalEnd, WalFrame, WalReader, holds_whole_frame,
};

use super::core::{lock, read_lock};
use super::files::{corrupted, foreign, named_file_error};
use super::index::Index;
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
        check_manifest_counters(&manifest_path, &manifest)?;
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
            check_wal_seqs(&path, &frames)?;
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
        // else changes it while this holds the writer and merge locks).
        let segments = read_lock(&self.core.state).segments.clone();
        for segment in &segments {
            segment.verify()?;
            report.files += 2;
            report.bytes += segment.meta.seg_file_len + segment.meta.ids_file_len;
        }
        // Queries take the newest version of an id from the segment with
        // the highest sequence numbers: the segments' ranges must not
        // overlap (each flush and merge covers a run of writes of its own).
        let mut ranges: Vec<&SegmentMeta> = segments
            .iter()
            .map(|s| &s.meta)
            .filter(|m| m.doc_count > 0 || m.tombstone_count > 0)
            .collect();
        ranges.sort_by_key(|m| m.min_seq);
        for pair in ranges.windows(2) {
            if let [older, newer] = pair
                && newer.min_seq <= older.max_seq
            {
                return Err(Error::Corrupted {
                    path: manifest_path.clone(),
                    offset: 0,
                    reason: format!(
                        "segments {} and {} hold overlapping sequence numbers ({}..={} and {}..={})",
                        older.id,
                        newer.id,
                        older.min_seq,
                        older.max_seq,
                        newer.min_seq,
                        newer.max_seq
                    ),
                });
            }
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

/// Checks that the manifest's counters lie past everything it names: the
/// next segment id above every segment's, the next WAL id above every WAL's,
/// the next sequence number above every segment's. A manifest that fails
/// would make the engine reuse a live file's name or a sequence number, so
/// it is refused as damage (docs/FORMAT.md, "Manifest file").
pub(super) fn check_manifest_counters(path: &Path, manifest: &Manifest) -> Result<()> {
    let refuse = |reason: String| Error::Corrupted {
        path: path.to_path_buf(),
        offset: 0,
        reason,
    };
    for (what, value) in [
        ("next segment id", manifest.next_segment_id),
        ("next WAL id", manifest.next_wal_id),
        ("next sequence number", manifest.next_seq),
        ("generation", manifest.generation),
    ] {
        if value >= COUNTER_LIMIT {
            return Err(refuse(format!(
                "the {what} {value} is beyond 2^63, which no index reaches"
            )));
        }
    }
    for meta in &manifest.segments {
        if meta.id >= manifest.next_segment_id {
            return Err(refuse(format!(
                "the next segment id {} is not above segment {} that the manifest names",
                manifest.next_segment_id, meta.id
            )));
        }
        if (meta.doc_count > 0 || meta.tombstone_count > 0) && meta.max_seq >= manifest.next_seq {
            return Err(refuse(format!(
                "the next sequence number {} is not above segment {}'s largest, {}",
                manifest.next_seq, meta.id, meta.max_seq
            )));
        }
    }
    if let Some(&wal_id) = manifest
        .wal_ids
        .iter()
        .find(|&&id| id >= manifest.next_wal_id)
    {
        return Err(refuse(format!(
            "the next WAL id {} is not above WAL {} that the manifest names",
            manifest.next_wal_id, wal_id
        )));
    }
    Ok(())
}

/// Ids and sequence numbers stay below this: at a billion a second, 2^63
/// takes 292 years. A larger counter in a file is damage, and the counters
/// can never overflow.
pub(super) const COUNTER_LIMIT: u64 = 1 << 63;

/// Checks the sequence numbers of a WAL's records: each below
/// [`COUNTER_LIMIT`], and increasing (every write takes a number above the
/// last). A WAL that fails has checksum-valid frames written by no writer of
/// this index, or reordered.
pub(super) fn check_wal_seqs(path: &Path, frames: &[WalFrame]) -> Result<()> {
    let mut last: Option<u64> = None;
    for frame in frames {
        for record in &frame.records {
            let seq = record.seq();
            if seq >= COUNTER_LIMIT || last.is_some_and(|l| seq <= l) {
                return Err(Error::Corrupted {
                    path: path.to_path_buf(),
                    offset: frame.offset,
                    reason: format!(
                        "a record's sequence number {seq} does not follow the previous one ({}) or is beyond 2^63",
                        last.map_or("none".to_owned(), |l| l.to_string())
                    ),
                });
            }
            last = Some(seq);
        }
    }
    Ok(())
}
