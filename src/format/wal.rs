//! Write-ahead log files: a header, then frames appended one per write batch.
//!
//! A frame holds every record of one batch behind one CRC32, so a batch
//! torn by a crash is dropped whole. Reading tells a torn tail (a crash while
//! appending: drop it) from damage in the middle (report it); see
//! docs/FORMAT.md#wal-file and docs/FORMAT.md#wal-torn-tail.

use super::bytes::{Cursor, check_crc, check_magic_and_version, crc32, to_u64, u32_at, u64_at};
use super::{EncodeError, FileKind, FormatError, FormatErrorKind, MAX_NAME_LEN};
use crate::sketch::Sketch;

const FILE: FileKind = FileKind::Wal;
/// Magic, version, flags, WAL id, index id, CRC.
pub const WAL_HEADER_LEN: usize = 36;
/// Payload length, payload CRC32, and the CRC32 of those 8 bytes.
pub const FRAME_HEADER_LEN: usize = 12;
/// The largest payload a frame may have (256 MiB).
pub const MAX_FRAME_PAYLOAD: usize = 256 << 20;

const INSERT: u8 = 1;
const INSERT_NAMED: u8 = 2;
const DELETE: u8 = 3;
/// Format version 4 on.
const INSERT_SKETCHED: u8 = 4;
const INSERT_NAMED_SKETCHED: u8 = 5;

/// One logged write.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Record {
    /// Insert or replace document `id`.
    Insert {
        /// Sequence number of the write.
        seq: u64,
        /// Document id.
        id: u64,
        /// The document's fingerprint.
        fingerprint: u64,
        /// Milliseconds since the Unix epoch.
        timestamp: u64,
        /// Optional name, at most [`MAX_NAME_LEN`] bytes.
        name: Option<String>,
        /// Optional verification value (logged from format version 4 on).
        sketch: Option<Sketch>,
    },
    /// Delete document `id`.
    Delete {
        /// Sequence number of the write.
        seq: u64,
        /// Document id.
        id: u64,
        /// Milliseconds since the Unix epoch.
        timestamp: u64,
    },
}

impl Record {
    /// The write's sequence number.
    pub fn seq(&self) -> u64 {
        match self {
            Record::Insert { seq, .. } | Record::Delete { seq, .. } => *seq,
        }
    }
}

/// The header that starts WAL file `wal_id` of index `index_id`.
pub fn encode_wal_header(index_id: u64, wal_id: u64) -> Vec<u8> {
    encode_wal_header_with_flags(index_id, wal_id, 0)
}

/// Header flag: frames of this WAL are acknowledged before they are synced
/// (`Durability::Buffered`), so after a power loss any of them may be lost,
/// not only the last (docs/FORMAT.md, "WAL torn tail").
pub const WAL_UNSYNCED_APPENDS: u32 = 1;

