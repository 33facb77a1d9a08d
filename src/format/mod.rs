//! The bytes of every simhashdb file, and nothing else.
//!
//! This module encodes into `Vec<u8>` or any [`std::io::Write`] and decodes
//! from `&[u8]`; it never opens, maps, locks or syncs a file. The engine maps
//! files and hands the bytes here. `docs/FORMAT.md` is the specification; the
//! code links to its sections rather than repeating layouts.
//!
//! Decoding treats bytes as untrusted: every read is bounds-checked and every
//! failure is a [`FormatError`] naming the file kind and byte offset. Nothing
//! here panics on any input (indexing, `unwrap` and `panic!` are denied by lint
//! in this module).
//!
//! | file | writer | reader |
//! |------|--------|--------|
//! | `<id>.seg` | [`SegmentWriter`] | [`SegmentReader`], [`TableReader`] |
//! | `<id>.ids` | [`DocMapWriter`] | [`DocMapReader`] |
//! | `<id>.wal` | [`encode_wal_header`], [`encode_frame`] | [`WalReader`] |
//! | `MANIFEST` | [`Manifest::encode`] | [`Manifest::decode`] |
//!
//! Build a table of sorted keys, store it in a segment, and query a range:
//!
//! ```
//! use simhashdb::format::{SegmentInfo, SegmentReader, SegmentWriter};
//! use simhashdb::plan::Shape;
//!
//! let keys: Vec<u64> = (0..1000u64).map(|i| i * 0x0123_4567_89ab).collect();
//! let info = SegmentInfo {
//!     index_id: 1,
//!     segment_id: 7,
//!     shape: Shape::Flat { blocks: 4 },
//!     k: 3,
//!     table_count: 1,
//!     key_count: keys.len() as u64,
//! };
//! let mut writer = SegmentWriter::new(info)?;
//! writer.push_table(keys.iter().copied())?;
//! let bytes: Vec<u8> = writer.finish()?;
//!
//! let segment = SegmentReader::new(&bytes[..])?; // cheap: header, footer, directory
//! segment.verify()?; // every checksum
//! let table = segment.table(0)?;
//! let found: Vec<u64> = table.range(keys[10], keys[12]).collect::<Result<_, _>>()?;
//! assert_eq!(found, keys[10..=12]);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![deny(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic
)]

mod bytes;
pub(crate) use bytes::{prefetch, prefetch_line, prefetch_line_to_l2, prefetch_to_l2};
mod container;
// The submodules are the engine's: their items that are API are re-exported
// below, and the rest (layout constants, the engine's write-back heuristics,
// the streaming doc map writer) may change in any release.
#[doc(hidden)]
pub mod docmap;
#[doc(hidden)]
pub mod manifest;
#[doc(hidden)]
pub mod segment;
#[doc(hidden)]
pub mod table;
#[doc(hidden)]
pub mod wal;

use std::fmt;
use std::io;

pub use docmap::{
    ByFingerprint, DocEntry, DocMapReader, DocMapWriter, Entries, Tombstone, Tombstones,
};
#[doc(hidden)]
pub use docmap::{Ranges, SortedDocMapWriter, id_index_order};
pub use manifest::{Manifest, SegmentMeta};
pub use segment::{SegmentInfo, SegmentReader, SegmentWriter, TableKeys};
#[doc(hidden)]
pub use table::MAX_BLOCK_LEN;
pub use table::{
    DEFAULT_BLOCK_LEN, FLAT_CHUNK_LEN, FlatKeys, FlatLayout, FlatTable, FlatTableWriter,
    MAX_FLAT_BITS, Range, TableLayout, TableReader, TableWriter, flat_width,
};
pub use wal::{Record, WalEnd, WalFrame, WalReader, encode_frame, encode_wal_header};
// For the engine and for tests that build WALs as a crashed process leaves
// them; not API.
#[doc(hidden)]
pub use wal::{
    WAL_UNSYNCED_APPENDS, encode_wal_header_with_flags, holds_whole_frame,
    looks_like_lost_write_back,
};

/// The format version this build writes, for every file kind.
///
/// See docs/FORMAT.md#versions.
pub const FORMAT_VERSION: u32 = 5;

