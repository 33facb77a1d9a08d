//! `dedup` on datasets: JSON Lines, CSV/TSV and Parquet files in, the
//! deduplicated dataset (or the removed records, or the groups) out.
//! Parquet (`parquet.rs`) is compiled with the `parquet` feature only; a
//! build without it refuses Parquet files (`read::check_supported`).
//!
//! The engine is the library's (`simhashdb::dedup`, docs/ARCHITECTURE.md,
//! "Deduplicating a dataset"); this module reads and writes the files:
//! 1. read every record once into `dedup::Sketches` (fingerprint, length,
//!    band keys), keeping (for `--keep newest:F`) the value of F and (for
//!    `--add-to`) the id;
//! 2. the candidate pairs (`Sketches::candidates`), in `--keep` order;
//! 3. the exact check (`Settings::check`), re-reading only the candidates'
//!    texts from the inputs (`Inputs` is its `dedup::TextSource`);
//! 4. the keep rule (`Settings::keep`), then the survivors against
//!    `--against`;
//! 5. write the output (a temporary file renamed at the end) and append the
//!    survivors to `--add-to`.

#[cfg(feature = "parquet")]
mod parquet;
mod read;
mod write;

use std::collections::HashMap;
use std::ffi::OsString;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use rayon::prelude::*;
use serde_json::{Value, json};
use simhashdb::dedup::{self, TextChunk, TextSource};
use simhashdb::plan::Plan;
use simhashdb::recheck::JaccardRule;
use simhashdb::{Index, Options, Simhasher, doc_id, hamming};

use crate::docs::{WalkArgs, collect_inputs};
use crate::error::CliError;
use read::{Counter, Fields, Format, Raw, Rec, Source};

pub use read::by_extension;

/// What `dedup` writes for a dataset.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Emit {
    /// The records that survive, unchanged, in input order.
    Keep,
    /// One JSON line per removed record: id, duplicate_of, distance, similarity.
    Drop,
    /// The groups of near-duplicates as one JSON object.
    Groups,
}

/// Which record of a group is kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeepRule {
    First,
    Longest,
    Newest(String),
}

fn parse_keep(s: &str) -> Result<KeepRule, String> {
    match s {
        "first" => Ok(KeepRule::First),
        "longest" => Ok(KeepRule::Longest),
        _ => match s.strip_prefix("newest:") {
            Some(f) if !f.is_empty() => Ok(KeepRule::Newest(f.to_owned())),
            _ => Err(format!(
                "expected `first`, `longest` or `newest:FIELD`, got `{s}`"
            )),
        },
    }
}

fn parse_size(s: &str) -> Result<usize, String> {
    let (digits, unit) = match s.char_indices().last() {
        Some((i, 'K' | 'k')) => (&s[..i], 1usize << 10),
        Some((i, 'M' | 'm')) => (&s[..i], 1 << 20),
        Some((i, 'G' | 'g')) => (&s[..i], 1 << 30),
        _ => (s, 1 << 20),
    };
    match digits.parse::<usize>() {
        Ok(n) if n > 0 => n
            .checked_mul(unit)
            .ok_or_else(|| format!("`{s}` is too large")),
        _ => Err(format!(
            "expected a positive size such as 512, 64K or 2G, got `{s}`"
        )),
    }
}

fn parse_format(s: &str) -> Result<Format, String> {
    Format::parse(s)
}

/// The options of `dedup` for datasets.
#[derive(clap::Args, Debug, Clone)]
#[cfg_attr(
    feature = "parquet",
    command(next_help_heading = "Datasets (JSONL, CSV/TSV, Parquet; .gz/.zst)")
)]
#[cfg_attr(
    not(feature = "parquet"),
    command(next_help_heading = "Datasets (JSONL, CSV/TSV; .gz/.zst; no Parquet in this build)")
)]
pub struct DatasetArgs {
    /// Read the inputs as this dataset format (jsonl, csv, tsv, parquet)
    /// whatever their names; by default a file is a dataset when its name
    /// ends in .jsonl, .ndjson, .csv, .tsv or .parquet (JSONL/CSV/TSV may add
    /// .gz or .zst), and dataset mode is on when every input file is one.
    #[cfg_attr(
        not(feature = "parquet"),
        doc = " Parquet needs a build with the `parquet` feature: this one refuses \
               Parquet files, naming them, before anything is written."
    )]
    #[arg(long, value_parser = parse_format, value_name = "FORMAT")]
    pub format: Option<Format>,
    /// The field (JSON key, CSV column, Parquet column) holding the text.
    #[arg(long, default_value = "text", value_name = "F")]
    pub text_field: String,
    /// The field holding the record's id: a string, or an integer from 0 to
    /// 2^64 - 1 (JSON: written without a fraction or exponent; Parquet: an
    /// integer column; a CSV field is a string). Anything else is refused,
    /// naming the record. Default: the record's position, 0-based, counted
    /// over all inputs in order.
    #[arg(long, value_name = "F")]
    pub id_field: Option<String>,
    /// Write the result to this file: its extension chooses the format
    /// (the input's for `--emit keep`; JSON lines otherwise) and a .gz or
    /// .zst compression. Created before any record is read (a missing
    /// directory is found at once) as a temporary file next to it, renamed
    /// at the end: on any failure, SIGINT, SIGTERM or SIGHUP nothing is
    /// left. Default: standard output (JSON lines; `--emit keep` needs JSONL
    /// inputs there).
    #[arg(short, long, value_name = "PATH")]
    pub output: Option<PathBuf>,
    /// keep: the surviving records, unchanged, in input order; drop: one
    /// JSON line per removed record `{"id", "duplicate_of" (the kept
    /// record's id), "distance", "similarity" (Jaccard to the kept record)}`;
    /// groups: one JSON object with every group, the kept record first.
    #[arg(long, value_enum, default_value_t = Emit::Keep)]
    pub emit: Emit,
    /// Which record of a group is kept: first (in input order), longest
    /// (text; ties: the first) or newest:FIELD (the largest value of FIELD,
    /// a number or a string such as an ISO date; missing or null is oldest;
    /// ties: the first).
    #[arg(long, default_value = "first", value_parser = parse_keep, value_name = "RULE")]
    pub keep: KeepRule,
    /// Also drop the records whose fingerprint is within the distance
    /// (`-d`, default 3, at most the index's) of a document of this index
    /// (opened read-only). The index holds fingerprints, not texts, so these
    /// matches are not verified; they are reported with similarity null.
    /// The index's fingerprint configuration is used.
    #[arg(long, value_name = "DIR")]
    pub against: Option<PathBuf>,
    /// Append the surviving records to this index (created if missing) once
    /// the output is written: id = doc_id(id) for a string id (its name is
    /// the id), the integer for an integer id. Needs --id-field. An existing
    /// index is opened (locked) before any record is read; two surviving
    /// records with the same id are refused, naming both.
    #[arg(long, value_name = "DIR")]
    pub add_to: Option<PathBuf>,
    /// Plain simhash: every pair within `-d` (default 3) is a duplicate,
    /// without re-reading texts.
    #[arg(long)]
    pub no_verify: bool,
    /// Memory for the texts' shingle sets while checking candidates (a
    /// number of MiB, or bytes with a K, M or G suffix); candidates that do
    /// not fit are checked in further passes over the inputs.
    #[arg(long, default_value = "512", value_parser = parse_size, value_name = "SIZE")]
    pub verify_memory: usize,
    /// Write the summary as a JSON object to this file.
    #[arg(long, value_name = "PATH")]
    pub stats_json: Option<PathBuf>,
}

