//! The table (block) decoder and the segment reader.
//!
//! Raw mode (first byte even): arbitrary bytes never panic; whatever decodes
//! is strictly increasing; a range query returns exactly the keys of a full
//! scan that fall in the range; a table that passes `verify` scans without an
//! error.
//!
//! Round-trip mode (first byte odd): keys with arbitrary gaps are encoded with
//! an arbitrary block length and decoded back unchanged (scans and range
//! queries); then one byte of the encoding is damaged, and every key the
//! reader still returns is the original's (a prefix of the scan, then an
//! error, or the whole scan): never a wrong key.

#![no_main]

use libfuzzer_sys::fuzz_target;
use simhashdb::format::{SegmentReader, TableReader, TableWriter};

const LIMIT: usize = 20_000;

fn check_table(table: &TableReader<'_>, lo: u64, hi: u64) {
    let mut scan = Vec::new();
    let mut scan_failed = false;
    for key in table.iter().take(LIMIT) {
        match key {
            Ok(key) => {
                assert!(scan.last().is_none_or(|&p| p < key), "keys out of order");
                scan.push(key);
            }
            Err(_) => {
                scan_failed = true;
                break;
            }
        }
    }
    let complete = !scan_failed && scan.len() < LIMIT;
    if table.verify().is_ok() && scan.len() < LIMIT {
        assert!(!scan_failed, "a verified table failed to scan");
        assert_eq!(scan.len() as u64, table.len(), "a verified table has another length");
    }
    let range: Result<Vec<u64>, _> = table.range(lo, hi).take(LIMIT).collect();
    if let (true, Ok(range)) = (complete, range) {
        let expected: Vec<u64> = scan.iter().copied().filter(|k| (lo..=hi).contains(k)).collect();
        assert_eq!(range, expected, "range [{lo:#x}, {hi:#x}] differs from the scan");
    }
}

fn raw(lo: u64, hi: u64, rest: &[u8]) {
    if let Ok(table) = TableReader::new(rest) {
        check_table(&table, lo, hi);
    }
    if let Ok(segment) = SegmentReader::new(rest) {
        let verified = segment.verify().is_ok();
        for t in 0..segment.table_count().min(64) {
            match segment.table(t) {
                Ok(table) => check_table(&table, lo, hi),
                Err(_) => assert!(!verified, "a verified segment refused table {t}"),
            }
        }
    }
}

/// Keys from the input: each byte pair picks a gap width (in bits) and low bits.
fn keys(rest: &[u8]) -> Vec<u64> {
    let mut keys = Vec::new();
    let mut key = 0u64;
    for pair in rest.chunks_exact(2) {
        let width = u32::from(pair[0] % 65);
        let gap = if width == 0 {
            1
        } else {
            (u64::from(pair[1]).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (64 - width)).max(1)
        };
        let Some(next) = key.checked_add(gap) else { break };
        key = next;
        keys.push(key);
    }
    keys
}

fn round_trip(lo: u64, hi: u64, block_len: u32, damage: (usize, u8), rest: &[u8]) {
    let keys = keys(rest);
    let mut writer = TableWriter::new(block_len).unwrap();
    for &k in &keys {
        writer.push(k).unwrap();
    }
    let mut bytes = writer.finish().unwrap();
    let table = TableReader::new(&bytes).expect("a written table opens");
    assert_eq!(table.len(), keys.len() as u64);
    table.verify().expect("a written table verifies");
    let scan: Vec<u64> = table.iter().map(|k| k.unwrap()).collect();
    assert_eq!(scan, keys);
    let range: Vec<u64> = table.range(lo, hi).map(|k| k.unwrap()).collect();
    let expected: Vec<u64> = keys.iter().copied().filter(|k| (lo..=hi).contains(k)).collect();
    assert_eq!(range, expected);

    let (at, mask) = damage;
    if bytes.is_empty() || mask == 0 {
        return;
    }
    let at = at % bytes.len();
    bytes[at] ^= mask;
    let Ok(table) = TableReader::new(&bytes) else { return };
    let mut got = Vec::new();
    for key in table.iter().take(keys.len() + 1) {
        match key {
            Ok(k) => got.push(k),
            Err(_) => break,
        }
    }
    assert!(keys.starts_with(&got), "a damaged table returned a key that was never written");
    let mut got = Vec::new();
    for key in table.range(lo, hi).take(keys.len() + 1) {
        match key {
            Ok(k) => got.push(k),
            Err(_) => break,
        }
    }
    assert!(expected.starts_with(&got), "a damaged table's range returned a wrong key");
}

fuzz_target!(|data: &[u8]| {
    let Some((head, rest)) = data.split_first_chunk::<20>() else {
        return;
    };
    let a = u64::from_le_bytes(head[..8].try_into().unwrap());
    let b = u64::from_le_bytes(head[8..16].try_into().unwrap());
    let (lo, hi) = (a.min(b), a.max(b));
    if head[16] & 1 == 0 {
        raw(lo, hi, rest);
    } else {
        let block_len = u32::from(head[17] % 64) + 1;
        let damage = (usize::from(u16::from_le_bytes([head[18], head[16]])) , head[19]);
        round_trip(lo, hi, block_len, damage, rest);
    }
});
