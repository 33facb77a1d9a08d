//! What checking a doc map block's CRC once per reader saves a lookup.
//!
//! `cargo run --release --example docmap_lookup_bench -- [N] [ROUNDS]`
//!
//! Builds an in-memory doc map of N documents (default 4,000,000) named by
//! URLs of about 60 bytes, sorted by fingerprint, as a merge writes them;
//! then, ROUNDS times (default 5), opens a fresh reader and looks up one
//! stored fingerprint in each block, in a shuffled order, twice: the first
//! pass reads every block for the first time (its CRC, names included,
//! computed: the cost of every lookup before), the second reads the same
//! blocks again (CRC already checked: the cost of every later lookup). The
//! doc map (about 80 bytes per document) is far larger than the CPU's
//! caches, so both passes miss them alike.

use std::time::Instant;

use simhashdb::format::{DocEntry, DocMapReader, DocMapWriter};

fn xorshift(mut s: u64) -> impl FnMut() -> u64 {
    move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let n: u64 = args.first().map_or(Ok(4_000_000), |s| s.parse())?;
    let rounds: usize = args.get(1).map_or(Ok(5), |s| s.parse())?;
    let mut next = xorshift(0x9E37_79B9_7F4A_7C15);
    let mut fps: Vec<u64> = (0..n).map(|_| next()).collect();
    fps.sort_unstable();
    let names: Vec<String> = (0..n)
        .map(|i| format!("https://www.example.com/articles/2026/11/{i:012}/index.html"))
        .collect();
    let mut w = DocMapWriter::new(1, 2);
    for (i, (&fp, name)) in fps.iter().zip(&names).enumerate() {
        w.push(DocEntry {
            fingerprint: fp,
            id: i as u64,
            seq: i as u64,
            timestamp: 1_790_000_000_000,
            name: Some(name),
            sketch: None,
        })?;
    }
    let bytes = w.finish()?;
    println!(
        "doc map: {n} documents, {:.1} MiB ({:.1} bytes per document)",
        bytes.len() as f64 / (1 << 20) as f64,
        bytes.len() as f64 / n as f64
    );
    // One stored fingerprint per block of 128, shuffled.
    let mut probes: Vec<u64> = fps.iter().step_by(128).copied().collect();
    for i in (1..probes.len()).rev() {
        let j = (next() % (i as u64 + 1)) as usize;
        probes.swap(i, j);
    }
    println!("round\tfirst read ns/lookup\tlater reads ns/lookup\tratio");
    let mut found = 0usize;
    for round in 0..rounds {
        let reader = DocMapReader::new(&bytes[..])?;
        let mut pass = || -> Result<f64, Box<dyn std::error::Error>> {
            let start = Instant::now();
            for &fp in &probes {
                if let Some(doc) = reader.by_fingerprint(fp).next() {
                    found += doc?.name.map_or(0, str::len);
                }
            }
            Ok(start.elapsed().as_nanos() as f64 / probes.len() as f64)
        };
        let first = pass()?;
        let later = pass()?;
        println!("{round}\t{first:.0}\t{later:.0}\t{:.2}", first / later);
    }
    assert!(found > 0);
    Ok(())
}