impl DatasetArgs {
    /// Whether an option that only datasets use was given.
    pub fn any_given(&self) -> bool {
        self.format.is_some()
            || self.text_field != "text"
            || self.id_field.is_some()
            || self.output.is_some()
            || self.emit != Emit::Keep
            || self.keep != KeepRule::First
            || self.against.is_some()
            || self.add_to.is_some()
            || self.no_verify
            || self.stats_json.is_some()
    }
}

/// The arguments `dedup` shares with its dataset mode.
pub struct Common<'a> {
    pub paths: &'a [OsString],
    pub walk: &'a WalkArgs,
    pub hasher: Simhasher,
    pub hasher_explicit: bool,
    pub distance: Option<u32>,
    pub rule: Option<JaccardRule>,
}

/// Whether `dedup` should run in dataset mode: `--format` given, or every
/// input a file with a dataset extension.
pub fn is_dataset_mode(paths: &[OsString], walk: &WalkArgs, args: &DatasetArgs) -> bool {
    if args.format.is_some() {
        return true;
    }
    let (files, _) = collect_inputs(paths, walk);
    let mut datasets = files.iter().filter(|f| !is_marker(&f.path)).peekable();
    datasets.peek().is_some() && datasets.all(|f| f.name != "-" && by_extension(&f.path).is_some())
}

/// Whether a file is a job's marker (`_SUCCESS`, `_committed_...`, as Spark
/// and Hadoop leave next to their shards), skipped in dataset mode.
fn is_marker(path: &Path) -> bool {
    path.file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.starts_with('_'))
}

/// Records per chunk handed from the reading thread to the workers.
const CHUNK_RECORDS: usize = 8192;
/// Bytes of text per chunk handed from the reading thread to the workers.
const CHUNK_BYTES: usize = 32 << 20;

/// The inputs, their record counts and a byte counter for progress.
pub struct Inputs {
    sources: Vec<Source>,
    fields: Fields,
    /// Global number of each file's first record (filled by the first pass).
    starts: Vec<u64>,
    total_bytes: u64,
    counter: Counter,
    records: AtomicU64,
}