/// The oldest format version this build reads (it reads every version from
/// this one to [`FORMAT_VERSION`]). Version 3 changed the doc map's layout
/// and this build has no reader for version 2's, so a version-2 index is
/// refused as a whole; version 3 files are read (their documents have no
/// sketch), and so are version 4 files (their tables are all Rice-coded)
/// (docs/FORMAT.md, "Versions").
pub const OLDEST_READ_VERSION: u32 = 3;

/// Longest document name, in bytes, that the WAL and the doc map accept.
pub const MAX_NAME_LEN: usize = 64 * 1024;

/// Name of the temporary file a new manifest is written to before it is
/// renamed over [`FileKind::Manifest`]'s name. See docs/FORMAT.md#manifest-replace.
pub const MANIFEST_TEMP_FILE_NAME: &str = "MANIFEST.tmp";

/// The kinds of files in an index directory.
///
/// See docs/FORMAT.md#file-names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FileKind {
    /// `<segment id>.seg`: one compressed sorted table per permuted table.
    Segment,
    /// `<segment id>.ids`: the documents of a segment, and its tombstones.
    DocMap,
    /// `<wal id>.wal`: the write-ahead log.
    Wal,
    /// `MANIFEST`: the list of live files, the commit point.
    Manifest,
}

impl FileKind {
    /// Every kind, in a fixed order.
    pub const ALL: [FileKind; 4] = [
        FileKind::Segment,
        FileKind::DocMap,
        FileKind::Wal,
        FileKind::Manifest,
    ];

    /// The 8 bytes every file of this kind starts with.
    pub const fn magic(self) -> [u8; 8] {
        match self {
            FileKind::Segment => *b"SHDBSEG\0",
            FileKind::DocMap => *b"SHDBIDS\0",
            FileKind::Wal => *b"SHDBWAL\0",
            FileKind::Manifest => *b"SHDBMAN\0",
        }
    }

    /// The file name extension (`None` for the manifest, which has a fixed name).
    pub const fn extension(self) -> Option<&'static str> {
        match self {
            FileKind::Segment => Some("seg"),
            FileKind::DocMap => Some("ids"),
            FileKind::Wal => Some("wal"),
            FileKind::Manifest => None,
        }
    }

    /// The file's name: the id as 16 lower-case hex digits and the extension
    /// (`00000000000000ff.seg`), or `MANIFEST` (the id is ignored).
    pub fn file_name(self, id: u64) -> String {
        match self.extension() {
            Some(ext) => format!("{id:016x}.{ext}"),
            None => "MANIFEST".to_owned(),
        }
    }

    /// Parses a name made by [`file_name`](Self::file_name): `Some((kind, id))`,
    /// with id 0 for `MANIFEST`; `None` for any other name (including
    /// [`MANIFEST_TEMP_FILE_NAME`], upper-case hex or a wrong digit count).
    pub fn parse_file_name(name: &str) -> Option<(FileKind, u64)> {
        if name == "MANIFEST" {
            return Some((FileKind::Manifest, 0));
        }
        let (stem, ext) = name.split_once('.')?;
        let kind = FileKind::ALL
            .into_iter()
            .find(|k| k.extension() == Some(ext))?;
        let lower_hex =
            stem.len() == 16 && stem.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
        if !lower_hex {
            return None;
        }
        u64::from_str_radix(stem, 16).ok().map(|id| (kind, id))
    }

    fn noun(self) -> &'static str {
        match self {
            FileKind::Segment => "segment file",
            FileKind::DocMap => "doc map file",
            FileKind::Wal => "WAL file",
            FileKind::Manifest => "manifest",
        }
    }
}

impl fmt::Display for FileKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.noun())
    }
}

/// What is wrong with the bytes; see [`FormatError`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum FormatErrorKind {
    /// The file does not start with the magic bytes of its kind: it is not a
    /// file of this kind at all.
    BadMagic {
        /// The magic of the expected kind.
        expected: [u8; 8],
        /// The first 8 bytes found (zero-padded if the file is shorter).
        got: [u8; 8],
    },
    /// The file was written by a format version this build cannot read.
    UnsupportedVersion {
        /// The version this build writes ([`FORMAT_VERSION`]); it reads
        /// those from [`OLDEST_READ_VERSION`] on.
        expected: u32,
        /// The version recorded in the file.
        got: u32,
    },
    /// A stored checksum does not match the bytes it covers.
    ChecksumMismatch {
        /// The CRC32 stored in the file.
        expected: u32,
        /// The CRC32 computed over the bytes.
        got: u32,
    },
    /// The bytes end before a structure they must contain.
    Truncated {
        /// Bytes the structure needs from the error's offset.
        needed: u64,
        /// Bytes there are from the error's offset.
        available: u64,
    },
    /// The file does not end with the footer of its kind: it was truncated or
    /// never completely written.
    MissingFooter,
    /// A field holds a value the format does not allow.
    Malformed(&'static str),
}

