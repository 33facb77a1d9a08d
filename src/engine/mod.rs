//! The persistent index: files, policy, recovery. Bytes on disk are
//! `crate::format`'s business; this module decides which files exist and when.

mod bulk_read;
#[cfg(feature = "fault-injection")]
pub mod fault;
pub mod fs;
mod index;
mod keys;
pub mod lock;
mod memtable;
mod options_builder;
pub mod policy;
mod repair;
pub mod schedule;

pub use bulk_read::Docs;
pub use index::{Doc, Durability, Index, Match, Options, Stats, VerifyReport, WalTail};
pub use repair::{LOST_AND_FOUND, RepairReport};
