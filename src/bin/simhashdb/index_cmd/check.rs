//! `simhashdb check`: streaming check-and-insert of `NAME<TAB>TEXT` lines.

use std::io::{BufRead, Read, Write};

use simhashdb::sketch::TextValues;
use simhashdb::{Durability, Index, Options, doc_id};

use super::{Db, recorded_settings};
use crate::docs::{self};
use crate::error::CliError;
use crate::input::{MAX_LINE_BYTES, escape_field, line_error, parse_named_text};

#[derive(clap::Args, Debug)]
pub struct CheckArgs {
    #[command(flatten)]
    db: Db,
    /// Largest distance at which a stored document without a sketch (added
    /// by fingerprint, or by a version before sketches) counts as a
    /// duplicate; default and maximum: the index's k (6 for an index that
    /// `check` creates).
    /// Documents with a sketch are judged by --threshold instead.
    #[arg(short, long)]
    distance: Option<u32>,
    /// Estimated similarity (Jaccard of the word 5-shingles, 0 to 1) from
    /// which a stored document with a sketch is a duplicate; default: 0.7,
    /// or 0.6 for a text mostly of Han characters.
    #[arg(long, value_name = "T")]
    threshold: Option<f64>,
    /// The texts are HTML: only their visible text counts.
    #[arg(long)]
    html: bool,
    /// Sync every insert to the device before printing `new` (survives power
    /// loss, not only a crash of the process).
    #[arg(long)]
    sync: bool,
}

/// `check`: reads `NAME<TAB>TEXT` lines from standard input as they arrive;
/// for each, atomically inserts it (with its sketch) and prints `new`, or
/// prints `dup<TAB>NAME<TAB>DISTANCE<TAB>SIMILARITY<TAB>RULE` of the most
/// similar existing document accepted by the verified rule
/// (`Index::insert_text_if_new`).
pub fn check(args: &CheckArgs) -> Result<(), CliError> {
    let options = Options::for_texts().durability(if args.sync {
        Durability::Sync
    } else {
        Durability::Buffered
    });
    if let Some(t) = args.threshold
        && !(0.0..=1.0).contains(&t)
    {
        return Err(CliError::Input(format!(
            "--threshold {t}: a similarity threshold lies between 0 and 1"
        )));
    }
    // Checked before the index is opened (or created).
    let plan_k = recorded_settings(&args.db.db)?.map_or(options.k, |m| m.k);
    let k = args.distance.unwrap_or(plan_k);
    if k > plan_k {
        return Err(simhashdb::Error::DistanceTooLarge {
            requested: k,
            plan_k,
        }
        .into());
    }
    let index = Index::open(&args.db.db, options)?;
    let hasher = docs::hasher_for(&index)?;
    if k > index.plan().k() {
        return Err(simhashdb::Error::DistanceTooLarge {
            requested: k,
            plan_k: index.plan().k(),
        }
        .into());
    }
    let stdin = std::io::stdin();
    let mut input = stdin.lock();
    let mut out = std::io::stdout().lock();
    let write_err = |e| CliError::write("standard output", e);
    let mut line = Vec::new();
    for n in 1.. {
        line.clear();
        let read = input
            .by_ref()
            .take(MAX_LINE_BYTES as u64 + 2)
            .read_until(b'\n', &mut line)
            .map_err(|e| CliError::read("standard input", e))?;
        if read == 0 {
            break;
        }
        match line.strip_suffix(b"\n") {
            Some(rest) => {
                let len = rest.len();
                line.truncate(len);
            }
            None if line.len() > MAX_LINE_BYTES => {
                return Err(line_error(
                    "standard input",
                    n,
                    format!("line longer than the limit of {MAX_LINE_BYTES} bytes"),
                ));
            }
            None => {
                return Err(line_error(
                    "standard input",
                    n,
                    "truncated: the input ends without a newline after this line",
                ));
            }
        }
        if line.ends_with(b"\r") {
            line.pop();
        }
        let (name, text) = parse_named_text(&line, "standard input", n)?;
        let doc = docs::document(name.to_owned(), text.as_bytes(), args.html);
        let Some(fp) = doc.fingerprint_checked(&hasher, 1.0) else {
            out.write_all(b"blank\n")
                .and_then(|()| out.flush())
                .map_err(write_err)?;
            continue;
        };
        let mut values = TextValues::of(&hasher, &doc.text);
        values.fingerprint = Some(fp);
        if let Some(t) = args.threshold {
            values.threshold = t;
        }
        let id = doc_id(&doc.name);
        let answer = match index
            .insert_if_new_many_verified([(id, values, Some(doc.name))], k, usize::MAX)?
            .pop()
        {
            Some(Ok(())) => "new\n".to_string(),
            Some(Err(matches)) => {
                let best = &matches[0];
                let name = best
                    .doc
                    .name
                    .clone()
                    .unwrap_or_else(|| format!("id {}", best.doc.id));
                format!(
                    "dup\t{}\t{}\t{}\t{}\n",
                    escape_field(&name),
                    best.doc.distance,
                    similarity_field(best.similarity),
                    best.rule.as_str()
                )
            }
            None => unreachable!("one answer per document"),
        };
        out.write_all(answer.as_bytes())
            .and_then(|()| out.flush())
            .map_err(write_err)?;
    }
    Ok(())
}

/// A similarity as the text outputs print it: three decimals, or `-` for a
/// document matched on its fingerprint.
pub fn similarity_field(similarity: Option<f64>) -> String {
    similarity.map_or_else(|| "-".to_owned(), |s| format!("{s:.3}"))
}
