//! The manifest: the index's settings and the list of live files, in one
//! small checksummed file that the engine replaces atomically.
//!
//! See docs/FORMAT.md#manifest-file and docs/FORMAT.md#manifest-replace.

use super::bytes::{Cursor, check_magic_and_version, crc32, to_u64, u32_at, u64_at};
use super::segment::{decode_shape, encode_shape};
use super::{EncodeError, FileKind, FormatError, FormatErrorKind};
use crate::plan::Shape;

const FILE: FileKind = FileKind::Manifest;
/// Fixed fields before the variable parts.
const FIXED_LEN: usize = 88;
const SEGMENT_LEN: usize = 96;
/// Longest fingerprint configuration line accepted.
pub const MAX_CONFIG_LEN: usize = 4096;

/// A live segment as the manifest records it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct SegmentMeta {
    /// Segment id (names `<id>.seg` and `<id>.ids`).
    pub id: u64,
    /// Compaction level or generation (0 for a flushed memtable).
    pub level: u32,
    /// Keys per table (distinct fingerprints).
    pub key_count: u64,
    /// Documents in the doc map.
    pub doc_count: u64,
    /// Tombstones in the doc map.
    pub tombstone_count: u64,
    /// Smallest sequence number of an entry or tombstone.
    pub min_seq: u64,
    /// Largest sequence number of an entry or tombstone.
    pub max_seq: u64,
    /// Oldest timestamp (ms since the Unix epoch).
    pub min_timestamp: u64,
    /// Newest timestamp (ms since the Unix epoch).
    pub max_timestamp: u64,
    /// Length of the `.seg` file in bytes.
    pub seg_file_len: u64,
    /// Length of the `.ids` file in bytes.
    pub ids_file_len: u64,
    /// Footer CRC32 of the `.seg` file ([`SegmentReader::footer_crc`](super::SegmentReader::footer_crc)).
    pub seg_footer_crc: u32,
    /// Footer CRC32 of the `.ids` file ([`DocMapReader::footer_crc`](super::DocMapReader::footer_crc)).
    pub ids_footer_crc: u32,
}

/// The contents of the `MANIFEST` file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Manifest {
    /// The index's id, drawn at random when it was created and written into
    /// every file of the index: a file copied in from another index is
    /// refused.
    pub index_id: u64,
    /// The plan's block structure.
    pub shape: Shape,
    /// The plan's distance.
    pub k: u32,
    /// The fingerprint configuration line
    /// ([`FingerprintConfig`](crate::FingerprintConfig)'s `Display` form), at
    /// most [`MAX_CONFIG_LEN`] bytes, one line.
    pub fingerprint_config: String,
    /// Retention window in milliseconds; 0 keeps everything.
    pub retention_ms: u64,
    /// Incremented by each manifest the engine writes.
    pub generation: u64,
    /// The id the next new segment gets.
    pub next_segment_id: u64,
    /// The id the next new WAL gets.
    pub next_wal_id: u64,
    /// The sequence number the next write gets.
    pub next_seq: u64,
    /// The WAL files to replay, oldest first.
    pub wal_ids: Vec<u64>,
    /// The live segments.
    pub segments: Vec<SegmentMeta>,
}

