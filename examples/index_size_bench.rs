//! Bytes per fingerprint of a whole index on disk (tables, doc maps,
//! manifest, WAL) and the time to ingest and compact it, in one bounded run.
//!
//! `cargo run --release --example index_size_bench -- N [N ...]`
//!
//! For each N (default 1,000,000): a fresh index in a temporary directory
//! with the default options, N xorshift64 fingerprints inserted as documents
//! `0..N` without names in batches of 10,000 (the harnesses' workload), then
//! `flush` and a close (which waits for a merge in progress): the ingest time.
//! It prints the files' bytes per fingerprint by kind, then reopens the
//! index, times `compact` (every segment merged into one), and prints the
//! sizes again. The source uses only the public API, so the same file builds
//! against an earlier release for a before/after comparison.

use std::path::Path;
use std::time::Instant;

use simhashdb::{Index, Options};

mod common;
use common::{cpu_seconds, insert_xorshift_timed, written_bytes};

/// Bytes of the index's files by kind: (`.seg`, `.ids`, MANIFEST, `.wal`, segments).
fn sizes(dir: &Path) -> std::io::Result<(u64, u64, u64, u64, usize)> {
    let (mut seg, mut ids, mut manifest, mut wal, mut segments) = (0, 0, 0, 0, 0);
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let len = entry.metadata()?.len();
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.ends_with(".seg") {
            seg += len;
            segments += 1;
        } else if name.ends_with(".ids") {
            ids += len;
        } else if name == "MANIFEST" {
            manifest += len;
        } else if name.ends_with(".wal") {
            wal += len;
        }
    }
    Ok((seg, ids, manifest, wal, segments))
}

fn report(label: &str, dir: &Path, n: u64) -> std::io::Result<()> {
    let (seg, ids, manifest, wal, segments) = sizes(dir)?;
    let per = |b: u64| b as f64 / n as f64;
    println!(
        "{n:>10} {label:>16}: {segments:>3} segments; bytes per fingerprint: tables {:.2}, doc maps {:.2}, manifest {:.4}, WAL {:.2}; total without WAL {:.2}",
        per(seg),
        per(ids),
        per(manifest),
        per(wal),
        per(seg + ids + manifest)
    );
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let ns: Vec<u64> = std::env::args()
        .skip(1)
        .map(|s| s.parse())
        .collect::<Result<_, _>>()?;
    let ns = if ns.is_empty() { vec![1_000_000] } else { ns };
    for n in ns {
        let temp = tempfile::tempdir()?;
        let dir = temp.path().join("index");
        let index = Index::open(&dir, Options::default())?;
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let (cpu, written) = (cpu_seconds(), written_bytes());
        let start = Instant::now();
        insert_xorshift_timed(&index, &mut state, 0..n, &mut Vec::new())?;
        index.flush()?;
        drop(index);
        let ingest = start.elapsed().as_secs_f64();
        println!(
            "{n:>10} ingest: {ingest:.2} s ({:.0} per second, merges included); {:.2} CPU s; {:.1} bytes written per fingerprint",
            n as f64 / ingest,
            cpu_seconds() - cpu,
            (written_bytes() - written) / n as f64
        );
        report("after ingest", &dir, n)?;
        let index = Index::open(&dir, Options::default())?;
        let (cpu, written) = (cpu_seconds(), written_bytes());
        let start = Instant::now();
        index.compact()?;
        let compact = start.elapsed().as_secs_f64();
        drop(index);
        println!(
            "{n:>10} compact: {compact:.2} s; {:.2} CPU s; {:.1} bytes written per fingerprint",
            cpu_seconds() - cpu,
            (written_bytes() - written) / n as f64
        );
        report("after compact", &dir, n)?;
    }
    Ok(())
}
