//! `simhashdb verify`: every checksum of every file.

use super::{Db, print};
use crate::error::CliError;
use crate::progress;

#[derive(clap::Args, Debug)]
pub struct VerifyArgs {
    #[command(flatten)]
    db: Db,
}

/// `verify`: checks every checksum of every file and that the files agree;
/// exit code 0 when healthy, 3 when damaged (the message names the file and
/// offset). A WAL tail that recovery will drop is reported on stderr; in a
/// WAL of a `Sync` writer, a whole last frame that fails its checksum (a
/// damaged acknowledged write, unless power was just cut) is damage.
pub fn verify(args: &VerifyArgs) -> Result<(), CliError> {
    let index = args.db.read_only()?;
    let spinner = progress::spinner("verifying");
    let report = index.verify();
    spinner.finish_and_clear();
    let report = report?;
    for tail in &report.wal_tails {
        let what = if tail.complete_frame {
            "a whole last frame that fails its checksum"
        } else {
            "an incomplete last frame (an interrupted append)"
        };
        let message = format!(
            "{}: the last {} bytes, from offset {}, are {what}; recovery drops them",
            tail.path.display(),
            tail.bytes,
            tail.offset
        );
        if tail.complete_frame && !tail.unsynced_appends {
            return Err(CliError::Damaged(format!(
                "{message}. The WAL was written with --sync, so that batch was acknowledged unless power was cut while it was written"
            )));
        }
        eprintln!("warning: {message}");
    }
    print(&format!(
        "ok: {} files, {} bytes checked\n",
        report.files, report.bytes
    ))
}
