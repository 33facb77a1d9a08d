//! `simhashdb backup`: a consistent copy of an index, whether or not
//! another process has it open.

use std::path::PathBuf;

use simhashdb::engine::lock::{DirLock, LockError};
use simhashdb::{BackupReport, Index};

use super::{Db, format_bytes, json_line, print};
use crate::error::CliError;

#[derive(clap::Args, Debug)]
pub struct BackupArgs {
    #[command(flatten)]
    db: Db,
    /// The backup's directory: a new path, or an empty directory.
    #[arg(value_name = "DEST")]
    dest: PathBuf,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
}

/// `backup`: [`Index::backup_dir`], holding a reader's lock on the index
/// (so no writer starts meanwhile) unless another process holds its writer
/// lock (a `simhashdb serve`); then without it. Either way nothing of the
/// index is replayed or changed: its files are linked and copied.
pub fn backup(args: &BackupArgs) -> Result<(), CliError> {
    let dir = args.db.existing()?;
    let _shared = match DirLock::shared(dir) {
        Ok(lock) => Some(lock),
        Err(LockError::Locked { .. }) => None,
        Err(e) => return Err(CliError::Failure(e.to_string())),
    };
    let report = Index::backup_dir(dir, &args.dest)?;
    if args.json {
        print(&json_line(&report_json(&report)))
    } else {
        print(&format!(
            "backed up to {}: {} file(s) linked, {} copied ({} written), {} in all; every \
             write numbered below {} (generation {})\n",
            report.dest.display(),
            report.linked,
            report.copied,
            format_bytes(report.copied_bytes),
            format_bytes(report.bytes),
            report.next_seq,
            report.generation
        ))
    }
}

fn report_json(report: &BackupReport) -> serde_json::Value {
    serde_json::json!({
        "dest": report.dest.display().to_string(),
        "linked": report.linked,
        "copied": report.copied,
        "bytes": report.bytes,
        "copied_bytes": report.copied_bytes,
        "next_seq": report.next_seq,
        "generation": report.generation,
    })
}
