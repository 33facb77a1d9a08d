//! `simhashdb delete`: documents by name or id.

use super::{Db, Which, print_then_report_missing};
use crate::error::CliError;

#[derive(clap::Args, Debug)]
pub struct DeleteArgs {
    #[command(flatten)]
    db: Db,
    #[command(flatten)]
    which: Which,
}

pub fn delete(args: &DeleteArgs) -> Result<(), CliError> {
    let index = args.db.writer()?;
    let mut text = String::new();
    let mut missing = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for (id, label) in args.which.ids() {
        if !seen.insert(id) {
            // Named twice (or by name and by id): deleted once.
            continue;
        }
        if index.get(id)?.is_some() {
            index.delete(id)?;
            text.push_str(&format!("deleted {label}\n"));
        } else {
            missing.push(label);
        }
    }
    print_then_report_missing(&text, &missing)
}
