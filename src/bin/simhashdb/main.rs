//! The `simhashdb` command line. Uses only the library's public API.

mod batch_cmd;
mod dedup_cmd;
mod docs;
mod error;
mod fingerprint_cmd;
mod html;
mod index_cmd;
mod input;
mod plan_cmd;
mod progress;
#[cfg(feature = "serve")]
mod serve;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

use error::CliError;

const EXIT_CODES: &str = "\
Exit codes:
  0  success (also when the reader of standard output goes away early)
  1  failure: a file could not be read or written (dedup and fingerprint report
     and skip unreadable inputs, then exit 1), the index is locked by another
     process, a document to get or delete does not exist, or another runtime error
  2  usage error or bad input: the message names the line, and nothing was
     written (check has applied the lines before the bad one, none after it)
  3  the index is damaged: a checksum failed; the message names file and offset

Document ids: a named document's id is the FNV-1a 64 hash of its name's UTF-8
bytes, so `get NAME` and `delete NAME` find what `add` and `check` stored.";

/// An exact near-duplicate index for 64-bit SimHash fingerprints.
#[derive(Parser, Debug)]
#[command(name = "simhashdb", version, about, after_help = EXIT_CODES)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Print the groups of near-duplicate documents among files, directories or lines.
    ///
    /// Each group lists its members with their distance to its first member
    /// (in input order); largest groups first. A summary goes to standard
    /// error. Unreadable files are reported and skipped (exit code 1 at the end).
    #[command(after_help = EXIT_CODES)]
    Dedup(dedup_cmd::Args),
    /// Create an index with chosen settings (`add` creates one with the defaults).
    #[command(after_help = EXIT_CODES)]
    Create(index_cmd::CreateArgs),
    /// Add documents (files, directories, `NAME<TAB>TEXT` lines or fingerprints) to an index.
    ///
    /// Creates the index with the default settings if the directory holds
    /// none. All input is read and checked first and then written, so bad input
    /// writes nothing. A document with the name of an existing one replaces it.
    #[command(after_help = EXIT_CODES)]
    Add(index_cmd::AddArgs),
    /// Find the documents of an index near a file, a text or a fingerprint.
    ///
    /// Prints `DISTANCE<TAB>ID<TAB>NAME` per match, nearest first.
    #[command(after_help = EXIT_CODES)]
    Query(index_cmd::QueryArgs),
    /// Streaming check-and-insert: reads `NAME<TAB>TEXT` lines from standard input.
    ///
    /// For each line, as it arrives, prints `new` (and inserts the document)
    /// or `dup<TAB>NAME<TAB>DISTANCE` naming the nearest existing document
    /// (and inserts nothing). Check and insert are one atomic step. A bad line
    /// stops the command with exit code 2; the lines before it have been
    /// answered and applied, the bad one and those after it have not. A last
    /// line without a newline is taken as cut off and refused.
    #[command(after_help = EXIT_CODES)]
    Check(index_cmd::CheckArgs),
    /// Print documents of an index: `ID<TAB>FINGERPRINT<TAB>TIMESTAMP_MS<TAB>NAME`.
    #[command(after_help = EXIT_CODES)]
    Get(index_cmd::GetArgs),
    /// Delete documents from an index by name or id.
    #[command(after_help = EXIT_CODES)]
    Delete(index_cmd::DeleteArgs),
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
    /// Read every file of an index and check every checksum.
    ///
    /// Exit code 0: healthy. Exit code 3: damaged; the message names the file
    /// and byte offset of the first damage found.
    #[command(after_help = EXIT_CODES)]
    Verify(index_cmd::VerifyArgs),
    /// Show an index's plan, fingerprint configuration, segments and sizes.
    #[command(after_help = EXIT_CODES)]
    Stats(index_cmd::StatsArgs),
    /// Serve the index over HTTP: check-and-insert, documents, queries (docs/SERVER.md).
    ///
    /// One process owns the index; crawlers in any language call JSON over
    /// HTTP. Prints `listening on http://ADDR` once it accepts connections.
    /// SIGTERM or SIGINT: stops accepting, finishes the requests in flight,
    /// flushes the index, releases its lock and exits 0.
    #[cfg(feature = "serve")]
    #[command(after_help = EXIT_CODES)]
    Serve(serve::Args),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Dedup(args) => dedup_cmd::run(&args),
        Command::Create(args) => index_cmd::create(&args),
        Command::Add(args) => index_cmd::add(&args),
        Command::Query(args) => index_cmd::query(&args),
        Command::Delete(args) => index_cmd::delete(&args),
        Command::Check(args) => index_cmd::check(&args),
        Command::Get(args) => index_cmd::get(&args),
        Command::Verify(args) => index_cmd::verify(&args),
        Command::Stats(args) => index_cmd::stats(&args),
        Command::Fingerprint(args) => fingerprint_cmd::run(&args),
        Command::FindAll(args) => batch_cmd::run(&args, batch_cmd::Mode::Pairs),
        Command::Clusters(args) => batch_cmd::run(&args, batch_cmd::Mode::Clusters),
        Command::Plan(args) => plan_cmd::run(&args),
        Command::Compact(args) => index_cmd::compact(&args),
        #[cfg(feature = "serve")]
        Command::Serve(args) => serve::run(&args),
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