/// A WAL header with `flags` (0 or [`WAL_UNSYNCED_APPENDS`]).
pub fn encode_wal_header_with_flags(index_id: u64, wal_id: u64, flags: u32) -> Vec<u8> {
    let mut out = Vec::with_capacity(WAL_HEADER_LEN);
    out.extend_from_slice(&FILE.magic());
    out.extend_from_slice(&super::FORMAT_VERSION.to_le_bytes());
    out.extend_from_slice(&flags.to_le_bytes());
    out.extend_from_slice(&wal_id.to_le_bytes());
    out.extend_from_slice(&index_id.to_le_bytes());
    let crc = crc32(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

/// One frame holding `records` (a batch: replayed all or not at all).
pub fn encode_frame(records: &[Record]) -> Result<Vec<u8>, EncodeError> {
    let mut out = Vec::new();
    encode_frame_into(&mut out, records)?;
    Ok(out)
}

/// Appends one frame holding `records` to `out` (left unchanged on error).
pub fn encode_frame_into(out: &mut Vec<u8>, records: &[Record]) -> Result<(), EncodeError> {
    let count =
        u32::try_from(records.len())
            .ok()
            .filter(|&n| n > 0)
            .ok_or(EncodeError::Invalid(
                "a WAL frame holds between 1 and 2^32 - 1 records",
            ))?;
    let start = out.len();
    // Room for the header and unnamed, unsketched inserts (33 bytes each),
    // so that a large frame is not copied as it grows.
    out.reserve(FRAME_HEADER_LEN + 4 + records.len() * 33);
    out.extend_from_slice(&[0; FRAME_HEADER_LEN]);
    out.extend_from_slice(&count.to_le_bytes());
    for record in records {
        match record {
            Record::Insert {
                seq,
                id,
                fingerprint,
                timestamp,
                name,
                sketch,
            } => {
                out.push(match (name.is_some(), sketch.is_some()) {
                    (false, false) => INSERT,
                    (true, false) => INSERT_NAMED,
                    (false, true) => INSERT_SKETCHED,
                    (true, true) => INSERT_NAMED_SKETCHED,
                });
                for v in [seq, id, fingerprint, timestamp] {
                    out.extend_from_slice(&v.to_le_bytes());
                }
                if let Some(sketch) = sketch {
                    out.extend_from_slice(&sketch.to_bytes());
                }
                if let Some(name) = name {
                    if name.len() > MAX_NAME_LEN {
                        out.truncate(start);
                        return Err(EncodeError::NameTooLong {
                            id: *id,
                            len: name.len(),
                        });
                    }
                    out.extend_from_slice(&(name.len() as u32).to_le_bytes());
                    out.extend_from_slice(name.as_bytes());
                }
            }
            Record::Delete { seq, id, timestamp } => {
                out.push(DELETE);
                for v in [seq, id, timestamp] {
                    out.extend_from_slice(&v.to_le_bytes());
                }
            }
        }
    }
    let payload_len = out.len() - start - FRAME_HEADER_LEN;
    if payload_len > MAX_FRAME_PAYLOAD {
        out.truncate(start);
        return Err(EncodeError::Invalid(
            "a WAL frame's payload must not exceed 256 MiB; split the batch",
        ));
    }
    let payload_crc = crc32(out.get(start + FRAME_HEADER_LEN..).unwrap_or_default());
    let mut header = [0u8; FRAME_HEADER_LEN];
    let (fields, header_crc) = header.split_at_mut(8);
    fields
        .iter_mut()
        .zip(
            (payload_len as u32)
                .to_le_bytes()
                .iter()
                .chain(&payload_crc.to_le_bytes()),
        )
        .for_each(|(dst, src)| *dst = *src);
    let fields_crc = crc32(fields);
    header_crc.copy_from_slice(&fields_crc.to_le_bytes());
    out.iter_mut()
        .skip(start)
        .zip(header)
        .for_each(|(dst, src)| *dst = src);
    Ok(())
}

/// Decodes a payload whose CRC matched, of a WAL of format `version`.
fn decode_payload(payload: &[u8], base: u64, version: u32) -> Result<Vec<Record>, FormatError> {
    let mut c = Cursor::new(payload, base, FILE);
    let count = c.u32()?;
    if count == 0 {
        return Err(c.malformed("a WAL frame holds no record"));
    }
    // Each record takes at least 25 bytes: never trust the count for memory.
    let mut records = Vec::with_capacity((count as usize).min(c.remaining() / 25));
    for _ in 0..count {
        let kind = c.u8()?;
        let record = match kind {
            INSERT_SKETCHED | INSERT_NAMED_SKETCHED if version < 4 => {
                return Err(c.malformed("a WAL record with a sketch in a WAL of format version 3"));
            }
            INSERT | INSERT_NAMED | INSERT_SKETCHED | INSERT_NAMED_SKETCHED => {
                let (seq, id, fingerprint, timestamp) = (c.u64()?, c.u64()?, c.u64()?, c.u64()?);
                let sketch = if matches!(kind, INSERT_SKETCHED | INSERT_NAMED_SKETCHED) {
                    let bytes = c.take(Sketch::BYTES)?;
                    let mut array = [0u8; Sketch::BYTES];
                    array.copy_from_slice(bytes);
                    Some(Sketch::from_bytes(array))
                } else {
                    None
                };
                let name = if matches!(kind, INSERT_NAMED | INSERT_NAMED_SKETCHED) {
                    let len = c.u32()? as usize;
                    if len > MAX_NAME_LEN {
                        return Err(c.malformed("a document name is longer than 64 KiB"));
                    }
                    let at = c.offset();
                    let bytes = c.take(len)?;
                    let name = std::str::from_utf8(bytes).map_err(|_| {
                        FormatError::malformed(FILE, at, "a document name is not UTF-8")
                    })?;
                    Some(name.to_owned())
                } else {
                    None
                };
                Record::Insert {
                    seq,
                    id,
                    fingerprint,
                    timestamp,
                    name,
                    sketch,
                }
            }
            DELETE => Record::Delete {
                seq: c.u64()?,
                id: c.u64()?,
                timestamp: c.u64()?,
            },
            _ => return Err(c.malformed("unknown WAL record type")),
        };
        records.push(record);
    }
    if c.remaining() != 0 {
        return Err(c.malformed("a WAL frame has bytes after its last record"));
    }
    Ok(records)
}

/// A frame read back: the batch's records and where the frame lies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WalFrame {
    /// Offset of the frame in the file.
    pub offset: u64,
    /// Offset just past the frame (where the next one starts).
    pub end: u64,
    /// The batch's records, in the order they were written.
    pub records: Vec<Record>,
}

/// How a WAL ends after its last valid frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WalEnd {
    /// The last frame ends exactly at the end of the file.
    Clean,
    /// From `offset` on, the file holds an incomplete or invalid frame and
    /// nothing valid after it: what a crash while appending leaves. The
    /// writes there were never acknowledged; truncate the file at `offset`.
    TornTail {
        /// Where the torn frame starts (the length to truncate to).
        offset: u64,
    },
    /// The frame at `error.offset` has matching checksums, but its payload
    /// does not parse (`error.kind` says why). An interrupted append cannot leave that (the payload
    /// CRC says its bytes are the ones written), so it is damage wherever it
    /// lies, the last frame included: a file written by a faulty writer or
    /// crafted. Nothing after it is read. Report it; never drop it silently.
    Unparsable {
        /// What is wrong with the payload.
        error: FormatError,
    },
    /// The frame at `error.offset` is invalid, but a valid frame follows
    /// it: acknowledged data was damaged. Report it; never drop it silently.
    Corrupted {
        /// What is wrong with the first invalid frame.
        error: FormatError,
        /// Where the next valid frame starts.
        next_valid: u64,
    },
}

