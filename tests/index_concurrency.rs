//! Queries from several threads while one thread writes, flushes (a small
//! memtable budget) and compacts: no query ever misses a document whose
//! insert was acknowledged before the query began, and nothing returned is
//! wrong.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use common::mix;
use simhashdb::engine::fault::FaultFs;
use simhashdb::engine::fs::FileSystem;
use simhashdb::plan::Plan;
use simhashdb::{Index, Match, Options, hamming};

/// `Index` is shared between threads by reference.
const _: () = {
    const fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Index>();
};

/// Documents the writer inserts, ids `0..DOCS`.
const DOCS: u64 = 3_000;
/// Ids of short-lived documents, inserted and deleted again (tombstones).
const TEMP: u64 = 1 << 40;
const READERS: usize = 2;
const CENTRES: [u64; 8] = [
    0,
    u64::MAX,
    0x0123_4567_89ab_cdef,
    0xdead_beef_cafe_f00d,
    0x5555_5555_5555_5555,
    0xaaaa_aaaa_0000_ffff,
    0x0f0f_0f0f_f0f0_f0f0,
    0x8000_0000_0000_0001,
];

/// Document `id`'s fingerprint: up to three bits from one of the centres,
/// so a query at distance 3 finds several.
fn fp(id: u64) -> u64 {
    let r = mix(id);
    let mut fp = CENTRES[(r % 8) as usize];
    for i in 0..(r >> 3) % 4 {
        fp ^= 1 << ((r >> (8 + 6 * i)) & 63);
    }
    fp
}

fn name(id: u64) -> Option<String> {
    id.is_multiple_of(3)
        .then(|| format!("https://example.com/{id}"))
}

/// The writer: inserts `0..DOCS` in order, publishing each acknowledged id
/// through `acked`; re-inserts older documents unchanged (their new version
/// must shadow the old without a gap), inserts and deletes short-lived ones,
/// and compacts now and then.
fn write(index: &Index, acked: &AtomicU64) {
    for id in 0..DOCS {
        match name(id) {
            Some(n) => index.insert_named(id, fp(id), n).unwrap(),
            None => index.insert(id, fp(id)).unwrap(),
        }
        acked.store(id + 1, Ordering::Release);
        if id % 5 == 4 {
            let again = id / 2;
            match name(again) {
                Some(n) => index.insert_named(again, fp(again), n).unwrap(),
                None => index.insert(again, fp(again)).unwrap(),
            }
        }
        if id.is_multiple_of(7) {
            index.insert(TEMP + id, fp(id) ^ 1 << 17).unwrap();
        }
        if id % 7 == 3 && id > 7 {
            index.delete(TEMP + id - 10).unwrap();
        }
        if id.is_multiple_of(11) {
            index
                .insert_batch([
                    (TEMP + id + 1, fp(id), None::<String>),
                    (TEMP + id + 2, fp(id), None),
                ])
                .unwrap();
            index.delete(TEMP + id + 1).unwrap();
        }
        if id % 600 == 300 {
            index.compact().unwrap();
        }
    }
}

/// A reader: until `done`, picks an acknowledged id (often the newest) and
/// checks that `get` and an exact query find it, and now and then that a
/// query at distance 3 returns every acknowledged document within 3 bits
/// and nothing wrong. Returns how many checks it made.
fn read(index: &Index, acked: &AtomicU64, done: &AtomicBool, seed: u64) -> u64 {
    let mut checks = 0u64;
    let mut rng = seed;
    while !done.load(Ordering::Acquire) {
        let n = acked.load(Ordering::Acquire);
        if n == 0 {
            std::thread::yield_now();
            continue;
        }
        rng = mix(rng);
        let id = if rng.is_multiple_of(2) {
            n - 1
        } else {
            (rng >> 1) % n
        };
        let f = fp(id);

        assert_eq!(
            index.get(id).unwrap(),
            Some(f),
            "get({id}) with {n} acknowledged"
        );
        let exact = index.query(f, 0).unwrap();
        assert!(
            exact.iter().any(|m| m.id == id && m.name == name(id)),
            "query({f:#x}, 0) misses {id} with {n} acknowledged: {exact:?}"
        );

        if checks.is_multiple_of(8) {
            let found = index.query(f, 3).unwrap();
            let after = acked.load(Ordering::Acquire);
            for m in &found {
                assert!(
                    m.distance <= 3 && m.distance == hamming(m.fingerprint, f),
                    "{m:?}"
                );
                if m.id < TEMP {
                    // Visible at most one insert before its acknowledgement.
                    assert!(m.id <= after, "{} returned with {after} acknowledged", m.id);
                    assert_eq!(m.fingerprint, fp(m.id));
                    assert_eq!(m.name, name(m.id));
                }
            }
            let found: Vec<u64> = found.iter().map(|m| m.id).collect();
            for other in 0..n {
                if hamming(fp(other), f) <= 3 {
                    assert!(
                        found.contains(&other),
                        "query({f:#x}, 3) misses {other} with {n} acknowledged"
                    );
                }
            }
        }
        checks += 1;
    }
    checks
}

