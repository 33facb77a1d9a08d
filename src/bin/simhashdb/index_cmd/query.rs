//! `simhashdb query`: the documents near a file, a text or a fingerprint.

use serde_json::json;

use super::{Db, json_line, print, to_json};
use crate::docs::{self};
use crate::error::CliError;
use crate::input::{display_name, escape_field, parse_decimal_u64, read_all, snippet};

#[derive(clap::Args, Debug)]
#[command(group(clap::ArgGroup::new("what").required(true).args(["path", "fp", "text"])))]
pub struct QueryArgs {
    #[command(flatten)]
    db: Db,
    /// A file whose text to look up (`-` for standard input).
    path: Option<String>,
    /// A fingerprint (decimal) to look up.
    #[arg(long, value_name = "N")]
    fp: Option<String>,
    /// A text to look up.
    #[arg(long)]
    text: Option<String>,
    /// Largest distance to report; default and maximum: the index's k.
    #[arg(short, long)]
    distance: Option<u32>,
    /// Read the file as HTML (by default only `.html`, `.htm` and `.xhtml` files are).
    #[arg(long)]
    html: bool,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
}

pub fn query(args: &QueryArgs) -> Result<(), CliError> {
    let index = args.db.read_only()?;
    let fingerprint = match (&args.fp, &args.text, &args.path) {
        (Some(fp), _, _) => parse_decimal_u64(fp.as_bytes())
            .map_err(|why| CliError::Input(format!("--fp {}: {why}", snippet(fp.as_bytes()))))?,
        (None, Some(text), _) => {
            let hasher = docs::hasher_for(&index)?;
            match hasher.fingerprint_checked(text) {
                Some(fp) if !docs::is_blank_text(text) => fp,
                _ => return Err(blank_query("--text")),
            }
        }
        (None, None, Some(path)) => {
            let hasher = docs::hasher_for(&index)?;
            let is_html = args.html || crate::html::is_html_name(path);
            let doc = docs::document(path.clone(), &read_all(path)?, is_html);
            let Some(fp) = doc.fingerprint_checked(&hasher, 1.0) else {
                return Err(blank_query(&display_name(path, "standard input")));
            };
            fp
        }
        (None, None, None) => unreachable!("clap requires one of them"),
    };
    let k = args.distance.unwrap_or(index.plan().k());
    let matches = index.query(fingerprint, k)?;
    let text = if args.json {
        json_line(&json!({
            "fingerprint": fingerprint,
            "distance": k,
            "matches": to_json(&matches)?,
        }))
    } else {
        matches
            .iter()
            .map(|m| {
                format!(
                    "{}\t{}\t{}\n",
                    m.distance,
                    m.id,
                    escape_field(m.name.as_deref().unwrap_or(""))
                )
            })
            .collect()
    };
    print(&text)
}

/// A blank text has no words and so no meaningful fingerprint; blank
/// documents are never stored, so a query for one is refused.
fn blank_query(what: &str) -> CliError {
    CliError::Input(format!(
        "{what} is blank (no letter or digit): blank documents are never stored"
    ))
}
