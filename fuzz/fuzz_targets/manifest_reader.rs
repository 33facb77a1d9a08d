//! The manifest decoder.
//!
//! Raw mode (first byte even): arbitrary bytes never panic, and a manifest
//! the decoder accepts encodes back to exactly the same bytes.
//!
//! Round-trip mode (first byte odd): a manifest with arbitrary fields encodes
//! and decodes back unchanged; with one byte damaged or the file cut short,
//! decoding fails (a manifest is all or nothing).

#![no_main]

use libfuzzer_sys::fuzz_target;
use simhashdb::format::{Manifest, SegmentMeta};
use simhashdb::plan::Plan;

fn raw(data: &[u8]) {
    if let Ok(manifest) = Manifest::decode(data) {
        let encoded = manifest.encode().expect("a decoded manifest encodes");
        assert_eq!(encoded, data, "decode then encode changed the bytes");
    }
}

fn word(data: &[u8], i: usize) -> u64 {
    let mut b = [0u8; 8];
    for (j, x) in b.iter_mut().enumerate() {
        *x = data.get((i * 8 + j) % data.len().max(1)).copied().unwrap_or(0) ^ (i as u8);
    }
    u64::from_le_bytes(b)
}

fn round_trip(head: &[u8; 6], data: &[u8]) {
    let plan = match head[1] % 3 {
        0 => Plan::new(u32::from(head[2] % 6) + 4, 3),
        1 => Plan::nested(4, 4, 3),
        _ => Plan::new(u32::from(head[2] % 4) + 2, 1),
    }
    .unwrap();
    let segments = (0..usize::from(head[3] % 6))
        .map(|i| SegmentMeta {
            // Distinct ids: the decoder refuses a segment listed twice.
            id: word(data, i * 11) << 3 | i as u64,
            level: word(data, i * 11 + 1) as u32,
            key_count: word(data, i * 11 + 2),
            doc_count: word(data, i * 11 + 3),
            tombstone_count: word(data, i * 11 + 4),
            min_seq: word(data, i * 11 + 5),
            max_seq: word(data, i * 11 + 6),
            min_timestamp: word(data, i * 11 + 7),
            max_timestamp: word(data, i * 11 + 8),
            seg_file_len: word(data, i * 11 + 9),
            ids_file_len: word(data, i * 11 + 10),
            seg_footer_crc: word(data, i * 11 + 3) as u32,
            ids_footer_crc: (word(data, i * 11 + 4) >> 32) as u32,
        })
        .collect();
    let config: String = data.iter().take(200).map(|&b| char::from(b' ' + b % 94)).collect();
    let manifest = Manifest {
        index_id: 0x5eed_0001,
        shape: plan.shape(),
        k: plan.k(),
        fingerprint_config: config,
        retention_ms: word(data, 90),
        generation: word(data, 91),
        next_segment_id: word(data, 92),
        next_wal_id: word(data, 93),
        next_seq: word(data, 94),
        wal_ids: (0..u64::from(head[4] % 5)).map(|i| word(data, 95 + i as usize) << 3 | i).collect(),
        segments,
    };
    let mut bytes = manifest.encode().expect("a manifest encodes");
    assert_eq!(Manifest::decode(&bytes).expect("an encoded manifest decodes"), manifest);
    let at = usize::from(head[5]) * 7 % bytes.len();
    let cut = bytes[..at].to_vec();
    assert!(Manifest::decode(&cut).is_err(), "a manifest cut to {at} bytes decoded");
    let mask = head[0] | 1;
    bytes[at] ^= mask;
    assert!(Manifest::decode(&bytes).is_err(), "a manifest damaged at {at} decoded");
}

fuzz_target!(|data: &[u8]| {
    match data.split_first_chunk::<6>() {
        Some((head, rest)) if head[0] & 1 == 1 => round_trip(head, rest),
        _ => raw(data),
    }
});