/// Bytes that are not a valid file of the expected kind.
///
/// `offset` is the absolute byte offset, within the file, of the structure
/// found to be bad (for a checksum mismatch, the start of the bytes the
/// checksum covers).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FormatError {
    /// The kind of file being decoded.
    pub file: FileKind,
    /// Byte offset in the file.
    pub offset: u64,
    /// What is wrong.
    pub kind: FormatErrorKind,
}

impl FormatError {
    pub(crate) fn new(file: FileKind, offset: u64, kind: FormatErrorKind) -> FormatError {
        FormatError { file, offset, kind }
    }

    pub(crate) fn malformed(file: FileKind, offset: u64, what: &'static str) -> FormatError {
        FormatError::new(file, offset, FormatErrorKind::Malformed(what))
    }

    /// Whether the error means the bytes are damaged (as opposed to written
    /// by an unsupported version or not being a file of this kind).
    pub fn is_corruption(&self) -> bool {
        !matches!(
            self.kind,
            FormatErrorKind::BadMagic { .. } | FormatErrorKind::UnsupportedVersion { .. }
        )
    }
}

fn show_magic(magic: &[u8; 8]) -> String {
    magic.escape_ascii().to_string()
}

impl fmt::Display for FormatError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (file, at) = (self.file, self.offset);
        let damaged = "the file is damaged: restore it from a backup, or rebuild the index \
                       from its source data";
        match &self.kind {
            FormatErrorKind::BadMagic { expected, got } => write!(
                f,
                "not a simhashdb {file}: it starts with \"{}\" instead of \"{}\"; \
                 check that the path points to an index directory and that no other \
                 program wrote into it",
                show_magic(got),
                show_magic(expected)
            ),
            FormatErrorKind::UnsupportedVersion { expected, got } if got < expected => write!(
                f,
                "{file} has format version {got}, which this build no longer reads (it reads \
                 versions {OLDEST_READ_VERSION} to {expected}; docs/FORMAT.md, \"Versions\"); rebuild the index: with \
                 the build that wrote it, read its documents (`Index::for_each_doc`) and insert \
                 them into a new index"
            ),
            FormatErrorKind::UnsupportedVersion { expected, got } => write!(
                f,
                "{file} has format version {got}, but this build reads versions \
                 {OLDEST_READ_VERSION} to {expected}; \
                 open it with a simhashdb release that supports version {got}"
            ),
            FormatErrorKind::ChecksumMismatch { expected, got } => write!(
                f,
                "{file}: checksum mismatch for the bytes at offset {at} (stored {expected:#010x}, \
                 computed {got:#010x}); {damaged}"
            ),
            FormatErrorKind::Truncated { needed, available } => write!(
                f,
                "{file} is truncated: the structure at offset {at} needs {needed} bytes but only \
                 {available} remain; {damaged}"
            ),
            FormatErrorKind::MissingFooter => write!(
                f,
                "{file} does not end with its footer (checked at offset {at}): it was truncated \
                 or never completely written; {damaged}"
            ),
            FormatErrorKind::Malformed(what) => {
                write!(f, "{file} is malformed at offset {at}: {what}; {damaged}")
            }
        }
    }
}

impl std::error::Error for FormatError {}

