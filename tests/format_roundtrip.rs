//! Encode/decode round trips of every file kind, and table range queries
//! against a filter over a sorted `Vec`, on random and clustered keys.

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;
use simhashdb::format::{
    DocEntry, DocMapReader, DocMapWriter, Manifest, Record, SegmentInfo, SegmentMeta,
    SegmentReader, SegmentWriter, TableReader, TableWriter, Tombstone, WalEnd, WalReader,
    encode_frame, encode_wal_header,
};
use simhashdb::plan::{Plan, Shape};

fn encode_table(keys: &[u64], block_len: u32) -> Vec<u8> {
    let mut w = TableWriter::new(block_len).unwrap();
    for &k in keys {
        w.push(k).unwrap();
    }
    w.finish().unwrap()
}

fn filter(keys: &[u64], lo: u64, hi: u64) -> Vec<u64> {
    keys.iter()
        .copied()
        .filter(|&k| lo <= k && k <= hi)
        .collect()
}

/// Sorted distinct keys: uniform, or a few dense clusters (near-duplicate
/// fingerprints share their high bits), or both.
fn keys_strategy() -> impl Strategy<Value = Vec<u64>> {
    let uniform = prop::collection::vec(any::<u64>(), 0..2000);
    let clustered = (
        prop::collection::vec(any::<u64>(), 1..6),
        prop::collection::vec((0usize..6, 0u64..1 << 12), 0..2000),
    )
        .prop_map(|(bases, members)| {
            members
                .into_iter()
                .map(|(b, low)| bases[b % bases.len()].wrapping_add(low))
                .collect::<Vec<u64>>()
        });
    let edges = prop::collection::vec(
        prop_oneof![
            Just(0u64),
            Just(1),
            Just(u64::MAX),
            Just(u64::MAX - 1),
            any::<u64>()
        ],
        0..20,
    );
    (prop_oneof![uniform, clustered], edges).prop_map(|(mut keys, edges)| {
        keys.extend(edges);
        keys.sort_unstable();
        keys.dedup();
        keys
    })
}

