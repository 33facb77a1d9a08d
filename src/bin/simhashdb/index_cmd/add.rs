//! `simhashdb add`: documents or fingerprints from files, directories or standard input.

use simhashdb::sketch::Sketch;
use simhashdb::{Index, Options, doc_id};

use super::{Db, index_hasher, print};
use crate::docs::{self, Blank, ReadArgs, collect_inputs, read_documents};
use crate::error::CliError;
use crate::input::{
    check_complete, display_name, lines, parse_id_fingerprint, parse_named_text, read_all,
};
use crate::progress;

#[derive(clap::Args, Debug)]
pub struct AddArgs {
    #[command(flatten)]
    db: Db,
    /// Files or directories (read recursively; each file is a document named
    /// by its path), or `-`: standard input as `NAME<TAB>TEXT` lines.
    #[arg(required = true, value_name = "PATH")]
    paths: Vec<std::ffi::OsString>,
    /// The inputs hold `ID<TAB>FP[<TAB>NAME]` lines (decimal document id and
    /// fingerprint) instead of texts.
    #[arg(long)]
    fingerprints: bool,
    #[command(flatten)]
    read: ReadArgs,
}

/// Documents are written in batches of at most this many bytes of WAL
/// records (a WAL frame holds at most 256 MiB), after all input has been
/// read and checked.
const BATCH_BYTES: usize = 64 << 20;

/// The bytes a document takes in a WAL frame (docs/FORMAT.md, "WAL file"):
/// 16 more with a sketch.
fn wal_record_bytes(sketch: Option<&Sketch>, name: Option<&str>) -> usize {
    37 + sketch.map_or(0, |_| Sketch::BYTES) + name.map_or(0, str::len)
}

pub fn add(args: &AddArgs) -> Result<(), CliError> {
    // Read and check everything before the index is opened: bad input
    // leaves it untouched (and does not even create it).
    let (config, hasher) = index_hasher(&args.db.db)?;
    let weight = args.read.heading_weight;
    // Texts are stored with their sketch (verified answers).
    let mut batch: Vec<(u64, u64, Option<Sketch>, Option<String>)> = Vec::new();
    let mut blanks = 0;
    if args.fingerprints {
        for arg in &args.paths {
            let arg = arg.to_string_lossy();
            let source = display_name(&arg, "standard input");
            let data = read_all(&arg)?;
            check_complete(&data, &source)?;
            for (n, line) in lines(&data).enumerate() {
                let (id, fp, name) = parse_id_fingerprint(line, &source, n + 1)?;
                batch.push((id, fp, None, name));
            }
        }
    } else {
        let file_args: Vec<std::ffi::OsString> =
            args.paths.iter().filter(|p| *p != "-").cloned().collect();
        if file_args.len() < args.paths.len() {
            let data = read_all("-")?;
            check_complete(&data, "standard input")?;
            for (n, line) in lines(&data).enumerate() {
                let (name, text) = parse_named_text(line, "standard input", n + 1)?;
                let doc = docs::document(name.to_owned(), text.as_bytes(), args.read.html);
                let Some(fp) = doc.fingerprint_checked(&hasher, weight) else {
                    blanks += 1;
                    continue;
                };
                let sketch = Sketch::from_text(&hasher, &doc.text);
                batch.push((doc_id(&doc.name), fp, Some(sketch), Some(doc.name)));
            }
        }
        let (files, unlisted) = collect_inputs(&file_args, &args.read.walk);
        if !unlisted.is_empty() {
            return Err(CliError::Failure(format!(
                "nothing was added: cannot read {}",
                unlisted.join(", ")
            )));
        }
        let bar = progress::bytes(files.iter().map(|f| f.len).sum(), "reading");
        let (from_files, unreadable, blank_files) =
            read_documents(&files, &args.read, Blank::Skip, &bar, |d| {
                (
                    doc_id(&d.name),
                    d.fingerprint(&hasher, weight),
                    Some(Sketch::from_text(&hasher, &d.text)),
                    Some(d.name),
                )
            });
        bar.finish_and_clear();
        if !unreadable.is_empty() {
            return Err(CliError::Failure(format!(
                "nothing was added: cannot read {}",
                unreadable.join(", ")
            )));
        }
        blanks += blank_files;
        batch.extend(from_files);
    }
    let distinct = batch
        .iter()
        .map(|d| d.0)
        .collect::<std::collections::HashSet<u64>>()
        .len();

    // The recorded configuration is checked again under the lock.
    // A new index of texts gets the plan k verified answers search at.
    let options = if args.fingerprints {
        Options::new()
    } else {
        Options::for_texts()
    }
    .fingerprint(config);
    let index = Index::open(&args.db.db, options)?;
    let mut rest = batch.into_iter().peekable();
    while rest.peek().is_some() {
        let mut bytes = 0;
        let docs = std::iter::from_fn(|| {
            let next = rest.next_if(|d| {
                bytes == 0 || bytes + wal_record_bytes(d.2.as_ref(), d.3.as_deref()) <= BATCH_BYTES
            })?;
            bytes += wal_record_bytes(next.2.as_ref(), next.3.as_deref());
            Some(next)
        });
        index.insert_batch_sketched(docs.collect::<Vec<_>>())?;
    }
    if blanks > 0 {
        eprintln!(
            "simhashdb: left out {blanks} blank document(s) (no letter or digit: they would all \
             be duplicates of each other)"
        );
    }
    print(&format!(
        "added {distinct} documents to {}\n",
        args.db.db.display()
    ))
}