impl Manifest {
    /// Encodes the manifest, checksum last.
    pub fn encode(&self) -> Result<Vec<u8>, EncodeError> {
        let config = self.fingerprint_config.as_bytes();
        if config.len() > MAX_CONFIG_LEN || self.fingerprint_config.contains(['\n', '\r']) {
            return Err(EncodeError::Invalid(
                "the fingerprint configuration must be one line of at most 4096 bytes",
            ));
        }
        // The decoder refuses an id listed twice: never write such a file.
        if !unique(self.wal_ids.clone()) || !unique(self.segments.iter().map(|s| s.id).collect()) {
            return Err(EncodeError::Invalid(
                "a WAL id or segment id is listed twice in the manifest",
            ));
        }
        let too_many = || EncodeError::Invalid("too many WAL ids or segments for one manifest");
        let wal_count = u32::try_from(self.wal_ids.len()).map_err(|_| too_many())?;
        let segment_count = u32::try_from(self.segments.len()).map_err(|_| too_many())?;
        let len = FIXED_LEN
            + config.len()
            + 8 * self.wal_ids.len()
            + SEGMENT_LEN * self.segments.len()
            + 4;
        let mut out = Vec::with_capacity(len);
        out.extend_from_slice(&FILE.magic());
        out.extend_from_slice(&super::FORMAT_VERSION.to_le_bytes());
        out.extend_from_slice(&encode_shape(self.shape, self.k)?);
        for v in [
            to_u64(len),
            self.generation,
            self.retention_ms,
            self.next_segment_id,
            self.next_wal_id,
            self.next_seq,
        ] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        for v in [config.len() as u32, wal_count, segment_count, 0] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        out.extend_from_slice(&self.index_id.to_le_bytes());
        out.extend_from_slice(config);
        for id in &self.wal_ids {
            out.extend_from_slice(&id.to_le_bytes());
        }
        for s in &self.segments {
            out.extend_from_slice(&s.id.to_le_bytes());
            out.extend_from_slice(&s.level.to_le_bytes());
            out.extend_from_slice(&0u32.to_le_bytes());
            for v in [
                s.key_count,
                s.doc_count,
                s.tombstone_count,
                s.min_seq,
                s.max_seq,
                s.min_timestamp,
                s.max_timestamp,
                s.seg_file_len,
                s.ids_file_len,
            ] {
                out.extend_from_slice(&v.to_le_bytes());
            }
            out.extend_from_slice(&s.seg_footer_crc.to_le_bytes());
            out.extend_from_slice(&s.ids_footer_crc.to_le_bytes());
        }
        let crc = crc32(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        Ok(out)
    }

    /// Decodes and checks a manifest: magic, version, length, checksum, then
    /// every field.
    pub fn decode(bytes: &[u8]) -> Result<Manifest, FormatError> {
        check_magic_and_version(bytes, FILE)?;
        let len = bytes.len();
        let recorded_len = u64_at(bytes, 16);
        let truncated = |needed: u64| {
            FormatError::new(
                FILE,
                0,
                FormatErrorKind::Truncated {
                    needed,
                    available: to_u64(len),
                },
            )
        };
        if len < FIXED_LEN + 4 {
            return Err(truncated(recorded_len.unwrap_or(to_u64(FIXED_LEN + 4))));
        }
        let (covered, stored) = bytes.split_at_checked(len - 4).unwrap_or_default();
        let stored = u32_at(stored, 0).unwrap_or_default();
        let computed = crc32(covered);
        if computed != stored {
            // A recorded length beyond the end explains the mismatch better.
            if let Some(recorded) = recorded_len.filter(|&r| r > to_u64(len)) {
                return Err(truncated(recorded));
            }
            return Err(FormatError::new(
                FILE,
                0,
                FormatErrorKind::ChecksumMismatch {
                    expected: stored,
                    got: computed,
                },
            ));
        }
        let mut c = Cursor::new(covered, 0, FILE);
        c.take(12)?; // magic and version, checked above
        let shape_at = c.offset();
        let shape_bytes = c.take(4)?.first_chunk::<4>().copied().unwrap_or_default();
        let version = u32_at(bytes, 8).unwrap_or_default();
        let (shape, k) = decode_shape(shape_bytes, version)
            .map_err(|what| FormatError::malformed(FILE, shape_at, what))?;
        if c.u64()? != to_u64(len) {
            return Err(FormatError::malformed(
                FILE,
                16,
                "the recorded length differs from the file's",
            ));
        }
        let generation = c.u64()?;
        let retention_ms = c.u64()?;
        let next_segment_id = c.u64()?;
        let next_wal_id = c.u64()?;
        let next_seq = c.u64()?;
        let config_len = c.u32()? as usize;
        let wal_count = c.u32()? as usize;
        let segment_count = c.u32()? as usize;
        if c.u32()? != 0 {
            return Err(FormatError::malformed(
                FILE,
                76,
                "the manifest's reserved field is not zero",
            ));
        }
        let index_id = c.u64()?;
        let expected = config_len
            .checked_add(wal_count.saturating_mul(8))
            .and_then(|n| n.checked_add(segment_count.checked_mul(SEGMENT_LEN)?));
        if config_len > MAX_CONFIG_LEN || expected != Some(c.remaining()) {
            return Err(FormatError::malformed(
                FILE,
                64,
                "the manifest's counts do not match its length",
            ));
        }
        let config_at = c.offset();
        let config = std::str::from_utf8(c.take(config_len)?)
            .ok()
            .filter(|s| !s.contains(['\n', '\r']))
            .ok_or_else(|| {
                FormatError::malformed(
                    FILE,
                    config_at,
                    "the fingerprint configuration is not one line of UTF-8",
                )
            })?
            .to_owned();
        let mut wal_ids = Vec::with_capacity(wal_count);
        for _ in 0..wal_count {
            wal_ids.push(c.u64()?);
        }
        let mut segments = Vec::with_capacity(segment_count);
        for _ in 0..segment_count {
            let at = c.offset();
            let id = c.u64()?;
            let level = c.u32()?;
            if c.u32()? != 0 {
                return Err(FormatError::malformed(
                    FILE,
                    at + 12,
                    "a segment record's reserved field is not zero",
                ));
            }
            let mut v = [0u64; 9];
            for slot in &mut v {
                *slot = c.u64()?;
            }
            let [
                key_count,
                doc_count,
                tombstone_count,
                min_seq,
                max_seq,
                min_timestamp,
                max_timestamp,
                seg_file_len,
                ids_file_len,
            ] = v;
            segments.push(SegmentMeta {
                id,
                level,
                key_count,
                doc_count,
                tombstone_count,
                min_seq,
                max_seq,
                min_timestamp,
                max_timestamp,
                seg_file_len,
                ids_file_len,
                seg_footer_crc: c.u32()?,
                ids_footer_crc: c.u32()?,
            });
        }
        if !unique(wal_ids.clone()) {
            return Err(FormatError::malformed(
                FILE,
                config_at + to_u64(config_len),
                "a WAL id is listed twice",
            ));
        }
        if !unique(segments.iter().map(|s| s.id).collect()) {
            return Err(FormatError::malformed(
                FILE,
                config_at + to_u64(config_len + 8 * wal_count),
                "a segment id is listed twice",
            ));
        }
        Ok(Manifest {
            index_id,
            shape,
            k,
            fingerprint_config: config,
            retention_ms,
            generation,
            next_segment_id,
            next_wal_id,
            next_seq,
            wal_ids,
            segments,
        })
    }
}

/// Whether no id occurs twice.
fn unique(mut ids: Vec<u64>) -> bool {
    ids.sort_unstable();
    ids.windows(2).all(|w| w.first() != w.get(1))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing, clippy::panic)]