/// Page size assumed for write-back: the largest unit a power cut can lose on
/// its own in the file systems we know (a smaller unit, like a 512-byte
/// sector, ends on these boundaries too).
pub const WRITE_BACK_PAGE: usize = 4096;

/// Whether the damaged bytes `from..to` of a WAL (a bad frame at `from`, the
/// next valid frame at `to`) look like a page lost to out-of-order write-back
/// rather than damage: some page boundary `q` in `from + 1 ..= to` is preceded
/// by zeros back to `from`, or by at least 64 zero bytes. A file system fills
/// appended blocks that never reached the device with zeros; a flipped bit
/// leaves the surrounding data, which does not end in zeros at a page
/// boundary. Only meaningful for a WAL with [`WAL_UNSYNCED_APPENDS`]
/// (docs/FORMAT.md, "WAL torn tail").
pub fn looks_like_lost_write_back(bytes: &[u8], from: u64, to: u64) -> bool {
    const RUN: usize = 64;
    let (Ok(from), Ok(to)) = (usize::try_from(from), usize::try_from(to)) else {
        return false;
    };
    let to = to.min(bytes.len());
    let first = (from / WRITE_BACK_PAGE + 1) * WRITE_BACK_PAGE;
    (first..=to).step_by(WRITE_BACK_PAGE).any(|q| {
        let start = q.saturating_sub(RUN).max(from);
        start < q
            && bytes
                .get(start..q)
                .is_some_and(|run| run.iter().all(|&b| b == 0))
    })
}

/// Whether the bytes of a WAL from `offset` on hold a whole frame: a frame
/// header whose own CRC matches, followed by all the payload it declares.
/// Said of a torn tail ([`WalEnd::TornTail`]), it means the payload failed
/// its checksum although every byte of it is there.
pub fn holds_whole_frame(bytes: &[u8], offset: u64) -> bool {
    usize::try_from(offset).is_ok_and(|at| {
        frame_header_at(bytes, at).is_some_and(|(len, _)| {
            at.checked_add(FRAME_HEADER_LEN + len)
                .is_some_and(|end| end <= bytes.len())
        })
    })
}

