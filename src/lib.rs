//! simhashdb: exact near-duplicate search over 64-bit SimHash fingerprints.
//!
//! Fingerprint documents with a [`Simhasher`], then find every fingerprint
//! within Hamming distance `k`, with none missed, using the permuted sorted
//! tables of Manku, Jain and Das Sarma (WWW 2007) that a [`plan::Plan`]
//! describes:
//!
//! ```
//! use simhashdb::batch::find_all;
//! use simhashdb::plan::{Budget, Plan};
//! use simhashdb::search::PermutedTables;
//! use simhashdb::{Simhasher, hamming};
//!
//! let hasher = Simhasher::default();
//! let docs = [
//!     "a crawler fetched this page about rust storage engines and their file formats today",
//!     "a crawler fetched this page about rust storage engines and their file formats yesterday",
//!     "an unrelated page lists recipes for bread, cakes and other things baked in an oven",
//! ];
//! let fps: Vec<u64> = docs.iter().map(|d| hasher.fingerprint(d)).collect();
//! assert!(hamming(fps[0], fps[1]) < hamming(fps[0], fps[2]));
//!
//! // Every pair within the plan's k = 3 bits, exactly (a batch search sorts
//! // its tables, so its plan permutes without probing).
//! let plan = Plan::choose(fps.len() as u64, 3, Budget::Unprobed)?;
//! let pairs = find_all(&fps, &plan);
//! assert!(pairs.iter().all(|&(i, j)| hamming(fps[i], fps[j]) <= 3));
//!
//! // One query: all fingerprints within 3 bits, nearest first, from two
//! // tables probed at every prefix within 1 bit of the query's.
//! let tables = PermutedTables::new(&fps, &Plan::probed(2, 1, 3)?);
//! let hits = tables.query(fps[0], 3)?;
//! assert_eq!((hits[0].fingerprint, hits[0].distance), (fps[0], 0));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Modules: [`fingerprint`] (text to fingerprint), [`plan`] (block splits,
//! permutations, the cost model), [`search`] (queries over in-memory tables),
//! [`batch`] (all pairs and clusters of a set), [`recheck`] (exact Jaccard
//! re-checks of candidate pairs), [`dedup`] (the verified deduplication of a
//! collection of texts), [`sketch`] (a text's 16-byte verification
//! value), [`engine`] (the persistent [`Index`]).

#![warn(missing_docs)]

pub mod batch;
pub mod dedup;
pub mod engine;
pub mod error;
pub mod fingerprint;
pub mod format;
pub mod plan;
mod radix;
pub mod recheck;
pub mod search;
pub mod sketch;

/// The old name of [`recheck`], kept so that code written against it still
/// builds. (Hidden rather than `#[deprecated]`: rustc does not warn about
/// uses through a deprecated re-export.)
#[doc(hidden)]
pub use recheck as verify;

pub use engine::{
    BackupReport, Checked, Doc, Docs, Durability, Index, Match, Options, RepairReport, Rule, Stats,
    VerifiedMatch, VerifyReport, WalTail,
};
pub use error::{Error, Result};
pub use fingerprint::{FingerprintConfig, FingerprintError, Simhasher, Tokenizer, Weighting};

/// Number of bit positions in which `a` and `b` differ.
#[inline]
pub fn hamming(a: u64, b: u64) -> u32 {
    (a ^ b).count_ones()
}

/// The id of the document named `name` (a URL or path): FNV-1a 64 of its
/// UTF-8 bytes. The command line (`add`, `check`, `get NAME`, `delete NAME`)
/// and the Python package's `Index.add` / `Index.check` store named documents
/// under this id, so a name finds its document without a name table.
///
/// ```
/// use simhashdb::doc_id;
///
/// assert_eq!(doc_id(""), 0xcbf2_9ce4_8422_2325); // the FNV-1a 64 offset basis
/// assert_ne!(doc_id("https://example.com/a"), doc_id("https://example.com/b"));
/// ```
#[inline]
pub fn doc_id(name: &str) -> u64 {
    fingerprint::fnv1a64(name.as_bytes())
}

/// The README's Rust snippets, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

/// The guide's Rust snippets, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../docs/GUIDE.md")]
struct GuideDoctests;
