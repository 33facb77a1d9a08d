//! `simhashdb query`: the documents near a file, a text or a fingerprint.

use serde_json::json;

use simhashdb::sketch::TextValues;

use super::check::similarity_field;
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
    /// Largest distance to report for --fp (default and maximum: the
    /// index's k); for a text, the distance at which a document without a
    /// sketch matches (default and maximum: the index's k). A text is
    /// answered by the verified rule: documents with a sketch match at
    /// --threshold, and each line ends with the similarity (`-` without a
    /// sketch) and the rule that decided (`sketch` or `fingerprint`), most
    /// similar first.
    #[arg(short, long)]
    distance: Option<u32>,
    /// For a text: the estimated similarity (0 to 1) from which a document
    /// with a sketch matches; default: 0.7, or 0.6 for a text mostly of Han
    /// characters.
    #[arg(long, value_name = "T")]
    threshold: Option<f64>,
    /// Read the file as HTML (by default only `.html`, `.htm` and `.xhtml` files are).
    #[arg(long)]
    html: bool,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
}

pub fn query(args: &QueryArgs) -> Result<(), CliError> {
    let index = args.db.read_only()?;
    if let Some(t) = args.threshold
        && !(0.0..=1.0).contains(&t)
    {
        return Err(CliError::Input(format!(
            "--threshold {t}: a similarity threshold lies between 0 and 1"
        )));
    }
    // A text's values, or a bare fingerprint.
    let values = match (&args.fp, &args.text, &args.path) {
        (Some(fp), _, _) => Err(parse_decimal_u64(fp.as_bytes())
            .map_err(|why| CliError::Input(format!("--fp {}: {why}", snippet(fp.as_bytes()))))?),
        (None, Some(text), _) => {
            let hasher = docs::hasher_for(&index)?;
            match hasher.fingerprint_checked(text) {
                Some(_) if !docs::is_blank_text(text) => Ok(TextValues::of(&hasher, text)),
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
            let mut values = TextValues::of(&hasher, &doc.text);
            values.fingerprint = Some(fp);
            Ok(values)
        }
        (None, None, None) => unreachable!("clap requires one of them"),
    };
    let text = match values {
        Err(fingerprint) => {
            let k = args.distance.unwrap_or(index.plan().k());
            let matches = index.query(fingerprint, k)?;
            if args.json {
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
            }
        }
        Ok(mut values) => {
            let k = args.distance.unwrap_or(index.plan().k());
            if let Some(t) = args.threshold {
                values.threshold = t;
            }
            let matches = index.query_verified(&values, k)?;
            if args.json {
                json_line(&json!({
                    "fingerprint": values.fingerprint,
                    "distance": k,
                    "threshold": values.threshold,
                    "matches": to_json(&matches)?,
                }))
            } else {
                matches
                    .iter()
                    .map(|m| {
                        format!(
                            "{}\t{}\t{}\t{}\t{}\n",
                            m.doc.distance,
                            m.doc.id,
                            escape_field(m.doc.name.as_deref().unwrap_or("")),
                            similarity_field(m.similarity),
                            m.rule.as_str()
                        )
                    })
                    .collect()
            }
        }
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
