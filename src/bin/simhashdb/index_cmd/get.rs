//! `simhashdb get`: stored documents by name or id.

use super::{Db, Which, json_line, print_then_report_missing, to_json};
use crate::error::CliError;
use crate::input::escape_field;

#[derive(clap::Args, Debug)]
pub struct GetArgs {
    #[command(flatten)]
    db: Db,
    #[command(flatten)]
    which: Which,
    /// Print one JSON object per document.
    #[arg(long)]
    json: bool,
}

/// `get`: prints `ID<TAB>FINGERPRINT<TAB>TIMESTAMP_MS<TAB>NAME` per document.
pub fn get(args: &GetArgs) -> Result<(), CliError> {
    let index = args.db.read_only()?;
    let mut text = String::new();
    let mut missing = Vec::new();
    for (id, label) in args.which.ids() {
        match index.get_doc(id)? {
            Some(doc) if args.json => text.push_str(&json_line(&to_json(&doc)?)),
            Some(doc) => text.push_str(&format!(
                "{}\t{}\t{}\t{}\n",
                doc.id,
                doc.fingerprint,
                doc.timestamp_ms,
                escape_field(doc.name.as_deref().unwrap_or(""))
            )),
            None => missing.push(label),
        }
    }
    print_then_report_missing(&text, &missing)
}
