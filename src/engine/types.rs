//! What the index answers: matches, documents (and an iterator over them),
//! statistics, verify reports.

use std::path::PathBuf;

use crate::plan::Plan;
use crate::sketch::Sketch;

/// A document found by a query.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct Match {
    /// The document id.
    pub id: u64,
    /// Its fingerprint.
    pub fingerprint: u64,
    /// Hamming distance from the query.
    pub distance: u32,
    /// Its name, if it was inserted with one.
    pub name: Option<String>,
    /// Its verification value, if it was inserted with one
    /// ([`Index::insert_sketched`](crate::Index::insert_sketched));
    /// left out of serialized output when absent.
    #[cfg_attr(feature = "serde", serde(skip_serializing_if = "Option::is_none"))]
    pub sketch: Option<Sketch>,
}

/// A live document, as [`Index::get_doc`](crate::Index::get_doc) and [`Index::for_each_doc`](crate::Index::for_each_doc) return it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct Doc {
    /// The document id.
    pub id: u64,
    /// Its fingerprint.
    pub fingerprint: u64,
    /// Its name, if it was inserted with one.
    pub name: Option<String>,
    /// When it was inserted, in milliseconds since the Unix epoch.
    pub timestamp_ms: u64,
    /// Its verification value, if it was inserted with one
    /// ([`Index::insert_sketched`](crate::Index::insert_sketched));
    /// left out of serialized output when absent.
    #[cfg_attr(feature = "serde", serde(skip_serializing_if = "Option::is_none"))]
    pub sketch: Option<Sketch>,
}

/// What [`Index::verify`](crate::Index::verify) read.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct VerifyReport {
    /// Files checked: the manifest, every WAL, every segment and doc map.
    pub files: usize,
    /// Bytes read and checked.
    pub bytes: u64,
    /// WALs that end in bytes which do not form a valid frame: what a
    /// crash in the middle of an append leaves, and what damage to the last
    /// frame looks like. Recovery drops those bytes. In a WAL of a
    /// [`Durability::Sync`](crate::Durability::Sync) writer the last batch was acknowledged only if
    /// its frame was complete; see [`WalTail::complete_frame`].
    pub wal_tails: Vec<WalTail>,
}

/// The end of a WAL that recovery drops (docs/FORMAT.md, "WAL torn tail").
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct WalTail {
    /// The WAL.
    pub path: PathBuf,
    /// Where the dropped bytes start.
    pub offset: u64,
    /// How many bytes are dropped.
    pub bytes: u64,
    /// Whether the WAL's header says its frames were acknowledged before
    /// being synced ([`Durability::Buffered`](crate::Durability::Buffered)).
    pub unsynced_appends: bool,
    /// Whether the dropped bytes hold a whole frame whose header checks
    /// out and whose payload fails its checksum. An interrupted append
    /// under a process kill never leaves that (the frame's bytes are written
    /// in one call); a power cut can, and so can damage to an acknowledged
    /// last frame. In a `Sync` WAL that was not just through a power cut,
    /// treat it as a lost acknowledged write.
    pub complete_frame: bool,
}

/// A snapshot of the index's shape and size.
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct Stats {
    /// The plan.
    pub plan: Plan,
    /// The recorded fingerprint configuration line.
    pub fingerprint_config: String,
    /// Live segments.
    pub segments: usize,
    /// Documents in segments (including versions later replaced or deleted
    /// until compaction drops them).
    pub segment_docs: u64,
    /// Tombstones in segments.
    pub tombstones: u64,
    /// Distinct fingerprints per table, summed over segments.
    pub segment_keys: u64,
    /// Table bytes per key per table, over all segments and each one's own
    /// tables (raw would be 8).
    pub table_bytes_per_key: f64,
    /// Heap bytes of the small segments' decoded tables
    /// ([`Options::decoded_tables_up_to`](crate::Options::decoded_tables_up_to)).
    pub decoded_table_bytes: u64,
    /// Bytes of segment and doc-map files.
    pub disk_bytes: u64,
    /// Ids with a version in the memtable (live or deleted).
    pub memtable_docs: usize,
    /// Approximate memtable bytes.
    pub memtable_bytes: usize,
    /// Ids with a version in a full memtable the flush thread is writing
    /// to a segment; 0 when no flush is running. Queries search it too, and
    /// its writes are still in the WAL.
    pub flushing_docs: usize,
    /// Memtables written to segments since the index was opened, on any
    /// thread (each adds a segment).
    pub flushes: u64,
    /// Flushes that failed since the open (a failure poisons the index).
    pub flush_failures: u64,
    /// Merges of segments since the open: by the merge policy (on the
    /// merge thread or the writing thread) and by [`compact`](super::Index::compact).
    pub merges: u64,
    /// Merges that failed since the open.
    pub merge_failures: u64,
    /// Segments whose tables were decoded in memory since the open
    /// ([`Options::decoded_tables_up_to`](super::Options::decoded_tables_up_to)):
    /// each at most once.
    pub decodes: u64,
}

/// The documents of [`Index::docs`](crate::Index::docs), owned.
#[derive(Debug, Clone)]
pub struct Docs(pub(super) std::vec::IntoIter<Doc>);

impl Iterator for Docs {
    type Item = Doc;

    fn next(&mut self) -> Option<Doc> {
        self.0.next()
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.0.size_hint()
    }
}

impl ExactSizeIterator for Docs {}

impl DoubleEndedIterator for Docs {
    fn next_back(&mut self) -> Option<Doc> {
        self.0.next_back()
    }
}

impl std::iter::FusedIterator for Docs {}
