//! The WAL reader.
//!
//! Raw mode (first byte even): arbitrary bytes never panic; the frames
//! returned lie inside the file, contiguous and in order; each frame's bytes
//! are exactly the encoding of the records it decoded to; how the file ends
//! agrees with where the frames stop.
//!
//! Round-trip mode (first byte odd): batches of arbitrary records are written
//! as frames after a header and read back unchanged; then the file is cut
//! short and one byte is damaged, and the reader returns a prefix of the
//! original frames, never a frame that was not written.

#![no_main]

use libfuzzer_sys::fuzz_target;
use simhashdb::format::{Record, WalEnd, WalReader, encode_frame, encode_wal_header};
use simhashdb::sketch::Sketch;

fn raw(data: &[u8]) {
    let Ok(reader) = WalReader::new(data) else {
        return;
    };
    let len = data.len() as u64;
    let (frames, end) = reader.read_all();
    let mut previous_end = None;
    for frame in &frames {
        assert!(frame.offset < frame.end && frame.end <= len);
        if let Some(p) = previous_end {
            assert_eq!(frame.offset, p, "frames are contiguous");
        }
        previous_end = Some(frame.end);
        assert!(!frame.records.is_empty());
        let bytes = &data[frame.offset as usize..frame.end as usize];
        let encoded = encode_frame(&frame.records).expect("decoded records re-encode");
        assert_eq!(encoded, bytes, "a frame decodes to records that encode to other bytes");
    }
    match end {
        WalEnd::Clean => assert!(previous_end.is_none_or(|e| e == len)),
        WalEnd::TornTail { offset } => {
            assert!(offset < len);
            assert!(previous_end.is_none_or(|e| e == offset));
        }
        WalEnd::Corrupted { error, next_valid } => {
            assert!(error.offset < len && next_valid < len);
            assert!(previous_end.is_none_or(|e| e <= next_valid));
        }
        WalEnd::Unparsable { error } => {
            // Reported at the frame, right after the last valid one.
            assert!(error.offset < len);
            assert!(previous_end.is_none_or(|e| e == error.offset));
        }
    }
}

fn records(data: &[u8]) -> Vec<Vec<Record>> {
    let mut batches = Vec::new();
    let mut batch = Vec::new();
    let mut seq = 1;
    for chunk in data.chunks(4) {
        let b = chunk[0];
        let word = chunk.iter().fold(0u64, |a, &x| a << 8 | u64::from(x));
        let record = match b % 5 {
            0 => Record::Delete { seq, id: word, timestamp: word >> 3 },
            1 => Record::Insert {
                seq,
                id: word,
                fingerprint: word.wrapping_mul(0x9e37_79b9_7f4a_7c15),
                timestamp: 1_700_000_000_000 + word,
                name: Some(String::from_utf8_lossy(chunk).into_owned()),
                // Every other named insert with a sketch (record type 5).
                sketch: (b & 0x10 != 0).then(|| Sketch::from_bytes([b; Sketch::BYTES])),
            },
            _ => Record::Insert {
                seq,
                id: word >> 2,
                fingerprint: word.rotate_left(u32::from(b)),
                timestamp: 1_700_000_000_000,
                name: None,
                // Type 4 for some of them.
                sketch: (b % 5 == 2).then(|| Sketch::from_bytes(word.to_le_bytes().repeat(2).try_into().unwrap())),
            },
        };
        seq += 1;
        batch.push(record);
        if b >> 5 == 0 {
            batches.push(std::mem::take(&mut batch));
        }
    }
    if !batch.is_empty() {
        batches.push(batch);
    }
    batches
}

fn round_trip(cut: u16, damage: (u16, u8), data: &[u8]) {
    let batches = records(data);
    let mut file = encode_wal_header(0, 7);
    for batch in &batches {
        file.extend_from_slice(&encode_frame(batch).unwrap());
    }
    let (frames, end) = WalReader::new(&file).expect("a written WAL opens").read_all();
    assert_eq!(end, WalEnd::Clean);
    let got: Vec<Vec<Record>> = frames.into_iter().map(|f| f.records).collect();
    assert_eq!(got, batches);

    let len = file.len() - usize::from(cut) % (file.len() / 4 + 1);
    file.truncate(len);
    let (at, mask) = (usize::from(damage.0) % len, damage.1);
    file[at] ^= mask;
    let Ok(reader) = WalReader::new(&file) else { return };
    let (frames, _) = reader.read_all();
    for (i, frame) in frames.iter().enumerate() {
        assert_eq!(frame.records, batches[i], "frame {i} after damage is not the one written");
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((head, rest)) = data.split_first_chunk::<5>() else {
        return raw(data);
    };
    if head[0] & 1 == 0 {
        raw(data);
    } else {
        let cut = u16::from_le_bytes([head[1], head[2]]);
        let damage = (u16::from_le_bytes([head[3], head[0]]), head[4]);
        round_trip(cut, damage, rest);
    }
});
