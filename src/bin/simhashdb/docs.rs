//! Documents from files, directories and lines, and their fingerprints.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use indicatif::ProgressBar;
use rayon::prelude::*;
use simhashdb::fingerprint::{Tokenizer, Weighting, simhash};
use simhashdb::{FingerprintConfig, Index, Simhasher};

use crate::error::CliError;
use crate::html;
use crate::input::{lines, read_all};

/// How texts become fingerprints.
#[derive(clap::Args, Debug, Clone)]
pub struct FingerprintArgs {
    /// Tokenizer: words, letters, chinese, chars or chars:N.
    #[arg(long, default_value_t = Tokenizer::Words)]
    pub tokenizer: Tokenizer,
    /// Word shingle width (1 = single words).
    #[arg(long, default_value_t = 1)]
    pub shingle: usize,
    /// Feature weighting: tf (term frequency) or binary.
    #[arg(long, default_value_t = Weighting::TermFrequency)]
    pub weighting: Weighting,
}

impl FingerprintArgs {
    pub fn hasher(&self) -> Result<Simhasher, CliError> {
        Simhasher::builder()
            .tokenizer(self.tokenizer)
            .shingle(self.shingle)
            .weighting(self.weighting)
            .build()
            .map_err(|e| CliError::Input(e.to_string()))
    }
}

/// The hasher a configuration line describes (read from an index's
/// manifest before the index is opened).
pub fn hasher_for_config(config_line: &str) -> Result<Simhasher, CliError> {
    let config: FingerprintConfig = config_line.parse().map_err(|e| {
        CliError::Failure(format!(
            "the index records fingerprint config `{config_line}`, which this version cannot use: {e}"
        ))
    })?;
    Simhasher::from_config(&config).map_err(|e| CliError::Failure(e.to_string()))
}

/// The hasher of the fingerprint configuration recorded in `index`.
pub fn hasher_for(index: &Index) -> Result<Simhasher, CliError> {
    index.simhasher().map_err(|e| {
        CliError::Failure(format!(
            "the index records fingerprint config `{}`, which this version cannot use: {e}",
            index.stats().fingerprint_config
        ))
    })
}

/// How files are turned into documents.
#[derive(clap::Args, Debug, Clone)]
pub struct ReadArgs {
    /// Treat every line of every file as a document, named `PATH:LINE`.
    #[arg(long)]
    pub lines: bool,
    /// Read every input as HTML (by default only `.html`, `.htm` and `.xhtml`
    /// files are): only the visible text counts, without scripts, styles and markup.
    #[arg(long)]
    pub html: bool,
    /// Weight of the words of an HTML document's title and headings relative
    /// to the rest of its text.
    #[arg(long, default_value_t = 1.0, value_name = "W", value_parser = parse_weight)]
    pub heading_weight: f64,
    #[command(flatten)]
    pub walk: WalkArgs,
}

fn parse_weight(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(w) if w > 0.0 && w.is_finite() => Ok(w),
        _ => Err(format!("expected a positive number, got `{s}`")),
    }
}

/// One document: its name and text.
#[derive(Debug)]
pub struct Document {
    pub name: String,
    pub text: String,
    /// The part of `text` in an HTML title or heading (empty for plain text).
    pub headings: String,
}

impl Document {
    /// The document's fingerprint: that of its text, with the words of its
    /// headings counted `heading_weight` times.
    pub fn fingerprint(&self, hasher: &Simhasher, heading_weight: f64) -> u64 {
        if self.headings.is_empty() || heading_weight == 1.0 {
            return hasher.fingerprint(&self.text);
        }
        let extra = heading_weight - 1.0;
        simhash(
            hasher.features(&self.text).into_iter().chain(
                hasher
                    .features(&self.headings)
                    .into_iter()
                    .map(|(h, w)| (h, w * extra)),
            ),
        )
    }

    /// Whether the document is blank: no letter or digit in its text (for
    /// an HTML page, its visible text). Such a text has no words, so its
    /// fingerprint would be 0 and every blank document a duplicate of every
    /// other: `dedup`, `add` and `check` leave blank documents out.
    pub fn is_blank(&self) -> bool {
        is_blank_text(&self.text)
    }

    /// The document's fingerprint ([`Document::fingerprint`]), or `None` if
    /// it is blank: no letter or digit ([`Document::is_blank`]), or no
    /// feature for `hasher` ([`Simhasher::fingerprint_checked`]: digits only,
    /// say, for the letter-run tokenizer).
    pub fn fingerprint_checked(&self, hasher: &Simhasher, heading_weight: f64) -> Option<u64> {
        if self.is_blank() {
            return None;
        }
        let fp = hasher.fingerprint_checked(&self.text)?;
        if self.headings.is_empty() || heading_weight == 1.0 {
            Some(fp)
        } else {
            Some(self.fingerprint(hasher, heading_weight))
        }
    }
}

