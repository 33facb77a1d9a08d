//! Shared by the index scenario tests: the model of live documents, the
//! brute-force answer every query is checked against, and a seeded generator
//! of workloads. (Each test file uses some of these.)
#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use simhashdb::engine::fault::FaultFs;
use simhashdb::engine::fs::FileSystem;
use simhashdb::{Index, Match, hamming};

pub mod cli;
pub mod http;
pub mod schedule;
pub mod server;
pub mod workload;

/// Live documents: id → (fingerprint, name).
pub type Model = BTreeMap<u64, (u64, Option<String>)>;

/// Every document of `model` within `k` of `fp`, sorted by (distance, id):
/// what `Index::query` must return.
pub fn brute_force(model: &Model, fp: u64, k: u32) -> Vec<Match> {
    let mut out: Vec<Match> = model
        .iter()
        .filter(|(_, (f, _))| hamming(*f, fp) <= k)
        .map(|(&id, (f, n))| Match {
            id,
            fingerprint: *f,
            distance: hamming(*f, fp),
            name: n.clone(),
            sketch: None,
        })
        .collect();
    out.sort_by_key(|m| (m.distance, m.id));
    out
}

/// Every live document, read through `for_each_doc`.
pub fn live_docs(index: &Index) -> Model {
    let mut seen = Model::new();
    index
        .for_each_doc(|d| {
            seen.insert(d.id, (d.fingerprint, d.name.clone()));
        })
        .expect("for_each_doc");
    seen
}

/// What the index holds, read through `get` and `query` and checked for
/// consistency between the two: every id of `ids` with its fingerprint and
/// name, and no document outside `ids` at any of those fingerprints.
pub fn snapshot(index: &Index, ids: impl IntoIterator<Item = u64>) -> Model {
    let mut seen = Model::new();
    for id in ids {
        if let Some(fp) = index.get(id).expect("get") {
            let matches = index.query(fp, 0).expect("query");
            let m = matches
                .iter()
                .find(|m| m.id == id)
                .unwrap_or_else(|| panic!("get({id}) = {fp:#x}, but a query of it misses {id}"));
            seen.insert(id, (fp, m.name.clone()));
        }
    }
    let fps: BTreeSet<u64> = seen.values().map(|(fp, _)| *fp).collect();
    for fp in fps {
        assert_eq!(
            index.query(fp, 0).expect("query"),
            brute_force(&seen, fp, 0),
            "query({fp:#x}, 0) disagrees with get"
        );
    }
    seen
}

/// Fingerprints are drawn near these, so that queries have answers.
pub const CENTRES: [u64; 4] = [0, u64::MAX, 0x0123_4567_89ab_cdef, 0xdead_beef_cafe_f00d];

/// The directory of an index on an in-memory file system
/// (`engine::fault::FaultFs`).
pub fn dir() -> &'static Path {
    Path::new("/index")
}

/// A new file system holding a durable copy of `dir` from `src`, each file
/// passed through `edit` (by name) first.
pub fn copy_dir(src: &FaultFs, dir: &Path, mut edit: impl FnMut(&str, &mut Vec<u8>)) -> FaultFs {
    let dst = FaultFs::new();
    dst.create_dir_all(dir).unwrap();
    dst.sync_dir(Path::new("/")).unwrap();
    for name in src.list(dir).unwrap() {
        let path = dir.join(&name);
        let mut bytes = src.read(&path).unwrap();
        edit(name.to_str().unwrap(), &mut bytes);
        let mut file = dst.create_new(&path).unwrap();
        file.write_all(&bytes).unwrap();
        file.sync().unwrap();
    }
    dst.sync_dir(dir).unwrap();
    dst
}

/// splitmix64 of `x`: the `x`-th value of the generator seeded with 0, so a
/// test can derive a value from an id without carrying a generator.
pub fn mix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// splitmix64: deterministic workloads without a dependency.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        let z = mix(self.0);
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        z
    }

    /// Uniform enough in `0..n` for workloads.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// [`below`](Self::below) for an index or a count.
    pub fn index(&mut self, n: usize) -> usize {
        self.below(n as u64) as usize
    }

    /// A fingerprint within 5 bits of one of [`CENTRES`].
    pub fn fingerprint(&mut self) -> u64 {
        let mut fp = CENTRES[self.below(4) as usize];
        for _ in 0..self.below(6) {
            fp ^= 1 << self.below(64);
        }
        fp
    }
}

/// Writes `batches` (all of one schema, at least one) to a new Parquet file
/// at `path`, with the writer's default properties unless `props` are given.
#[cfg(feature = "parquet")]
pub fn write_parquet_batches(
    path: &Path,
    batches: &[arrow_array::RecordBatch],
    props: Option<parquet::file::properties::WriterProperties>,
) {
    let file = std::fs::File::create(path).unwrap();
    let mut w = parquet::arrow::ArrowWriter::try_new(file, batches[0].schema(), props).unwrap();
    for batch in batches {
        w.write(batch).unwrap();
    }
    w.close().unwrap();
}