/// Whether the 12 bytes at `at` are a frame header: its own CRC matches and
/// the length is allowed. Returns the payload length and CRC. O(1), so the
/// search for a valid frame after a bad one stays linear.
fn frame_header_at(bytes: &[u8], at: usize) -> Option<(usize, u32)> {
    let header = bytes.get(at..at.checked_add(FRAME_HEADER_LEN)?)?;
    let (fields, stored) = header.split_at_checked(8)?;
    let len = u32_at(fields, 0)? as usize;
    if len == 0 || len > MAX_FRAME_PAYLOAD || crc32(fields) != u32_at(stored, 0)? {
        return None;
    }
    Some((len, u32_at(fields, 4)?))
}

/// The payload of the frame at `at` and the frame's end, if the frame is
/// complete and both its CRCs match.
fn frame_at(bytes: &[u8], at: usize) -> Result<(&[u8], usize), FormatError> {
    let available = bytes.len().saturating_sub(at);
    let truncated = |needed: usize| {
        FormatError::new(
            FILE,
            to_u64(at),
            FormatErrorKind::Truncated {
                needed: to_u64(needed),
                available: to_u64(available),
            },
        )
    };
    if available < FRAME_HEADER_LEN {
        return Err(truncated(FRAME_HEADER_LEN));
    }
    let Some((len, stored)) = frame_header_at(bytes, at) else {
        return Err(FormatError::malformed(
            FILE,
            to_u64(at),
            "a WAL frame header's checksum or length is invalid",
        ));
    };
    let end = at.saturating_add(FRAME_HEADER_LEN + len);
    let Some(payload) = bytes.get(at + FRAME_HEADER_LEN..end) else {
        return Err(truncated(FRAME_HEADER_LEN + len));
    };
    let computed = crc32(payload);
    if computed != stored {
        return Err(FormatError::new(
            FILE,
            to_u64(at),
            FormatErrorKind::ChecksumMismatch {
                expected: stored,
                got: computed,
            },
        ));
    }
    Ok((payload, end))
}

/// Reads a WAL file frame by frame.
///
/// Iterating yields each valid frame in order and stops at the first
/// invalid one (or the end); [`end`](Self::end) then says whether the file
/// ended cleanly, in a torn tail, or is corrupted.
///
/// ```
/// use simhashdb::format::{Record, WalEnd, WalReader, encode_frame, encode_wal_header};
///
/// let mut wal = encode_wal_header(0, 1);
/// let batch = [Record::Delete { seq: 1, id: 9, timestamp: 0 }];
/// wal.extend(encode_frame(&batch)?);
/// wal.extend(&encode_frame(&batch)?[..5]); // a crash mid-append
///
/// let mut reader = WalReader::new(&wal)?;
/// let frames: Vec<_> = reader.by_ref().collect();
/// assert_eq!(frames.len(), 1);
/// assert!(matches!(reader.end(), Some(WalEnd::TornTail { .. })));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct WalReader<'a> {
    bytes: &'a [u8],
    wal_id: u64,
    index_id: u64,
    flags: u32,
    version: u32,
    pos: usize,
    end: Option<WalEnd>,
}

impl<'a> WalReader<'a> {
    /// Checks the header. A WAL shorter than its header is an error: the
    /// engine makes the header durable before any manifest names the file.
    pub fn new(bytes: &'a [u8]) -> Result<Self, FormatError> {
        check_magic_and_version(bytes, FILE)?;
        let header = bytes.get(..WAL_HEADER_LEN).ok_or_else(|| {
            FormatError::new(
                FILE,
                0,
                FormatErrorKind::Truncated {
                    needed: to_u64(WAL_HEADER_LEN),
                    available: to_u64(bytes.len()),
                },
            )
        })?;
        let covered = header.get(..32).unwrap_or_default();
        check_crc(FILE, 0, covered, u32_at(header, 32).unwrap_or_default())?;
        let flags = u32_at(header, 12).unwrap_or_default();
        if flags & !WAL_UNSYNCED_APPENDS != 0 {
            return Err(FormatError::malformed(
                FILE,
                12,
                "the WAL header's flags hold an unknown bit",
            ));
        }
        Ok(WalReader {
            bytes,
            wal_id: u64_at(header, 16).unwrap_or_default(),
            index_id: u64_at(header, 24).unwrap_or_default(),
            flags,
            version: u32_at(header, 8).unwrap_or_default(),
            pos: WAL_HEADER_LEN,
            end: None,
        })
    }

    /// The format version in the header (3 or 4: only version 4 WALs hold
    /// records with sketches, and the engine appends to no other).
    pub fn version(&self) -> u32 {
        self.version
    }

