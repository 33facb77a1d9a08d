//! `simhashdb compact`: the offline compaction tool.

use simhashdb::Stats;

use super::{Db, dir_bytes, format_bytes, logged, print};
use crate::error::CliError;
use crate::progress;

#[derive(clap::Args, Debug)]
pub struct CompactArgs {
    #[command(flatten)]
    db: Db,
}

fn describe(stats: &Stats, dir_bytes: u64) -> String {
    format!(
        "{} segment(s), {} entries ({} in the write-ahead log), {} tombstones, {} on disk",
        stats.segments,
        stats.segment_docs + logged(stats),
        logged(stats),
        stats.tombstones,
        format_bytes(dir_bytes)
    )
}

/// `compact`: the offline compaction tool. Takes the index's writer lock, so
/// it fails clearly while a service has the index open.
pub fn compact(args: &CompactArgs) -> Result<(), CliError> {
    let index = args.db.writer()?;
    let before = describe(&index.stats(), dir_bytes(&args.db.db)?);
    let spinner = progress::spinner("compacting");
    let result = index.compact();
    spinner.finish_and_clear();
    result?;
    let after = describe(&index.stats(), dir_bytes(&args.db.db)?);
    print(&format!("before: {before}\nafter:  {after}\n"))
}
