//! A k-way merge of sorted runs, each key kept once: what a merge needs
//! to combine its inputs' id indexes and tables, which are each sorted
//! already (a stable sort of their concatenation, as before, found the
//! runs and merged them pairwise, copying every item once per level of
//! merging, with a buffer of half the items besides).

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::collections::binary_heap::PeekMut;

/// Up to this many runs the smallest head is found by comparing every
/// head; above it, with a binary heap.
const LINEAR_MAX: usize = 8;

/// Merges `runs`, each ascending by `key` (equal keys allowed), and calls
/// `emit` once per distinct key with the first item that has it: the one
/// of the lowest-numbered run, and within a run the first (what a stable
/// sort of the runs' concatenation followed by a dedup by key keeps).
/// A run whose keys go down ends the merge with `disorder(run)`, or an
/// error it yields with that error.
pub(super) fn merge_distinct<T, E, I>(
    runs: Vec<I>,
    key: impl Fn(&T) -> u64,
    mut emit: impl FnMut(T) -> Result<(), E>,
    disorder: impl Fn(usize) -> E,
) -> Result<(), E>
where
    I: Iterator<Item = Result<T, E>>,
{
    // Each live run with its number and its head (the head's key first).
    let mut heads: Vec<(u64, usize, T, I)> = Vec::with_capacity(runs.len());
    for (r, mut run) in runs.into_iter().enumerate() {
        if let Some(item) = run.next() {
            let item = item?;
            heads.push((key(&item), r, item, run));
        }
    }
    let mut last: Option<u64> = None;
    let mut take = |k: u64, item: T| -> Result<(), E> {
        if last != Some(k) {
            last = Some(k);
            emit(item)?;
        }
        Ok(())
    };
    if heads.len() <= LINEAR_MAX {
        while !heads.is_empty() {
            // The smallest key, the lowest-numbered run among equals
            // (`heads` stays in run order).
            let mut best = 0;
            for (j, head) in heads.iter().enumerate().skip(1) {
                if head.0 < heads[best].0 {
                    best = j;
                }
            }
            let head = &mut heads[best];
            let k = head.0;
            let item = match head.3.next() {
                Some(next) => {
                    let next = next?;
                    let nk = key(&next);
                    if nk < k {
                        return Err(disorder(head.1));
                    }
                    head.0 = nk;
                    std::mem::replace(&mut head.2, next)
                }
                None => heads.remove(best).2,
            };
            take(k, item)?;
        }
        return Ok(());
    }
    let mut heap: BinaryHeap<Reverse<(u64, usize)>> = heads
        .iter()
        .enumerate()
        .map(|(j, h)| Reverse((h.0, j)))
        .collect();
    let mut slots: Vec<(usize, Option<T>, I)> = heads
        .into_iter()
        .map(|(_, r, item, run)| (r, Some(item), run))
        .collect();
    while let Some(mut top) = heap.peek_mut() {
        let Reverse((k, j)) = *top;
        let (r, head, run) = &mut slots[j];
        let item = match run.next() {
            Some(next) => {
                let next = next?;
                let nk = key(&next);
                if nk < k {
                    return Err(disorder(*r));
                }
                *top = Reverse((nk, j));
                head.replace(next)
            }
            None => {
                PeekMut::pop(top);
                head.take()
            }
        };
        if let Some(item) = item {
            take(k, item)?;
        }
    }
    Ok(())
}

