//! Commands on a persistent index directory.

use std::io::Write;
use std::path::PathBuf;

use simhashdb::{Index, Options, Stats};

use crate::error::CliError;
use crate::input::open_output;

#[derive(clap::Args, Debug)]
pub struct CompactArgs {
    /// The index directory.
    #[arg(long)]
    db: PathBuf,
}

fn failure(e: simhashdb::Error) -> CliError {
    CliError::Failure(e.to_string())
}

fn describe(stats: &Stats) -> String {
    format!(
        "{} segment(s), {} documents, {} tombstones, {:.1} MiB",
        stats.segments,
        stats.segment_docs,
        stats.tombstones,
        stats.disk_bytes as f64 / (1 << 20) as f64
    )
}

/// `compact`: the offline compaction tool. Takes the index's writer lock, so
/// it fails clearly while a service has the index open.
pub fn compact(args: &CompactArgs) -> Result<(), CliError> {
    if !args.db.join("MANIFEST").exists() {
        return Err(CliError::Input(format!(
            "{} holds no index",
            args.db.display()
        )));
    }
    let index = Index::open(&args.db, Options::default()).map_err(failure)?;
    let before = index.stats();
    index.compact().map_err(failure)?;
    let after = index.stats();
    let mut out = open_output("-")?;
    writeln!(
        out,
        "before: {}\nafter:  {}",
        describe(&before),
        describe(&after)
    )
    .and_then(|()| out.flush())
    .map_err(|e| CliError::write("standard output", e))
}
