//! The persistent index against a model: arbitrary sequences of inserts,
//! upserts, named inserts, batches, deletes, flushes, compactions, reopens and
//! crashes (process kills; power loss in `Durability::Sync`) on the
//! fault-injecting file system, checked after every step against a `BTreeMap`
//! of live documents searched by brute force, and `Index::verify` after every
//! reopen.

#![no_main]

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use libfuzzer_sys::fuzz_target;
use simhashdb::engine::fault::{CrashMode, FaultFs, Unsynced};
use simhashdb::engine::fs::FileSystem;
use simhashdb::engine::policy::{MergePolicy, TieredMergePolicy};
use simhashdb::plan::Plan;
use simhashdb::{Durability, Index, Match, Options, hamming};

type Model = BTreeMap<u64, (u64, Option<String>)>;

const CENTRES: [u64; 4] = [0, u64::MAX, 0x0123_4567_89ab_cdef, 0xdead_beef_cafe_f00d];

struct Input<'a>(&'a [u8]);

impl Input<'_> {
    fn byte(&mut self) -> Option<u8> {
        let (&b, rest) = self.0.split_first()?;
        self.0 = rest;
        Some(b)
    }
    fn id(&mut self) -> Option<u64> {
        Some(u64::from(self.byte()? % 32))
    }
    /// A fingerprint near one of a few centres, so queries have answers.
    fn fingerprint(&mut self) -> Option<u64> {
        let c = self.byte()?;
        let mut fp = CENTRES[usize::from(c & 3)];
        for _ in 0..(c >> 2) % 6 {
            fp ^= 1 << (self.byte()? & 63);
        }
        Some(fp)
    }
}

fn brute_force(model: &Model, fp: u64, k: u32) -> Vec<Match> {
    let mut out: Vec<Match> = model
        .iter()
        .filter(|(_, (f, _))| hamming(*f, fp) <= k)
        .map(|(&id, (f, n))| Match { id, fingerprint: *f, distance: hamming(*f, fp), name: n.clone(), sketch: None })
        .collect();
    out.sort_by_key(|m| (m.distance, m.id));
    out
}

fn check(index: &Index, model: &Model, step: usize) {
    index.verify().unwrap_or_else(|e| panic!("step {step}: verify: {e}"));
    for id in 0..32 {
        assert_eq!(index.get(id).unwrap(), model.get(&id).map(|(fp, _)| *fp), "step {step}: get({id})");
    }
    for fp in CENTRES {
        assert_eq!(index.query(fp, 3).unwrap(), brute_force(model, fp, 3), "step {step}: query({fp:#x})");
    }
}

fuzz_target!(|data: &[u8]| {
    let mut input = Input(data);
    let Some(setup) = input.byte() else { return };
    let durability = if setup & 1 == 0 { Durability::Buffered } else { Durability::Sync };
    let memtable_bytes = [256, 1024, 4096, 1 << 20][usize::from(setup >> 1) & 3];
    let fan_in = [None, Some(2), Some(3), Some(8)][usize::from(setup >> 3) & 3];
    let fs = FaultFs::with_seed(u64::from(setup));
    let dir = Path::new("/index");
    let options = || {
        Options::new()
            .plan(Plan::new(5, 3).unwrap())
            .durability(durability)
            .memtable_bytes(memtable_bytes)
            .file_system(Arc::new(fs.clone()) as Arc<dyn FileSystem>)
            .merge_policy(fan_in.map(|fan_in| Arc::new(TieredMergePolicy { fan_in }) as Arc<dyn MergePolicy>))
    };
    let mut index = Index::open(dir, options()).unwrap();
    let mut model = Model::new();
    let mut step = 0;
    while let Some(op) = input.byte() {
        step += 1;
        if step > 64 {
            break;
        }
        let done = (|| -> Option<()> {
            match op % 12 {
                0..=2 => {
                    let (id, fp) = (input.id()?, input.fingerprint()?);
                    index.insert(id, fp).unwrap();
                    model.insert(id, (fp, None));
                }
                3 => {
                    let (id, fp) = (input.id()?, input.fingerprint()?);
                    let name = format!("doc {id} {}", "x".repeat(usize::from(op >> 4)));
                    index.insert_named(id, fp, name.clone()).unwrap();
                    model.insert(id, (fp, Some(name)));
                }
                4 => {
                    let n = input.byte()? % 8;
                    let mut docs = Vec::new();
                    for _ in 0..n {
                        docs.push((input.id()?, input.fingerprint()?));
                    }
                    index.insert_batch(docs.iter().map(|&(id, fp)| (id, fp, None::<String>))).unwrap();
                    for (id, fp) in docs {
                        model.insert(id, (fp, None));
                    }
                }
                5 | 6 => {
                    let id = input.id()?;
                    index.delete(id).unwrap();
                    model.remove(&id);
                }
                7 => {
                    let (fp, k) = (input.fingerprint()?, u32::from(input.byte()? % 4));
                    assert_eq!(index.query(fp, k).unwrap(), brute_force(&model, fp, k), "step {step}");
                }
                8 => index.flush().unwrap(),
                9 => index.compact().unwrap(),
                10 => {
                    drop(std::mem::replace(&mut index, Index::open(dir, options()).unwrap_or_else(|e| panic!("{e}"))));
                }
                _ => {
                    // Killed, or (only when every write was synced) a power cut:
                    // every acknowledged write must survive either way.
                    let mode = match (durability, op >> 4) {
                        (Durability::Sync, 0..=4) => CrashMode::PowerLoss(Unsynced::Lost),
                        (Durability::Sync, 5..=9) => CrashMode::PowerLoss(Unsynced::Torn),
                        (Durability::Sync, 10..=12) => CrashMode::PowerLoss(Unsynced::Kept),
                        _ => CrashMode::ProcessKill,
                    };
                    fs.crash(mode);
                    let reopened = Index::open(dir, options()).unwrap_or_else(|e| panic!("step {step}, {mode:?}: {e}"));
                    drop(std::mem::replace(&mut index, reopened));
                    check(&index, &model, step);
                }
            }
            Some(())
        })();
        if done.is_none() {
            break;
        }
    }
    check(&index, &model, step);
    drop(index);
    let index = Index::open(dir, options()).unwrap();
    check(&index, &model, usize::MAX);
    assert_eq!(fs.violations(), vec![]);
});
