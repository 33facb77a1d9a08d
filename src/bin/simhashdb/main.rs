//! The `simhashdb` command line. Uses only the library's public API.

mod batch_cmd;
mod dataset;
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
     and skip unreadable inputs, then exit 1; add then writes nothing), the
     index is locked by another process, a document to get or delete does not
     exist (the others named are still done), the disk is full, or another
     runtime error
  2  usage error or bad input: the message names the argument or the line, and
     nothing was written (check has applied the lines before the bad one, none
     after it); also a new index asked for in a directory holding other files
  3  the index is damaged: a checksum failed (the message names file and
     offset), or the directory holds index files but no MANIFEST (nothing is
     changed; `simhashdb repair` rebuilds it)

Every argument is checked before an index is created or opened, so a refused
command leaves no new directory or file behind. An index is created only in a
missing or empty directory (`create --force` allows other files).

Document ids: a named document's id is the FNV-1a 64 hash of its name's UTF-8
bytes, so `get NAME` and `delete NAME` find what `add` and `check` stored.
Names in tab-separated output have `\\`, tab, newline and carriage return
written as `\\\\`, `\\t`, `\\n` and `\\r`.

Blank documents (no letter or digit; for check, query and `add -` also no word
for the index's tokenizer) are left out by dedup and add (counted on standard
error), answered `blank` by check, refused by query (exit 2), and never
stored: their
fingerprint would be 0, a duplicate of every other blank one (fingerprint
prints it).

On a full disk a writing command fails with exit code 1 and leaves no partial
file; add keeps the batches (of at most 64 MiB, each whole) written before the
failure. Reading commands need no free space.

Directories are walked in name order, taking regular files only (never FIFOs,
sockets or devices); hidden files, files excluded by .gitignore/.ignore rules,
symbolic links inside directories and binary files (a NUL byte in the first
8 KiB) are skipped unless --hidden, --no-ignore, --follow or --binary is
given. Symbolic link cycles are reported and read once.";

