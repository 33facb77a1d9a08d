//! The persistent index: files, policy, recovery. Bytes on disk are
//! `crate::format`'s business; this module decides which files exist and when.
//!
//! One file per stage of the pipeline (docs/ARCHITECTURE.md):
//! [`Index`] in `index.rs` is the façade; `options.rs` and `types.rs` hold
//! what it takes and answers; `core.rs` what its threads share; `write.rs`,
//! `flush.rs`, `compaction/` the path of a write; `read.rs` the path of a
//! query; `recovery.rs` the open; `reader.rs` readers beside a writer
//! in another process; `check.rs` `verify`; `backup.rs`
//! backups; `segment.rs` and `files.rs` the files.

mod backup;
mod check;
mod compaction;
mod core;
mod decoded;
#[cfg(feature = "fault-injection")]
pub mod fault;
mod files;
mod flat;
mod flush;
pub mod fs;
mod index;
mod keys;
pub mod lock;
mod memtable;
mod options;
mod pending;
mod read;
mod reader;
mod recovery;
mod repair;
pub mod schedule;
mod segment;
mod types;
mod verified;
mod write;

pub use backup::BackupReport;
pub use compaction::policy;
pub use index::Index;
pub use options::{Durability, Options};
pub use repair::{LOST_AND_FOUND, RepairReport};
pub use types::{Doc, Docs, Match, Stats, VerifyReport, WalTail};
pub use verified::{Checked, Rule, VerifiedMatch};
