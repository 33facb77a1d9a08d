//! Writes a small golden index of the current format version and a listing
//! of its live documents, for `tests/format_golden.rs` (docs/FORMAT.md,
//! "Versions": golden files of every released version are kept).
//!
//! `cargo run --release --example make_fixture -- DIR`
//!
//! DIR must not exist. The index (default options: k = 3) gets 400
//! documents in clusters of near-duplicates, some named (one with an empty
//! name), over two flushed segments, then a replacement of a flushed
//! document, a delete of a flushed one (a tombstone in the second segment),
//! and a WAL tail that is not flushed: more inserts, a delete and a
//! replacement. `DIR/index/` holds the index, `DIR/docs.tsv` the live
//! documents, one a line, sorted by id: id, fingerprint (16 hex digits),
//! timestamp in ms, and `-` for no name or `=` followed by the name. The
//! documents are deterministic; the timestamps are the clock's.

use std::fmt::Write as _;
use std::path::PathBuf;

use simhashdb::{Index, Options};

/// splitmix64: a deterministic stream of 64-bit values.
fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// `fingerprint` with `bits` distinct pseudo-random bits flipped.
fn flip(state: &mut u64, fingerprint: u64, bits: u32) -> u64 {
    let mut mask = 0u64;
    while mask.count_ones() < bits {
        mask |= 1 << (splitmix(state) % 64);
    }
    fingerprint ^ mask
}

/// The name of document `id`, if it has one: every third document, and
/// document 7 has the empty name.
fn name(id: u64) -> Option<String> {
    match id {
        7 => Some(String::new()),
        _ if id.is_multiple_of(3) => Some(format!("https://example.org/page/{id}?lang=en")),
        _ => None,
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let root = PathBuf::from(
        std::env::args()
            .nth(1)
            .ok_or("usage: make_fixture DIR (DIR must not exist)")?,
    );
    if root.exists() {
        return Err(format!("{} exists", root.display()).into());
    }
    std::fs::create_dir_all(&root)?;
    let dir = root.join("index");
    let options = Options::default()
        .merge_policy(None)
        .flush_thread(false)
        .memtable_bytes(usize::MAX);
    let index = Index::open(&dir, options)?;
    let mut state = 38;
    // Clusters of 8: a centre and seven copies 0..=5 bits away from it.
    let mut fingerprints = Vec::new();
    for _ in 0..50 {
        let centre = splitmix(&mut state);
        fingerprints.push(centre);
        for bits in [0, 1, 2, 3, 3, 4, 5] {
            fingerprints.push(flip(&mut state, centre, bits));
        }
    }
    let batch = |ids: std::ops::Range<u64>| {
        ids.map(|id| (id, fingerprints[id as usize], name(id)))
            .collect::<Vec<_>>()
    };
    // Segment 1: documents 0..200; segment 2: 200..360, a replacement of
    // document 5 and a delete of document 11 (both in segment 1).
    index.insert_batch(batch(0..200))?;
    index.flush()?;
    index.insert_batch(batch(200..360))?;
    index.insert_named(5, flip(&mut state, fingerprints[5], 2), "replaced")?;
    index.delete(11)?;
    index.flush()?;
    // The WAL tail: 360..400, a delete of a flushed document, a delete of
    // one in the tail, and a replacement of a flushed one.
    index.insert_batch(batch(360..400))?;
    index.delete(250)?;
    index.delete(390)?;
    index.insert(17, flip(&mut state, fingerprints[17], 1))?;
    index.sync()?;
    let mut listing = Vec::new();
    index.for_each_doc(|doc| listing.push(doc.clone()))?;
    listing.sort_by_key(|doc| doc.id);
    let mut out = String::new();
    for doc in &listing {
        let name = doc
            .name
            .as_ref()
            .map_or("-".to_string(), |n| format!("={n}"));
        writeln!(
            out,
            "{}\t{:016x}\t{}\t{}",
            doc.id, doc.fingerprint, doc.timestamp_ms, name
        )?;
    }
    // Closed without a flush: the tail stays in the WAL only.
    index.close()?;
    std::fs::write(root.join("docs.tsv"), out)?;
    println!("{} live documents in {}", listing.len(), dir.display());
    Ok(())
}