/// Merges `runs` of keys, each ascending, into `out`, each key once: a
/// merge's tables. The same as [`merge_distinct`] on slices (whose
/// `disorder` a run that a table reader checked cannot call), without an
/// iterator's dispatch per key.
pub(super) fn merge_keys(runs: &[&[u64]], out: &mut Vec<u64>) {
    let mut runs: Vec<&[u64]> = runs.iter().copied().filter(|r| !r.is_empty()).collect();
    out.reserve(runs.iter().map(|r| r.len()).sum());
    let mut last: Option<u64> = None;
    if runs.len() > LINEAR_MAX {
        let _ = merge_distinct(
            runs.into_iter()
                .map(|r| r.iter().copied().map(Ok))
                .collect(),
            |&k| k,
            |k| {
                out.push(k);
                Ok::<(), ()>(())
            },
            |_| (),
        );
        return;
    }
    while let [first, rest @ ..] = runs.as_slice() {
        let (mut best, mut min) = (0, first[0]);
        for (j, r) in rest.iter().enumerate() {
            if r[0] < min {
                (best, min) = (j + 1, r[0]);
            }
        }
        if last != Some(min) {
            last = Some(min);
            out.push(min);
        }
        let r = &mut runs[best];
        *r = &r[1..];
        if r.is_empty() {
            runs.remove(best);
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing)]
mod tests {
    use super::*;

    /// What the merge replaces: the runs concatenated, stably sorted by
    /// key, the first of each key kept.
    fn by_stable_sort(runs: &[Vec<(u64, u64)>]) -> Vec<(u64, u64)> {
        let mut all: Vec<(u64, u64)> = runs.concat();
        all.sort_by_key(|&(k, _)| k);
        all.dedup_by_key(|&mut (k, _)| k);
        all
    }

    fn merged(runs: &[Vec<(u64, u64)>]) -> Result<Vec<(u64, u64)>, usize> {
        let mut out = Vec::new();
        merge_distinct(
            runs.iter().map(|r| r.iter().copied().map(Ok)).collect(),
            |&(k, _)| k,
            |item| {
                out.push(item);
                Ok(())
            },
            |r| r,
        )?;
        Ok(out)
    }

    /// Runs of every count around the switch to the heap (0 to 12), empty
    /// runs among them, keys repeated within and across runs (the value
    /// says which run and which position, so the item kept is checked, not
    /// only the key), and 0 and `u64::MAX`.
    #[test]
    fn keeps_the_first_of_each_key_as_a_stable_sort_would() {
        let mut s = 0x2545_f491_4f6c_dd1du64;
        let mut random = || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s
        };
        for count in 0..=12usize {
            for spread in [4u64, 1_000, u64::MAX] {
                let runs: Vec<Vec<(u64, u64)>> = (0..count)
                    .map(|r| {
                        let len = if r % 3 == 1 { 0 } else { random() % 300 };
                        let mut keys: Vec<u64> = (0..len)
                            .map(|_| match random() % 10 {
                                0 => 0,
                                1 => u64::MAX,
                                _ => random() % spread,
                            })
                            .collect();
                        keys.sort_unstable();
                        (0u64..)
                            .zip(keys)
                            .map(|(i, k)| (k, (r as u64) << 32 | i))
                            .collect()
                    })
                    .collect();
                assert_eq!(
                    merged(&runs).unwrap(),
                    by_stable_sort(&runs),
                    "{count} runs, keys below {spread}"
                );
            }
        }
    }

    /// Keys: runs of every count around the switch to the heap, empty runs,
    /// keys shared by runs, against a sort and dedup of them all.
    #[test]
    fn merge_keys_keeps_each_key_once_in_order() {
        let mut s = 0x9e37_79b9_7f4a_7c15u64;
        let mut random = || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s
        };
        for count in 0..=12usize {
            for spread in [4u64, 1_000, u64::MAX] {
                let runs: Vec<Vec<u64>> = (0..count)
                    .map(|r| {
                        let len = if r % 3 == 1 { 0 } else { random() % 300 };
                        let mut keys: Vec<u64> = (0..len)
                            .map(|_| match random() % 10 {
                                0 => 0,
                                1 => u64::MAX,
                                _ => random() % spread,
                            })
                            .collect();
                        keys.sort_unstable();
                        keys.dedup();
                        keys
                    })
                    .collect();
                let mut expected = runs.concat();
                expected.sort_unstable();
                expected.dedup();
                let mut out = vec![7];
                out.clear();
                merge_keys(
                    &runs.iter().map(|r| r.as_slice()).collect::<Vec<_>>(),
                    &mut out,
                );
                assert_eq!(out, expected, "{count} runs, keys below {spread}");
            }
        }
    }

    /// A run whose keys go down is reported, by its number, with a few runs
    /// and with many.
    #[test]
    fn a_run_out_of_order_is_an_error() {
        for count in [2usize, 3, 9, 11] {
            let mut runs: Vec<Vec<(u64, u64)>> = (0..count as u64)
                .map(|r| vec![(r, 0), (r + 10, 0)])
                .collect();
            runs[1] = vec![(5, 0), (4, 0)];
            assert_eq!(merged(&runs), Err(1), "{count} runs");
        }
    }

    /// An error a run yields ends the merge with that error.
    #[test]
    fn a_run_s_error_is_returned() {
        for count in [1usize, 4, 10] {
            let mut runs: Vec<Vec<Result<(u64, u64), usize>>> =
                (0..count as u64).map(|r| vec![Ok((r, 0))]).collect();
            runs[0].push(Err(77));
            let result = merge_distinct(
                runs.into_iter().map(|r| r.into_iter()).collect(),
                |&(k, _)| k,
                |_| Ok(()),
                |r| r,
            );
            assert_eq!(result, Err(77), "{count} runs");
        }
    }
}
