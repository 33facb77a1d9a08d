//! Shared by the index scenario tests: the model of live documents and the
//! brute-force answer every query is checked against.

use std::collections::BTreeMap;

use simhashdb::{Match, hamming};

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
        })
        .collect();
    out.sort_by_key(|m| (m.distance, m.id));
    out
}
