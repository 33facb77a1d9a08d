//! A seeded workload of writes, flushes, syncs and compactions, and the
//! model after each prefix of it: what a crash test checks a recovered index
//! against.

use simhashdb::Index;

use super::{Model, Rng};

/// Ids the workloads use; nothing outside it is ever written.
pub const ID_SPACE: u64 = 40;

/// The name a named write gives document `id` with fingerprint `fp`.
pub fn name(id: u64, fp: u64) -> String {
    format!("https://example.com/{id}/{fp:016x}")
}

/// One call of the index's write interface.
#[derive(Debug, Clone)]
pub enum W {
    Insert(u64, u64),
    Named(u64, u64),
    /// `insert_batch` with a name for every document.
    Batch(Vec<(u64, u64)>),
    /// `insert_batch` without names (smaller frames). [`workload`] never
    /// draws it; tests that build their own call sequences may.
    UnnamedBatch(Vec<(u64, u64)>),
    Delete(u64),
    Flush,
    Sync,
    Compact,
}

/// `len` calls drawn from `seed`: mostly writes (a third of them upserts of
/// a live id, since ids come from [`ID_SPACE`]), and one in five an
/// explicit flush, sync or compaction.
pub fn workload(seed: u64, len: usize) -> Vec<W> {
    let mut rng = Rng(seed);
    (0..len)
        .map(|_| {
            let id = rng.below(ID_SPACE);
            match rng.below(20) {
                0..=6 => W::Insert(id, rng.fingerprint()),
                7..=9 => W::Named(id, rng.fingerprint()),
                10..=12 => W::Batch(
                    (0..1 + rng.below(4))
                        .map(|_| (rng.below(ID_SPACE), rng.fingerprint()))
                        .collect(),
                ),
                13..=15 => W::Delete(id),
                16 => W::Flush,
                17 | 18 => W::Sync,
                _ => W::Compact,
            }
        })
        .collect()
}

/// Makes the call `op`.
pub fn perform(index: &Index, op: &W) -> simhashdb::Result<()> {
    match op {
        W::Insert(id, fp) => index.insert(*id, *fp),
        W::Named(id, fp) => index.insert_named(*id, *fp, name(*id, *fp)),
        W::Batch(docs) => index.insert_batch(docs.iter().map(|&(i, f)| (i, f, Some(name(i, f))))),
        W::UnnamedBatch(docs) => {
            index.insert_batch(docs.iter().map(|&(i, f)| (i, f, None::<String>)))
        }
        W::Delete(id) => index.delete(*id),
        W::Flush => index.flush(),
        W::Sync => index.sync(),
        W::Compact => index.compact(),
    }
}

/// The model after each prefix of `ops`: `models[p]` after the first `p`.
pub fn prefix_models(ops: &[W]) -> Vec<Model> {
    let mut model = Model::new();
    let mut out = vec![model.clone()];
    for op in ops {
        match op {
            W::Insert(id, fp) => {
                model.insert(*id, (*fp, None));
            }
            W::Named(id, fp) => {
                model.insert(*id, (*fp, Some(name(*id, *fp))));
            }
            W::Batch(docs) => {
                for &(i, f) in docs {
                    model.insert(i, (f, Some(name(i, f))));
                }
            }
            W::UnnamedBatch(docs) => {
                for &(i, f) in docs {
                    model.insert(i, (f, None));
                }
            }
            W::Delete(id) => {
                model.remove(id);
            }
            W::Flush | W::Sync | W::Compact => {}
        }
        out.push(model.clone());
    }
    out
}

/// How far [`perform_until_failure`] got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    /// Calls acknowledged, from the first.
    pub acked: usize,
    /// Calls acknowledged up to and including the last acknowledged flush,
    /// sync or compaction: what a power cut must keep in Buffered mode.
    pub floor: usize,
    /// Whether a call failed (the one after the acknowledged ones).
    pub failed: bool,
}

impl Progress {
    /// The prefixes of the workload a recovered index may equal: from
    /// `floor` (a power cut in Buffered mode) or `acked` (otherwise) to
    /// `acked`, plus the failed call, which may or may not have happened.
    pub fn survivors(&self, power_cut_buffered: bool) -> std::ops::RangeInclusive<usize> {
        let oldest = if power_cut_buffered {
            self.floor
        } else {
            self.acked
        };
        oldest..=self.acked + usize::from(self.failed)
    }
}

/// Makes the calls of `ops` in order until one fails.
pub fn perform_until_failure(index: &Index, ops: &[W]) -> Progress {
    let mut progress = Progress {
        acked: 0,
        floor: 0,
        failed: false,
    };
    for op in ops {
        if perform(index, op).is_err() {
            progress.failed = true;
            break;
        }
        progress.acked += 1;
        if matches!(op, W::Flush | W::Sync | W::Compact) {
            progress.floor = progress.acked;
        }
    }
    progress
}

/// Asserts that `got`, what the index held after a crash and a reopen,
/// equals `models[p]` for a prefix `p` that `progress` allows.
pub fn assert_a_prefix_survived(
    models: &[Model],
    got: &Model,
    progress: Progress,
    power_cut_buffered: bool,
    ctx: &str,
) {
    let survivors = progress.survivors(power_cut_buffered);
    assert!(
        survivors.clone().any(|p| &models[p] == got),
        "{ctx}: after reopening, the index equals the model after none of the operations \
         {survivors:?} ({progress:?})\n got: {got:?}\n acknowledged: {:?}",
        models[progress.acked]
    );
}
