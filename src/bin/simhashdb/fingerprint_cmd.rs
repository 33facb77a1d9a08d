//! `fingerprint`: one `FINGERPRINT<TAB>NAME` line per document.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use rayon::prelude::*;
use simhashdb::Simhasher;
use simhashdb::fingerprint::{Tokenizer, Weighting};

use crate::error::CliError;
use crate::input::{open_output, read_all};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Files or directories (read recursively) to fingerprint; `-` for standard input.
    #[arg(default_value = "-")]
    paths: Vec<String>,
    /// Treat every line as a document, named `PATH:LINE`.
    #[arg(long)]
    lines: bool,
    /// Tokenizer: words, letters, chinese, chars or chars:N.
    #[arg(long, default_value_t = Tokenizer::Words)]
    tokenizer: Tokenizer,
    /// Word shingle width (1 = single words).
    #[arg(long, default_value_t = 1)]
    shingle: usize,
    /// Feature weighting: tf (term frequency) or binary.
    #[arg(long, default_value_t = Weighting::TermFrequency)]
    weighting: Weighting,
}

/// Documents are read and fingerprinted this many files at a time.
const FILES_PER_BATCH: usize = 256;

pub fn run(args: &Args) -> Result<(), CliError> {
    let hasher = Simhasher::builder()
        .tokenizer(args.tokenizer)
        .shingle(args.shingle)
        .weighting(args.weighting)
        .build()
        .map_err(|e| CliError::Input(e.to_string()))?;

    let mut failures: Vec<String> = Vec::new();
    let mut files: Vec<String> = Vec::new();
    for arg in &args.paths {
        if arg == "-" {
            files.push(arg.clone());
        } else {
            collect_files(Path::new(arg), &mut files, &mut failures);
        }
    }

    let mut out = open_output("-")?;
    let write_err = |e| CliError::write("standard output", e);
    for batch in files.chunks(FILES_PER_BATCH) {
        let results: Vec<Result<Vec<(u64, String)>, CliError>> = batch
            .par_iter()
            .map(|name| {
                let data = read_all(name)?;
                let text = String::from_utf8_lossy(&data);
                Ok(if args.lines {
                    let docs: Vec<&str> = text.lines().collect();
                    docs.par_iter()
                        .enumerate()
                        .map(|(n, line)| (hasher.fingerprint(line), format!("{name}:{}", n + 1)))
                        .collect()
                } else {
                    vec![(hasher.fingerprint(&text), name.clone())]
                })
            })
            .collect();
        for result in results {
            match result {
                Ok(docs) => {
                    for (fp, name) in docs {
                        writeln!(out, "{fp}\t{name}").map_err(write_err)?;
                    }
                }
                Err(e) => {
                    eprintln!("simhashdb: {e}");
                    failures.push(e.to_string());
                }
            }
        }
    }
    out.flush().map_err(write_err)?;
    match failures.len() {
        0 => Ok(()),
        n => Err(CliError::Failure(format!("{n} input(s) could not be read"))),
    }
}

/// Adds `path` (a file) or every file below it (a directory, in name order).
fn collect_files(path: &Path, files: &mut Vec<String>, failures: &mut Vec<String>) {
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
        Ok(_) => files.push(path.display().to_string()),
        Err(e) => {
            eprintln!("simhashdb: cannot read {}: {e}", path.display());
            failures.push(path.display().to_string());
        }
    }
}