impl Inputs {
    /// Streams every input, calling `f(global_index, record)` for every
    /// record; `want(global_index)` says which ones to parse.
    pub fn scan_all(
        &self,
        what: &'static str,
        want: &mut dyn FnMut(u64) -> bool,
        f: &mut dyn FnMut(u64, Rec<'_>) -> Result<(), CliError>,
    ) -> Result<(), CliError> {
        let bar = self.bar(what);
        for (s, src) in self.sources.iter().enumerate() {
            let start = self.starts.get(s).copied().unwrap_or(0);
            read::scan(
                src,
                &self.fields,
                &self.counter,
                &mut |i| want(start + i),
                &mut |rec| {
                    let n = self.records.fetch_add(1, Ordering::Relaxed);
                    if n.is_multiple_of(4096) {
                        self.tick(&bar, n);
                    }
                    f(start + rec.index, rec)
                },
            )?;
        }
        bar.finish_and_clear();
        Ok(())
    }

    /// Streams the texts of the records `want(global_index)` asks for,
    /// in input order and in chunks of [`CHUNK_RECORDS`] records or
    /// [`CHUNK_BYTES`] of text, to `f`: one thread reads and parses while
    /// `f` works on the chunk before (with the rayon pool, as the first
    /// pass does), so a pass that has work for every record is not bound
    /// to one core.
    pub fn scan_texts(
        &self,
        what: &'static str,
        want: &(dyn Fn(u64) -> bool + Sync),
        f: &mut dyn FnMut(Vec<(u64, String)>) -> Result<(), CliError>,
    ) -> Result<(), CliError> {
        let (tx, rx) = std::sync::mpsc::sync_channel::<Vec<(u64, String)>>(1);
        std::thread::scope(|scope| {
            let reader = scope.spawn(|| {
                let tx = tx;
                let mut chunk: Vec<(u64, String)> = Vec::new();
                let mut chunk_bytes = 0usize;
                self.scan_all(what, &mut |g| want(g), &mut |g, rec| {
                    if !want(g) {
                        return Ok(());
                    }
                    chunk_bytes += rec.text.len();
                    chunk.push((g, rec.text.into_owned()));
                    if chunk.len() >= CHUNK_RECORDS || chunk_bytes >= CHUNK_BYTES {
                        chunk_bytes = 0;
                        // The receiver only stops early on an error.
                        if tx.send(std::mem::take(&mut chunk)).is_err() {
                            return Err(CliError::Failure(format!("{what} stopped")));
                        }
                    }
                    Ok(())
                })?;
                let _ = tx.send(chunk);
                Ok::<_, CliError>(())
            });
            let mut worked = Ok(());
            for chunk in rx {
                worked = f(chunk);
                if worked.is_err() {
                    break; // drops the receiver: the reader stops too
                }
            }
            let read = reader
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
            // The work's own error comes first: the reader's is then only
            // that it was stopped.
            worked.and(read)
        })
    }

    fn bar(&self, what: &'static str) -> ProgressBar {
        self.counter.store(0, Ordering::Relaxed);
        self.records.store(0, Ordering::Relaxed);
        let target = if std::io::stderr().is_terminal() {
            ProgressDrawTarget::stderr()
        } else {
            ProgressDrawTarget::hidden()
        };
        let bar = ProgressBar::with_draw_target(Some(self.total_bytes), target);
        if let Ok(style) = ProgressStyle::with_template(
            "{prefix} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} {msg} ({eta} left)",
        ) {
            bar.set_style(style.progress_chars("=> "));
        }
        bar.set_prefix(what);
        bar
    }

    fn tick(&self, bar: &ProgressBar, records: u64) {
        bar.set_position(self.counter.load(Ordering::Relaxed));
        bar.set_message(format!("{records} records"));
    }
}

/// The check (`dedup::Settings::check`) re-reads the candidates' texts
/// from the inputs.
impl TextSource for Inputs {
    type Error = CliError;

