//! Segment files: one [table](super::table) per permuted table of the plan,
//! all holding the same keys (the segment's distinct fingerprints, permuted).
//!
//! See docs/FORMAT.md#segment-file.

use std::io::Write;

use super::bytes::{to_u64, u32_at, u64_at};
use super::container::{Container, ContainerWriter};
use super::table::{
    DEFAULT_BLOCK_LEN, FlatKeys, FlatTable, FlatTableWriter, Range, TableReader, TableWriter,
    is_flat,
};
use super::{EncodeError, FileKind, FormatError};
use crate::plan::Shape;

const FILE: FileKind = FileKind::Segment;
/// Magic, version, table count, segment id, key count, shape (4 bytes),
/// index id, CRC.
const HEADER_LEN: usize = 48;

/// What a segment's header records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentInfo {
    /// The id of the index the segment belongs to (written at its creation;
    /// a file copied in from another index is refused).
    pub index_id: u64,
    /// The segment's id (also its file name).
    pub segment_id: u64,
    /// The plan's block structure (each count at most 255).
    pub shape: Shape,
    /// The plan's distance (at most 255).
    pub k: u32,
    /// Number of tables, one per permuted table of the plan, in plan order.
    pub table_count: u32,
    /// Keys in every table: the number of distinct fingerprints.
    pub key_count: u64,
}

/// Shape and k as 4 bytes: kind (0 flat, 1 nested, 2 probed), blocks or
/// outer, inner or radius (0 when flat), k. See docs/FORMAT.md#plan-shape.
pub(crate) fn encode_shape(shape: Shape, k: u32) -> Result<[u8; 4], EncodeError> {
    let byte = |v: u32| {
        u8::try_from(v).map_err(|_| EncodeError::Invalid("plan block counts and k must be < 256"))
    };
    Ok(match shape {
        Shape::Flat { blocks } => [0, byte(blocks)?, 0, byte(k)?],
        Shape::Nested { outer, inner } => [1, byte(outer)?, byte(inner)?, byte(k)?],
        Shape::Probed { blocks, radius } => [2, byte(blocks)?, byte(radius)?, byte(k)?],
    })
}

/// Decodes the 4 shape bytes of a file of format `version` (probed shapes
/// exist from version 3 on).
pub(crate) fn decode_shape(bytes: [u8; 4], version: u32) -> Result<(Shape, u32), &'static str> {
    let [kind, a, b, k] = bytes;
    let shape = match (kind, b) {
        (2, _) if version < 3 => {
            return Err("a probed plan shape in a file of format version 2");
        }
        (2, 0) => return Err("a probed plan shape has radius 0"),
        (2, _) => Shape::Probed {
            blocks: u32::from(a),
            radius: u32::from(b),
        },
        (0, 0) => Shape::Flat {
            blocks: u32::from(a),
        },
        (1, _) => Shape::Nested {
            outer: u32::from(a),
            inner: u32::from(b),
        },
        (0, _) => return Err("a flat plan shape has a non-zero inner block count"),
        _ => return Err("unknown plan shape kind"),
    };
    Ok((shape, u32::from(k)))
}

/// Writes a segment: header, then each table in plan order, then the
/// directory and footer.
///
/// After any error the output is incomplete; discard it.
#[derive(Debug)]
pub struct SegmentWriter<W: Write = Vec<u8>> {
    container: ContainerWriter<W>,
    info: SegmentInfo,
    block_len: u32,
}

impl SegmentWriter<Vec<u8>> {
    /// A writer into a new `Vec<u8>`, with [`DEFAULT_BLOCK_LEN`] keys per block.
    pub fn new(info: SegmentInfo) -> Result<Self, EncodeError> {
        SegmentWriter::with_writer(Vec::new(), info, DEFAULT_BLOCK_LEN)
    }
}

