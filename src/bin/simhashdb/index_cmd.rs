//! Commands on a persistent index directory.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::json;
use simhashdb::{Index, Options, Stats};

use crate::docs::{self, FingerprintArgs, ReadArgs, collect_inputs, doc_id, read_documents};
use crate::error::CliError;
use crate::input::{
    check_complete, display_name, lines, open_output, parse_decimal_u64, parse_id_fingerprint,
    parse_named_text, read_all, snippet,
};
use crate::progress;

/// The index directory argument of every index command.
#[derive(clap::Args, Debug)]
pub struct Db {
    /// The index directory.
    #[arg(long, value_name = "DIR")]
    pub db: PathBuf,
}

impl Db {
    /// Fails with a usage error unless the directory holds an index.
    pub fn existing(&self) -> Result<&Path, CliError> {
        if self.db.join("MANIFEST").exists() {
            Ok(&self.db)
        } else {
            Err(CliError::Input(format!(
                "{} holds no index (create one with `simhashdb create` or `simhashdb add`)",
                self.db.display()
            )))
        }
    }

    /// Opens the existing index for queries (a shared lock).
    pub fn read_only(&self) -> Result<Index, CliError> {
        Ok(Index::open_read_only(self.existing()?)?)
    }

    /// Opens the existing index for writing (the exclusive writer lock).
    pub fn writer(&self) -> Result<Index, CliError> {
        Ok(Index::open(self.existing()?, Options::default())?)
    }
}

fn print(text: &str) -> Result<(), CliError> {
    let mut out = open_output("-")?;
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .map_err(|e| CliError::write("standard output", e))
}

fn json_line(value: &serde_json::Value) -> String {
    format!("{value}\n")
}

// ---------------------------------------------------------------- create

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
}

/// Parses `N` followed by a unit: `s`, `m`, `h` or `d`.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let bad = || format!("expected a number and a unit (s, m, h or d), such as 48h; got `{s}`");
    let split = s.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?;
    let (digits, unit) = s.split_at(split);
    let n: u64 = digits.parse().map_err(|_| bad())?;
    let seconds = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        _ => return Err(bad()),
    };
    if n == 0 {
        return Err(format!("a retention of `{s}` would keep nothing"));
    }
    n.checked_mul(seconds)
        .map(Duration::from_secs)
        .ok_or_else(bad)
}

pub fn create(args: &CreateArgs) -> Result<(), CliError> {
    if args.db.db.join("MANIFEST").exists() {
        return Err(CliError::Input(format!(
            "{} already holds an index; its settings were fixed when it was created",
            args.db.db.display()
        )));
    }
    let hasher = args.fingerprint.hasher()?;
    let options = Options {
        k: args.distance,
        expected_n: args.expected_n,
        fingerprint: Some(hasher.config()),
        retention: args.retention,
        ..Options::default()
    };
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

// ---------------------------------------------------------------- add

#[derive(clap::Args, Debug)]
pub struct AddArgs {
    #[command(flatten)]
    db: Db,
    /// Files or directories (read recursively; each file is a document named
    /// by its path), or `-`: standard input as `NAME<TAB>TEXT` lines.
    #[arg(required = true, value_name = "PATH")]
    paths: Vec<String>,
    /// The inputs hold `ID<TAB>FP[<TAB>NAME]` lines (decimal document id and
    /// fingerprint) instead of texts.
    #[arg(long)]
    fingerprints: bool,
    #[command(flatten)]
    read: ReadArgs,
}

/// Documents are written in batches of this many after all input has been
/// read and checked (a WAL frame has a size limit).
const DOCS_PER_BATCH: usize = 100_000;

pub fn add(args: &AddArgs) -> Result<(), CliError> {
    // Read and check everything before the index is opened: bad input
    // leaves it untouched (and does not even create it).
    let mut fp_lines: Vec<(u64, u64, Option<String>)> = Vec::new();
    let mut texts: Vec<(String, String)> = Vec::new();
    let mut files = Vec::new();
    if args.fingerprints {
        for arg in &args.paths {
            let source = display_name(arg, "standard input");
            let data = read_all(arg)?;
            check_complete(&data, &source)?;
            for (n, line) in lines(&data).enumerate() {
                fp_lines.push(parse_id_fingerprint(line, &source, n + 1)?);
            }
        }
    } else {
        let file_args: Vec<String> = args.paths.iter().filter(|p| *p != "-").cloned().collect();
        if file_args.len() < args.paths.len() {
            let data = read_all("-")?;
            check_complete(&data, "standard input")?;
            for (n, line) in lines(&data).enumerate() {
                let (name, text) = parse_named_text(line, "standard input", n + 1)?;
                texts.push((name.to_owned(), text.to_owned()));
            }
        }
        let (found, unlisted) = collect_inputs(&file_args);
        if !unlisted.is_empty() {
            return Err(CliError::Failure(format!(
                "nothing was added: cannot read {}",
                unlisted.join(", ")
            )));
        }
        files = found;
    }

    let index = Index::open(&args.db.db, Options::default())?;
    let hasher = docs::hasher_for(&index.stats().fingerprint_config)?;
    let weight = args.read.heading_weight;
    let mut batch: Vec<(u64, u64, Option<String>)> = fp_lines;
    batch.extend(texts.into_iter().map(|(name, text)| {
        let doc = docs::document(name, text.as_bytes(), args.read.html);
        (
            doc_id(&doc.name),
            doc.fingerprint(&hasher, weight),
            Some(doc.name),
        )
    }));
    let bar = progress::bytes(files.iter().map(|f| f.len).sum(), "reading");
    let (from_files, unreadable) = read_documents(&files, &args.read, &bar, |d| {
        (
            doc_id(&d.name),
            d.fingerprint(&hasher, weight),
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
    batch.extend(from_files);
    let count = batch.len();
    let mut rest = batch.into_iter().peekable();
    while rest.peek().is_some() {
        index.insert_batch(rest.by_ref().take(DOCS_PER_BATCH))?;
    }
    print(&format!(
        "added {count} documents to {}\n",
        args.db.db.display()
    ))
}

// ---------------------------------------------------------------- query

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
            docs::hasher_for(&index.stats().fingerprint_config)?.fingerprint(text)
        }
        (None, None, Some(path)) => {
            let hasher = docs::hasher_for(&index.stats().fingerprint_config)?;
            let is_html = args.html || crate::html::is_html_name(path);
            docs::document(path.clone(), &read_all(path)?, is_html).fingerprint(&hasher, 1.0)
        }
        (None, None, None) => unreachable!("clap requires one of them"),
    };
    let k = args.distance.unwrap_or(index.plan().k());
    let matches = index.query(fingerprint, k)?;
    let text = if args.json {
        let list: Vec<serde_json::Value> = matches
            .iter()
            .map(|m| {
                json!({
                    "id": m.id,
                    "name": m.name,
                    "fingerprint": m.fingerprint,
                    "distance": m.distance,
                })
            })
            .collect();
        json_line(&json!({
            "fingerprint": fingerprint,
            "distance": k,
            "matches": list,
        }))
    } else {
        matches
            .iter()
            .map(|m| {
                format!(
                    "{}\t{}\t{}\n",
                    m.distance,
                    m.id,
                    m.name.as_deref().unwrap_or("")
                )
            })
            .collect()
    };
    print(&text)
}

// ---------------------------------------------------------------- delete

/// Documents named on the command line: by name, or by id.
#[derive(clap::Args, Debug)]
#[command(group(clap::ArgGroup::new("which").required(true).multiple(true).args(["names", "id"])))]
pub struct Which {
    /// Document names (as given to `add` or `check`).
    #[arg(value_name = "NAME")]
    names: Vec<String>,
    /// Document ids.
    #[arg(long, value_name = "N")]
    id: Vec<u64>,
}

impl Which {
    /// `(id, how the user named it)` for every document given.
    fn ids(&self) -> Vec<(u64, String)> {
        self.names
            .iter()
            .map(|n| (doc_id(n), n.clone()))
            .chain(self.id.iter().map(|&id| (id, format!("id {id}"))))
            .collect()
    }
}

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
    for (id, label) in args.which.ids() {
        if index.get(id)?.is_some() {
            index.delete(id)?;
            text.push_str(&format!("deleted {label}\n"));
        } else {
            missing.push(label);
        }
    }
    print(&text)?;
    if missing.is_empty() {
        Ok(())
    } else {
        Err(CliError::Failure(format!(
            "not found: {}",
            missing.join(", ")
        )))
    }
}