    fn scan(
        &self,
        what: &'static str,
        want: &(dyn Fn(u64) -> bool + Sync),
        f: &mut dyn FnMut(&TextChunk<'_>),
    ) -> Result<(), CliError> {
        self.scan_texts(what, want, &mut |chunk| {
            let texts: Vec<(u64, &str)> = chunk.iter().map(|(g, t)| (*g, t.as_str())).collect();
            f(&texts);
            Ok(())
        })
    }
}

/// What was found, for the summary line and `--stats-json`.
#[derive(Default)]
struct Summary {
    records: u64,
    blank: u64,
    text_bytes: u64,
    candidates: u64,
    /// Candidates dropped because their sets' sizes bound the Jaccard below
    /// the threshold.
    bounded_by_size: u64,
    verified: u64,
    groups: u64,
    in_groups: u64,
    dropped_in_dataset: u64,
    dropped_by_index: u64,
    added: u64,
    verify_passes: usize,
    /// Wall seconds of each step, in order.
    steps: Vec<(&'static str, f64)>,
    step_started: Option<Instant>,
}

impl Summary {
    /// Ends the step under way as `name` and starts the next.
    fn step(&mut self, name: &'static str) {
        let now = Instant::now();
        if let Some(t) = self.step_started.replace(now) {
            self.steps.push((name, (now - t).as_secs_f64()));
        }
    }
}

/// What happens to one record.
#[derive(Clone, Copy, PartialEq)]
enum Fate {
    Kept,
    /// A duplicate of record `of` in the dataset.
    Duplicate {
        of: u32,
    },
    /// A duplicate of index document `m` (into `index_matches`).
    InIndex {
        m: u32,
    },
}

pub fn run(common: Common<'_>, args: &DatasetArgs) -> Result<(), CliError> {
    let started = Instant::now();
    // ---- arguments, checked before anything is read or written
    if args.add_to.is_some() && args.id_field.is_none() {
        return Err(CliError::Input(
            "--add-to needs --id-field: the index stores each record under its id".into(),
        ));
    }
    if let Some(d) = common.distance {
        Plan::new(d.saturating_add(1), d).map_err(|e| CliError::Input(format!("-d {d}: {e}")))?;
    }
    if common.rule.is_some() && args.no_verify {
        return Err(CliError::Input(
            "--verify and --no-verify contradict each other".into(),
        ));
    }
    let (files, skipped) = collect_inputs(common.paths, common.walk);
    if !skipped.is_empty() {
        return Err(CliError::Failure(format!(
            "nothing was written: cannot read {}",
            skipped.join(", ")
        )));
    }
    let mut sources = Vec::new();
    for f in files {
        if is_marker(&f.path) && args.format.is_none() {
            continue;
        }
        if f.name == "-" {
            return Err(CliError::Input(
                "dataset mode reads its inputs more than once: write standard input to a file"
                    .into(),
            ));
        }
        // A pipe (`<(cat x.jsonl)`, /dev/fd/N, a FIFO), a socket or a device
        // would give its records to the first pass only.
        let meta = std::fs::metadata(&f.path).map_err(|e| CliError::read(&f.name, e))?;
        if !meta.is_file() {
            return Err(CliError::Input(format!(
                "{}: not a regular file (a pipe, FIFO or device); dataset mode reads its \
                 inputs more than once: write it to a file",
                f.name
            )));
        }
        let by_ext = by_extension(&f.path);
        let format = match (args.format, by_ext) {
            (Some(fmt), _) => fmt,
            (None, Some((fmt, _))) => fmt,
            (None, None) => {
                return Err(CliError::Input(format!(
                    "{}: not a dataset file name (.jsonl, .ndjson, .csv, .tsv, .parquet, \
                     optionally .gz or .zst): give --format",
                    f.name
                )));
            }
        };
        // A build without the `parquet` feature refuses Parquet inputs here,
        // before anything is read or written (and so a Parquet output, which
        // `--emit keep` writes for Parquet inputs only).
        read::check_supported(format, &f.name, read::PARQUET)?;
        let compression = read::compression_of(&f.path);
        if format == Format::Parquet && compression != read::Compression::None {
            return Err(CliError::Input(format!(
                "{}: a Parquet file compresses its own columns; .gz/.zst around it is not read",
                f.name
            )));
        }
        sources.push(Source {
            path: f.path,
            name: f.name,
            format,
            compression,
            len: meta.len(),
            modified: meta.modified().ok(),
        });
    }
    if sources.is_empty() {
        return Err(CliError::Input("no dataset files among the inputs".into()));
    }
    let first_format = sources[0].format;
    if args.emit == Emit::Keep {
        if let Some(s) = sources.iter().find(|s| s.format != first_format) {
            return Err(CliError::Input(format!(
                "--emit keep writes the input's format, but {} is {} and {} is {}",
                sources[0].name, first_format, s.name, s.format
            )));
        }
        match &args.output {
            None if first_format != Format::Jsonl => {
                return Err(CliError::Input(format!(
                    "--emit keep writes {first_format}: give --output PATH"
                )));
            }
            Some(out) => {
                let out_format = by_extension(out).map(|(f, _)| f);
                if out_format != Some(first_format) {
                    return Err(CliError::Input(format!(
                        "--output {}: --emit keep writes the input's format ({first_format}); \
                         name the output with its extension",
                        out.display()
                    )));
                }
                if first_format == Format::Parquet
                    && read::compression_of(out) != read::Compression::None
                {
                    return Err(CliError::Input(format!(
                        "--output {}: Parquet output is not wrapped in .gz/.zst",
                        out.display()
                    )));
                }
            }
            None => {}
        }
    }
    if let Some(out) = &args.output {
        for s in &sources {
            if same_file(&s.path, out) {
                return Err(CliError::Input(format!(
                    "--output {} is also an input",
                    out.display()
                )));
            }
        }
    }

    // The hasher: the index's configuration when one is involved.
    let mut hasher = common.hasher;
    let index_dirs: Vec<&PathBuf> = args.against.iter().chain(args.add_to.iter()).collect();
    let mut index_config: Option<String> = None;
    for dir in &index_dirs {
        if let Some((config, h)) = crate::index_cmd::existing_index_hasher(dir)? {
            if let Some(prev) = &index_config
                && *prev != config
            {
                return Err(CliError::Input(format!(
                    "--against and --add-to record different fingerprint configurations \
                     (`{prev}` and `{config}`)"
                )));
            }
            if common.hasher_explicit && h.config() != hasher.config() {
                return Err(CliError::Input(format!(
                    "{} records fingerprint config `{config}`; the fingerprint options given differ",
                    dir.display()
                )));
            }
            index_config = Some(config);
            hasher = h;
        }
    }
    // --add-to: an existing index is opened for writing now, so that a lock
    // held by another process (a running `serve`, another `dedup`) is found
    // before the work; a new one is created once the output is written.
    let add_index = match &args.add_to {
        Some(dir) if dir.join("MANIFEST").exists() => {
            Some(open_add_to(dir, index_config.as_deref(), &hasher)?)
        }
        _ => None,
    };
    // --against the index --add-to holds open is searched through it.
    let against_is_add_to = matches!(
        (&args.against, &args.add_to, &add_index),
        (Some(a), Some(b), Some(_)) if same_file(a, b)
    );
    let against = match &args.against {
        Some(_) if against_is_add_to => None,
        Some(dir) => {
            if !dir.join("MANIFEST").exists() {
                return Err(CliError::Input(format!(
                    "--against {}: not an index (no MANIFEST)",
                    dir.display()
                )));
            }
            Some(Index::open_read_only(dir)?)
        }
        None => None,
    };

    // The outputs, created (under temporary names) before any record is
    // read: a missing directory, or inputs that cannot make one output, are
    // found before the work.
    let output = Output::open(args, &sources)?;
    let stats_out = match &args.stats_json {
        Some(path) => Some(write::ByteOut::open(Some(path))?),
        None => None,
    };

    let key_field = match &args.keep {
        KeepRule::Newest(f) => Some(f.clone()),
        _ => None,
    };
    let mut inputs = Inputs {
        total_bytes: sources.iter().map(|s| s.len).sum(),
        sources,
        fields: Fields {
            text: args.text_field.clone(),
            id: args.id_field.clone(),
            key: key_field,
        },
        starts: Vec::new(),
        counter: Arc::new(AtomicU64::new(0)),
        records: AtomicU64::new(0),
    };
    let mut summary = Summary {
        step_started: Some(Instant::now()),
        ..Summary::default()
    };

    // ---- stage 1 (dedup::Sketches): fingerprints, lengths, keys (and band
    // keys for the default candidate search)
    let verify = !args.no_verify;
    let settings = dedup::Settings {
        verify,
        threshold: common
            .rule
            .map_or(dedup::DEFAULT_THRESHOLD, |r| r.threshold),
        width: common.rule.map_or(dedup::DEFAULT_WIDTH, |r| r.width),
        distance: common.distance,
        verify_memory: args.verify_memory,
    };
    let width = settings.width;
    let threshold = settings.threshold;
    let bands = settings.bands();
    let keep_longest = args.keep == KeepRule::Longest;
    let mut sketches = settings.sketches(&hasher, keep_longest);
    let keys: Vec<Value>;
    // With --add-to: each record's id in the index.
    let index_ids: Vec<u64>;
    {
        // One thread parses the inputs into chunks of texts while the pool
        // sketches the chunk before.
        let bar = inputs.bar("reading");
        let (tx, rx) = std::sync::mpsc::sync_channel::<Vec<String>>(1);
        let read_inputs = &inputs;
        let want_index_ids = args.add_to.is_some();
        let (starts, text_bytes, read_keys, read_ids) = std::thread::scope(|scope| {
            let reader = scope.spawn(|| {
                let tx = tx;
                let mut starts = Vec::new();
                let mut total = 0u64;
                let mut text_bytes = 0u64;
                let mut keys = Vec::new();
                let mut ids = Vec::new();
                let mut chunk: Vec<String> = Vec::new();
                let mut chunk_bytes = 0usize;
                for src in &read_inputs.sources {
                    starts.push(total);
                    read::scan(
                        src,
                        &read_inputs.fields,
                        &read_inputs.counter,
                        &mut |_| true,
                        &mut |rec| {
                            text_bytes += rec.text.len() as u64;
                            if let Some(k) = rec.key {
                                keys.push(k);
                            }
                            if want_index_ids && let Some(id) = &rec.id {
                                ids.push(index_id(id, total));
                            }
                            chunk_bytes += rec.text.len();
                            chunk.push(rec.text.into_owned());
                            total += 1;
                            if chunk.len() >= CHUNK_RECORDS || chunk_bytes >= CHUNK_BYTES {
                                // The receiver only stops early when it
                                // panics: stop reading then too.
                                if tx.send(std::mem::take(&mut chunk)).is_err() {
                                    return Err(CliError::Failure("fingerprinting stopped".into()));
                                }
                                chunk_bytes = 0;
                                read_inputs.tick(&bar, total);
                            }
                            Ok(())
                        },
                    )?;
                }
                let _ = tx.send(chunk);
                Ok::<_, CliError>((starts, text_bytes, keys, ids))
            });
            for chunk in rx {
                sketches.push(&chunk);
            }
            reader
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
        })?;
        keys = read_keys;
        index_ids = read_ids;
        bar.finish_and_clear();
        summary.text_bytes = text_bytes;
        inputs.starts = starts;
    }
    sketches
        .check_len()
        .map_err(|e| CliError::Input(e.to_string()))?;
    let n = sketches.len();
    summary.records = n as u64;
    summary.blank = sketches.blank.iter().filter(|&&b| b).count() as u64;

    summary.step("read");

    // ---- stage 2: candidates
    let spinner = spinner("finding candidates");
    let order = keep_order(n, &args.keep, &sketches.chars, &keys);
    let candidates = sketches.candidates(&order);
    spinner.finish_and_clear();
    summary.candidates = candidates.found;
    summary.bounded_by_size = candidates.bounded_by_size;

    summary.step("candidates");

    // ---- stage 3: the exact check (re-reading the candidates' texts)
    let checked = settings.check(&hasher, &inputs, n, candidates.pairs)?;
    summary.verify_passes += checked.passes;
    summary.verified = checked.pairs.len() as u64;

    summary.step("check");

    // ---- stage 4: the keep rule: groups and the record each keeps
    let outcome = settings.keep(n, &checked, &order);
    drop(checked);
    let dedup::Outcome {
        fate: decided,
        groups,
        kept_of_group,
        similarities,
    } = outcome;
    let fps = std::mem::take(&mut sketches.fingerprints);
    let blank = std::mem::take(&mut sketches.blank);
    drop(sketches);
    // The similarity of each dropped record to the kept record it matched,
    // sorted by record (for the report).
    let reported = args.emit != Emit::Keep;
    let sim_to_kept = if reported { similarities } else { Vec::new() };
    // (In place: the two enums have one size.)
    let mut fate: Vec<Fate> = decided
        .into_iter()
        .map(|f| match f {
            dedup::Fate::Kept => Fate::Kept,
            dedup::Fate::Duplicate { of } => Fate::Duplicate { of },
        })
        .collect();
    summary.groups = groups.len() as u64;
    summary.in_groups = groups.iter().map(|g| g.len() as u64).sum();
    summary.dropped_in_dataset = summary.in_groups - summary.groups;
    // ---- the survivors against an existing index (fingerprints only)
    let mut index_matches: Vec<(Value, u32)> = Vec::new();
    let used_index = args.against.is_some();
    let against_index = match against_is_add_to {
        true => add_index.as_ref(),
        false => against.as_ref(),
    };
    if let Some(index) = against_index {
        let k = common.distance.unwrap_or(3).min(index.plan().k());
        for i in 0..n {
            if fate[i] != Fate::Kept || blank[i] {
                continue;
            }
            if let Some(m) = index.query(fps[i], k)?.into_iter().next() {
                let id = match m.name {
                    Some(name) => Value::String(name),
                    None => Value::from(m.id),
                };
                fate[i] = Fate::InIndex {
                    m: index_matches.len() as u32,
                };
                index_matches.push((id, m.distance));
                summary.dropped_by_index += 1;
            }
        }
    }
    // Closed before --add-to (possibly the same directory) opens it for writing.
    drop(against);

    // --add-to stores each survivor under its id: two survivors with one id
    // would leave one of them out of the index, silently.
    if args.add_to.is_some() {
        check_unique_ids(&inputs, &index_ids, &fate, &blank)?;
    }

    summary.step("groups");

    // ---- ids (of the records that appear in the report)
    let mut ids: HashMap<u32, Value> = HashMap::new();
    if reported {
        let in_report = |i: usize| match fate[i] {
            Fate::Kept => false,
            Fate::Duplicate { .. } | Fate::InIndex { .. } => true,
        };
        let mut wanted: Vec<bool> = (0..n).map(in_report).collect();
        for &k in &kept_of_group {
            wanted[k as usize] = true;
        }
        if inputs.fields.id.is_some() {
            inputs.scan_all("reading ids", &mut |g| wanted[g as usize], &mut |g, rec| {
                if wanted[g as usize]
                    && let Some(id) = rec.id
                {
                    ids.insert(g as u32, id);
                }
                Ok(())
            })?;
        }
    }
    let id_of = |i: u32| -> Value { ids.get(&i).cloned().unwrap_or_else(|| Value::from(i)) };
    let similarity_of = |i: u32| -> Option<f64> {
        let at = sim_to_kept.binary_search_by_key(&i, |&(r, _)| r).ok()?;
        Some(sim_to_kept[at].1)
    };
    summary.step("report");

    // ---- output
    match (args.emit, output) {
        (Emit::Keep, output) => write_kept(&inputs, output, &fate)?,
        #[cfg(feature = "parquet")]
        (_, Output::Parquet(..)) => unreachable!("Parquet is written for --emit keep only"),
        (Emit::Drop, Output::Bytes(mut out)) => {
            for (i, f) in fate.iter().enumerate() {
                let line = match *f {
                    Fate::Kept => continue,
                    Fate::Duplicate { of } => json!({
                        "id": id_of(i as u32),
                        "duplicate_of": id_of(of),
                        "distance": hamming(fps[i], fps[of as usize]),
                        "similarity": similarity_of(i as u32),
                    }),
                    Fate::InIndex { m } => {
                        let (id, d) = &index_matches[m as usize];
                        json!({
                            "id": id_of(i as u32),
                            "duplicate_of": id,
                            "distance": d,
                            "similarity": null,
                            "in_index": true,
                        })
                    }
                };
                out.write_all(format!("{line}\n").as_bytes())?;
            }
            out.finish()?;
        }
        (Emit::Groups, Output::Bytes(mut out)) => {
            let mut order: Vec<usize> = (0..groups.len()).collect();
            order.sort_by(|&a, &b| groups[b].len().cmp(&groups[a].len()).then(a.cmp(&b)));
            let list: Vec<Value> = order
                .iter()
                .map(|&g| {
                    let kept = kept_of_group[g];
                    let mut members = vec![json!({
                        "id": id_of(kept),
                        "fingerprint": fps[kept as usize],
                        "distance": 0,
                        "similarity": verify.then_some(1.0),
                        "kept": true,
                    })];
                    members.extend(groups[g].iter().filter(|&&m| m != kept).map(|&m| {
                        json!({
                            "id": id_of(m),
                            "fingerprint": fps[m as usize],
                            "distance": hamming(fps[m as usize], fps[kept as usize]),
                            "similarity": similarity_of(m),
                        })
                    }));
                    json!({ "members": members })
                })
                .collect();
            let report = json!({ "records": n, "groups": list });
            out.write_all(format!("{report}\n").as_bytes())?;
            out.finish()?;
        }
    }

    summary.step("output");

    // ---- survivors into an index
    if let Some(dir) = &args.add_to {
        let index = match add_index {
            Some(index) => index,
            None => open_add_to(dir, index_config.as_deref(), &hasher)?,
        };
        summary.added = add_survivors(&inputs, index, &index_ids, &fate, &fps, &blank)?;
    }

    if args.add_to.is_some() {
        summary.step("add_to");
    }

    // ---- summary
    let seconds = started.elapsed().as_secs_f64();
    let dropped = summary.dropped_in_dataset + summary.dropped_by_index;
    let mb = summary.text_bytes as f64 / 1e6;
    let rule = if verify {
        let check = format!(
            "kept if word {width}-shingle Jaccard >= {threshold} with an earlier kept record"
        );
        match (common.distance, bands) {
            (Some(d), _) => format!("candidates at d <= {d}, {check}"),
            (None, Some(b)) => format!(
                "candidates sharing a MinHash band ({} bands of {} rows), {check}",
                b.bands, b.rows
            ),
            (None, None) => check,
        }
    } else {
        format!("plain simhash, d <= {}", common.distance.unwrap_or(3))
    };
    eprintln!(
        "simhashdb: dedup: {} records, {} dropped ({} in {} groups{}), {} kept; \
         {:.1} MB of text in {:.2} s ({:.1} MB/s); {rule}",
        summary.records,
        dropped,
        summary.dropped_in_dataset,
        summary.groups,
        if used_index {
            format!(", {} found in the index", summary.dropped_by_index)
        } else {
            String::new()
        },
        summary.records - dropped,
        mb,
        seconds,
        mb / seconds.max(1e-9),
    );
    if let Some(mut out) = stats_out {
        let stats = json!({
            "records": summary.records,
            "kept": summary.records - dropped,
            "dropped": dropped,
            "dropped_in_dataset": summary.dropped_in_dataset,
            "dropped_by_index": summary.dropped_by_index,
            "groups": summary.groups,
            "records_in_groups": summary.in_groups,
            "blank": summary.blank,
            "candidate_pairs": summary.candidates,
            "pairs_bounded_by_size": summary.bounded_by_size,
            "verified_pairs": summary.verified,
            "verify": verify,
            "verify_passes": summary.verify_passes,
            "added_to_index": summary.added,
            "input_bytes": inputs.total_bytes,
            "text_bytes": summary.text_bytes,
            "seconds": seconds,
            "seconds_by_step": summary.steps.iter().map(|&(name, s)| (name.to_owned(), json!(s))).collect::<serde_json::Map<_, _>>(),
            "rule": rule,
        });
        out.write_all(format!("{stats:#}\n").as_bytes())?;
        out.finish()?;
    }
    Ok(())
}

fn spinner(what: &'static str) -> ProgressBar {
    crate::progress::spinner(what)
}

fn same_file(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}

/// `--keep newest`: numbers before strings, null (missing) oldest.
fn compare_keys(a: &Value, b: &Value) -> std::cmp::Ordering {
    use std::cmp::Ordering;
    fn rank(v: &Value) -> u8 {
        match v {
            Value::Null => 0,
            Value::Number(_) => 1,
            Value::String(_) => 2,
            _ => 3,
        }
    }
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x
            .as_f64()
            .unwrap_or(0.0)
            .partial_cmp(&y.as_f64().unwrap_or(0.0))
            .unwrap_or(Ordering::Equal),
        (Value::String(x), Value::String(y)) => x.cmp(y),
        _ => rank(a).cmp(&rank(b)),
    }
}

/// The records in the order the keep rule prefers them: the library's
/// order for `first` and `longest`; newest first, ties by input order, for
/// `newest:FIELD`.
fn keep_order(n: usize, keep: &KeepRule, lens: &[u32], keys: &[Value]) -> Vec<u32> {
    match keep {
        KeepRule::First => dedup::keep_order(n, dedup::Keep::First, lens),
        KeepRule::Longest => dedup::keep_order(n, dedup::Keep::Longest, lens),
        KeepRule::Newest(_) => {
            let mut order: Vec<u32> = (0..n as u32).collect();
            order.sort_by(|&a, &b| compare_keys(&keys[b as usize], &keys[a as usize]));
            order
        }
    }
}

/// Where `dedup` writes: bytes (JSONL, CSV/TSV, JSON; to a file or
/// standard output), or a Parquet file with its schema.
enum Output {
    Bytes(write::ByteOut),
    #[cfg(feature = "parquet")]
    Parquet(Box<parquet::ParquetOut>, arrow_schema::SchemaRef),
}

impl Output {
    /// Opens the output `args` ask for. For `--emit keep`, every input
    /// must be able to go into one file: CSV/TSV inputs need the same
    /// header, Parquet inputs the same columns (name, type, nullability);
    /// the output carries the first input's schema, with its key-value
    /// metadata (what pandas and Hugging Face `datasets` record there).
    fn open(args: &DatasetArgs, sources: &[Source]) -> Result<Output, CliError> {
        let first = &sources[0];
        if args.emit != Emit::Keep {
            return Ok(Output::Bytes(write::ByteOut::open(args.output.as_deref())?));
        }
        let counter = Arc::new(AtomicU64::new(0));
        match first.format {
            Format::Jsonl => Ok(Output::Bytes(write::ByteOut::open(args.output.as_deref())?)),
            Format::Csv | Format::Tsv => {
                let (_, header) = read::csv_reader(first, &counter)?;
                for src in &sources[1..] {
                    if read::csv_reader(src, &counter)?.1 != header {
                        return Err(CliError::Input(format!(
                            "{}: its header differs from that of {}; --emit keep writes one {}",
                            src.name, first.name, first.format
                        )));
                    }
                }
                Ok(Output::Bytes(write::ByteOut::open(args.output.as_deref())?))
            }
            #[cfg(feature = "parquet")]
            Format::Parquet => {
                let schema = parquet::schema(first)?;
                for src in &sources[1..] {
                    if parquet::schema(src)?.fields() != schema.fields() {
                        return Err(CliError::Input(format!(
                            "{}: its columns differ from those of {}; --emit keep writes one \
                             Parquet file",
                            src.name, first.name
                        )));
                    }
                }
                let path = args
                    .output
                    .as_deref()
                    .expect("checked: Parquet keep output has a path");
                let out = parquet::ParquetOut::open(path, schema.clone())?;
                Ok(Output::Parquet(Box::new(out), schema))
            }
            // Refused with the inputs (`read::check_supported`).
            #[cfg(not(feature = "parquet"))]
            Format::Parquet => Err(read::unsupported(&first.name)),
        }
    }
}

/// Writes the kept records, unchanged and in input order.
fn write_kept(inputs: &Inputs, output: Output, fate: &[Fate]) -> Result<(), CliError> {
    let format = inputs.sources[0].format;
    let keep = |g: u64| fate[g as usize] == Fate::Kept;
    match (format, output) {
        #[cfg(feature = "parquet")]
        (_, Output::Parquet(mut out, schema)) => {
            for (s, src) in inputs.sources.iter().enumerate() {
                let start = inputs.starts[s];
                parquet::for_each_batch(src, None, &inputs.counter, &mut |batch, first| {
                    if batch.schema().fields() != schema.fields() {
                        return Err(CliError::Input(format!(
                            "{}: its columns differ from those of {}; --emit keep writes one \
                             Parquet file",
                            src.name, inputs.sources[0].name
                        )));
                    }
                    let mask: arrow_array::BooleanArray = (0..batch.num_rows())
                        .map(|r| Some(keep(start + first + r as u64)))
                        .collect();
                    let kept =
                        arrow_select::filter::filter_record_batch(batch, &mask).map_err(|e| {
                            CliError::Failure(format!("cannot filter {}: {e}", src.name))
                        })?;
                    if kept.num_rows() > 0 {
                        // The output's schema: the same columns, with the
                        // first input's metadata.
                        let kept = kept.with_schema(schema.clone()).map_err(|e| {
                            CliError::Failure(format!("cannot filter {}: {e}", src.name))
                        })?;
                        out.write(&kept)?;
                    }
                    Ok(())
                })?;
            }
            out.finish()
        }
        (Format::Jsonl, Output::Bytes(mut out)) => {
            let mut result = Ok(());
            inputs
                .scan_all("writing", &mut |_| false, &mut |g, rec| {
                    if keep(g)
                        && let Raw::Line(line) = rec.raw
                    {
                        result = out.write_all(line).and_then(|()| out.write_all(b"\n"));
                        result.as_ref().map_err(|_| CliError::BrokenPipe)?;
                    }
                    Ok(())
                })
                .or_else(|e| match e {
                    CliError::BrokenPipe => Ok(()),
                    e => Err(e),
                })?;
            result?;
            out.finish()
        }
        (Format::Csv | Format::Tsv, Output::Bytes(mut out)) => {
            let name = out.name().to_owned();
            let mut header: Option<csv::ByteRecord> = None;
            {
                let mut writer = csv::WriterBuilder::new()
                    .delimiter(if format == Format::Tsv { b'\t' } else { b',' })
                    .from_writer(out.writer());
                for (s, src) in inputs.sources.iter().enumerate() {
                    let (mut reader, h) = read::csv_reader(src, &inputs.counter)?;
                    match &header {
                        None => {
                            writer.write_byte_record(&h).map_err(|e| {
                                CliError::Failure(format!("cannot write {name}: {e}"))
                            })?;
                            header = Some(h);
                        }
                        Some(first) if *first != h => {
                            return Err(CliError::Input(format!(
                                "{}: its header differs from that of {}; --emit keep writes one CSV",
                                src.name, inputs.sources[0].name
                            )));
                        }
                        Some(_) => {}
                    }
                    let start = inputs.starts[s];
                    let mut record = csv::ByteRecord::new();
                    let mut i = 0u64;
                    while reader.read_byte_record(&mut record).map_err(|e| {
                        CliError::Input(format!("{}, record {}: {e}", src.name, i + 1))
                    })? {
                        if keep(start + i) {
                            writer.write_byte_record(&record).map_err(|e| {
                                CliError::Failure(format!("cannot write {name}: {e}"))
                            })?;
                        }
                        i += 1;
                    }
                }
                writer.flush().map_err(|e| CliError::write(&name, e))?;
            }
            out.finish()
        }
        // Parquet is written through `Output::Parquet`; a build without
        // the `parquet` feature refuses Parquet inputs before this.
        (Format::Parquet, Output::Bytes(_)) => {
            unreachable!("Parquet is written through Output::Parquet")
        }
    }
}

/// Opens (or creates) the `--add-to` index in `dir` for writing, with the
/// fingerprint configuration it records (or the hasher's, for a new one).
fn open_add_to(dir: &Path, config: Option<&str>, hasher: &Simhasher) -> Result<Index, CliError> {
    let config = match config {
        Some(c) => c.parse().map_err(|e| CliError::Failure(format!("{e}")))?,
        None => hasher.config(),
    };
    let options = Options::default().fingerprint(config);
    Ok(Index::open(dir, options)?)
}

/// The document id a record is stored under by `--add-to`: `doc_id` of a
/// string id (the name hashed as `add` hashes names), an integer id itself
/// (ids are checked as they are read: strings or integers in `u64`).
fn index_id(id: &Value, record: u64) -> u64 {
    match id {
        Value::String(s) => doc_id(s),
        Value::Number(x) => x.as_u64().unwrap_or(record),
        _ => record,
    }
}

/// Where record `g` (global number) is, for messages: `FILE, record N`.
fn locate(inputs: &Inputs, g: u64) -> String {
    let s = inputs.starts.partition_point(|&start| start <= g).max(1) - 1;
    read::at(&inputs.sources[s], "record", g - inputs.starts[s] + 1)
}

/// Refuses two survivors (kept, not blank) with the same index id, naming
/// both records and the id.
fn check_unique_ids(
    inputs: &Inputs,
    index_ids: &[u64],
    fate: &[Fate],
    blank: &[bool],
) -> Result<(), CliError> {
    let mut survivors: Vec<(u64, u32)> = (0..fate.len())
        .filter(|&g| fate[g] == Fate::Kept && !blank[g])
        .map(|g| (index_ids[g], g as u32))
        .collect();
    survivors.par_sort_unstable();
    let Some((a, b)) = survivors
        .windows(2)
        .filter(|w| w[0].0 == w[1].0)
        .map(|w| (w[0].1 as u64, w[1].1 as u64))
        .min()
    else {
        return Ok(());
    };
    let mut id = Value::Null;
    inputs.scan_all("reading ids", &mut |g| g == a, &mut |g, rec| {
        if g == a {
            id = rec.id.unwrap_or(Value::Null);
        }
        Ok(())
    })?;
    Err(CliError::Input(format!(
        "--add-to: {} and {} are both kept and have the same id {id}; the index holds one \
         document per id: give each record its own id (or leave --add-to out)",
        locate(inputs, a),
        locate(inputs, b)
    )))
}

/// Appends the survivors to `index`, in batches; returns how many.
fn add_survivors(
    inputs: &Inputs,
    index: Index,
    index_ids: &[u64],
    fate: &[Fate],
    fps: &[u64],
    blank: &[bool],
) -> Result<u64, CliError> {
    let mut batch: Vec<(u64, u64, Option<String>)> = Vec::new();
    let mut added = 0u64;
    let survivor = |g: u64| fate[g as usize] == Fate::Kept && !blank[g as usize];
    inputs.scan_all("adding", &mut |g| survivor(g), &mut |g, rec| {
        if !survivor(g) {
            return Ok(());
        }
        let name = match rec.id {
            Some(Value::String(s)) => Some(s),
            _ => None,
        };
        let name = name.filter(|s| s.len() <= simhashdb::format::MAX_NAME_LEN);
        batch.push((index_ids[g as usize], fps[g as usize], name));
        if batch.len() >= 50_000 {
            added += batch.len() as u64;
            index.insert_batch(std::mem::take(&mut batch))?;
        }
        Ok(())
    })?;
    added += batch.len() as u64;
    index.insert_batch(batch)?;
    index.flush()?;
    Ok(added)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_order_null_numbers_strings() {
        use std::cmp::Ordering::*;
        assert_eq!(compare_keys(&Value::Null, &json!(1)), Less);
        assert_eq!(compare_keys(&json!(2), &json!(10)), Less);
        assert_eq!(
            compare_keys(&json!("2024-01-02"), &json!("2023-12-31")),
            Greater
        );
    }
}
