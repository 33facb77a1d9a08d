//! A crawler's duplicate filter on a persistent index: check-and-insert each
//! fetched page, look documents up, and reopen the index after a restart.
//!
//! Run with `cargo run --release --example crawler` (the index lives in a
//! temporary directory, or in the directory given as the first argument).

use simhashdb::fingerprint::fnv1a64;
use simhashdb::{Durability, Index, Options, Simhasher};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let temp = tempfile::tempdir()?;
    let dir = match std::env::args_os().nth(1) {
        Some(dir) => dir.into(),
        None => temp.path().join("pages"),
    };
    let pages = [
        (
            "https://news.example/rust-storage",
            "Segments are immutable files: the engine writes each one once, maps it into memory \
             and never modifies it again, so readers need no locks while a writer appends to the \
             log and compaction merges old segments into new ones in the background.",
        ),
        (
            // A syndicated copy, its last words cut.
            "https://mirror.example/2024/rust-storage",
            "Segments are immutable files: the engine writes each one once, maps it into memory \
             and never modifies it again, so readers need no locks while a writer appends to the \
             log and compaction merges old segments into new ones.",
        ),
        (
            "https://recipes.example/bread",
            "Mix the flour, water, salt and starter, rest the dough for an hour, fold it every \
             half hour for two hours, shape it, proof it overnight in the refrigerator and bake \
             it in a very hot covered pot.",
        ),
    ];

    // `Durability::Sync`: an acknowledged page survives power loss too.
    let options = Options::new().durability(Durability::Sync);
    let index = Index::open(&dir, options)?;
    // Use the fingerprint configuration the index records, so that a text
    // gets the same fingerprint in every run and every release.
    let config = index.stats().fingerprint_config.parse()?;
    let hasher = Simhasher::from_config(&config)?;

    for (url, text) in pages {
        // The same id rule as the command line: FNV-1a 64 of the name.
        let id = fnv1a64(url.as_bytes());
        let fp = hasher.fingerprint(text);
        match index.insert_if_new_named(id, fp, Some(url.to_string()), 3)? {
            Ok(()) => println!("new  {url}"),
            Err(matches) => {
                let first = &matches[0];
                println!(
                    "dup  {url} (distance {} from {})",
                    first.distance,
                    first.name.as_deref().unwrap_or("?")
                );
            }
        }
    }
    drop(index);

    // After a restart everything acknowledged is still there.
    let index = Index::open(&dir, Options::default())?;
    let doc = index
        .get_doc(fnv1a64(b"https://recipes.example/bread"))?
        .ok_or("the bread page should be stored")?;
    println!(
        "get  {} -> fingerprint {:016x}",
        doc.name.as_deref().unwrap_or("?"),
        doc.fingerprint
    );
    let report = index.verify()?;
    println!(
        "verify: {} files, {} bytes, all checksums good",
        report.files, report.bytes
    );
    Ok(())
}
