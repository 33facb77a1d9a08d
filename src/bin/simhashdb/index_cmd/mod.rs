//! Commands on a persistent index directory: one file per command, and
//! here what several share (the `--db` argument, the recorded settings,
//! output, documents named on the command line, sizes).

mod add;
mod backup;
mod check;
mod compact;
mod create;
mod delete;
mod get;
mod query;
mod repair;
mod stats;
mod verify;

pub use add::{AddArgs, add};
pub use backup::{BackupArgs, backup};
pub use check::{CheckArgs, check};
pub use compact::{CompactArgs, compact};
pub use create::{CreateArgs, create};
pub use delete::{DeleteArgs, delete};
pub use get::{GetArgs, get};
pub use query::{QueryArgs, query};
pub use repair::{RepairArgs, repair};
pub use stats::{StatsArgs, stats};
pub use verify::{VerifyArgs, verify};

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use simhashdb::format::{FileKind, Manifest};
use simhashdb::{FingerprintConfig, Index, Options, Simhasher, Stats, doc_id};

use crate::docs::{self};
use crate::error::CliError;
use crate::input::open_output;

/// The index directory argument of every index command.
#[derive(clap::Args, Debug)]
pub struct Db {
    /// The index directory.
    #[arg(long, value_name = "DIR")]
    pub db: PathBuf,
}

/// Whether `dir` holds an index (its manifest, the commit point, exists).
fn holds_index(dir: &Path) -> bool {
    dir.join(FileKind::Manifest.file_name(0)).exists()
}

impl Db {
    /// Fails with a usage error unless the directory holds an index, and
    /// with exit code 3 if it holds index files without a manifest.
    pub fn existing(&self) -> Result<&Path, CliError> {
        if holds_index(&self.db) {
            Ok(&self.db)
        } else if let Err(e @ simhashdb::Error::ManifestMissing { .. }) =
            Index::open_read_only(&self.db)
        {
            Err(e.into())
        } else {
            Err(CliError::Input(format!(
                "{} holds no index (create one with `simhashdb create` or `simhashdb add`)",
                self.db.display()
            )))
        }
    }

    /// Opens the existing index for queries (no lock: beside any writer).
    pub fn read_only(&self) -> Result<Index, CliError> {
        Ok(Index::open_read_only(self.existing()?)?)
    }

    /// Opens the existing index for writing (the exclusive writer lock).
    pub fn writer(&self) -> Result<Index, CliError> {
        Ok(Index::open(self.existing()?, Options::default())?)
    }
}

/// The settings recorded in the index in `dir`, read from its manifest
/// without opening the index, so that input can be checked against them
/// before anything is opened or created; `None` if there is no manifest.
fn recorded_settings(dir: &Path) -> Result<Option<Manifest>, CliError> {
    let path = dir.join(FileKind::Manifest.file_name(0));
    match std::fs::read(&path) {
        Ok(bytes) => Manifest::decode(&bytes).map(Some).map_err(|e| {
            CliError::Damaged(format!(
                "{} is corrupted at byte {}: {e}",
                path.display(),
                e.offset
            ))
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(CliError::read(&path.display().to_string(), e)),
    }
}

/// The fingerprint configuration and hasher recorded by the index in `dir`,
/// if there is one.
pub fn existing_index_hasher(dir: &Path) -> Result<Option<(String, Simhasher)>, CliError> {
    match recorded_settings(dir)? {
        Some(manifest) => {
            let hasher = docs::hasher_for_config(&manifest.fingerprint_config)?;
            Ok(Some((manifest.fingerprint_config, hasher)))
        }
        None => Ok(None),
    }
}

/// The fingerprint configuration the index in `dir` records, or the one a
/// new index gets, with its hasher.
fn index_hasher(dir: &Path) -> Result<(FingerprintConfig, Simhasher), CliError> {
    let line = match recorded_settings(dir)? {
        Some(manifest) => manifest.fingerprint_config,
        None => Simhasher::default().config().to_string(),
    };
    let hasher = docs::hasher_for_config(&line)?;
    Ok((hasher.config(), hasher))
}

fn print(text: &str) -> Result<(), CliError> {
    let mut out = open_output("-")?;
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .map_err(|e| CliError::write("standard output", e))
}

fn json_line(value: &serde_json::Value) -> String {
    format!("{value}\n")
}

/// The library's result types (`Match`, `Doc`) as JSON values, through their
/// `Serialize` (the `serde` feature). An object's keys come out sorted, as
/// for the objects built here with `json!`.
fn to_json(value: &impl serde::Serialize) -> Result<serde_json::Value, CliError> {
    serde_json::to_value(value)
        .map_err(|e| CliError::Failure(format!("cannot write JSON output: {e}")))
}

/// Parses `N` followed by a unit: `s`, `m`, `h` or `d`.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let bad = || format!("expected a number and a unit (s, m, h or d), such as 48h; got `{s}`");
    let split = s.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?;
    let (digits, unit) = s.split_at(split);
    let n: u64 = digits.parse().map_err(|_| bad())?;
    let seconds = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        _ => return Err(bad()),
    };
    if n == 0 {
        return Err(format!("a retention of `{s}` would keep nothing"));
    }
    n.checked_mul(seconds)
        .map(Duration::from_secs)
        .ok_or_else(bad)
}

// ---------------------------------------------------------------- delete

/// Documents named on the command line: by name, or by id.
#[derive(clap::Args, Debug)]
#[command(group(clap::ArgGroup::new("which").required(true).multiple(true).args(["names", "id"])))]
pub struct Which {
    /// Document names (as given to `add` or `check`).
    #[arg(value_name = "NAME")]
    names: Vec<String>,
    /// Document ids.
    #[arg(long, value_name = "N")]
    id: Vec<u64>,
}

impl Which {
    /// `(id, how the user named it)` for every document given.
    fn ids(&self) -> Vec<(u64, String)> {
        self.names
            .iter()
            .map(|n| (doc_id(n), n.clone()))
            .chain(self.id.iter().map(|&id| (id, format!("id {id}"))))
            .collect()
    }
}

/// Prints what was found, then fails naming the documents that were not.
fn print_then_report_missing(text: &str, missing: &[String]) -> Result<(), CliError> {
    print(text)?;
    if missing.is_empty() {
        Ok(())
    } else {
        Err(CliError::Failure(format!(
            "not found: {}",
            missing.join(", ")
        )))
    }
}

/// Entries not yet in a segment: in the memtable, or in one being flushed.
fn logged(stats: &Stats) -> u64 {
    (stats.memtable_docs + stats.flushing_docs) as u64
}

/// Total size of the files in the index directory.
fn dir_bytes(dir: &Path) -> Result<u64, CliError> {
    let entries =
        std::fs::read_dir(dir).map_err(|e| CliError::read(&dir.display().to_string(), e))?;
    let mut total = 0;
    for entry in entries {
        let entry = entry.map_err(|e| CliError::read(&dir.display().to_string(), e))?;
        if let Ok(meta) = entry.metadata()
            && meta.is_file()
        {
            total += meta.len();
        }
    }
    Ok(total)
}

fn format_bytes(n: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut v = n as f64 / 1024.0;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    format!("{v:.1} {}", UNITS[u])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("48h"), Ok(Duration::from_secs(48 * 3600)));
        assert_eq!(parse_duration("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("7d"), Ok(Duration::from_secs(7 * 86_400)));
        assert_eq!(parse_duration("30m"), Ok(Duration::from_secs(1800)));
        for bad in [
            "48",
            "h",
            "4.5h",
            "48 h",
            "0h",
            "1w",
            "-1h",
            "99999999999999999999d",
        ] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }
}