impl<W: Write> SegmentWriter<W> {
    /// A writer that streams the segment into `out` (memory: one block of
    /// keys and one table's block index).
    pub fn with_writer(out: W, info: SegmentInfo, block_len: u32) -> Result<Self, EncodeError> {
        if block_len == 0 || block_len > super::MAX_BLOCK_LEN {
            return Err(EncodeError::Invalid(
                "the block length must be between 1 and 4096 keys",
            ));
        }
        let mut header = Vec::with_capacity(HEADER_LEN);
        header.extend_from_slice(&FILE.magic());
        header.extend_from_slice(&super::FORMAT_VERSION.to_le_bytes());
        header.extend_from_slice(&info.table_count.to_le_bytes());
        header.extend_from_slice(&info.segment_id.to_le_bytes());
        header.extend_from_slice(&info.key_count.to_le_bytes());
        header.extend_from_slice(&encode_shape(info.shape, info.k)?);
        header.extend_from_slice(&info.index_id.to_le_bytes());
        Ok(SegmentWriter {
            container: ContainerWriter::new(out, FILE, &header)?,
            info,
            block_len,
        })
    }

    fn check_room(&self) -> Result<(), EncodeError> {
        let pushed = self.container.section_count() as u32;
        if pushed >= self.info.table_count {
            return Err(EncodeError::TableCountMismatch {
                expected: self.info.table_count,
                got: pushed + 1,
            });
        }
        Ok(())
    }

    /// Encodes the next table from its keys, strictly increasing; there
    /// must be exactly [`SegmentInfo::key_count`] of them.
    pub fn push_table<I: IntoIterator<Item = u64>>(&mut self, keys: I) -> Result<(), EncodeError> {
        self.check_room()?;
        let mut table = TableWriter::with_writer(self.container.sink(), self.block_len)?;
        for key in keys {
            table.push(key)?;
        }
        let key_count = table.len();
        table.finish()?;
        if key_count != self.info.key_count {
            return Err(EncodeError::KeyCountMismatch {
                expected: self.info.key_count,
                got: key_count,
            });
        }
        self.container.end_section();
        Ok(())
    }

    /// Encodes the next table flat ([`FlatTable`], docs/FORMAT.md#flat-table-section)
    /// from its keys, strictly increasing, with a directory of `bits` bits
    /// (1 to 28); there must be exactly [`SegmentInfo::key_count`] of them.
    pub fn push_flat_table<I: IntoIterator<Item = u64>>(
        &mut self,
        keys: I,
        bits: u32,
    ) -> Result<(), EncodeError> {
        self.check_room()?;
        let mut table = FlatTableWriter::with_writer(self.container.sink(), bits)?;
        for key in keys {
            table.push(key)?;
        }
        let key_count = table.len();
        table.finish()?;
        if key_count != self.info.key_count {
            return Err(EncodeError::KeyCountMismatch {
                expected: self.info.key_count,
                got: key_count,
            });
        }
        self.container.end_section();
        Ok(())
    }

    /// Appends a table already encoded by a [`TableWriter`] (checked
    /// cheaply with [`TableReader::new`] and copied).
    pub fn push_encoded_table(&mut self, table: &[u8]) -> Result<(), EncodeError> {
        self.check_room()?;
        let reader = TableReader::new(table)
            .map_err(|_| EncodeError::Invalid("the bytes are not an encoded table"))?;
        if reader.len() != self.info.key_count {
            return Err(EncodeError::KeyCountMismatch {
                expected: self.info.key_count,
                got: reader.len(),
            });
        }
        self.container.sink().write_all(table)?;
        self.container.end_section();
        Ok(())
    }

    /// Writes the directory and footer; every declared table must have been
    /// pushed.
    pub fn finish(self) -> Result<W, EncodeError> {
        let pushed = self.container.section_count() as u32;
        if pushed != self.info.table_count {
            return Err(EncodeError::TableCountMismatch {
                expected: self.info.table_count,
                got: pushed,
            });
        }
        Ok(self.container.finish()?)
    }
}

/// A segment file, checked cheaply when opened.
///
/// Generic over its bytes: `&[u8]`, `Vec<u8>`, or a memory map.
/// [`new`](Self::new) checks the header, footer and directory and that every
/// table lies inside the bytes (a file shorter than it claims is refused);
/// tables check their blocks as they are read, and [`verify`](Self::verify)
/// checks every checksum.
#[derive(Debug, Clone)]
pub struct SegmentReader<D> {
    data: D,
    container: Container,
    info: SegmentInfo,
    /// The format version in its header (flat tables exist from 5 on).
    version: u32,
}

