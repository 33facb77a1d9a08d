//! Most-significant-digit radix passes for sorting by a 64-bit key whose
//! top bits are close to uniform: permuted simhash keys, fingerprints.

/// Below this many items [`sort_by_top_bits`] uses the standard library's sort.
const RADIX_MIN: usize = 1 << 12;

/// Sorts `items` by `full`, given `top`, a `u64` such that `top(a) < top(b)`
/// implies `full(a) < full(b)` (a prefix of the full key). Two counting-sort
/// passes on the top 16 bits of `top` (8 at a time) leave buckets of a few
/// items each when those bits are close to uniform; each bucket is finished
/// by insertion sort, or the standard sort if it is large (skewed input
/// stays correct, only slower). On 400,000 random keys (a flush of the
/// default memtable) it took 6.4–7.4 ms, against 10.6–11.4 ms for one pass
/// into 65,536 buckets and about 12.5 ms for that pass as first written
/// (with `usize` counts); on input that is already in sorted runs (a
/// merge's) the standard stable sort is faster.
pub(crate) fn sort_by_top_bits<T: Copy + Default, K: Ord>(
    items: &mut [T],
    top: impl Fn(&T) -> u64,
    full: impl Fn(&T) -> K,
) {
    let n = items.len();
    if n < RADIX_MIN {
        items.sort_unstable_by_key(full);
        return;
    }
    if u32::try_from(n).is_err() {
        items.sort_unstable_by_key(full);
        return;
    }
    // Two counting passes of 8 bits each: each scatters into 256 places at
    // a time, which the caches follow (one pass into 65,536 buckets missed
    // the cache on nearly every item). The first moves `items` into `out`
    // by the top 8 bits; the second moves each of those buckets back into
    // its place in `items` by the next 8.
    let mut out = vec![T::default(); n];
    let digit = |item: &T, shift: u32| ((top(item) >> shift) & 0xff) as usize;
    let mut starts = [0u32; 257];
    scatter(items, &mut out, &mut starts, |item| digit(item, 56));
    let mut inner = [0u32; 257];
    for b in 0..256 {
        let (begin, end) = (starts[b] as usize, starts[b + 1] as usize);
        let (from, to) = (&out[begin..end], &mut items[begin..end]);
        scatter(from, to, &mut inner, |item| digit(item, 48));
        for w in inner.windows(2) {
            let bucket = &mut to[w[0] as usize..w[1] as usize];
            if bucket.len() <= 16 {
                for i in 1..bucket.len() {
                    let mut j = i;
                    while j > 0 && full(&bucket[j - 1]) > full(&bucket[j]) {
                        bucket.swap(j - 1, j);
                        j -= 1;
                    }
                }
            } else {
                bucket.sort_unstable_by_key(&full);
            }
        }
    }
}

/// One counting-sort pass: moves `from` into `to` (the same length) ordered
/// by `digit` (below 256), stably, and leaves in `starts[d]..starts[d + 1]`
/// where digit `d`'s items went.
fn scatter<T: Copy>(
    from: &[T],
    to: &mut [T],
    starts: &mut [u32; 257],
    digit: impl Fn(&T) -> usize,
) {
    starts.fill(0);
    for item in from {
        starts[digit(item) + 1] += 1;
    }
    for d in 1..starts.len() {
        starts[d] += starts[d - 1];
    }
    let mut next = [0u32; 256];
    next.copy_from_slice(&starts[..256]);
    for item in from {
        let slot = &mut next[digit(item)];
        to[*slot as usize] = *item;
        *slot += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn xorshift(state: &mut u64) -> u64 {
        *state ^= *state << 13;
        *state ^= *state >> 7;
        *state ^= *state << 17;
        *state
    }

    fn sort_keys(keys: &mut [u64]) {
        sort_by_top_bits(keys, |&k| k, |&k| k);
    }

    #[test]
    fn keys_agree_with_the_standard_sort() {
        let mut s = 7u64;
        let cases: Vec<Vec<u64>> = vec![
            vec![],
            vec![5, 1, 5, 0],
            (0..RADIX_MIN as u64 * 3)
                .map(|_| xorshift(&mut s))
                .collect(),
            // Skewed: every key in one top-16-bit bucket, plus duplicates.
            (0..RADIX_MIN as u64 * 2)
                .map(|i| (xorshift(&mut s) >> 20) | (i % 3))
                .collect(),
            // Many buckets with more than 16 keys, and a few with one.
            (0..RADIX_MIN as u64 * 40)
                .map(|i| {
                    if i % 97 == 0 {
                        xorshift(&mut s)
                    } else {
                        (xorshift(&mut s) >> 58) << 48 | i
                    }
                })
                .collect(),
            (0..RADIX_MIN as u64 + 1).rev().collect(),
        ];
        for (i, mut keys) in cases.into_iter().enumerate() {
            let mut want = keys.clone();
            want.sort_unstable();
            sort_keys(&mut keys);
            assert_eq!(keys, want, "case {i}");
        }
    }

    #[test]
    fn pairs_sort_by_the_full_key() {
        let mut s = 3u64;
        // Few distinct top keys, so buckets need the second component.
        let mut pairs: Vec<(u64, u64)> = (0..RADIX_MIN as u64 * 3)
            .map(|_| {
                let r = xorshift(&mut s);
                ((r % 7) << 60, r >> 3)
            })
            .collect();
        let mut want = pairs.clone();
        want.sort_unstable();
        sort_by_top_bits(&mut pairs, |p| p.0, |&p| p);
        assert_eq!(pairs, want);
    }
}
