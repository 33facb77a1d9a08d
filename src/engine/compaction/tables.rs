//! The permuted tables of a merge's output, reusing the inputs' tables
//! where their plan is the output's.

use std::sync::Arc;

use crate::error::{Error, Result};
use crate::plan::Plan;

use crate::engine::files::corrupted;
use crate::engine::keys::{sort_keys, sort_keys_with};
use crate::engine::segment::Segment;

/// The permuted tables of a merge's output in `plan`, as a `fill` for
/// [`Core::write_segment`]. `live_fingerprints` are the survivors'
/// fingerprints, sorted and distinct; `dropped` those of the entries that
/// did not survive (replaced, deleted or expired), which leave the tables
/// unless a survivor has them too.
///
/// An input whose plan is `plan` contributes its table as it is: decoded,
/// less the dropped keys. The other inputs (small segments have fewer
/// tables) contribute their fingerprints, read once from their first table,
/// permuted and radix-sorted per table as one more run. A stable sort of the
/// concatenated runs merges them, and duplicates go (one fingerprint may
/// live in several inputs). When no input has `plan`, the tables are built
/// from `live_fingerprints` alone.
pub(in crate::engine) fn merged_tables<'a>(
    run: &'a [Arc<Segment>],
    plan: &'a Plan,
    live_fingerprints: Vec<u64>,
    mut dropped: Vec<u64>,
) -> Result<impl FnMut(usize, &mut Vec<u64>) -> Result<()> + 'a> {
    let live = live_fingerprints.len();
    let (same, other): (Vec<&Segment>, Vec<&Segment>) = run
        .iter()
        .map(|s| &**s)
        .partition(|s| s.plan.shape() == plan.shape());
    sort_keys(&mut dropped);
    dropped.dedup();
    dropped.retain(|fp| live_fingerprints.binary_search(fp).is_err());
    // The fingerprints of the inputs whose tables cannot be reused.
    let others = if same.is_empty() {
        live_fingerprints
    } else {
        drop(live_fingerprints);
        let mut others = Vec::new();
        for segment in other {
            let first = &segment.plan.tables()[0];
            let reader = segment
                .tables
                .keys(0)
                .map_err(|e| corrupted(&segment.seg_path, &e))?;
            for key in reader {
                let fp = first.unpermute(key.map_err(|e| corrupted(&segment.seg_path, &e))?);
                if dropped.binary_search(&fp).is_err() {
                    others.push(fp);
                }
            }
        }
        others
    };
    let mut dead: Vec<u64> = Vec::with_capacity(if same.is_empty() { 0 } else { dropped.len() });
    let (mut permuted, mut scratch): (Vec<u64>, Vec<u64>) = (Vec::new(), Vec::new());
    Ok(move |t: usize, keys: &mut Vec<u64>| {
        let table = plan
            .tables()
            .get(t)
            .ok_or_else(|| Error::InvalidArgument(format!("the plan has no table {t}")))?;
        if !same.is_empty() {
            dead.clear();
            dead.extend(dropped.iter().map(|&fp| table.permute(fp)));
            dead.sort_unstable();
        }
        for segment in &same {
            let reader = segment
                .tables
                .keys(t)
                .map_err(|e| corrupted(&segment.seg_path, &e))?;
            for key in reader {
                let key = key.map_err(|e| corrupted(&segment.seg_path, &e))?;
                if dead.is_empty() || dead.binary_search(&key).is_err() {
                    keys.push(key);
                }
            }
        }
        if !others.is_empty() {
            permuted.clear();
            permuted.extend(others.iter().map(|&fp| table.permute(fp)));
            sort_keys_with(&mut permuted, &mut scratch);
            keys.extend_from_slice(&permuted);
        }
        if same.len() + usize::from(!others.is_empty()) > 1 {
            keys.sort();
        }
        keys.dedup();
        if keys.len() != live {
            return Err(Error::Corrupted {
                path: run.first().map(|s| s.seg_path.clone()).unwrap_or_default(),
                offset: 0,
                reason: format!(
                    "merging table {t}: {} keys for {live} live fingerprints (a table and its doc map disagree)",
                    keys.len()
                ),
            });
        }
        Ok(())
    })
}