/// The keys of one table of a segment, whatever its layout
/// ([`SegmentReader::keys`]).
#[derive(Debug)]
pub enum TableKeys<'a> {
    /// A Rice-coded table's (boxed: a range iterator carries a chunk of
    /// decoded keys).
    Rice(Box<Range<'a>>),
    /// A flat table's.
    Flat(FlatKeys<'a>),
}

impl Iterator for TableKeys<'_> {
    type Item = Result<u64, FormatError>;

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        match self {
            TableKeys::Rice(keys) => keys.next(),
            TableKeys::Flat(keys) => keys.next(),
        }
    }
}

impl<D: AsRef<[u8]>> SegmentReader<D> {
    /// Opens a segment. Costs O(tables).
    pub fn new(data: D) -> Result<Self, FormatError> {
        let bytes = data.as_ref();
        let (container, header) = Container::open(bytes, FILE, HEADER_LEN)?;
        let field = |at| u64_at(header, at).unwrap_or_default();
        let table_count = u32_at(header, 12).unwrap_or_default();
        let shape_bytes = header
            .get(32..36)
            .and_then(|s| s.first_chunk::<4>())
            .copied()
            .unwrap_or_default();
        let version = u32_at(header, 8).unwrap_or_default();
        let (shape, k) = decode_shape(shape_bytes, version)
            .map_err(|what| FormatError::malformed(FILE, 32, what))?;
        if container.section_count() != table_count as usize {
            return Err(FormatError::malformed(
                FILE,
                12,
                "the header's table count differs from the directory's",
            ));
        }
        let info = SegmentInfo {
            index_id: field(36),
            segment_id: field(16),
            shape,
            k,
            table_count,
            key_count: field(24),
        };
        Ok(SegmentReader {
            data,
            container,
            info,
            version,
        })
    }

    /// Everything the header records.
    pub fn info(&self) -> SegmentInfo {
        self.info
    }

    /// The id of the index the segment belongs to.
    pub fn index_id(&self) -> u64 {
        self.info.index_id
    }

    /// The segment's id.
    pub fn segment_id(&self) -> u64 {
        self.info.segment_id
    }

    /// Keys per table.
    pub fn key_count(&self) -> u64 {
        self.info.key_count
    }

    /// Number of tables.
    pub fn table_count(&self) -> usize {
        self.info.table_count as usize
    }

    /// The footer's CRC32, which identifies the file's contents (the
    /// manifest records it so a swapped or replaced file is detected).
    pub fn footer_crc(&self) -> u32 {
        self.container.footer_crc()
    }

    /// The format version in the header.
    pub fn version(&self) -> u32 {
        self.version
    }

    /// Whether table `i` is flat (a file of version 5 or later whose table
    /// footer says so; docs/FORMAT.md#flat-table-section).
    pub fn is_flat(&self, i: usize) -> Result<bool, FormatError> {
        let section = self.container.section(self.data.as_ref(), i)?;
        Ok(self.version >= 5 && is_flat(section.bytes))
    }