/// The short-lived documents alive after `write`: its inserts and deletes
/// of them, replayed in order.
fn short_lived() -> BTreeMap<u64, u64> {
    let mut live = BTreeMap::new();
    for id in 0..DOCS {
        if id.is_multiple_of(7) {
            live.insert(TEMP + id, fp(id) ^ 1 << 17);
        }
        if id % 7 == 3 && id > 7 {
            live.remove(&(TEMP + id - 10));
        }
        if id.is_multiple_of(11) {
            live.insert(TEMP + id + 1, fp(id));
            live.insert(TEMP + id + 2, fp(id));
            live.remove(&(TEMP + id + 1));
        }
    }
    live
}

fn brute_force(fp_query: u64, k: u32) -> Vec<Match> {
    let mut out: Vec<Match> = (0..DOCS)
        .filter(|&id| hamming(fp(id), fp_query) <= k)
        .map(|id| Match {
            id,
            fingerprint: fp(id),
            distance: hamming(fp(id), fp_query),
            name: name(id),
            sketch: None,
        })
        .collect();
    for (t, f) in short_lived() {
        if hamming(f, fp_query) <= k {
            out.push(Match {
                id: t,
                fingerprint: f,
                distance: hamming(f, fp_query),
                name: None,
                sketch: None,
            });
        }
    }
    out.sort_by_key(|m| (m.distance, m.id));
    out
}

fn run(index: Index) -> Index {
    let index = Arc::new(index);
    let acked = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = (0..READERS as u64)
        .map(|r| {
            let (index, acked, done) = (index.clone(), acked.clone(), done.clone());
            std::thread::spawn(move || read(&index, &acked, &done, r))
        })
        .collect();
    let writer = {
        let (index, acked) = (index.clone(), acked.clone());
        std::thread::spawn(move || write(&index, &acked))
    };
    let written = writer.join();
    done.store(true, Ordering::Release);
    let checks: Vec<u64> = readers.into_iter().map(|r| r.join().unwrap()).collect();
    written.unwrap();
    assert!(checks.iter().all(|&c| c > 100), "too few reads: {checks:?}");

    let stats = index.stats();
    assert!(stats.segments >= 2, "{} segments", stats.segments);
    for centre in CENTRES {
        assert_eq!(index.query(centre, 3).unwrap(), brute_force(centre, 3));
    }
    for id in 0..DOCS {
        assert_eq!(index.get(id).unwrap(), Some(fp(id)));
    }
    Arc::into_inner(index).unwrap()
}

/// `flush_thread` whatever the core count: on real files (or a `FaultFs`
/// process handle) flushes run on the flush thread, so readers also meet a
/// memtable being flushed, or on the writing thread; merges on the merge
/// thread either way.
fn options(memtable_bytes: usize, flush_thread: bool) -> Options {
    Options::new()
        .plan(Plan::new(6, 3).unwrap())
        .memtable_bytes(memtable_bytes)
        .flush_thread(flush_thread)
}

#[test]
fn readers_never_miss_an_acknowledged_insert_on_real_files() {
    readers_on_real_files(true);
}

#[test]
fn readers_never_miss_an_acknowledged_insert_on_real_files_without_the_flush_thread() {
    readers_on_real_files(false);
}

fn readers_on_real_files(flush_thread: bool) {
    let tmp = tempfile::tempdir().unwrap();
    let index = run(Index::open(tmp.path(), options(16 << 10, flush_thread)).unwrap());
    drop(index);
    let index = Index::open_read_only(tmp.path()).unwrap();
    for centre in CENTRES {
        assert_eq!(index.query(centre, 3).unwrap(), brute_force(centre, 3));
    }
}

/// A plain handle: flushes and merges on the writing thread.
#[test]
fn readers_never_miss_an_acknowledged_insert_on_fault_fs() {
    readers_on_fault_fs(|fs| fs.clone(), false);
}

/// A process handle: the flush and merge threads over the simulated file
/// system, which records any file written while mapped.
#[test]
fn readers_never_miss_an_acknowledged_insert_on_fault_fs_with_the_threads() {
    readers_on_fault_fs(FaultFs::process, true);
    readers_on_fault_fs(FaultFs::process, false);
}

fn readers_on_fault_fs(handle: fn(&FaultFs) -> FaultFs, flush_thread: bool) {
    let fs = FaultFs::new();
    let dir = Path::new("/index");
    let options =
        || options(8 << 10, flush_thread).file_system(Arc::new(handle(&fs)) as Arc<dyn FileSystem>);
    let index = run(Index::open(dir, options()).unwrap());
    drop(index);
    // No file was written or truncated while a reader had it mapped.
    assert_eq!(fs.violations(), vec![]);
    let index = Index::open(dir, options()).unwrap();
    for centre in CENTRES {
        assert_eq!(index.query(centre, 3).unwrap(), brute_force(centre, 3));
    }
}
