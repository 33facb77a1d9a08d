//! `fingerprint`: one `FINGERPRINT<TAB>NAME` line per document.

use std::io::Write;

use crate::docs::{Blank, FingerprintArgs, ReadArgs, collect_inputs, read_documents};
use crate::error::CliError;
use crate::input::{escape_field, open_output};
use crate::progress;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Files or directories (read recursively) to fingerprint; `-` for standard input.
    #[arg(default_value = "-")]
    paths: Vec<std::ffi::OsString>,
    #[command(flatten)]
    read: ReadArgs,
    #[command(flatten)]
    fingerprint: FingerprintArgs,
}

pub fn run(args: &Args) -> Result<(), CliError> {
    let hasher = args.fingerprint.hasher()?;
    let (files, mut failures) = collect_inputs(&args.paths, &args.read.walk);
    let bar = progress::bytes(files.iter().map(|f| f.len).sum(), "reading");
    let (docs, unreadable, _) = read_documents(&files, &args.read, Blank::Keep, &bar, |d| {
        (d.fingerprint(&hasher, args.read.heading_weight), d.name)
    });
    bar.finish_and_clear();
    failures.extend(unreadable);

    let mut out = open_output("-")?;
    let write_err = |e| CliError::write("standard output", e);
    for (fp, name) in docs {
        writeln!(out, "{fp}\t{}", escape_field(&name)).map_err(write_err)?;
    }
    out.flush().map_err(write_err)?;
    match failures.len() {
        0 => Ok(()),
        n => Err(CliError::Failure(format!("{n} input(s) could not be read"))),
    }
}
