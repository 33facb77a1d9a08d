//! How long a full `Index::verify` takes: every checksum of every file, and
//! the agreement of each segment's tables with its doc map.
//!
//! `cargo run --release --example verify_bench -- N [DIR]`
//!
//! Builds an index of N xorshift64 fingerprints (ids 0..N, no names) in a
//! fresh directory (default: a temporary one) with the default options,
//! inserting batches of 10,000, compacts it to one segment, and reopens it
//! read-only. Then, with a warm page cache, it times a CRC32 pass over every
//! byte of every file (the baseline: reading and checksumming the bytes,
//! nothing decoded), then `Index::verify`, three times each, and prints the
//! best of each and their ratio.

use std::time::Instant;

use simhashdb::{Index, Options};

fn xorshift(mut s: u64) -> impl FnMut() -> u64 {
    move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let n: u64 = args
        .next()
        .and_then(|a| a.replace('_', "").parse().ok())
        .expect("usage: verify_bench N [DIR]");
    let tmp;
    let dir = match args.next() {
        Some(d) => std::path::PathBuf::from(d),
        None => {
            tmp = tempfile::tempdir().expect("temporary directory");
            tmp.path().join("index")
        }
    };
    let started = Instant::now();
    {
        let index = Index::open(&dir, Options::default()).expect("open");
        let mut next = xorshift(0x9E37_79B9_7F4A_7C15);
        let mut id = 0u64;
        while id < n {
            let batch: Vec<(u64, u64, Option<String>)> = (id..(id + 10_000).min(n))
                .map(|i| (i, next(), None))
                .collect();
            id += batch.len() as u64;
            index.insert_batch(batch).expect("insert");
        }
        index.compact().expect("compact");
    }
    println!(
        "built and compacted {n} documents in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let index = Index::open_read_only(&dir).expect("open read-only");
    let stats = index.stats();
    println!(
        "{} segment(s), {} tables in the index's plan, {} documents, {:.2} GB on disk",
        stats.segments,
        stats.plan.tables().len(),
        stats.segment_docs,
        stats.disk_bytes as f64 / 1e9
    );
    let files: Vec<_> = std::fs::read_dir(&dir)
        .expect("list")
        .map(|e| e.expect("entry").path())
        .filter(|p| !p.to_string_lossy().ends_with("LOCK"))
        .collect();
    let mut crc_best = f64::MAX;
    let mut verify_best = f64::MAX;
    for round in 0..3 {
        let t = Instant::now();
        let mut bytes = 0u64;
        let mut crc = 0u32;
        for path in &files {
            let data = std::fs::read(path).expect("read");
            bytes += data.len() as u64;
            crc ^= crc32fast::hash(&data);
        }
        let crc_s = t.elapsed().as_secs_f64();
        let t = Instant::now();
        let report = index.verify().expect("verify");
        let verify_s = t.elapsed().as_secs_f64();
        println!(
            "round {round}: CRC32 of {bytes} bytes in {crc_s:.2} s (xor {crc:08x}); \
             verify of {} files, {} bytes in {verify_s:.2} s",
            report.files, report.bytes
        );
        crc_best = crc_best.min(crc_s);
        verify_best = verify_best.min(verify_s);
    }
    println!(
        "best: CRC32 pass {crc_best:.2} s, verify {verify_best:.2} s, ratio {:.1}",
        verify_best / crc_best
    );
}
