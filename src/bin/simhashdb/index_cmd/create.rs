//! `simhashdb create`: an index with chosen settings.

use std::time::Duration;

use simhashdb::{Index, Options};

use super::{Db, holds_index, parse_duration, print};
use crate::docs::FingerprintArgs;
use crate::error::CliError;

#[derive(clap::Args, Debug)]
pub struct CreateArgs {
    #[command(flatten)]
    db: Db,
    /// Largest distance queries will ask for (fixed at creation).
    #[arg(short, long, default_value_t = 3)]
    distance: u32,
    /// Expected number of documents; the table plan is chosen for it.
    #[arg(long, default_value_t = Options::default().expected_n, value_name = "N")]
    expected_n: u64,
    /// Keep documents only this long (e.g. 48h, 30m, 7d, 3600s); older ones
    /// are not returned and are dropped by compaction. Default: forever.
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    retention: Option<Duration>,
    #[command(flatten)]
    fingerprint: FingerprintArgs,
    /// Create the index even though the directory holds other files (never
    /// over index files: a directory with index files but no manifest needs
    /// `repair`).
    #[arg(long)]
    force: bool,
}

pub fn create(args: &CreateArgs) -> Result<(), CliError> {
    if holds_index(&args.db.db) {
        return Err(CliError::Input(format!(
            "{} already holds an index; its settings were fixed when it was created",
            args.db.db.display()
        )));
    }
    let hasher = args.fingerprint.hasher()?;
    // Checked before anything is created.
    let plan = simhashdb::plan::Plan::auto(args.expected_n, args.distance)
        .map_err(|e| CliError::Input(format!("--distance {}: {e}", args.distance)))?;
    let mut options = Options::new()
        .plan(plan)
        .fingerprint(hasher.config())
        .create_in_non_empty_dir(args.force);
    options.retention = args.retention;
    let index = Index::open(&args.db.db, options)?;
    let stats = index.stats();
    print(&format!(
        "created {}\nplan: {}\nfingerprint: {}\nretention: {}\n",
        args.db.db.display(),
        stats.plan,
        stats.fingerprint_config,
        args.retention
            .map_or("none".to_string(), |r| format!("{} s", r.as_secs()))
    ))
}
