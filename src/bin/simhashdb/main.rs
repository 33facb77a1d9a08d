//! The `simhashdb` command line. Uses only the library's public API.

mod batch_cmd;
mod error;
mod fingerprint_cmd;
mod index_cmd;
mod input;
mod plan_cmd;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

use error::CliError;

const EXIT_CODES: &str = "\
Exit codes:
  0  success
  1  failure: a file could not be read or written, or another runtime error
  2  usage error or bad input (the message names the line); nothing was written";

/// An exact near-duplicate index for 64-bit SimHash fingerprints.
#[derive(Parser, Debug)]
#[command(name = "simhashdb", version, about, after_help = EXIT_CODES)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Print one `FINGERPRINT<TAB>NAME` line per document (fingerprint in decimal).
    #[command(after_help = EXIT_CODES)]
    Fingerprint(fingerprint_cmd::Args),
    /// Find every pair of fingerprints within distance d (simhash-cpp compatible).
    ///
    /// Reads newline-separated decimal u64 values; writes one JSON array `[a,b]`
    /// per pair. Identical values on different lines are a pair.
    #[command(after_help = EXIT_CODES)]
    FindAll(batch_cmd::Args),
    /// Group fingerprints into clusters of near-duplicates (simhash-cpp compatible).
    ///
    /// Reads newline-separated decimal u64 values; writes one JSON array per
    /// cluster (connected components of the pairs within distance d, two or
    /// more members each).
    #[command(after_help = EXIT_CODES)]
    Clusters(batch_cmd::Args),
    /// Show the table plans for a corpus size and distance, and which one is chosen.
    #[command(after_help = EXIT_CODES)]
    Plan(plan_cmd::Args),
    /// Merge an index's segments into one, dropping replaced, deleted and expired entries.
    ///
    /// Takes the index's writer lock: it fails (exit code 1) while another
    /// process has the index open for writing.
    #[command(after_help = EXIT_CODES)]
    Compact(index_cmd::CompactArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Fingerprint(args) => fingerprint_cmd::run(&args),
        Command::FindAll(args) => batch_cmd::run(&args, batch_cmd::Mode::Pairs),
        Command::Clusters(args) => batch_cmd::run(&args, batch_cmd::Mode::Clusters),
        Command::Plan(args) => plan_cmd::run(&args),
        Command::Compact(args) => index_cmd::compact(&args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(CliError::BrokenPipe) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("simhashdb: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}