    /// The id recorded in the header.
    pub fn wal_id(&self) -> u64 {
        self.wal_id
    }

    /// The id of the index the header says the WAL belongs to.
    pub fn index_id(&self) -> u64 {
        self.index_id
    }

    /// Whether the header says frames were acknowledged before being synced
    /// ([`WAL_UNSYNCED_APPENDS`]).
    pub fn unsynced_appends(&self) -> bool {
        self.flags & WAL_UNSYNCED_APPENDS != 0
    }

    /// How the file ends; `None` until iteration has finished.
    pub fn end(&self) -> Option<&WalEnd> {
        self.end.as_ref()
    }

    /// Reads every frame: the valid frames and how the file ends.
    pub fn read_all(mut self) -> (Vec<WalFrame>, WalEnd) {
        let frames: Vec<WalFrame> = self.by_ref().collect();
        (frames, self.end.unwrap_or(WalEnd::Clean))
    }

    /// Whether a valid frame starts anywhere after `from`; the first such
    /// offset. This is the test that tells damage from a torn tail.
    fn next_valid_frame(&self, from: usize) -> Option<usize> {
        (from..self.bytes.len()).find(|&at| {
            // The header's own CRC rejects almost every offset in O(1).
            frame_header_at(self.bytes, at).is_some()
                && frame_at(self.bytes, at).is_ok_and(|(payload, _)| {
                    decode_payload(payload, to_u64(at + FRAME_HEADER_LEN), self.version).is_ok()
                })
        })
    }
}