/// A range: around a key, inside the key span, or arbitrary.
fn range_for(keys: &[u64], pick: usize, a: u64, b: u64, kind: u8) -> (u64, u64) {
    let k = keys.get(pick % keys.len().max(1)).copied().unwrap_or(a);
    match kind % 4 {
        0 => (k, k),
        1 => (k.saturating_sub(a % 4096), k.saturating_add(b % 4096)),
        2 => {
            let bits = (a % 64) as u32;
            let mask = if bits == 0 {
                0
            } else {
                u64::MAX << (64 - bits)
            };
            (k & mask, k | !mask)
        }
        _ => (a.min(b), a.max(b)),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn table_round_trip_and_ranges(
        keys in keys_strategy(),
        block_len in prop_oneof![Just(128u32), 1u32..300],
        queries in prop::collection::vec((any::<usize>(), any::<u64>(), any::<u64>(), any::<u8>()), 1..40),
    ) {
        let bytes = encode_table(&keys, block_len);
        let table = TableReader::new(&bytes).unwrap();
        table.verify().unwrap();
        prop_assert_eq!(table.len(), keys.len() as u64);
        let all: Vec<u64> = table.iter().collect::<Result<_, _>>().unwrap();
        prop_assert_eq!(&all, &keys);
        for (pick, a, b, kind) in queries {
            let (lo, hi) = range_for(&keys, pick, a, b, kind);
            let got: Vec<u64> = table.range(lo, hi).collect::<Result<_, _>>().unwrap();
            prop_assert_eq!(got, filter(&keys, lo, hi), "{:#x}..={:#x}", lo, hi);
        }
    }

    #[test]
    fn segment_round_trip_through_a_plan(
        fingerprints in prop::collection::btree_set(any::<u64>(), 0..1500),
        nested in any::<bool>(),
        id in any::<u64>(),
    ) {
        let plan = if nested { Plan::nested(4, 4, 3).unwrap() } else { Plan::new(5, 2).unwrap() };
        let info = SegmentInfo {
            index_id: 0,
            segment_id: id,
            shape: plan.shape(),
            k: plan.k(),
            table_count: plan.tables().len() as u32,
            key_count: fingerprints.len() as u64,
        };
        let mut writer = SegmentWriter::new(info).unwrap();
        for table in plan.tables() {
            let mut keys: Vec<u64> = fingerprints.iter().map(|&f| table.permute(f)).collect();
            keys.sort_unstable();
            writer.push_table(keys).unwrap();
        }
        let bytes = writer.finish().unwrap();
        let segment = SegmentReader::new(&bytes[..]).unwrap();
        segment.verify().unwrap();
        prop_assert_eq!(segment.info(), info);
        prop_assert_eq!(Plan::from_shape(segment.info().shape, segment.info().k).unwrap(), plan.clone());
        for (i, table) in plan.tables().iter().enumerate() {
            let reader = segment.table(i).unwrap();
            let back: BTreeSet<u64> = reader
                .iter()
                .map(|k| table.unpermute(k.unwrap()))
                .collect();
            prop_assert_eq!(&back, &fingerprints);
            // A query's prefix range finds exactly the keys sharing its prefix.
            if let Some(&fp) = fingerprints.iter().next() {
                let (lo, hi) = table.prefix_range(table.permute(fp));
                let found: Vec<u64> = reader.range(lo, hi).collect::<Result<_, _>>().unwrap();
                let expected: Vec<u64> = {
                    let mut v: Vec<u64> = fingerprints
                        .iter()
                        .map(|&f| table.permute(f))
                        .filter(|&k| lo <= k && k <= hi)
                        .collect();
                    v.sort_unstable();
                    v
                };
                prop_assert_eq!(found, expected);
            }
        }
    }

    #[test]
    fn doc_map_round_trip_against_a_model(
        docs in prop::collection::btree_map(
            any::<u64>(),
            (0u64..64, any::<u64>(), any::<u64>(), prop::option::of("[a-z/:.\u{e9}\u{4e2d}]{0,30}")),
            0..300,
        ),
        tombstones in prop::collection::btree_map(any::<u64>(), (any::<u64>(), any::<u64>()), 0..50),
        probes in prop::collection::vec(any::<u64>(), 0..20),
    ) {
        // Few distinct fingerprints, so that many ids share one.
        let entries: Vec<DocEntry<'_>> = docs
            .iter()
            .map(|(&id, (fp, seq, ts, name))| DocEntry {
                fingerprint: fp.wrapping_mul(0x9e37_79b9_7f4a_7c15),
                id,
                seq: *seq,
                timestamp: *ts,
                name: name.as_deref(),
                sketch: None,
            })
            .collect();
        let mut writer = DocMapWriter::new(0, 5);
        for e in entries.iter().rev() {
            writer.push(*e).unwrap();
        }
        for (&id, &(seq, timestamp)) in &tombstones {
            writer.push_tombstone(Tombstone { id, seq, timestamp });
        }
        let bytes = writer.finish().unwrap();
        let reader = DocMapReader::new(&bytes[..]).unwrap();
        reader.verify().unwrap();
        prop_assert_eq!(reader.len(), entries.len());

        let mut by_fp: BTreeMap<(u64, u64), DocEntry<'_>> = BTreeMap::new();
        for e in &entries {
            by_fp.insert((e.fingerprint, e.id), *e);
        }
        let all: Vec<DocEntry<'_>> = reader.entries().collect::<Result<_, _>>().unwrap();
        prop_assert_eq!(all, by_fp.values().copied().collect::<Vec<_>>());
        let fps: BTreeSet<u64> = entries.iter().map(|e| e.fingerprint).chain(probes.iter().copied()).collect();
        for fp in fps {
            let got: Vec<DocEntry<'_>> = reader.by_fingerprint(fp).collect::<Result<_, _>>().unwrap();
            let want: Vec<DocEntry<'_>> = by_fp.range((fp, 0)..=(fp, u64::MAX)).map(|(_, e)| *e).collect();
            prop_assert_eq!(got, want);
        }
        for id in docs.keys().chain(tombstones.keys()).chain(&probes) {
            let want = entries.iter().find(|e| e.id == *id).copied();
            prop_assert_eq!(reader.by_id(*id).unwrap(), want);
            let want = tombstones.get(id).map(|&(seq, timestamp)| Tombstone { id: *id, seq, timestamp });
            prop_assert_eq!(reader.tombstone(*id).unwrap(), want);
        }
        let ts: Vec<Tombstone> = reader.tombstones().collect::<Result<_, _>>().unwrap();
        prop_assert_eq!(ts.len(), tombstones.len());
    }

    #[test]
    fn wal_round_trip_and_every_truncation(
        batches in prop::collection::vec(prop::collection::vec(record_strategy(), 1..5), 0..6),
        wal_id in any::<u64>(),
    ) {
        let mut bytes = encode_wal_header(0, wal_id);
        let mut ends = vec![bytes.len()];
        for batch in &batches {
            bytes.extend(encode_frame(batch).unwrap());
            ends.push(bytes.len());
        }
        let reader = WalReader::new(&bytes).unwrap();
        prop_assert_eq!(reader.wal_id(), wal_id);
        let (frames, end) = reader.read_all();
        prop_assert_eq!(end, WalEnd::Clean);
        let records: Vec<Vec<Record>> = frames.into_iter().map(|f| f.records).collect();
        prop_assert_eq!(&records, &batches);

        for len in ends[0]..bytes.len() {
            let (frames, end) = WalReader::new(&bytes[..len]).unwrap().read_all();
            let complete = ends.iter().filter(|&&e| e <= len).count() - 1;
            prop_assert_eq!(frames.len(), complete);
            let records: Vec<Vec<Record>> = frames.into_iter().map(|f| f.records).collect();
            prop_assert_eq!(&records[..], &batches[..complete]);
            if ends.contains(&len) {
                prop_assert_eq!(end, WalEnd::Clean);
            } else {
                prop_assert_eq!(end, WalEnd::TornTail { offset: ends[complete] as u64 });
            }
        }
    }

    #[test]
    fn manifest_round_trip(manifest in manifest_strategy()) {
        let bytes = manifest.encode().unwrap();
        prop_assert_eq!(Manifest::decode(&bytes).unwrap(), manifest);
    }
}

fn record_strategy() -> impl Strategy<Value = Record> {
    prop_oneof![
        (
            any::<u64>(),
            any::<u64>(),
            any::<u64>(),
            any::<u64>(),
            prop::option::of(".{0,40}")
        )
            .prop_map(|(seq, id, fingerprint, timestamp, name)| Record::Insert {
                seq,
                id,
                fingerprint,
                timestamp,
                name,
                sketch: None,
            }),
        (any::<u64>(), any::<u64>(), any::<u64>())
            .prop_map(|(seq, id, timestamp)| Record::Delete { seq, id, timestamp }),
    ]
}

fn manifest_strategy() -> impl Strategy<Value = Manifest> {
    let shape = prop_oneof![
        (1u32..=64).prop_map(|blocks| Shape::Flat { blocks }),
        (1u32..=255, 1u32..=255).prop_map(|(outer, inner)| Shape::Nested { outer, inner }),
    ];
    let segment = (
        any::<u64>(),
        any::<u32>(),
        prop::array::uniform9(any::<u64>()),
        any::<u32>(),
        any::<u32>(),
    )
        .prop_map(
            |(id, level, v, seg_footer_crc, ids_footer_crc)| SegmentMeta {
                id,
                level,
                key_count: v[0],
                doc_count: v[1],
                tombstone_count: v[2],
                min_seq: v[3],
                max_seq: v[4],
                min_timestamp: v[5],
                max_timestamp: v[6],
                seg_file_len: v[7],
                ids_file_len: v[8],
                seg_footer_crc,
                ids_footer_crc,
            },
        );
    (
        shape,
        0u32..=255,
        "[ -~]{0,100}",
        prop::array::uniform5(any::<u64>()),
        prop::collection::btree_set(any::<u64>(), 0..4),
        prop::collection::btree_map(any::<u64>(), segment, 0..10),
    )
        .prop_map(|(shape, k, config, v, wal_ids, segments)| Manifest {
            index_id: 0x5eed_0001,
            shape,
            k,
            fingerprint_config: config,
            retention_ms: v[0],
            generation: v[1],
            next_segment_id: v[2],
            next_wal_id: v[3],
            next_seq: v[4],
            wal_ids: wal_ids.into_iter().collect(),
            segments: segments
                .into_iter()
                .map(|(id, s)| SegmentMeta { id, ..s })
                .collect(),
        })
}

#[test]
fn plan_shapes_survive_the_manifest() {
    for (shape, k) in [
        (Shape::Flat { blocks: 6 }, 3),
        (Shape::Nested { outer: 4, inner: 4 }, 3),
        (Shape::Flat { blocks: 1 }, 0),
    ] {
        let m = Manifest {
            index_id: 0x5eed_0001,
            shape,
            k,
            fingerprint_config: simhashdb::Simhasher::default().config().to_string(),
            retention_ms: 0,
            generation: 1,
            next_segment_id: 1,
            next_wal_id: 1,
            next_seq: 1,
            wal_ids: vec![],
            segments: vec![],
        };
        let back = Manifest::decode(&m.encode().unwrap()).unwrap();
        assert_eq!(back, m);
        let config: simhashdb::FingerprintConfig = back.fingerprint_config.parse().unwrap();
        assert_eq!(config, simhashdb::Simhasher::default().config());
    }
}

/// The doc map files in `dir`, by name.
fn doc_map_files(dir: &std::path::Path) -> BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "ids"))
        .map(|p| {
            let bytes = std::fs::read(&p).unwrap();
            (p.file_name().unwrap().to_string_lossy().into_owned(), bytes)
        })
        .collect()
}

