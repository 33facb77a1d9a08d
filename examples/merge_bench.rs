//! Cost of one merge: the work the merge thread does under sustained ingest.
//!
//! `cargo run --release --example merge_bench -- [SEGMENTS] [PER_SEGMENT] [ROUNDS] [DIR]`
//!
//! Builds an index of SEGMENTS segments (default 8) of PER_SEGMENT xorshift64
//! fingerprints each (default 1,000,000), one explicit flush per segment and
//! no merge policy, under DIR (default: a temporary directory); then times
//! `compact()`, which merges them all into one segment. Repeats ROUNDS times
//! (default 3), each on a fresh index, and prints per round the merge's wall
//! time, fingerprints merged per second, the process's CPU seconds and the
//! bytes it wrote per fingerprint during the merge.

use std::time::Instant;

use simhashdb::{Index, Options};

mod common;
use common::{cpu_seconds, insert_xorshift_timed, written_bytes};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |i: usize, default: u64| -> Result<u64, std::num::ParseIntError> {
        args.get(i).map_or(Ok(default), |s| s.parse())
    };
    let segments = arg(0, 8)?;
    let per_segment = arg(1, 1_000_000)?;
    let rounds = arg(2, 3)?;
    let temp = tempfile::tempdir()?;
    let root = args
        .get(3)
        .map_or_else(|| temp.path().to_path_buf(), std::path::PathBuf::from);
    let n = segments * per_segment;
    for round in 1..=rounds {
        let dir = root.join(format!("merge-{round}"));
        if dir.exists() {
            std::fs::remove_dir_all(&dir)?;
        }
        let options = Options::new().merge_policy(None).memtable_bytes(usize::MAX);
        let index = Index::open(&dir, options)?;
        let mut s = 0x9e37_79b9_7f4a_7c15u64 ^ round;
        for segment in 0..segments {
            let ids = segment * per_segment..(segment + 1) * per_segment;
            insert_xorshift_timed(&index, &mut s, ids, &mut Vec::new())?;
            index.flush()?;
        }
        let before = index.stats().segments;
        let cpu = cpu_seconds();
        let written = written_bytes();
        let start = Instant::now();
        index.compact()?;
        let wall = start.elapsed().as_secs_f64();
        let after = index.stats().segments;
        println!(
            "round {round}: merged {before} segments of {per_segment} into {after} in {wall:.2} s = {:.0} fingerprints per second; {:.2} CPU s; {:.1} bytes written per fingerprint",
            n as f64 / wall,
            cpu_seconds() - cpu,
            (written_bytes() - written) / n as f64
        );
        drop(index);
        std::fs::remove_dir_all(&dir)?;
    }
    Ok(())
}