    /// Table `i` (plan order) if it is flat, opened with
    /// [`FlatTable::at`]'s checks and its key count checked against the
    /// header's; `None` if it is Rice-coded.
    pub fn flat_table(&self, i: usize) -> Result<Option<FlatTable<'_>>, FormatError> {
        let section = self.container.section(self.data.as_ref(), i)?;
        if self.version < 5 || !is_flat(section.bytes) {
            return Ok(None);
        }
        let table = FlatTable::at(section.bytes, section.offset)?;
        if table.len() != self.info.key_count {
            return Err(FormatError::malformed(
                FILE,
                section.offset + to_u64(section.bytes.len()).saturating_sub(28),
                "a table holds a different number of keys than the segment header",
            ));
        }
        Ok(Some(table))
    }

    /// The keys of table `i`, ascending, whatever its layout.
    pub fn keys(&self, i: usize) -> Result<TableKeys<'_>, FormatError> {
        Ok(match self.flat_table(i)? {
            Some(flat) => TableKeys::Flat(flat.iter()),
            None => TableKeys::Rice(Box::new(self.table(i)?.iter())),
        })
    }

    /// The size in bytes of table `i`'s section, whatever its layout.
    pub fn table_size(&self, i: usize) -> Result<u64, FormatError> {
        Ok(match self.flat_table(i)? {
            Some(flat) => flat.size_bytes(),
            None => self.table(i)?.size_bytes(),
        })
    }

    /// Table `i` (plan order) if it is Rice-coded, opened with
    /// [`TableReader::new`]'s checks and its key count checked against the
    /// header's; an error for a flat table (read with
    /// [`flat_table`](Self::flat_table) or [`keys`](Self::keys)).
    pub fn table(&self, i: usize) -> Result<TableReader<'_>, FormatError> {
        let section = self.container.section(self.data.as_ref(), i)?;
        if self.version >= 5 && is_flat(section.bytes) {
            return Err(FormatError::malformed(
                FILE,
                section.offset,
                "a flat table read as a Rice-coded one",
            ));
        }
        let table = TableReader::at(section.bytes, section.offset)?;
        if table.len() != self.info.key_count {
            return Err(FormatError::malformed(
                FILE,
                section.offset + to_u64(section.bytes.len()).saturating_sub(28),
                "a table holds a different number of keys than the segment header",
            ));
        }
        Ok(table)
    }

    /// Where table `i`'s section starts in the file.
    pub fn table_offset(&self, i: usize) -> Result<u64, FormatError> {
        Ok(self.container.section(self.data.as_ref(), i)?.offset)
    }

    /// Where each table's block index lies in the file (see
    /// [`TableReader::index_range`]), or a flat table's directory; tables
    /// that fail to open are left out.
    pub fn index_ranges(&self) -> Vec<std::ops::Range<u64>> {
        (0..self.table_count())
            .filter_map(|i| match self.flat_table(i).ok()? {
                Some(flat) => Some(flat.dir_range()),
                None => Some(self.table(i).ok()?.index_range()),
            })
            .collect()
    }

    /// Checks every checksum: each table section's, then each table's index
    /// and blocks (decoding every key), or a flat table's chunks, directory
    /// and keys.
    pub fn verify(&self) -> Result<(), FormatError> {
        self.container.verify_sections(self.data.as_ref())?;
        for i in 0..self.table_count() {
            match self.flat_table(i)? {
                Some(flat) => flat.verify()?,
                None => self.table(i)?.verify()?,
            }
        }
        Ok(())
    }

    /// The bytes.
    pub fn as_bytes(&self) -> &[u8] {
        self.data.as_ref()
    }

    /// Gives the bytes back.
    pub fn into_inner(self) -> D {
        self.data
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing, clippy::panic)]
mod tests {
    use super::*;
    use crate::format::FormatErrorKind;

    fn info(tables: u32, keys: u64) -> SegmentInfo {
        SegmentInfo {
            index_id: 0,
            segment_id: 42,
            shape: Shape::Nested { outer: 4, inner: 4 },
            k: 3,
            table_count: tables,
            key_count: keys,
        }
    }

    fn build(tables: &[Vec<u64>]) -> Vec<u8> {
        let mut w = SegmentWriter::new(info(tables.len() as u32, tables[0].len() as u64)).unwrap();
        for t in tables {
            w.push_table(t.iter().copied()).unwrap();
        }
        w.finish().unwrap()
    }

    fn sample() -> Vec<Vec<u64>> {
        let a: Vec<u64> = (0..300u64).map(|i| i * 0x0101_0101_0101).collect();
        let b: Vec<u64> = (0..300u64).map(|i| (i << 50) | 7).collect();
        vec![a, b]
    }

    #[test]
    fn round_trip() {
        let tables = sample();
        let bytes = build(&tables);
        let seg = SegmentReader::new(&bytes[..]).unwrap();
        assert_eq!(seg.info(), info(2, 300));
        seg.verify().unwrap();
        for (i, keys) in tables.iter().enumerate() {
            let got: Vec<u64> = seg.table(i).unwrap().iter().map(Result::unwrap).collect();
            assert_eq!(&got, keys);
        }
        assert!(seg.table(2).is_err());
    }