/// Whether a text has no letter or digit (see [`Document::is_blank`]).
pub fn is_blank_text(text: &str) -> bool {
    simhashdb::dedup::is_blank_text(text)
}

/// A file to read, with its size for the progress bar.
#[derive(Debug)]
pub struct InputFile {
    /// Where to read it (`-`: standard input); any bytes, as the OS gave them.
    pub path: PathBuf,
    /// Its name as a document name (not UTF-8 bytes shown as U+FFFD).
    pub name: String,
    pub len: u64,
}

/// Which files a directory walk takes: regular files only, never FIFOs,
/// sockets or devices, which could block forever.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct WalkArgs {
    /// Also read hidden files and directories (names starting with `.`)
    /// inside directories; by default they are skipped.
    #[arg(long)]
    pub hidden: bool,
    /// Read files that `.gitignore`, `.ignore` and `.git/info/exclude`
    /// rules exclude; by default those rules are obeyed inside directories.
    #[arg(long)]
    pub no_ignore: bool,
    /// Follow symbolic links inside directories (a link cycle is reported
    /// and skipped); by default links inside directories are skipped.
    /// Paths named on the command line are always followed.
    #[arg(long)]
    pub follow: bool,
    /// Also read binary files (a NUL byte in their first 8 KiB); by default
    /// they are skipped.
    #[arg(long)]
    pub binary: bool,
}

/// The files named by `args` (directories are walked, in name order;
/// `-` is standard input), and the names of those that could not be listed
/// (each reported on standard error). Inside directories only regular files
/// are taken, hidden files and ignored ones only when `walk` says so. Names
/// may be any bytes.
pub fn collect_inputs(
    args: &[std::ffi::OsString],
    walk: &WalkArgs,
) -> (Vec<InputFile>, Vec<String>) {
    let mut files = Vec::new();
    let mut failures = Vec::new();
    for arg in args {
        if arg == "-" {
            files.push(InputFile {
                path: PathBuf::from(arg),
                name: "-".to_string(),
                len: 0,
            });
        } else {
            collect_files(Path::new(arg), walk, &mut files, &mut failures);
        }
    }
    (files, failures)
}

fn collect_files(
    path: &Path,
    walk: &WalkArgs,
    files: &mut Vec<InputFile>,
    failures: &mut Vec<String>,
) {
    match fs::metadata(path) {
        Ok(meta) if meta.is_dir() => {
            let walker = ignore::WalkBuilder::new(path)
                .hidden(!walk.hidden)
                .ignore(!walk.no_ignore)
                .git_ignore(!walk.no_ignore)
                .git_exclude(!walk.no_ignore)
                .git_global(false)
                .parents(!walk.no_ignore)
                .require_git(false)
                .follow_links(walk.follow)
                .sort_by_file_path(|a, b| a.cmp(b))
                .build();
            for entry in walker {
                match entry {
                    Ok(entry) if entry.file_type().is_some_and(|t| t.is_file()) => {
                        let len = entry.metadata().map(|m| m.len()).unwrap_or(0);
                        files.push(InputFile {
                            name: entry.path().to_string_lossy().into_owned(),
                            path: entry.into_path(),
                            len,
                        });
                    }
                    // Directories, and what is not a regular file: FIFOs,
                    // sockets, devices, links not followed.
                    Ok(_) => {}
                    Err(e) if is_loop(&e) => {
                        // Its files are read once, through the other path.
                        eprintln!("simhashdb: skipped a symbolic link cycle: {e}");
                    }
                    Err(e) => {
                        eprintln!("simhashdb: cannot read {e}");
                        failures.push(e.to_string());
                    }
                }
            }
        }
        Ok(meta) if is_device_or_socket(&meta) => {
            // Reading /dev/zero would never end; a pipe named here is read.
            eprintln!(
                "simhashdb: cannot read {}: not a regular file, directory or pipe",
                path.display()
            );
            failures.push(path.display().to_string());
        }
        Ok(meta) => files.push(InputFile {
            path: path.to_path_buf(),
            name: path.to_string_lossy().into_owned(),
            len: meta.len(),
        }),
        Err(e) => {
            eprintln!("simhashdb: cannot read {}: {e}", path.display());
            failures.push(path.display().to_string());
        }
    }
}

#[cfg(unix)]
fn is_device_or_socket(meta: &fs::Metadata) -> bool {
    use std::os::unix::fs::FileTypeExt;
    let t = meta.file_type();
    t.is_char_device() || t.is_block_device() || t.is_socket()
}

#[cfg(not(unix))]
fn is_device_or_socket(_meta: &fs::Metadata) -> bool {
    false
}