/// A flush writes its doc map from the memtable's slots, sorting small keys
/// that point at them, with buffers (and a memtable) reused from the flush
/// before: each of three flushes, on the writing thread and on the flush
/// thread, must hold exactly the model's last versions (names, sketches,
/// upserts, deletes of known and unknown ids, shared fingerprints, ids and
/// fingerprints at 0 and `u64::MAX`), and be byte for byte the file
/// [`DocMapWriter`] writes for the same records pushed in another order.
#[test]
fn a_flushed_doc_map_is_byte_for_byte_what_the_doc_map_writer_writes() {
    use simhashdb::sketch::Sketch;
    use simhashdb::{Index, Options};
    for flush_thread in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let index = Index::open(
            dir.path(),
            Options::new().merge_policy(None).flush_thread(flush_thread),
        )
        .unwrap();
        let mut s = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s
        };
        for round in 0..3u64 {
            // id → Some((fingerprint, name, sketch)) live, None deleted.
            type Live = (u64, Option<String>, Option<Sketch>);
            let mut model: BTreeMap<u64, Option<Live>> = BTreeMap::new();
            let before = doc_map_files(dir.path());
            let mut batch = Vec::new();
            for i in 0..30_000u64 {
                let r = next();
                let id = match i % 7 {
                    0 => 0,
                    1 => u64::MAX,
                    _ => r % 20_000 + round * 7,
                };
                let fingerprint = match r % 5 {
                    0 => 0,
                    1 => u64::MAX,
                    2 => 0x0123_4567_89ab_cdef ^ (r >> 60),
                    _ => r.rotate_left(7),
                };
                let name = (r % 3 == 0).then(|| format!("doc/{round}/{i}"));
                let sketch = (r % 4 == 1).then(|| Sketch::from_bytes([r as u8; 16]));
                batch.push((id, fingerprint, sketch, name.clone()));
                model.insert(id, Some((fingerprint, name, sketch)));
                if i % 1000 == 999 {
                    index
                        .insert_batch_sketched(std::mem::take(&mut batch))
                        .unwrap();
                    for id in [r % 20_000, u64::MAX - 1 - r % 50] {
                        index.delete(id).unwrap();
                        model.insert(id, None);
                    }
                }
            }
            index.flush().unwrap();
            let after = doc_map_files(dir.path());
            let new: Vec<&Vec<u8>> = after
                .iter()
                .filter(|(name, _)| !before.contains_key(*name))
                .map(|(_, bytes)| bytes)
                .collect();
            assert_eq!(new.len(), 1, "round {round}: one new doc map");
            let bytes = new[0].clone();
            let reader = DocMapReader::new(bytes.clone()).unwrap();
            let entries: Vec<DocEntry<'_>> = reader.entries().map(Result::unwrap).collect();
            let tombstones: Vec<Tombstone> = reader.tombstones().map(Result::unwrap).collect();
            let got: BTreeMap<u64, Option<Live>> = entries
                .iter()
                .map(|e| {
                    (
                        e.id,
                        Some((e.fingerprint, e.name.map(str::to_string), e.sketch)),
                    )
                })
                .chain(tombstones.iter().map(|t| (t.id, None)))
                .collect();
            assert_eq!(got.len(), entries.len() + tombstones.len(), "round {round}");
            assert_eq!(got, model, "round {round}, flush thread {flush_thread}");
            assert!(tombstones.len() > 10 && entries.iter().any(|e| e.sketch.is_some()));
            let mut w = DocMapWriter::new(reader.index_id(), reader.segment_id());
            for e in entries.iter().rev() {
                w.push(*e).unwrap();
            }
            for &t in tombstones.iter().rev() {
                w.push_tombstone(t);
            }
            assert!(
                w.finish().unwrap() == bytes,
                "round {round}, flush thread {flush_thread}: bytes differ"
            );
        }
    }
}