mod tests {
    use super::*;

    fn sample() -> Manifest {
        Manifest {
            index_id: 0x5eed_0001,
            shape: Shape::Flat { blocks: 6 },
            k: 3,
            fingerprint_config: "v1 tokenizer=words shingle=1 weighting=tf hash=fnv1a64-fmix64"
                .to_owned(),
            retention_ms: 48 * 3600 * 1000,
            generation: 12,
            next_segment_id: 9,
            next_wal_id: 4,
            next_seq: 1_000_001,
            wal_ids: vec![2, 3],
            segments: vec![
                SegmentMeta {
                    id: 5,
                    level: 1,
                    key_count: 100,
                    doc_count: 120,
                    tombstone_count: 3,
                    min_seq: 1,
                    max_seq: 500,
                    min_timestamp: 10,
                    max_timestamp: 20,
                    seg_file_len: 4096,
                    ids_file_len: 8192,
                    seg_footer_crc: 0xdead_beef,
                    ids_footer_crc: 0x1234_5678,
                },
                SegmentMeta {
                    id: 8,
                    ..SegmentMeta::default()
                },
            ],
        }
    }

    #[test]
    fn ids_listed_twice_are_refused_by_the_encoder_too() {
        let mut m = sample();
        m.wal_ids = vec![3, 3];
        assert!(matches!(m.encode(), Err(EncodeError::Invalid(_))));
        let mut m = sample();
        m.segments[1].id = m.segments[0].id;
        assert!(matches!(m.encode(), Err(EncodeError::Invalid(_))));
        // What the encoder writes, the decoder reads.
        let m = sample();
        assert_eq!(Manifest::decode(&m.encode().unwrap()).unwrap(), m);
    }

    #[test]
    fn round_trip() {
        let m = sample();
        let bytes = m.encode().unwrap();
        assert_eq!(Manifest::decode(&bytes).unwrap(), m);
        let empty = Manifest {
            index_id: 0x5eed_0001,
            wal_ids: vec![],
            segments: vec![],
            fingerprint_config: String::new(),
            ..sample()
        };
        assert_eq!(Manifest::decode(&empty.encode().unwrap()).unwrap(), empty);
    }

    #[test]
    fn every_bit_flip_is_an_error() {
        let bytes = sample().encode().unwrap();
        for bit in 0..bytes.len() * 8 {
            let mut bad = bytes.clone();
            bad[bit / 8] ^= 1 << (bit % 8);
            let e = Manifest::decode(&bad).unwrap_err();
            assert!(e.offset < bad.len() as u64, "bit {bit}: {e}");
        }
    }

    #[test]
    fn truncation_is_reported_as_such() {
        let bytes = sample().encode().unwrap();
        for len in 12..bytes.len() {
            let e = Manifest::decode(&bytes[..len]).unwrap_err();
            assert!(
                matches!(e.kind, FormatErrorKind::Truncated { .. }),
                "{len}: {e}"
            );
        }
    }

    #[test]
    fn bad_values_are_refused() {
        let m = Manifest {
            index_id: 0x5eed_0001,
            fingerprint_config: "two\nlines".to_owned(),
            ..sample()
        };
        assert!(m.encode().is_err());
        // The encoder refuses an id listed twice; the decoder must too, so
        // write one by hand: WAL ids 1, 2 turned into 1, 1, checksum fixed.
        let m = Manifest {
            index_id: 0x5eed_0001,
            wal_ids: vec![1, 2],
            ..sample()
        };
        let mut bytes = m.encode().unwrap();
        let second = FIXED_LEN + m.fingerprint_config.len() + 8;
        bytes[second..second + 8].copy_from_slice(&1u64.to_le_bytes());
        let end = bytes.len() - 4;
        let crc = crc32(&bytes[..end]);
        bytes[end..].copy_from_slice(&crc.to_le_bytes());
        let e = Manifest::decode(&bytes).unwrap_err();
        assert!(e.to_string().contains("listed twice"), "{e}");
    }
}
