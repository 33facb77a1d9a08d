//! The doc map reader.
//!
//! Raw mode (first byte even): arbitrary bytes never panic; a doc map that
//! passes `verify` lists its entries sorted by (fingerprint, id) and its
//! tombstones by id, and every lookup (by id, by fingerprint, tombstone)
//! agrees with the full listing.
//!
//! Round-trip mode (first byte odd): arbitrary entries and tombstones are
//! written and read back unchanged (up to 512 documents: several blocks,
//! runs of one fingerprint across block boundaries); then one byte is
//! damaged, and every lookup returns either an error or exactly what was
//! written.

#![no_main]

use std::collections::BTreeMap;

use libfuzzer_sys::fuzz_target;
use simhashdb::format::{DocEntry, DocMapReader, DocMapWriter, Tombstone};
use simhashdb::sketch::Sketch;

fn raw(probe: u64, rest: &[u8]) {
    let Ok(docs) = DocMapReader::new(rest) else {
        return;
    };
    // Lookups on unverified bytes may fail, never panic.
    let _ = docs.by_id(probe);
    let _ = docs.tombstone(probe);
    let _ = docs.by_fingerprint(probe).take(1000).count();
    let _ = docs.entries().take(1000).count();
    let _ = docs.tombstones().take(1000).count();
    if docs.verify().is_err() || docs.len() > 5000 || docs.tombstone_count() > 5000 {
        return;
    }
    let entries: Vec<_> = docs.entries().map(|e| e.expect("verified entry")).collect();
    let tombs: Vec<_> = docs.tombstones().map(|t| t.expect("verified tombstone")).collect();
    assert_eq!(entries.len(), docs.len());
    assert_eq!(tombs.len(), docs.tombstone_count());
    assert!(entries.windows(2).all(|w| (w[0].fingerprint, w[0].id) < (w[1].fingerprint, w[1].id)));
    assert!(tombs.windows(2).all(|w| w[0].id < w[1].id));
    for e in entries.iter().take(50) {
        assert_eq!(docs.by_id(e.id).expect("verified lookup"), Some(*e));
        let same: Vec<_> = docs.by_fingerprint(e.fingerprint).map(|x| x.expect("verified")).collect();
        assert!(same.contains(e));
        assert!(same.iter().all(|x| x.fingerprint == e.fingerprint));
    }
    for t in tombs.iter().take(50) {
        assert_eq!(docs.tombstone(t.id).expect("verified lookup"), Some(*t));
    }
    let expect_probe = entries.iter().find(|e| e.id == probe).copied();
    assert_eq!(docs.by_id(probe).expect("verified lookup"), expect_probe);
    let expect_tomb = tombs.iter().find(|t| t.id == probe).copied();
    assert_eq!(docs.tombstone(probe).expect("verified lookup"), expect_tomb);
}

fn round_trip(probe: u64, damage: (u16, u8), rest: &[u8]) {
    // id -> (fingerprint, seq, name); tombstone ids from a second map.
    let mut docs: BTreeMap<u64, (u64, u64, Option<String>)> = BTreeMap::new();
    let mut tombs: BTreeMap<u64, Tombstone> = BTreeMap::new();
    for (i, c) in rest.chunks(3).enumerate() {
        // Ids 0..512: enough documents to fill several 128-entry blocks.
        let id = u64::from(c[0]) | (u64::from(c.get(2).copied().unwrap_or(0) & 0x80) << 1);
        let fp = u64::from(*c.get(1).unwrap_or(&0) % 8).wrapping_mul(0x0101_0101_0101_0101);
        let seq = i as u64 + 1;
        match c.get(2).copied().unwrap_or(0) % 4 {
            0 => {
                tombs.insert(id, Tombstone { id, seq, timestamp: seq * 10 });
            }
            1 => {
                docs.insert(id, (fp, seq, Some(format!("name-{}", "é".repeat(usize::from(c[0] % 7))))));
            }
            _ => {
                docs.insert(id, (fp, seq, None));
            }
        }
    }
    let mut sorted: Vec<DocEntry<'_>> = docs
        .iter()
        .map(|(&id, (fp, seq, name))| DocEntry { fingerprint: *fp, id, seq: *seq, timestamp: seq * 10, name: name.as_deref(), sketch: (seq % 3 != 0).then(|| Sketch::from_bytes([*seq as u8; Sketch::BYTES])) })
        .collect();
    sorted.sort_by_key(|e| (e.fingerprint, e.id));
    let mut writer = DocMapWriter::new(0, 3);
    for e in &sorted {
        writer.push(*e).unwrap();
    }
    for t in tombs.values() {
        writer.push_tombstone(*t);
    }
    let mut bytes = writer.finish().unwrap();
    {
        let reader = DocMapReader::new(&bytes[..]).expect("a written doc map opens");
        reader.verify().expect("a written doc map verifies");
        let listed: Vec<DocEntry<'_>> = reader.entries().map(|e| e.unwrap()).collect();
        assert_eq!(listed, sorted);
        let listed: Vec<Tombstone> = reader.tombstones().map(|t| t.unwrap()).collect();
        assert_eq!(listed, tombs.values().copied().collect::<Vec<_>>());
    }
    let expected_entry = |id: u64| sorted.iter().find(|e| e.id == id).copied();
    let (at, mask) = (usize::from(damage.0) % bytes.len(), damage.1);
    bytes[at] ^= mask;
    let Ok(reader) = DocMapReader::new(&bytes[..]) else { return };
    for id in (0..512).chain([probe]) {
        if let Ok(found) = reader.by_id(id) {
            assert_eq!(found, expected_entry(id), "by_id({id}) after damage at {at}");
        }
        if let Ok(found) = reader.tombstone(id) {
            assert_eq!(found, tombs.get(&id).copied(), "tombstone({id}) after damage at {at}");
        }
    }
    for fp in 0..8u64 {
        let fp = fp.wrapping_mul(0x0101_0101_0101_0101);
        for found in reader.by_fingerprint(fp) {
            let Ok(found) = found else { break };
            assert_eq!(Some(found), expected_entry(found.id), "by_fingerprint after damage at {at}");
        }
    }
    if reader.verify().is_ok() {
        assert_eq!(mask, 0, "damage at {at} passed verify");
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((head, rest)) = data.split_first_chunk::<11>() else {
        return;
    };
    let probe = u64::from_le_bytes(head[..8].try_into().unwrap());
    if head[8] & 1 == 0 {
        raw(probe, rest);
    } else {
        round_trip(probe, (u16::from_le_bytes([head[9], head[10]]), head[8]), rest);
    }
});