/// Why bytes could not be encoded.
#[derive(Debug)]
#[non_exhaustive]
pub enum EncodeError {
    /// The destination writer failed.
    Io(io::Error),
    /// Keys pushed to a table were not strictly increasing.
    KeysNotIncreasing {
        /// The previous key.
        prev: u64,
        /// The key pushed after it.
        key: u64,
    },
    /// A table holds a different number of keys than its segment declares.
    KeyCountMismatch {
        /// The segment's key count.
        expected: u64,
        /// The table's key count.
        got: u64,
    },
    /// A segment got a different number of tables than it declares.
    TableCountMismatch {
        /// The declared table count.
        expected: u32,
        /// The tables pushed.
        got: u32,
    },
    /// The same document id was given twice (as two entries or two tombstones).
    DuplicateId {
        /// The repeated id.
        id: u64,
    },
    /// A document name is longer than [`MAX_NAME_LEN`].
    NameTooLong {
        /// The document id.
        id: u64,
        /// The name's length in bytes.
        len: usize,
    },
    /// A value does not fit the format (the message says which).
    Invalid(&'static str),
}

impl fmt::Display for EncodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EncodeError::Io(e) => write!(f, "writing failed: {e}"),
            EncodeError::KeysNotIncreasing { prev, key } => write!(
                f,
                "table keys must be strictly increasing: {key:#018x} was pushed after {prev:#018x}"
            ),
            EncodeError::KeyCountMismatch { expected, got } => write!(
                f,
                "every table of a segment must hold its {expected} keys, but a table holds {got}"
            ),
            EncodeError::TableCountMismatch { expected, got } => write!(
                f,
                "the segment declares {expected} tables but {got} were written"
            ),
            EncodeError::DuplicateId { id } => {
                write!(f, "document id {id} appears twice in one doc map")
            }
            EncodeError::NameTooLong { id, len } => write!(
                f,
                "the name of document {id} is {len} bytes, more than the limit of {MAX_NAME_LEN}"
            ),
            EncodeError::Invalid(what) => write!(f, "cannot encode: {what}"),
        }
    }
}

impl std::error::Error for EncodeError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            EncodeError::Io(e) => Some(e),
            _ => None,
        }
    }
}

impl From<io::Error> for EncodeError {
    fn from(e: io::Error) -> Self {
        EncodeError::Io(e)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn file_names_round_trip() {
        for kind in FileKind::ALL {
            for id in [0, 1, 0xff, u64::MAX] {
                let name = kind.file_name(id);
                let expected_id = if kind == FileKind::Manifest { 0 } else { id };
                assert_eq!(
                    FileKind::parse_file_name(&name),
                    Some((kind, expected_id)),
                    "{name}"
                );
            }
        }
        assert_eq!(FileKind::Segment.file_name(255), "00000000000000ff.seg");
        assert_eq!(FileKind::DocMap.file_name(1), "0000000000000001.ids");
        assert_eq!(FileKind::Wal.file_name(2), "0000000000000002.wal");
        assert_eq!(FileKind::Manifest.file_name(9), "MANIFEST");
    }

    #[test]
    fn foreign_names_are_not_parsed() {
        for name in [
            "MANIFEST.tmp",
            "manifest",
            "LOCK",
            "00000000000000FF.seg",
            "ff.seg",
            "000000000000000ff.seg",
            "00000000000000ff.seg.tmp",
            "00000000000000ff.log",
            "+0000000000000ff.seg",
            "00000000000000ff",
            ".seg",
        ] {
            assert_eq!(FileKind::parse_file_name(name), None, "{name}");
        }
    }

    #[test]
    fn magics_are_distinct() {
        for a in FileKind::ALL {
            for b in FileKind::ALL {
                assert_eq!(a == b, a.magic() == b.magic());
            }
        }
    }

    #[test]
    fn display_says_what_to_do() {
        let e = FormatError::new(
            FileKind::Segment,
            4096,
            FormatErrorKind::ChecksumMismatch {
                expected: 1,
                got: 2,
            },
        );
        let s = e.to_string();
        assert!(s.contains("segment file") && s.contains("4096") && s.contains("restore"));
        let e = FormatError::new(
            FileKind::Manifest,
            8,
            FormatErrorKind::UnsupportedVersion {
                expected: 3,
                got: 4,
            },
        );
        assert!(e.to_string().contains("version 4"));
        assert!(!e.is_corruption());
        // A file of an older version: say how to move its data over.
        let e = FormatError::new(
            FileKind::Manifest,
            8,
            FormatErrorKind::UnsupportedVersion {
                expected: 3,
                got: 1,
            },
        );
        let s = e.to_string();
        assert!(
            s.contains("version 1") && s.contains("no longer reads"),
            "{s}"
        );
        assert!(s.contains("for_each_doc") && s.contains("new index"), "{s}");
    }
}
