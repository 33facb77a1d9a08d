//! Arbitrary bytes through every reader of the format layer: decoding never
//! panics, and whatever a reader accepts it can iterate and verify without
//! panicking either.

#![no_main]

use libfuzzer_sys::fuzz_target;
use simhashdb::format::{DocMapReader, Manifest, SegmentReader, TableReader, WalReader};

fuzz_target!(|data: &[u8]| {
    if let Ok(reader) = WalReader::new(data) {
        let (frames, _end) = reader.read_all();
        for frame in frames {
            assert!(frame.offset < frame.end);
        }
    }
    let _ = Manifest::decode(data);
    if let Ok(table) = TableReader::new(data) {
        let mut previous = None;
        for key in table.iter().take(10_000) {
            let Ok(key) = key else { break };
            // Whatever decodes must come out strictly increasing.
            assert!(previous.is_none_or(|p| p < key));
            previous = Some(key);
        }
        let _ = table.range(1 << 40, 1 << 50).take(100).count();
        let _ = table.verify();
    }
    if let Ok(segment) = SegmentReader::new(data) {
        for t in 0..segment.table_count().min(64) {
            if let Ok(table) = segment.table(t) {
                let _ = table.iter().take(1000).count();
            }
        }
        let _ = segment.verify();
    }
    if let Ok(docs) = DocMapReader::new(data) {
        let _ = docs.entries().take(1000).count();
        let _ = docs.tombstones().take(1000).count();
        let _ = docs.by_id(42);
        let _ = docs.tombstone(42);
        let _ = docs.by_fingerprint(7).take(100).count();
        let _ = docs.verify();
    }
});