    #[test]
    fn index_ranges_name_each_table_s_block_index_in_the_file() {
        let tables = sample();
        let bytes = build(&tables);
        let seg = SegmentReader::new(&bytes[..]).unwrap();
        let ranges = seg.index_ranges();
        assert_eq!(ranges.len(), tables.len());
        for (i, (range, keys)) in ranges.iter().zip(&tables).enumerate() {
            // The table's section ends with its index and footer.
            let table = seg.table(i).unwrap();
            let section_end = seg.table_offset(i).unwrap() + table.size_bytes();
            assert_eq!(range.end, section_end, "table {i}");
            // The index's first entry is the table's first key, at offset 0.
            let at = range.start as usize;
            assert_eq!(crate::format::bytes::u64_at(&bytes, at), Some(keys[0]));
            assert_eq!(crate::format::bytes::u64_at(&bytes, at + 8), Some(0));
        }
    }

    #[test]
    fn encoded_tables_and_counts() {
        let tables = sample();
        let mut w = SegmentWriter::new(info(2, 300)).unwrap();
        let mut t = TableWriter::new(16).unwrap();
        for &k in &tables[0] {
            t.push(k).unwrap();
        }
        w.push_encoded_table(&t.finish().unwrap()).unwrap();
        assert!(matches!(
            w.push_table([1u64, 2]),
            Err(EncodeError::KeyCountMismatch { .. })
        ));
        let mut w = SegmentWriter::new(info(1, 300)).unwrap();
        w.push_table(tables[0].iter().copied()).unwrap();
        assert!(matches!(
            w.push_table(tables[1].iter().copied()),
            Err(EncodeError::TableCountMismatch { .. })
        ));
        let w = SegmentWriter::new(info(2, 300)).unwrap();
        assert!(matches!(
            w.finish(),
            Err(EncodeError::TableCountMismatch { .. })
        ));
    }

    #[test]
    fn empty_segment() {
        let mut w = SegmentWriter::new(info(3, 0)).unwrap();
        for _ in 0..3 {
            w.push_table([]).unwrap();
        }
        let bytes = w.finish().unwrap();
        let seg = SegmentReader::new(bytes).unwrap();
        seg.verify().unwrap();
        assert_eq!(seg.table(1).unwrap().range(0, u64::MAX).count(), 0);
    }

    #[test]
    fn shorter_file_is_refused() {
        let bytes = build(&sample());
        for len in 0..bytes.len() {
            let e = SegmentReader::new(&bytes[..len]).unwrap_err();
            assert!(e.offset <= len as u64, "{len}: {e}");
        }
        let mut longer = bytes.clone();
        longer.extend_from_slice(&[0; 8]);
        assert_eq!(
            SegmentReader::new(&longer[..]).unwrap_err().kind,
            FormatErrorKind::MissingFooter
        );
    }

    #[test]
    fn version_and_magic_errors_come_first() {
        let mut bytes = build(&sample());
        bytes[8] = (super::super::FORMAT_VERSION + 1) as u8;
        assert_eq!(
            SegmentReader::new(&bytes[..]).unwrap_err().kind,
            FormatErrorKind::UnsupportedVersion {
                expected: super::super::FORMAT_VERSION,
                got: super::super::FORMAT_VERSION + 1
            }
        );
        bytes[0] = b'X';
        assert!(matches!(
            SegmentReader::new(&bytes[..]).unwrap_err().kind,
            FormatErrorKind::BadMagic { .. }
        ));
    }

    #[test]
    fn shape_codes() {
        for (shape, k) in [
            (Shape::Flat { blocks: 6 }, 3),
            (Shape::Nested { outer: 4, inner: 5 }, 3),
            (Shape::Flat { blocks: 1 }, 0),
            (
                Shape::Probed {
                    blocks: 2,
                    radius: 1,
                },
                3,
            ),
        ] {
            assert_eq!(
                decode_shape(encode_shape(shape, k).unwrap(), 3),
                Ok((shape, k))
            );
        }
        assert!(encode_shape(Shape::Flat { blocks: 300 }, 3).is_err());
        assert!(decode_shape([0, 6, 1, 3], 3).is_err());
        assert!(decode_shape([3, 6, 0, 3], 3).is_err());
        assert!(decode_shape([2, 6, 0, 3], 3).is_err());
        // Version 2 had no probed plans.
        assert!(decode_shape([2, 2, 1, 3], 2).is_err());
        assert!(decode_shape([0, 6, 0, 3], 2).is_ok());
    }
}
