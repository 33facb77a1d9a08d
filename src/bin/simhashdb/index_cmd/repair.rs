//! `simhashdb repair`: a damaged index made openable again.

use std::time::Duration;

use simhashdb::{Index, Options};

use super::{Db, parse_duration, print};
use crate::docs::FingerprintArgs;
use crate::error::CliError;
use crate::input::escape_field;

#[derive(clap::Args, Debug)]
pub struct RepairArgs {
    #[command(flatten)]
    db: Db,
    /// Used only if neither MANIFEST nor MANIFEST.tmp can be read: the
    /// distance the index was created with.
    #[arg(short, long, default_value_t = 3)]
    distance: u32,
    /// Used only if no manifest can be read: the expected number of
    /// documents the index was created with.
    #[arg(long, default_value_t = Options::default().expected_n, value_name = "N")]
    expected_n: u64,
    /// Used only if no manifest can be read: the retention it was created with.
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    retention: Option<Duration>,
    #[command(flatten)]
    fingerprint: FingerprintArgs,
}

/// `repair`: rebuilds the manifest from the files that pass their
/// checksums, moves the others to `lost+found/`, then verifies the result.
pub fn repair(args: &RepairArgs) -> Result<(), CliError> {
    let hasher = args.fingerprint.hasher()?;
    let plan = simhashdb::plan::Plan::auto(args.expected_n, args.distance)
        .map_err(|e| CliError::Input(format!("--distance {}: {e}", args.distance)))?;
    let mut options = Options::new().plan(plan).fingerprint(hasher.config());
    options.retention = args.retention;
    let report = Index::repair(&args.db.db, options)?;
    let mut text = format!(
        "settings from: {}\nkept: {} segment(s){}; {} WAL record(s) in {}\n",
        report.settings_from,
        report.kept_segments.len(),
        if report.kept_segments.is_empty() {
            String::new()
        } else {
            format!(
                " ({})",
                report
                    .kept_segments
                    .iter()
                    .map(u64::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        },
        report.wal_records,
        report.wal,
    );
    if report.wal_records_dropped > 0 {
        text.push_str(&format!(
            "not kept: {} WAL record(s) after a gap in sequence numbers or numbered past \
             what an index hands out\n",
            report.wal_records_dropped
        ));
    }
    if report.wal_records_not_newer > 0 {
        text.push_str(&format!(
            "not kept: {} WAL record(s) not newer than the kept segments\n",
            report.wal_records_not_newer
        ));
    }
    for (name, why) in &report.set_aside {
        text.push_str(&format!(
            "set aside in {}: {}: {why}\n",
            simhashdb::engine::LOST_AND_FOUND,
            escape_field(name)
        ));
    }
    let verified = Index::open_read_only(&args.db.db)?.verify()?;
    text.push_str(&format!(
        "verify: ok: {} files, {} bytes checked\n",
        verified.files, verified.bytes
    ));
    print(&text)
}
