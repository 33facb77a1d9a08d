//! Commands on a persistent index directory.

use std::io::{BufRead, Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::json;
use simhashdb::format::{FileKind, Manifest};
use simhashdb::{Durability, FingerprintConfig, Index, Options, Simhasher, Stats, doc_id};

use crate::docs::{self, Blank, FingerprintArgs, ReadArgs, collect_inputs, read_documents};
use crate::error::CliError;
use crate::input::{
    MAX_LINE_BYTES, check_complete, display_name, escape_field, line_error, lines, open_output,
    parse_decimal_u64, parse_id_fingerprint, parse_named_text, read_all, snippet,
};
use crate::progress;

/// The index directory argument of every index command.
#[derive(clap::Args, Debug)]
pub struct Db {
    /// The index directory.
    #[arg(long, value_name = "DIR")]
    pub db: PathBuf,
}

/// Whether `dir` holds an index (its manifest, the commit point, exists).
fn holds_index(dir: &Path) -> bool {
    dir.join(FileKind::Manifest.file_name(0)).exists()
}

impl Db {
    /// Fails with a usage error unless the directory holds an index, and
    /// with exit code 3 if it holds index files without a manifest.
    pub fn existing(&self) -> Result<&Path, CliError> {
        if holds_index(&self.db) {
            Ok(&self.db)
        } else if let Err(e @ simhashdb::Error::ManifestMissing { .. }) =
            Index::open_read_only(&self.db)
        {
            Err(e.into())
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

/// The settings recorded in the index in `dir`, read from its manifest
/// without opening the index, so that input can be checked against them
/// before anything is opened or created; `None` if there is no manifest.
fn recorded_settings(dir: &Path) -> Result<Option<Manifest>, CliError> {
    let path = dir.join(FileKind::Manifest.file_name(0));
    match std::fs::read(&path) {
        Ok(bytes) => Manifest::decode(&bytes).map(Some).map_err(|e| {
            CliError::Damaged(format!(
                "{} is corrupted at byte {}: {e}",
                path.display(),
                e.offset
            ))
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(CliError::read(&path.display().to_string(), e)),
    }
}

/// The fingerprint configuration the index in `dir` records, or the one a
/// new index gets, with its hasher.
fn index_hasher(dir: &Path) -> Result<(FingerprintConfig, Simhasher), CliError> {
    let line = match recorded_settings(dir)? {
        Some(manifest) => manifest.fingerprint_config,
        None => Simhasher::default().config().to_string(),
    };
    let hasher = docs::hasher_for_config(&line)?;
    Ok((hasher.config(), hasher))
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

/// The library's result types (`Match`, `Doc`) as JSON values, through their
/// `Serialize` (the `serde` feature). An object's keys come out sorted, as
/// for the objects built here with `json!`.
fn to_json(value: &impl serde::Serialize) -> Result<serde_json::Value, CliError> {
    serde_json::to_value(value)
        .map_err(|e| CliError::Failure(format!("cannot write JSON output: {e}")))
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
    /// Create the index even though the directory holds other files (never
    /// over index files: a directory with index files but no manifest needs
    /// `repair`).
    #[arg(long)]
    force: bool,
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
    if holds_index(&args.db.db) {
        return Err(CliError::Input(format!(
            "{} already holds an index; its settings were fixed when it was created",
            args.db.db.display()
        )));
    }
    let hasher = args.fingerprint.hasher()?;
    // Checked before anything is created.
    let plan = simhashdb::plan::Plan::auto(args.expected_n, args.distance)
        .map_err(|e| CliError::Input(format!("--distance {}: {e}", args.distance)))?;
    let mut options = Options::new()
        .plan(plan)
        .fingerprint(hasher.config())
        .create_in_non_empty_dir(args.force);
    options.retention = args.retention;
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

/// The bytes a document takes in a WAL frame (docs/FORMAT.md, "WAL file").
fn wal_record_bytes(name: Option<&str>) -> usize {
    37 + name.map_or(0, str::len)
}

pub fn add(args: &AddArgs) -> Result<(), CliError> {
    // Read and check everything before the index is opened: bad input
    // leaves it untouched (and does not even create it).
    let (config, hasher) = index_hasher(&args.db.db)?;
    let weight = args.read.heading_weight;
    let mut batch: Vec<(u64, u64, Option<String>)> = Vec::new();
    let mut blanks = 0;
    if args.fingerprints {
        for arg in &args.paths {
            let arg = arg.to_string_lossy();
            let source = display_name(&arg, "standard input");
            let data = read_all(&arg)?;
            check_complete(&data, &source)?;
            for (n, line) in lines(&data).enumerate() {
                batch.push(parse_id_fingerprint(line, &source, n + 1)?);
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
                if doc.is_blank() {
                    blanks += 1;
                    continue;
                }
                let fp = doc.fingerprint(&hasher, weight);
                batch.push((doc_id(&doc.name), fp, Some(doc.name)));
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
    let options = Options::new().fingerprint(config);
    let index = Index::open(&args.db.db, options)?;
    let mut rest = batch.into_iter().peekable();
    while rest.peek().is_some() {
        let mut bytes = 0;
        let docs = std::iter::from_fn(|| {
            let next = rest.next_if(|d| {
                bytes == 0 || bytes + wal_record_bytes(d.2.as_deref()) <= BATCH_BYTES
            })?;
            bytes += wal_record_bytes(next.2.as_deref());
            Some(next)
        });
        index.insert_batch(docs.collect::<Vec<_>>())?;
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
            if docs::is_blank_text(text) {
                return Err(blank_query("--text"));
            }
            docs::hasher_for(&index)?.fingerprint(text)
        }
        (None, None, Some(path)) => {
            let hasher = docs::hasher_for(&index)?;
            let is_html = args.html || crate::html::is_html_name(path);
            let doc = docs::document(path.clone(), &read_all(path)?, is_html);
            if doc.is_blank() {
                return Err(blank_query(&display_name(path, "standard input")));
            }
            doc.fingerprint(&hasher, 1.0)
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

/// Prints what was found, then fails naming the documents that were not.
fn print_then_report_missing(text: &str, missing: &[String]) -> Result<(), CliError> {
    print(text)?;
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

/// Entries not yet in a segment: in the memtable, or in one being flushed.
fn logged(stats: &Stats) -> u64 {
    (stats.memtable_docs + stats.flushing_docs) as u64
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

/// Total size of the files in the index directory.
fn dir_bytes(dir: &Path) -> Result<u64, CliError> {
    let entries =
        std::fs::read_dir(dir).map_err(|e| CliError::read(&dir.display().to_string(), e))?;
    let mut total = 0;
    for entry in entries {
        let entry = entry.map_err(|e| CliError::read(&dir.display().to_string(), e))?;
        if let Ok(meta) = entry.metadata()
            && meta.is_file()
        {
            total += meta.len();
        }
    }
    Ok(total)
}

fn format_bytes(n: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut v = n as f64 / 1024.0;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    format!("{v:.1} {}", UNITS[u])
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

// ---------------------------------------------------------------- stats

#[derive(clap::Args, Debug)]
pub struct StatsArgs {
    #[command(flatten)]
    db: Db,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
}

/// Documents sampled for the distance histogram: all pairs of 2,000 are
/// about two million distances, enough to see the shape.
const HISTOGRAM_SAMPLE: usize = 2000;

/// A uniform sample of at most `size` live fingerprints (reservoir sampling
/// with a fixed seed, so the same index gives the same sample), and the
/// number of live documents.
fn sample_fingerprints(index: &Index, size: usize) -> Result<(Vec<u64>, u64), CliError> {
    let mut sample = Vec::with_capacity(size);
    let mut seen = 0u64;
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    index.for_each_doc(|doc| {
        seen += 1;
        if sample.len() < size {
            sample.push(doc.fingerprint);
        } else {
            // splitmix64
            state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^= z >> 31;
            let slot = (z % seen) as usize;
            if slot < size {
                sample[slot] = doc.fingerprint;
            }
        }
    })?;
    Ok((sample, seen))
}

/// Counts of the pairwise Hamming distances (0..=64) of `fps`.
fn distance_histogram(fps: &[u64]) -> [u64; 65] {
    let mut counts = [0u64; 65];
    for (i, &a) in fps.iter().enumerate() {
        for &b in &fps[i + 1..] {
            counts[(a ^ b).count_ones() as usize] += 1;
        }
    }
    counts
}

/// Distances up to this get a row each in the chart; above it, rows of
/// four (the far side of the histogram matters less when choosing k).
const CHART_SINGLE_ROWS: usize = 16;

/// A bar chart of the histogram up to the largest distance seen, bars on a
/// log scale so that the few close pairs show.
fn histogram_chart(counts: &[u64; 65]) -> String {
    const WIDTH: f64 = 50.0;
    let Some(last) = counts.iter().rposition(|&c| c > 0) else {
        return "  (fewer than two documents)\n".to_string();
    };
    let mut rows: Vec<(String, u64)> = Vec::new();
    let mut d = 0;
    while d <= last {
        let end = if d <= CHART_SINGLE_ROWS {
            d
        } else {
            (d + 3).min(64)
        };
        let label = if end == d {
            d.to_string()
        } else {
            format!("{d}-{end}")
        };
        rows.push((label, counts[d..=end].iter().sum()));
        d = end + 1;
    }
    let top = rows.iter().map(|r| r.1).max().unwrap_or(1).max(1) as f64;
    let mut text = String::new();
    for (label, c) in rows {
        let len = if c == 0 {
            0
        } else {
            (((c as f64).ln_1p() / top.ln_1p()) * WIDTH).ceil() as usize
        };
        text.push_str(&format!("  {label:>5} {c:>10} {}\n", "#".repeat(len)).replace(" \n", "\n"));
    }
    text
}

pub fn stats(args: &StatsArgs) -> Result<(), CliError> {
    let index = args.db.read_only()?;
    let s = index.stats();
    let (sample, live) = sample_fingerprints(&index, HISTOGRAM_SAMPLE)?;
    let counts = distance_histogram(&sample);
    let entries = s.segment_docs + logged(&s);
    let bytes_per_entry = if s.segment_docs > 0 {
        s.disk_bytes as f64 / s.segment_docs as f64
    } else {
        0.0
    };
    let total_bytes = dir_bytes(&args.db.db)?;
    let text = if args.json {
        json_line(&json!({
            "plan": &s.plan,
            "k": s.plan.k(),
            "tables": s.plan.tables().len(),
            "fingerprint_config": s.fingerprint_config,
            "documents": live,
            "segments": s.segments,
            "segment_entries": s.segment_docs,
            "log_entries": logged(&s),
            "tombstones": s.tombstones,
            "directory_bytes": total_bytes,
            "segment_bytes": s.disk_bytes,
            "segment_bytes_per_entry": bytes_per_entry,
            "table_bytes_per_key": s.table_bytes_per_key,
            "histogram_sample": sample.len(),
            "distance_histogram": counts.to_vec(),
        }))
    } else {
        format!(
            "plan:          {}\n\
             fingerprint:   {}\n\
             documents:     {} live\n\
             entries:       {} ({} in {} segment(s), {} in the write-ahead log)\n\
             tombstones:    {}\n\
             disk:          {} in all ({} in segments, {:.1} bytes per segment entry)\n\
             tables:        {:.2} bytes per fingerprint per table (uncompressed: 8)\n\
             \n\
             Hamming distances between {} pairs of {} sampled documents (log scale):\n{}",
            s.plan,
            s.fingerprint_config,
            live,
            entries,
            s.segment_docs,
            s.segments,
            logged(&s),
            s.tombstones,
            format_bytes(total_bytes),
            format_bytes(s.disk_bytes),
            bytes_per_entry,
            s.table_bytes_per_key,
            counts.iter().sum::<u64>(),
            sample.len(),
            histogram_chart(&counts),
        )
    };
    print(&text)
}

// ---------------------------------------------------------------- check

#[derive(clap::Args, Debug)]
pub struct CheckArgs {
    #[command(flatten)]
    db: Db,
    /// Largest distance that counts as a duplicate; default and maximum: the index's k.
    #[arg(short, long)]
    distance: Option<u32>,
    /// The texts are HTML: only their visible text counts.
    #[arg(long)]
    html: bool,
    /// Sync every insert to the device before printing `new` (survives power
    /// loss, not only a crash of the process).
    #[arg(long)]
    sync: bool,
}

/// `check`: reads `NAME<TAB>TEXT` lines from standard input as they arrive;
/// for each, atomically inserts it and prints `new`, or prints
/// `dup<TAB>NAME<TAB>DISTANCE` of the nearest existing document.
pub fn check(args: &CheckArgs) -> Result<(), CliError> {
    let options = Options::new().durability(if args.sync {
        Durability::Sync
    } else {
        Durability::Buffered
    });
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
        if doc.is_blank() {
            out.write_all(b"blank\n")
                .and_then(|()| out.flush())
                .map_err(write_err)?;
            continue;
        }
        let fp = doc.fingerprint(&hasher, 1.0);
        let answer = match index.insert_if_new_named(doc_id(&doc.name), fp, Some(doc.name), k)? {
            Ok(()) => "new\n".to_string(),
            Err(matches) => {
                let nearest = &matches[0];
                let name = nearest
                    .name
                    .clone()
                    .unwrap_or_else(|| format!("id {}", nearest.id));
                format!("dup\t{}\t{}\n", escape_field(&name), nearest.distance)
            }
        };
        out.write_all(answer.as_bytes())
            .and_then(|()| out.flush())
            .map_err(write_err)?;
    }
    Ok(())
}

// ---------------------------------------------------------------- get

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

// ---------------------------------------------------------------- verify

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

// ---------------------------------------------------------------- repair

#[derive(clap::Args, Debug)]
pub struct RepairArgs {
    #[command(flatten)]
    db: Db,
    /// Used only if neither MANIFEST nor MANIFEST.tmp can be read: the
    /// distance the index was created with.
    #[arg(short, long, default_value_t = 3)]
    distance: u32,
    /// Used only if no manifest can be read: the expected number of
    /// documents the index was created with.
    #[arg(long, default_value_t = Options::default().expected_n, value_name = "N")]
    expected_n: u64,
    /// Used only if no manifest can be read: the retention it was created with.
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    retention: Option<Duration>,
    #[command(flatten)]
    fingerprint: FingerprintArgs,
}

/// `repair`: rebuilds the manifest from the files that pass their
/// checksums, moves the others to `lost+found/`, then verifies the result.
pub fn repair(args: &RepairArgs) -> Result<(), CliError> {
    let hasher = args.fingerprint.hasher()?;
    let plan = simhashdb::plan::Plan::auto(args.expected_n, args.distance)
        .map_err(|e| CliError::Input(format!("--distance {}: {e}", args.distance)))?;
    let mut options = Options::new().plan(plan).fingerprint(hasher.config());
    options.retention = args.retention;
    let report = Index::repair(&args.db.db, options)?;
    let mut text = format!(
        "settings from: {}\nkept: {} segment(s){}; {} WAL record(s) in {}\n",
        report.settings_from,
        report.kept_segments.len(),
        if report.kept_segments.is_empty() {
            String::new()
        } else {
            format!(
                " ({})",
                report
                    .kept_segments
                    .iter()
                    .map(u64::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        },
        report.wal_records,
        report.wal,
    );
    if report.wal_records_dropped > 0 {
        text.push_str(&format!(
            "not kept: {} WAL record(s) after a gap in sequence numbers\n",
            report.wal_records_dropped
        ));
    }
    for (name, why) in &report.set_aside {
        text.push_str(&format!(
            "set aside in {}: {}: {why}\n",
            simhashdb::engine::LOST_AND_FOUND,
            escape_field(name)
        ));
    }
    let verified = Index::open_read_only(&args.db.db)?.verify()?;
    text.push_str(&format!(
        "verify: ok: {} files, {} bytes checked\n",
        verified.files, verified.bytes
    ));
    print(&text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_counts_every_pair_once() {
        let counts = distance_histogram(&[0, 1, 3, 0]);
        assert_eq!(counts[0], 1);
        assert_eq!(counts[1], 3);
        assert_eq!(counts[2], 2);
        assert_eq!(counts.iter().sum::<u64>(), 6);
        let chart = histogram_chart(&counts);
        assert_eq!(chart.lines().count(), 3);
        assert!(chart.lines().nth(1).unwrap().ends_with(&"#".repeat(50)));
        let mut far = [0u64; 65];
        far[0] = 1;
        far[16] = 2;
        far[17] = 3;
        far[20] = 4;
        far[22] = 5;
        let chart = histogram_chart(&far);
        let rows: Vec<&str> = chart.lines().collect();
        assert_eq!(rows.len(), 19, "{chart}");
        assert!(
            rows[15].trim_start().starts_with("15          0"),
            "{chart}"
        );
        assert!(
            rows[17].trim_start().starts_with("17-20          7"),
            "{chart}"
        );
        assert!(
            rows[18].trim_start().starts_with("21-24          5"),
            "{chart}"
        );
    }

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