// ---------------------------------------------------------------- compact

#[derive(clap::Args, Debug)]
pub struct CompactArgs {
    #[command(flatten)]
    db: Db,
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
    let index = args.db.writer()?;
    let before = index.stats();
    let spinner = progress::spinner("compacting");
    let result = index.compact();
    spinner.finish_and_clear();
    result?;
    let after = index.stats();
    print(&format!(
        "before: {}\nafter:  {}\n",
        describe(&before),
        describe(&after)
    ))
}

// ---------------------------------------------------------------- stats

#[derive(clap::Args, Debug)]
pub struct StatsArgs {
    #[command(flatten)]
    db: Db,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
}

pub fn stats(args: &StatsArgs) -> Result<(), CliError> {
    let index = args.db.read_only()?;
    let s = index.stats();
    let entries = s.segment_docs + s.memtable_docs as u64;
    let bytes_per_entry = if s.segment_docs > 0 {
        s.disk_bytes as f64 / s.segment_docs as f64
    } else {
        0.0
    };
    let text = if args.json {
        json_line(&json!({
            "plan": s.plan.to_string(),
            "k": s.plan.k(),
            "tables": s.plan.tables().len(),
            "fingerprint_config": s.fingerprint_config,
            "segments": s.segments,
            "segment_entries": s.segment_docs,
            "memtable_entries": s.memtable_docs,
            "tombstones": s.tombstones,
            "disk_bytes": s.disk_bytes,
            "disk_bytes_per_entry": bytes_per_entry,
            "table_bytes_per_key": s.table_bytes_per_key,
        }))
    } else {
        format!(
            "plan:          {} ({} tables, k = {})\n\
             fingerprint:   {}\n\
             segments:      {}\n\
             entries:       {} ({} in segments, {} in the write-ahead log)\n\
             tombstones:    {}\n\
             disk:          {} bytes, {:.1} bytes per entry\n\
             tables:        {:.2} bytes per fingerprint per table (raw: 8)\n",
            s.plan,
            s.plan.tables().len(),
            s.plan.k(),
            s.fingerprint_config,
            s.segments,
            entries,
            s.segment_docs,
            s.memtable_docs,
            s.tombstones,
            s.disk_bytes,
            bytes_per_entry,
            s.table_bytes_per_key,
        )
    };
    print(&text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("48h"), Ok(Duration::from_secs(48 * 3600)));
        assert_eq!(parse_duration("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("7d"), Ok(Duration::from_secs(7 * 86_400)));
        assert_eq!(parse_duration("30m"), Ok(Duration::from_secs(1800)));
        for bad in [
            "48",
            "h",
            "4.5h",
            "48 h",
            "0h",
            "1w",
            "-1h",
            "99999999999999999999d",
        ] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }
}