/// An exact near-duplicate index for 64-bit SimHash fingerprints.
#[derive(Parser, Debug)]
#[command(name = "simhashdb", version, about, after_help = EXIT_CODES)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Print the groups of near-duplicate documents among files, directories
    #[cfg_attr(
        feature = "parquet",
        doc = " or lines; or deduplicate a dataset (JSONL, CSV/TSV, Parquet)."
    )]
    #[cfg_attr(
        not(feature = "parquet"),
        doc = " or lines; or deduplicate a dataset (JSONL, CSV/TSV; Parquet with the `parquet` feature)."
    )]
    ///
    /// Files and lines: each group lists its members with their distance to
    /// its first member (in input order); largest groups first. A summary
    /// goes to standard error. Unreadable files are reported and skipped
    /// (exit code 1 at the end).
    ///
    /// Datasets: when every input is a .jsonl/.ndjson/.csv/.tsv/.parquet file
    /// (JSONL/CSV/TSV optionally .gz or .zst; in directories, files named
    /// `_*` such as Spark's `_SUCCESS` are skipped), or with --format, each record is a document: its text is the
    /// --text-field. The output is the dataset without its near-duplicates
    /// (--emit keep, the default), the removed records (--emit drop) or the
    /// groups (--emit groups). Verified by default: a pair counts when the
    /// Jaccard similarity of the texts' word 5-shingles is at least 0.8
    /// (docs/QUALITY.md); the pairs to check are those that share a MinHash
    /// band of those shingles (20 bands of 5 rows: a pair at 0.8 is checked
    /// with probability 0.9996). Records are visited in --keep order and one
    /// is dropped only against an earlier record that is kept (the most
    /// similar); a group is a kept record and those dropped against it.
    /// --verify changes the check (and the bands with it); -d K checks the
    /// pairs within K bits instead of the bands' pairs; --no-verify is
    /// plain simhash within -d (default 3), groups = connected components. Memory holds fingerprints and positions, not texts: the
    /// check re-reads the candidates' texts within --verify-memory. A bad
    /// record stops the command (exit code 2, naming file and line or
    /// record) and nothing is written: a record (JSONL line, CSV record,
    /// Parquet text) over 64 MiB as decoded, a CSV quote never closed or
    /// followed by more than a delimiter or line end, a bad id. Inputs are
    /// read more than once, so each must be a regular file (not `-`, a pipe
    /// or a FIFO) that does not change while the command runs. Summary on standard error; --stats-json
    /// writes it as JSON.
    #[cfg_attr(
        feature = "parquet",
        doc = " Parquet is read and written by a build with the `parquet` feature, as this one."
    )]
    #[cfg_attr(
        not(feature = "parquet"),
        doc = " This build has no Parquet (the `parquet` feature): a Parquet input, or output, is \
               refused (exit code 2) before anything is written; `cargo install simhashdb \
               --features parquet`, or the `simhashdb` command of the Python wheel, reads and \
               writes Parquet."
    )]
    #[command(after_help = EXIT_CODES)]
    Dedup(dedup_cmd::Args),
    /// Create an index with chosen settings (`add` creates one with the defaults).
    #[command(after_help = EXIT_CODES)]
    Create(index_cmd::CreateArgs),
    /// Add documents (files, directories, `NAME<TAB>TEXT` lines or fingerprints) to an index.
    ///
    /// Creates the index with the default settings if the directory is missing
    /// or empty (k = 6 for texts, 3 with --fingerprints). Each text is stored
    /// with its sketch, the 16-byte value verified answers compare (docs/QUALITY.md).
    /// All input is read, checked and fingerprinted first and then
    /// written, so bad or unreadable input writes nothing. A document with the
    /// name of an existing one replaces it (also within one input: the last
    /// one is kept, and the count printed is of distinct documents).
    #[command(after_help = EXIT_CODES)]
    Add(index_cmd::AddArgs),
    /// Find the documents of an index near a file, a text or a fingerprint.
    ///
    /// For --fp, prints `DISTANCE<TAB>ID<TAB>NAME` per match, nearest first.
    /// For a file or --text, answers by the verified rule (a document with a
    /// sketch matches when the estimated similarity of the texts reaches
    /// --threshold, one without when its fingerprint lies within -d) and
    /// prints `DISTANCE<TAB>ID<TAB>NAME<TAB>SIMILARITY<TAB>RULE` per match,
    /// most similar first (`-` and `fingerprint` for a document without a
    /// sketch, by distance after the others).
    ///
    /// Reads beside a process that writes the index (`add`, `check`,
    /// `serve`): takes no lock, writes nothing, and sees every write that
    /// process had acknowledged when the command started.
    #[command(after_help = EXIT_CODES)]
    Query(index_cmd::QueryArgs),
    /// Streaming check-and-insert: reads `NAME<TAB>TEXT` lines from standard input.
    ///
    /// For each line, as it arrives, prints `new` (and inserts the document
    /// with its sketch), `dup<TAB>NAME<TAB>DISTANCE<TAB>SIMILARITY<TAB>RULE`
    /// naming the most similar existing near-duplicate (and inserts
    /// nothing), or `blank` for a text without a letter or digit
    /// (inserts nothing). A stored document is a near-duplicate when the
    /// estimated similarity of the two texts reaches --threshold (RULE
    /// `sketch`; its fingerprint within the text's candidate distance, 4 to
    /// 8 by length, at most the index's k), or, for a document stored
    /// without a sketch, when its fingerprint lies within -d (RULE
    /// `fingerprint`, SIMILARITY `-`). A new index gets k = 6.
    /// Check and insert are one atomic step. A bad line
    /// stops the command with exit code 2; the lines before it have been
    /// answered and applied, the bad one and those after it have not. A last
    /// line without a newline is taken as cut off and refused.
    #[command(after_help = EXIT_CODES)]
    Check(index_cmd::CheckArgs),
    /// Print documents of an index: `ID<TAB>FINGERPRINT<TAB>TIMESTAMP_MS<TAB>NAME`.
    ///
    /// Reads beside a process that writes the index (`add`, `check`,
    /// `serve`): takes no lock, writes nothing, and sees every write that
    /// process had acknowledged when the command started.
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
    /// Rebuild a lost or damaged manifest from the files that pass their checksums.
    ///
    /// Keeps every segment whose files verify (and are not superseded by a
    /// merge of them), copies the writes of the WALs that are newer than the
    /// segments into one new WAL, moves every other index file (and a copy of
    /// the old MANIFEST) to DIR/lost+found/ (never deletes), writes a new
    /// MANIFEST and verifies the result. The settings come from the old
    /// MANIFEST or MANIFEST.tmp if one can be read, else from the options
    /// below: give those the index was created with. Takes the writer lock.
    #[command(after_help = EXIT_CODES)]
    Repair(index_cmd::RepairArgs),
    /// Read every file of an index and check every checksum.
    ///
    /// Exit code 0: healthy. Exit code 3: damaged; the message names the file
    /// and byte offset of the first damage found.
    ///
    /// Reads beside a process that writes the index (`add`, `check`,
    /// `serve`): takes no lock, writes nothing, and sees every write that
    /// process had acknowledged when the command started.
    /// Beside a writer, the frame it is appending may be reported as a
    /// warning (a tail recovery would drop).
    #[command(after_help = EXIT_CODES)]
    Verify(index_cmd::VerifyArgs),
    /// Show an index's plan, fingerprint configuration, segments and sizes.
    ///
    /// Reads beside a process that writes the index (`add`, `check`,
    /// `serve`): takes no lock, writes nothing, and sees every write that
    /// process had acknowledged when the command started.
    #[command(after_help = EXIT_CODES)]
    Stats(index_cmd::StatsArgs),
    /// Write a consistent copy of an index into DEST (a new path or an empty directory).
    ///
    /// Works whether or not another process has the index open. Segment
    /// files are hard-linked where the file system allows, else copied; the
    /// write-ahead logs are copied up to the last complete write, and a
    /// manifest naming them is written. Every write acknowledged before the
    /// command started is in the copy, which opens and verifies on its own.
    /// The index is not opened and none of its files is changed: the
    /// manifest is read, the files it names linked and copied, and the copy
    /// starts over if a flush or merge removed one meanwhile. A reader's lock
    /// is held while no other process has the index open for writing; a
    /// writer that holds it (a `simhashdb serve`) goes on writing
    /// meanwhile, and the copy holds every write it acknowledged before the
    /// command started (`POST /v1/backup` does the same inside the server).
    /// The copy is built in DEST's parent directory under
    /// `.NAME.backup-tmp.*` and renamed to DEST when complete: a killed
    /// backup leaves no DEST, and the next backup to DEST removes what it
    /// left. An existing DEST that is not an empty directory is refused
    /// (exit code 2). Restore: stop the writer, move the backup into place,
    /// start it (docs/RELIABILITY.md, "Backups").
    #[command(after_help = EXIT_CODES)]
    Backup(index_cmd::BackupArgs),
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
        Command::Backup(args) => index_cmd::backup(&args),
        Command::Fingerprint(args) => fingerprint_cmd::run(&args),
        Command::FindAll(args) => batch_cmd::run(&args, batch_cmd::Mode::Pairs),
        Command::Clusters(args) => batch_cmd::run(&args, batch_cmd::Mode::Clusters),
        Command::Plan(args) => plan_cmd::run(&args),
        Command::Compact(args) => index_cmd::compact(&args),
        Command::Repair(args) => index_cmd::repair(&args),
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
