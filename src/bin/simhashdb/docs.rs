//! Documents from files, directories and lines, and their fingerprints.

use std::fs;
use std::path::{Path, PathBuf};

use indicatif::ProgressBar;
use rayon::prelude::*;
use simhashdb::fingerprint::{Tokenizer, Weighting, simhash};
use simhashdb::{Index, Simhasher};

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

    /// Whether the document holds no text at all (it is left out: every
    /// empty document would be a duplicate of every other).
    pub fn is_blank(&self) -> bool {
        self.text.trim().is_empty()
    }
}

/// A file to read, with its size for the progress bar.
#[derive(Debug)]
pub struct InputFile {
    pub name: String,
    pub len: u64,
}

/// The files named by `args` (directories are read recursively, in name
/// order; `-` is standard input), and the names of those that could not be
/// listed (each reported on standard error).
pub fn collect_inputs(args: &[String]) -> (Vec<InputFile>, Vec<String>) {
    let mut files = Vec::new();
    let mut failures = Vec::new();
    for arg in args {
        if arg == "-" {
            files.push(InputFile {
                name: arg.clone(),
                len: 0,
            });
        } else {
            collect_files(Path::new(arg), &mut files, &mut failures);
        }
    }
    (files, failures)
}

fn collect_files(path: &Path, files: &mut Vec<InputFile>, failures: &mut Vec<String>) {
    match fs::metadata(path) {
        Ok(meta) if meta.is_dir() => {
            let entries = fs::read_dir(path).and_then(|rd| {
                rd.map(|e| e.map(|e| e.path()))
                    .collect::<Result<Vec<PathBuf>, _>>()
            });
            match entries {
                Ok(mut children) => {
                    children.sort();
                    for child in children {
                        collect_files(&child, files, failures);
                    }
                }
                Err(e) => {
                    eprintln!("simhashdb: cannot read directory {}: {e}", path.display());
                    failures.push(path.display().to_string());
                }
            }
        }
        Ok(meta) => files.push(InputFile {
            name: path.display().to_string(),
            len: meta.len(),
        }),
        Err(e) => {
            eprintln!("simhashdb: cannot read {}: {e}", path.display());
            failures.push(path.display().to_string());
        }
    }
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
/// names returned; the rest are read.
pub fn read_documents<T, F>(
    files: &[InputFile],
    read: &ReadArgs,
    blank: Blank,
    progress: &ProgressBar,
    f: F,
) -> (Vec<T>, Vec<String>)
where
    T: Send,
    F: Fn(Document) -> T + Sync,
{
    let mut out = Vec::new();
    let mut failures = Vec::new();
    for batch in files.chunks(FILES_PER_BATCH) {
        let results: Vec<Result<Vec<T>, CliError>> = batch
            .par_iter()
            .map(|file| {
                let data = read_all(&file.name)?;
                let is_html = read.html || html::is_html_name(&file.name);
                Ok(if read.lines {
                    // Progress by lines done: one large file is common here.
                    let docs: Vec<(usize, &[u8])> = lines(&data).enumerate().collect();
                    docs.into_par_iter()
                        .map(|(n, line)| {
                            progress.inc(line.len() as u64 + 1);
                            document(format!("{}:{}", file.name, n + 1), line, is_html)
                        })
                        .filter(|d| blank == Blank::Keep || !d.is_blank())
                        .map(&f)
                        .collect()
                } else {
                    progress.inc(file.len);
                    let doc = document(file.name.clone(), &data, is_html);
                    if blank == Blank::Skip && doc.is_blank() {
                        Vec::new()
                    } else {
                        vec![f(doc)]
                    }
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
    (out, failures)
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