/// A symbolic link cycle.
fn is_loop(e: &ignore::Error) -> bool {
    match e {
        ignore::Error::Loop { .. } => true,
        ignore::Error::WithPath { err, .. } | ignore::Error::WithDepth { err, .. } => is_loop(err),
        _ => false,
    }
}

/// Whether the start of a file says it is binary: a NUL byte in its first
/// 8 KiB (git's and ripgrep's rule).
pub fn is_binary(data: &[u8]) -> bool {
    data[..data.len().min(8192)].contains(&0)
}

/// Files are read this many at a time (in parallel within a batch).
const FILES_PER_BATCH: usize = 256;

/// Whether blank documents (no text at all) are passed on or left out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Blank {
    Keep,
    Skip,
}

/// Reads `files` as documents and maps each through `f` in parallel, in
/// input order. Unreadable files are reported on standard error and their
/// names returned; the rest are read. Also returns how many blank documents
/// were left out (with `Blank::Skip`). Binary files are skipped unless
/// `read.walk.binary`.
pub fn read_documents<T, F>(
    files: &[InputFile],
    read: &ReadArgs,
    blank: Blank,
    progress: &ProgressBar,
    f: F,
) -> (Vec<T>, Vec<String>, usize)
where
    T: Send,
    F: Fn(Document) -> T + Sync,
{
    let mut out = Vec::new();
    let mut failures = Vec::new();
    let binaries = AtomicUsize::new(0);
    let blanks = AtomicUsize::new(0);
    let keep = |d: &Document| {
        let skip = blank == Blank::Skip && d.is_blank();
        if skip {
            blanks.fetch_add(1, Ordering::Relaxed);
        }
        !skip
    };
    for batch in files.chunks(FILES_PER_BATCH) {
        let results: Vec<Result<Vec<T>, CliError>> = batch
            .par_iter()
            .map(|file| {
                let data = read_path(&file.path, &file.name)?;
                if !read.walk.binary && is_binary(&data) {
                    binaries.fetch_add(1, Ordering::Relaxed);
                    return Ok(Vec::new());
                }
                let is_html = read.html || html::is_html_name(&file.name);
                Ok(if read.lines {
                    // Progress by lines done: one large file is common here.
                    let docs: Vec<(usize, &[u8])> = lines(&data).enumerate().collect();
                    docs.into_par_iter()
                        .map(|(n, line)| {
                            progress.inc(line.len() as u64 + 1);
                            document(format!("{}:{}", file.name, n + 1), line, is_html)
                        })
                        .filter(keep)
                        .map(&f)
                        .collect()
                } else {
                    progress.inc(file.len);
                    let doc = document(file.name.clone(), &data, is_html);
                    if keep(&doc) { vec![f(doc)] } else { Vec::new() }
                })
            })
            .collect();
        for (result, file) in results.into_iter().zip(batch) {
            match result {
                Ok(docs) => out.extend(docs),
                Err(e) => {
                    progress.suspend(|| eprintln!("simhashdb: {e}"));
                    failures.push(file.name.clone());
                }
            }
        }
    }
    let binaries = binaries.into_inner();
    if binaries > 0 {
        progress.suspend(|| {
            eprintln!("simhashdb: skipped {binaries} binary file(s) (--binary reads them)")
        });
    }
    (out, failures, blanks.into_inner())
}

/// Reads a whole file by its path (any bytes), or standard input for `-`.
fn read_path(path: &Path, name: &str) -> Result<Vec<u8>, CliError> {
    if path.as_os_str() == "-" {
        return read_all("-");
    }
    fs::read(path).map_err(|e| CliError::read(name, e))
}

/// A document from raw bytes (invalid UTF-8 is replaced, not refused: a
/// file's name, not its bytes, is what the user controls).
pub fn document(name: String, data: &[u8], is_html: bool) -> Document {
    let text = String::from_utf8_lossy(data);
    if is_html {
        let page = html::visible_text(&text);
        Document {
            name,
            text: page.text,
            headings: page.headings,
        }
    } else {
        Document {
            name,
            text: text.into_owned(),
            headings: String::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heading_weight_one_is_the_plain_fingerprint() {
        let hasher = Simhasher::default();
        let doc = document(
            "a.html".into(),
            b"<title>Storage engines</title><p>write ahead logs and segments</p>",
            true,
        );
        assert_eq!(doc.fingerprint(&hasher, 1.0), hasher.fingerprint(&doc.text));
        // Weighted up, the title's words decide more bits.
        let heavy = doc.fingerprint(&hasher, 50.0);
        let title = hasher.fingerprint("Storage engines");
        assert!(
            simhashdb::hamming(heavy, title)
                < simhashdb::hamming(hasher.fingerprint(&doc.text), title)
        );
    }
}