impl Iterator for WalReader<'_> {
    type Item = WalFrame;

    fn next(&mut self) -> Option<WalFrame> {
        if self.end.is_some() {
            return None;
        }
        let at = self.pos;
        if at >= self.bytes.len() {
            self.end = Some(WalEnd::Clean);
            return None;
        }
        let frame = match frame_at(self.bytes, at) {
            Ok((payload, end)) => {
                match decode_payload(payload, to_u64(at + FRAME_HEADER_LEN), self.version) {
                    Ok(records) => Ok((records, end)),
                    Err(mut error) => {
                        // Both checksums matched: damage, not a torn append. The
                        // frame is the bad structure (the parse may have failed
                        // at its very end).
                        error.offset = to_u64(at);
                        self.end = Some(WalEnd::Unparsable { error });
                        return None;
                    }
                }
            }
            Err(error) => Err(error),
        };
        match frame {
            Ok((records, end)) => {
                self.pos = end;
                Some(WalFrame {
                    offset: to_u64(at),
                    end: to_u64(end),
                    records,
                })
            }
            Err(error) => {
                // A frame whose header checksum holds has a trustworthy
                // length: look for later frames only past its declared end,
                // never inside its payload (a document name may hold the
                // bytes of a valid frame). If that end lies past the end of
                // the file, the frame is an interrupted append.
                let search_from = match frame_header_at(self.bytes, at) {
                    Some((len, _)) => at.saturating_add(FRAME_HEADER_LEN + len),
                    None => at + 1,
                };
                self.end = Some(match self.next_valid_frame(search_from) {
                    None => WalEnd::TornTail { offset: to_u64(at) },
                    Some(next) => WalEnd::Corrupted {
                        error,
                        next_valid: to_u64(next),
                    },
                });
                None
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing, clippy::panic)]
mod tests {
    use super::*;

    fn batches() -> Vec<Vec<Record>> {
        vec![
            vec![Record::Insert {
                seq: 1,
                id: 10,
                fingerprint: 0xdead_beef,
                timestamp: 1_700_000_000_000,
                name: None,
                sketch: None,
            }],
            vec![
                Record::Insert {
                    seq: 2,
                    id: 11,
                    fingerprint: u64::MAX,
                    timestamp: 5,
                    name: Some("https://example.com/ü".to_owned()),
                    sketch: Some(Sketch::from_bytes([0xa5; Sketch::BYTES])),
                },
                Record::Delete {
                    seq: 3,
                    id: 10,
                    timestamp: 6,
                },
                Record::Insert {
                    seq: 4,
                    id: 12,
                    fingerprint: 0,
                    timestamp: 7,
                    name: Some(String::new()),
                    sketch: None,
                },
            ],
            vec![Record::Delete {
                seq: 5,
                id: 11,
                timestamp: 8,
            }],
            vec![Record::Insert {
                seq: 6,
                id: 13,
                fingerprint: 1,
                timestamp: 9,
                name: None,
                sketch: Some(Sketch::from_bytes(std::array::from_fn(|i| i as u8))),
            }],
        ]
    }

    fn wal(batches: &[Vec<Record>]) -> (Vec<u8>, Vec<usize>) {
        let mut bytes = encode_wal_header(0, 3);
        let mut ends = vec![bytes.len()];
        for b in batches {
            encode_frame_into(&mut bytes, b).unwrap();
            ends.push(bytes.len());
        }
        (bytes, ends)
    }

    #[test]
    fn round_trip() {
        let batches = batches();
        let (bytes, _) = wal(&batches);
        let reader = WalReader::new(&bytes).unwrap();
        assert_eq!(reader.wal_id(), 3);
        let (frames, end) = reader.read_all();
        assert_eq!(end, WalEnd::Clean);
        let got: Vec<Vec<Record>> = frames.into_iter().map(|f| f.records).collect();
        assert_eq!(got, batches);
    }

    #[test]
    fn every_truncation_is_a_torn_tail_or_clean() {
        let batches = batches();
        let (bytes, ends) = wal(&batches);
        for len in WAL_HEADER_LEN..=bytes.len() {
            let (frames, end) = WalReader::new(&bytes[..len]).unwrap().read_all();
            let complete = ends.iter().filter(|&&e| e <= len).count() - 1;
            assert_eq!(frames.len(), complete, "len {len}");
            let last_end = ends[complete];
            if len == last_end {
                assert_eq!(end, WalEnd::Clean, "len {len}");
            } else {
                assert_eq!(
                    end,
                    WalEnd::TornTail {
                        offset: last_end as u64
                    },
                    "len {len}"
                );
            }
            // The same with zeros after the cut (a file extended by the FS).
            // A frame whose missing bytes were zeros anyway is whole again.
            let mut zeroed = bytes[..len].to_vec();
            zeroed.extend_from_slice(&[0; 300]);
            let (frames, end) = WalReader::new(&zeroed).unwrap().read_all();
            let got = frames.len();
            assert!(got >= complete && got <= complete + 1, "len {len} + zeros");
            let records: Vec<Vec<Record>> = frames.into_iter().map(|f| f.records).collect();
            assert_eq!(records, batches[..got], "len {len} + zeros");
            assert_eq!(
                end,
                WalEnd::TornTail {
                    offset: ends[got] as u64
                }
            );
        }
        for len in 0..WAL_HEADER_LEN {
            assert!(WalReader::new(&bytes[..len]).is_err());
        }
    }

    #[test]
    fn damage_in_the_middle_is_corruption() {
        let batches = batches();
        let (bytes, ends) = wal(&batches);
        // Every bit of the first two frames: later frames are intact.
        for bit in ends[0] * 8..ends[2] * 8 {
            let mut bad = bytes.clone();
            bad[bit / 8] ^= 1 << (bit % 8);
            let (frames, end) = WalReader::new(&bad).unwrap().read_all();
            let frame = if bit / 8 < ends[1] { 0 } else { 1 };
            assert_eq!(frames.len(), frame, "bit {bit}");
            match end {
                WalEnd::Corrupted { error, next_valid } => {
                    assert_eq!(error.offset, ends[frame] as u64, "bit {bit}");
                    assert!(next_valid as usize >= ends[frame + 1], "bit {bit}");
                }
                other => panic!("bit {bit}: {other:?}"),
            }
        }
    }

    #[test]
    fn a_large_garbage_tail_is_scanned_in_linear_time() {
        let (mut bytes, ends) = wal(&batches());
        bytes.truncate(ends[2] - 3);
        let mut s = 0x2545_f491_4f6c_dd1du64;
        bytes.extend((0..4 << 20).map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s as u8
        }));
        bytes.extend_from_slice(&[0; 1 << 20]);
        let start = std::time::Instant::now();
        let (frames, end) = WalReader::new(&bytes).unwrap().read_all();
        assert_eq!(frames.len(), 1);
        assert_eq!(
            end,
            WalEnd::TornTail {
                offset: ends[1] as u64
            }
        );
        assert!(start.elapsed().as_secs() < 10, "{:?}", start.elapsed());
    }

    #[test]
    fn limits() {
        assert!(encode_frame(&[]).is_err());
        let long = Record::Insert {
            seq: 1,
            id: 1,
            fingerprint: 1,
            timestamp: 1,
            name: Some("x".repeat(MAX_NAME_LEN + 1)),
            sketch: None,
        };
        let mut out = vec![1, 2, 3];
        assert!(encode_frame_into(&mut out, &[long]).is_err());
        assert_eq!(out, [1, 2, 3]);
    }

    /// Records with a sketch exist from version 4 on: in a version 3 WAL
    /// they are damage, and the same records without sketches are read.
    #[test]
    fn a_version_3_wal_reads_plain_records_and_refuses_sketched_ones() {
        let v3_header = || {
            let mut header = encode_wal_header(0, 3);
            header[8..12].copy_from_slice(&3u32.to_le_bytes());
            let crc = crc32(&header[..32]);
            header[32..36].copy_from_slice(&crc.to_le_bytes());
            header
        };
        let all = batches();
        let plain: Vec<Vec<Record>> = all
            .iter()
            .map(|batch| {
                batch
                    .iter()
                    .cloned()
                    .map(|mut r| {
                        if let Record::Insert { sketch, .. } = &mut r {
                            *sketch = None;
                        }
                        r
                    })
                    .collect()
            })
            .collect();
        let mut bytes = v3_header();
        for batch in &plain {
            bytes.extend(encode_frame(batch).unwrap());
        }
        let reader = WalReader::new(&bytes).unwrap();
        assert_eq!(reader.version(), 3);
        let (frames, end) = reader.read_all();
        assert_eq!(end, WalEnd::Clean);
        let read: Vec<Vec<Record>> = frames.into_iter().map(|f| f.records).collect();
        assert_eq!(read, plain);

        let mut bytes = v3_header();
        bytes.extend(encode_frame(&all[1]).unwrap());
        let (frames, end) = WalReader::new(&bytes).unwrap().read_all();
        assert!(frames.is_empty());
        let WalEnd::Unparsable { error } = end else {
            panic!("{end:?}")
        };
        assert_eq!(error.offset, to_u64(WAL_HEADER_LEN));
        assert!(error.to_string().contains("sketch"), "{error}");
    }

    #[test]
    fn header_flags_round_trip_and_unknown_bits_are_refused() {
        let plain = encode_wal_header(0, 5);
        assert!(!WalReader::new(&plain).unwrap().unsynced_appends());
        let buffered = encode_wal_header_with_flags(0, 5, WAL_UNSYNCED_APPENDS);
        let reader = WalReader::new(&buffered).unwrap();
        assert!(reader.unsynced_appends());
        assert_eq!(reader.wal_id(), 5);
        let unknown = encode_wal_header_with_flags(0, 5, 2);
        assert!(WalReader::new(&unknown).is_err());
    }

    #[test]
    fn only_zeros_up_to_a_page_boundary_look_like_lost_write_back() {
        let page = WRITE_BACK_PAGE;
        let data: Vec<u8> = (0..3 * page).map(|i| (i % 251) as u8 | 1).collect();
        // A whole lost page between the bad frame and the next valid one.
        let mut lost = data.clone();
        lost[page..2 * page].fill(0);
        assert!(looks_like_lost_write_back(
            &lost,
            100,
            (2 * page + 50) as u64
        ));
        // A lost tail of a page starting at the bad frame (a synced prefix
        // ended mid-page), however short.
        let mut tail = data.clone();
        tail[page - 10..page].fill(0);
        assert!(looks_like_lost_write_back(
            &tail,
            (page - 10) as u64,
            (page + 40) as u64
        ));
        // No page boundary inside the damage, or data before every boundary.
        assert!(!looks_like_lost_write_back(&lost, 100, 200));
        assert!(!looks_like_lost_write_back(
            &data,
            100,
            (2 * page + 50) as u64
        ));
        // A flipped bit is not zeros.
        let mut flipped = data.clone();
        flipped[page - 1] ^= 0x40;
        assert!(!looks_like_lost_write_back(
            &flipped,
            100,
            (page + 50) as u64
        ));
        // Fewer than 64 zeros before the boundary, and data before them.
        let mut short = data;
        short[page - 20..page].fill(0);
        assert!(!looks_like_lost_write_back(&short, 100, (page + 50) as u64));
    }
}
