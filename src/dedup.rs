//! Deduplicating a collection of texts: the verified engine behind
//! `simhashdb dedup` on datasets and the Python package's `simhashdb.dedup`.
//!
//! The stages, in the order a run goes through them (docs/ARCHITECTURE.md,
//! "Deduplicating a dataset"):
//!
//! 1. [`Sketches`]: every text read once, keeping only its fingerprint, its
//!    length in characters (for [`Keep::Longest`]), whether it is blank and,
//!    for the default candidate search, the MinHash band keys and the size
//!    of its shingle set ([`MinHashBands`]);
//! 2. [`Sketches::candidates`]: the pairs of records that share a band key
//!    (default), or with [`Settings::distance`] (or without verification)
//!    the pairs within that many bits ([`find_all`]), less the pairs whose
//!    set sizes alone bound their Jaccard below the threshold;
//! 3. [`Settings::check`]: the exact Jaccard similarity of each candidate,
//!    re-reading only the candidates' texts from a [`TextSource`] in
//!    bounded memory ([`Settings::verify_memory`]), keeping the pairs at or
//!    above the threshold;
//! 4. [`Settings::keep`]: the keep rule. Records are visited in keep order
//!    and one is dropped only against an earlier visited record that is
//!    kept (the most similar, ties by keep order); without verification,
//!    the groups are the connected components of the candidate pairs and
//!    each keeps its first member in keep order;
//! 5. an [`Outcome`]: each record's [`Fate`] (kept, or dropped with the kept
//!    record it matched), the similarity of each dropped record to it, and
//!    the groups.
//!
//! [`dedup`] runs them all on texts in memory:
//!
//! ```
//! use simhashdb::Simhasher;
//! use simhashdb::dedup::{Fate, Keep, Settings, dedup};
//!
//! let texts = [
//!     "the quick brown fox jumps over the lazy dog near the river bank today",
//!     "an unrelated text about storage engines, their files and their formats",
//!     "the quick brown fox jumps over the lazy dog near the river bank today!",
//! ];
//! let outcome = dedup(&Simhasher::default(), &texts, &Settings::default(), Keep::First)?;
//! assert_eq!(outcome.fate[0], Fate::Kept);
//! assert_eq!(outcome.fate[1], Fate::Kept);
//! assert_eq!(outcome.fate[2], Fate::Duplicate { of: 0 });
//! assert_eq!(outcome.similarity(2), Some(1.0));
//! assert_eq!(outcome.groups, vec![vec![0, 2]]);
//! # Ok::<(), simhashdb::dedup::DedupError>(())
//! ```
//!
//! Memory holds, per record, its fingerprint, a few flags and (for the
//! default search) its band keys until the candidates are found; texts are
//! held only by the [`TextSource`], and the check holds at most
//! [`Settings::verify_memory`] bytes of shingle sets (plus those of one
//! chunk of texts), making further passes over the source when the
//! candidates' sets do not fit.

use std::collections::HashMap;
use std::convert::Infallible;
use std::fmt;

use rayon::prelude::*;

use crate::Simhasher;
use crate::batch::find_all;
use crate::plan::{Budget, Plan};
use crate::recheck::{MinHashBands, ShingleSet};

/// Shingle width of the default check, in tokens (word 5-shingles,
/// docs/quality/dedup.md).
pub const DEFAULT_WIDTH: usize = 5;
/// Jaccard threshold of the default check (docs/QUALITY.md, "Recommended
/// defaults for `dedup` on datasets").
pub const DEFAULT_THRESHOLD: f64 = 0.8;
/// Hamming distance of the candidate search without verification.
pub const DEFAULT_DISTANCE: u32 = 3;
/// Bytes of shingle sets the check may hold at once (512 MiB).
pub const DEFAULT_VERIFY_MEMORY: usize = 512 << 20;
/// At most this many records in one run (record numbers are `u32`).
pub const MAX_RECORDS: usize = u32::MAX as usize;
/// In the band search, a record is paired with at most this many of the
/// records that share a band key and come first in keep order, and as many
/// of those just before it: a key shared by a huge cluster costs pairs in
/// proportion to its records, not to their square.
pub const BUCKET_WINDOW: usize = 32;
/// Texts per chunk that [`TextSource`] for slices hands to the check.
const SLICE_CHUNK: usize = 8192;

/// Why a run was refused.
#[derive(Debug, Clone, PartialEq)]
pub enum DedupError {
    /// A setting is out of range; the message names it.
    InvalidSetting(String),
    /// More records than [`MAX_RECORDS`].
    TooManyRecords(usize),
}

impl fmt::Display for DedupError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DedupError::InvalidSetting(m) => f.write_str(m),
            DedupError::TooManyRecords(n) => write!(
                f,
                "{n} records: at most {MAX_RECORDS} are supported in one run"
            ),
        }
    }
}

impl std::error::Error for DedupError {}

impl From<Infallible> for DedupError {
    fn from(never: Infallible) -> Self {
        match never {}
    }
}

/// The rule of a run: what makes two records duplicates.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Settings {
    /// Check each candidate pair with the exact Jaccard similarity of the
    /// texts' shingle sets (default); `false` is plain simhash: every pair
    /// within [`distance`](Self::distance) (default 3) is a duplicate.
    pub verify: bool,
    /// The smallest Jaccard similarity of a duplicate (0 to 1).
    pub threshold: f64,
    /// Shingle width of the check, in tokens (at least 1).
    pub width: usize,
    /// `Some(k)`: the candidates are the pairs within `k` bits instead of
    /// those sharing a MinHash band (and the duplicates, without
    /// verification).
    pub distance: Option<u32>,
    /// Bytes of shingle sets the check may hold at once.
    pub verify_memory: usize,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            verify: true,
            threshold: DEFAULT_THRESHOLD,
            width: DEFAULT_WIDTH,
            distance: None,
            verify_memory: DEFAULT_VERIFY_MEMORY,
        }
    }
}

/// Which record of a group is kept, as an order of preference.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keep {
    /// The first in input order.
    First,
    /// The longest text (in characters); ties: the first.
    Longest,
}

/// What happens to one record (8 bytes: a run holds one per record).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fate {
    /// Kept.
    Kept,
    /// Dropped as a duplicate of the kept record `of`
    /// ([`Outcome::similarity`] gives their similarity).
    Duplicate {
        /// The kept record it matched.
        of: u32,
    },
}

/// A chunk of texts a [`TextSource`] hands over: (record number, text).
pub type TextChunk<'a> = [(u64, &'a str)];

/// Texts that can be read again, by record number: what the check re-reads.
pub trait TextSource {
    /// What reading can fail with.
    type Error;

    /// Calls `f` with the texts of the records `want(record)` asks for, in
    /// increasing record order, a chunk at a time. `what` names the pass
    /// (for progress reports).
    fn scan(
        &self,
        what: &'static str,
        want: &(dyn Fn(u64) -> bool + Sync),
        f: &mut dyn FnMut(&TextChunk<'_>),
    ) -> Result<(), Self::Error>;
}

impl<S: AsRef<str> + Sync> TextSource for [S] {
    type Error = Infallible;

    fn scan(
        &self,
        _what: &'static str,
        want: &(dyn Fn(u64) -> bool + Sync),
        f: &mut dyn FnMut(&TextChunk<'_>),
    ) -> Result<(), Infallible> {
        let mut chunk: Vec<(u64, &str)> = Vec::with_capacity(SLICE_CHUNK);
        for (i, text) in self.iter().enumerate() {
            if want(i as u64) {
                chunk.push((i as u64, text.as_ref()));
                if chunk.len() >= SLICE_CHUNK {
                    f(&chunk);
                    chunk.clear();
                }
            }
        }
        if !chunk.is_empty() {
            f(&chunk);
        }
        Ok(())
    }
}

/// Whether a text is blank: no letter or digit. A blank text is never a
/// duplicate and never has one.
pub fn is_blank_text(text: &str) -> bool {
    !text.chars().any(char::is_alphanumeric)
}

impl Settings {
    /// Refuses settings out of range, naming the setting.
    pub fn validate(&self) -> Result<(), DedupError> {
        if !(0.0..=1.0).contains(&self.threshold) {
            return Err(DedupError::InvalidSetting(format!(
                "threshold must be between 0 and 1, got {}",
                self.threshold
            )));
        }
        if self.width == 0 {
            return Err(DedupError::InvalidSetting(
                "the shingle width must be at least 1".into(),
            ));
        }
        if let Some(d) = self.distance {
            Plan::new(d.saturating_add(1), d)
                .map_err(|e| DedupError::InvalidSetting(format!("distance {d}: {e}")))?;
        }
        Ok(())
    }

    /// The MinHash bands of the default candidate search, `None` when the
    /// candidates are the pairs within [`distance`](Self::distance).
    pub fn bands(&self) -> Option<MinHashBands> {
        (self.verify && self.distance.is_none())
            .then(|| MinHashBands::for_threshold(self.threshold))
    }

    /// Stage 1: an empty set of sketches to [`push`](Sketches::push) texts
    /// into. `lengths`: whether to count each text's characters (only
    /// [`Keep::Longest`] reads them).
    pub fn sketches(&self, hasher: &Simhasher, lengths: bool) -> Sketches {
        Sketches {
            hasher: hasher.clone(),
            bands: self.bands(),
            width: self.width,
            threshold: self.threshold,
            distance: self.distance.unwrap_or(DEFAULT_DISTANCE),
            lengths,
            fingerprints: Vec::new(),
            chars: Vec::new(),
            blank: Vec::new(),
            band_keys: Vec::new(),
            set_sizes: Vec::new(),
        }
    }

    /// Stage 3: the candidate `pairs` (record numbers, each as (smaller,
    /// larger)) whose texts' Jaccard similarity reaches the threshold, with
    /// it, sorted by pair; and how many passes over `texts` it took. Without
    /// verification every pair is kept, with similarity NaN, and nothing
    /// is read. `n` is the number of records.
    pub fn check<T: TextSource + ?Sized>(
        &self,
        hasher: &Simhasher,
        texts: &T,
        n: usize,
        mut pairs: Vec<(u32, u32)>,
    ) -> Result<Checked, T::Error> {
        for pair in pairs.iter_mut() {
            *pair = (pair.0.min(pair.1), pair.0.max(pair.1));
        }
        if !self.verify {
            pairs.sort_unstable();
            pairs.dedup();
            return Ok(Checked {
                pairs: pairs.into_iter().map(|p| (p, f64::NAN)).collect(),
                passes: 0,
            });
        }
        if pairs.is_empty() {
            return Ok(Checked::default());
        }
        let checker = Checker {
            hasher,
            width: self.width,
            budget: self.verify_memory,
            n,
        };
        let (js, passes) = checker.jaccards(texts, &pairs, self.threshold, "checking")?;
        let mut confirmed: Vec<((u32, u32), f64)> = pairs
            .iter()
            .zip(js)
            .filter(|&(_, j)| j >= self.threshold)
            .map(|(&pair, j)| (pair, j))
            .collect();
        confirmed.sort_unstable_by_key(|&(pair, _)| pair);
        Ok(Checked {
            pairs: confirmed,
            passes,
        })
    }

    /// Stage 4: the keep rule over `n` records, given the checked pairs and
    /// the keep order (a permutation of the record numbers, most preferred
    /// first: [`keep_order`]).
    pub fn keep(&self, n: usize, checked: &Checked, order: &[u32]) -> Outcome {
        if self.verify {
            direct(n, &checked.pairs, order)
        } else {
            let pairs: Vec<(u32, u32)> = checked.pairs.iter().map(|&(p, _)| p).collect();
            by_components(n, &pairs, order)
        }
    }
}

/// Stage 1's result: what the later stages need of each record.
#[derive(Debug, Clone)]
pub struct Sketches {
    hasher: Simhasher,
    bands: Option<MinHashBands>,
    width: usize,
    threshold: f64,
    distance: u32,
    lengths: bool,
    /// Each record's fingerprint (0 for a blank one).
    pub fingerprints: Vec<u64>,
    /// Each record's length in characters (up to `u32::MAX`), when counted.
    pub chars: Vec<u32>,
    /// Whether each record is blank (no letter or digit; or, for the band
    /// search, no shingle): it takes no part in the candidate search.
    pub blank: Vec<bool>,
    /// The band keys, `bands` per record.
    band_keys: Vec<u32>,
    /// With the bands: each record's number of distinct shingles.
    set_sizes: Vec<u32>,
}

/// Stage 2's result.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Candidates {
    /// The pairs to check, each as (smaller, larger) record number.
    pub pairs: Vec<(u32, u32)>,
    /// How many pairs the search found (before the size bound).
    pub found: u64,
    /// How many of them were left out because their shingle sets' sizes
    /// alone bound their Jaccard below the threshold.
    pub bounded_by_size: u64,
}

/// Stage 3's result.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Checked {
    /// The confirmed pairs, each as (smaller, larger) record number, with
    /// their Jaccard similarity (NaN without verification), sorted by pair.
    pub pairs: Vec<((u32, u32), f64)>,
    /// Passes over the texts the check made.
    pub passes: usize,
}

/// Stage 4's result: what happens to each record, and the groups.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    /// Each record's fate, by record number.
    pub fate: Vec<Fate>,
    /// The groups: a kept record and the records dropped against it (with
    /// verification) or a connected component (without), members sorted
    /// by record number, groups ordered by their first member.
    pub groups: Vec<Vec<u32>>,
    /// The kept record of each group.
    pub kept_of_group: Vec<u32>,
    /// Each dropped record's Jaccard similarity to the kept record it
    /// matched, by record number (sorted); empty without verification.
    pub similarities: Vec<(u32, f64)>,
}

impl Outcome {
    /// The number of records dropped.
    pub fn dropped(&self) -> usize {
        self.fate.iter().filter(|f| **f != Fate::Kept).count()
    }

    /// The Jaccard similarity of dropped record `record` to the kept record
    /// it matched; `None` for a kept record, or without verification.
    pub fn similarity(&self, record: u32) -> Option<f64> {
        let at = self
            .similarities
            .binary_search_by_key(&record, |&(r, _)| r)
            .ok()?;
        Some(self.similarities[at].1)
    }
}

impl Sketches {
    /// The number of records pushed.
    pub fn len(&self) -> usize {
        self.fingerprints.len()
    }

    /// Whether no record was pushed.
    pub fn is_empty(&self) -> bool {
        self.fingerprints.is_empty()
    }

    /// The bands of the candidate search, `None` for the search by distance.
    pub fn bands(&self) -> Option<MinHashBands> {
        self.bands
    }

    /// Sketches the next records' texts, in parallel.
    pub fn push<S: AsRef<str> + Sync>(&mut self, texts: &[S]) {
        let hasher = &self.hasher;
        let bands = self.bands;
        let width = self.width;
        let lengths = self.lengths;
        let done: Vec<(u64, u32, bool, Vec<u32>, u32)> = texts
            .par_iter()
            .map(|t| {
                let t = t.as_ref();
                let is_blank = is_blank_text(t);
                let chars = if lengths {
                    t.chars().count().min(u32::MAX as usize) as u32
                } else {
                    0
                };
                let (fp, keys, size) = match &bands {
                    _ if is_blank => (0, Vec::new(), 0),
                    None => (hasher.fingerprint(t), Vec::new(), 0),
                    Some(b) => {
                        let sketch = b.sketch(hasher, t, width);
                        let size = sketch.shingles.min(u32::MAX as usize) as u32;
                        (sketch.fingerprint.unwrap_or(0), sketch.keys, size)
                    }
                };
                (fp, chars, is_blank, keys, size)
            })
            .collect();
        for (fp, chars, b, keys, size) in done {
            self.fingerprints.push(fp);
            if lengths {
                self.chars.push(chars);
            }
            // A text without shingles takes no part in the band search.
            self.blank.push(b || (bands.is_some() && keys.is_empty()));
            if let Some(bands) = &bands {
                self.set_sizes.push(size);
                self.band_keys.extend(
                    keys.iter()
                        .copied()
                        .chain(std::iter::repeat(0))
                        .take(bands.bands),
                );
            }
        }
    }

    /// Refuses more than [`MAX_RECORDS`] records.
    pub fn check_len(&self) -> Result<(), DedupError> {
        if self.len() > MAX_RECORDS {
            return Err(DedupError::TooManyRecords(self.len()));
        }
        Ok(())
    }

    /// Stage 2: the candidate pairs, given the keep order (which the band
    /// search uses to bound huge buckets). Frees the band keys.
    pub fn candidates(&mut self, order: &[u32]) -> Candidates {
        let n = self.len();
        let mut pairs = match &self.bands {
            Some(bands) => band_candidates(&self.band_keys, bands.bands, &self.blank, order),
            None => {
                let members: Vec<u32> =
                    (0..n as u32).filter(|&i| !self.blank[i as usize]).collect();
                within_distance(&self.fingerprints, &members, self.distance)
            }
        };
        self.band_keys = Vec::new();
        let found = pairs.len() as u64;
        // A pair whose shingle sets' sizes alone bound its Jaccard below
        // the threshold cannot pass the check: it is dropped before the
        // texts are read again.
        let sizes = std::mem::take(&mut self.set_sizes);
        if !sizes.is_empty() {
            pairs.retain(|&(a, b)| {
                !size_bound_below(sizes[a as usize], sizes[b as usize], self.threshold)
            });
        }
        Candidates {
            bounded_by_size: found - pairs.len() as u64,
            found,
            pairs,
        }
    }
}

/// The records in the order `keep` prefers them: input order for
/// [`Keep::First`]; longest first (ties by input order) for
/// [`Keep::Longest`], from the [`Sketches::chars`] counted for it.
pub fn keep_order(n: usize, keep: Keep, chars: &[u32]) -> Vec<u32> {
    let mut order: Vec<u32> = (0..n as u32).collect();
    if keep == Keep::Longest {
        order.sort_by(|&a, &b| chars[b as usize].cmp(&chars[a as usize]));
    }
    order
}

/// Every stage on texts in memory: the records are `texts`, in order.
pub fn dedup<S: AsRef<str> + Sync>(
    hasher: &Simhasher,
    texts: &[S],
    settings: &Settings,
    keep: Keep,
) -> Result<Outcome, DedupError> {
    settings.validate()?;
    if texts.len() > MAX_RECORDS {
        return Err(DedupError::TooManyRecords(texts.len()));
    }
    let mut sketches = settings.sketches(hasher, keep == Keep::Longest);
    for chunk in texts.chunks(SLICE_CHUNK) {
        sketches.push(chunk);
    }
    let n = sketches.len();
    let order = keep_order(n, keep, &sketches.chars);
    let candidates = sketches.candidates(&order);
    let checked = settings.check(hasher, texts, n, candidates.pairs)?;
    Ok(settings.keep(n, &checked, &order))
}

/// The pairs within distance `k` among `members` (record numbers).
fn within_distance(fps: &[u64], members: &[u32], k: u32) -> Vec<(u32, u32)> {
    if members.len() < 2 {
        return Vec::new();
    }
    let sub: Vec<u64> = members.iter().map(|&i| fps[i as usize]).collect();
    // `find_all` needs an unprobed plan.
    let plan = Plan::choose(sub.len() as u64, k, Budget::Unprobed)
        .or_else(|_| Plan::new(k + 1, k))
        .expect("k + 1 blocks make a plan for every k the settings allow");
    find_all(&sub, &plan)
        .into_iter()
        .map(|(a, b)| (members[a], members[b]))
        .collect()
}

/// The default candidates: pairs of records that share a MinHash band key
/// (`keys` holds `bands` keys per record, record by record), each pair once,
/// as (smaller, larger) record numbers, sorted. `order` is the keep order:
/// among the records sharing a key, each is paired with the first
/// [`BUCKET_WINDOW`] of them in that order (where the record it would be
/// kept against most often is) and the [`BUCKET_WINDOW`] just before it.
/// Blank records take no part. The bands are taken one after another and
/// each band's pairs merged into the pairs so far, so a cluster of copies,
/// which shares every band, is held once and one band's worth more.
fn band_candidates(keys: &[u32], bands: usize, blank: &[bool], order: &[u32]) -> Vec<(u32, u32)> {
    let n = blank.len();
    let mut rank = vec![0u32; n];
    for (r, &i) in order.iter().enumerate() {
        rank[i as usize] = r as u32;
    }
    let mut pairs: Vec<(u32, u32)> = Vec::new();
    for band in 0..bands {
        let mut entries: Vec<(u32, u32)> = (0..n)
            .filter(|&i| !blank[i])
            .map(|i| (keys[i * bands + band], rank[i]))
            .collect();
        entries.par_sort_unstable();
        let mut band_pairs = Vec::new();
        for run in entries.chunk_by(|a, b| a.0 == b.0) {
            for (j, &(_, later)) in run.iter().enumerate().skip(1) {
                let first = j.min(BUCKET_WINDOW);
                let recent = j.saturating_sub(BUCKET_WINDOW).max(first);
                let y = order[later as usize];
                for &(_, earlier) in run[..first].iter().chain(&run[recent..j]) {
                    let x = order[earlier as usize];
                    band_pairs.push((x.min(y), x.max(y)));
                }
            }
        }
        drop(entries);
        band_pairs.par_sort_unstable();
        band_pairs.dedup();
        pairs = merge_unique(&pairs, &band_pairs);
    }
    pairs
}

/// Whether sets of `a` and `b` elements have a Jaccard similarity below
/// `floor` whatever they hold: it is at most min / max of the sizes (the
/// check applies the same bound).
fn size_bound_below(a: u32, b: u32, floor: f64) -> bool {
    let (small, large) = (a.min(b), a.max(b));
    large > 0 && (small as f64 / large as f64) < floor
}

/// The sorted union of two sorted lists without repeats.
fn merge_unique(a: &[(u32, u32)], b: &[(u32, u32)]) -> Vec<(u32, u32)> {
    let mut out = Vec::with_capacity(a.len() + b.len());
    let (mut i, mut j) = (0, 0);
    while i < a.len() && j < b.len() {
        match a[i].cmp(&b[j]) {
            std::cmp::Ordering::Less => {
                out.push(a[i]);
                i += 1;
            }
            std::cmp::Ordering::Greater => {
                out.push(b[j]);
                j += 1;
            }
            std::cmp::Ordering::Equal => {
                out.push(a[i]);
                i += 1;
                j += 1;
            }
        }
    }
    out.extend_from_slice(&a[i..]);
    out.extend_from_slice(&b[j..]);
    out
}

/// Direct grouping: records visited in keep order; a record is dropped when a
/// confirmed pair links it to an earlier visited record that is kept, the most
/// similar such record (ties by keep order) becoming its `duplicate_of`. A
/// group is a kept record and the records dropped against it, members sorted
/// by input position, ordered by their first member.
fn direct(n: usize, similarity_of_pair: &[((u32, u32), f64)], order: &[u32]) -> Outcome {
    let mut rank = vec![0u32; n];
    for (r, &i) in order.iter().enumerate() {
        rank[i as usize] = r as u32;
    }
    // Each record's pairs, as (other record, similarity), in one array.
    let mut start = vec![0u32; n + 1];
    for &((a, b), _) in similarity_of_pair {
        start[a as usize + 1] += 1;
        start[b as usize + 1] += 1;
    }
    for r in 0..n {
        start[r + 1] += start[r];
    }
    let mut fill = start.clone();
    let mut adj = vec![(0u32, 0.0f64); start[n] as usize];
    for &((a, b), s) in similarity_of_pair {
        for (x, y) in [(a, b), (b, a)] {
            adj[fill[x as usize] as usize] = (y, s);
            fill[x as usize] += 1;
        }
    }
    drop(fill);
    let mut fate = vec![Fate::Kept; n];
    let mut similarities = Vec::new();
    for &i in order {
        let mut best: Option<(f64, u32)> = None;
        for &(j, s) in &adj[start[i as usize] as usize..start[i as usize + 1] as usize] {
            if rank[j as usize] >= rank[i as usize] || fate[j as usize] != Fate::Kept {
                continue;
            }
            let better = match best {
                None => true,
                Some((bs, bj)) => s > bs || (s == bs && rank[j as usize] < rank[bj as usize]),
            };
            if better {
                best = Some((s, j));
            }
        }
        if let Some((s, j)) = best {
            fate[i as usize] = Fate::Duplicate { of: j };
            similarities.push((i, s));
        }
    }
    similarities.sort_unstable_by_key(|&(r, _)| r);
    let mut members: HashMap<u32, Vec<u32>> = HashMap::new();
    for (i, f) in fate.iter().enumerate() {
        if let Fate::Duplicate { of } = *f {
            members.entry(of).or_insert_with(|| vec![of]).push(i as u32);
        }
    }
    let mut groups: Vec<(u32, Vec<u32>)> = members
        .into_iter()
        .map(|(k, mut g)| {
            g.sort_unstable();
            (k, g)
        })
        .collect();
    groups.sort_by_key(|(_, g)| g[0]);
    let kept_of_group = groups.iter().map(|(k, _)| *k).collect();
    let groups = groups.into_iter().map(|(_, g)| g).collect();
    Outcome {
        fate,
        groups,
        kept_of_group,
        similarities,
    }
}

/// Plain simhash grouping: the connected components of `pairs`, each
/// keeping its first member in keep `order`.
fn by_components(n: usize, pairs: &[(u32, u32)], order: &[u32]) -> Outcome {
    let mut rank = vec![0u32; n];
    for (r, &i) in order.iter().enumerate() {
        rank[i as usize] = r as u32;
    }
    let groups = components(n, pairs);
    let mut fate = vec![Fate::Kept; n];
    let mut kept_of_group: Vec<u32> = Vec::with_capacity(groups.len());
    for g in &groups {
        let kept = *g
            .iter()
            .min_by_key(|&&m| rank[m as usize])
            .expect("a component has members");
        for &m in g {
            if m != kept {
                fate[m as usize] = Fate::Duplicate { of: kept };
            }
        }
        kept_of_group.push(kept);
    }
    Outcome {
        fate,
        groups,
        kept_of_group,
        similarities: Vec::new(),
    }
}

/// Connected components of two or more members, each sorted, ordered by
/// their first member.
fn components(n: usize, pairs: &[(u32, u32)]) -> Vec<Vec<u32>> {
    let mut parent: Vec<u32> = (0..n as u32).collect();
    fn root(parent: &mut [u32], mut x: u32) -> u32 {
        while parent[x as usize] != x {
            parent[x as usize] = parent[parent[x as usize] as usize];
            x = parent[x as usize];
        }
        x
    }
    let mut in_pair = vec![false; n];
    for &(i, j) in pairs {
        in_pair[i as usize] = true;
        in_pair[j as usize] = true;
        let (a, b) = (root(&mut parent, i), root(&mut parent, j));
        if a != b {
            parent[a.max(b) as usize] = a.min(b);
        }
    }
    let mut by_root: HashMap<u32, Vec<u32>> = HashMap::new();
    for x in 0..n as u32 {
        if in_pair[x as usize] {
            let r = root(&mut parent, x);
            by_root.entry(r).or_default().push(x);
        }
    }
    let mut groups: Vec<Vec<u32>> = by_root.into_values().filter(|g| g.len() > 1).collect();
    groups.sort_unstable_by_key(|g| g[0]);
    groups
}

/// The exact check of candidate pairs in bounded memory.
///
/// Only fingerprints and record numbers are in memory after the first
/// stage; a pair's texts are read again to check it. Each check pass reads
/// the source once, in order, and keeps the shingle set of a record only
/// while it still has an unchecked pair with a later record. A record is
/// admitted when the shingle sets already held plus its own fit in the
/// budget (or when none is held), so the pass holds at most `budget` bytes
/// of shingle sets plus those of the chunk of records being worked on;
/// pairs whose earlier record was not admitted wait for the next pass.
/// Every pass checks all pairs of the first record it admits, so the
/// passes end.
struct Checker<'a> {
    hasher: &'a Simhasher,
    /// Shingle width in tokens.
    width: usize,
    /// Bytes of shingle sets a pass may hold.
    budget: usize,
    /// Number of records.
    n: usize,
}

impl Checker<'_> {
    /// The Jaccard similarity of the `width`-token shingle sets of each
    /// pair's two texts (pairs of record numbers below `n`, each as
    /// (smaller, larger)), and how many passes over `texts` it took. A pair
    /// whose Jaccard cannot reach `floor` (its sets' sizes alone bound it
    /// below) gets the size bound instead of the exact value, which is also
    /// below `floor`.
    fn jaccards<T: TextSource + ?Sized>(
        &self,
        texts: &T,
        pairs: &[(u32, u32)],
        floor: f64,
        what: &'static str,
    ) -> Result<(Vec<f64>, usize), T::Error> {
        let Checker {
            hasher,
            width,
            budget,
            n,
        } = *self;
        debug_assert!(
            pairs.iter().all(|&(a, b)| a <= b),
            "pairs come as (smaller, larger)"
        );
        let mut result = vec![f64::NAN; pairs.len()];
        for (p, &(i, j)) in pairs.iter().enumerate() {
            if i == j {
                result[p] = 1.0;
            }
        }
        let mut passes = 0;
        loop {
            let unresolved: Vec<u32> = (0..pairs.len() as u32)
                .filter(|&p| result[p as usize].is_nan())
                .collect();
            if unresolved.is_empty() {
                break;
            }
            passes += 1;
            // The unchecked pairs by their later record (compressed rows),
            // and how many each earlier record has.
            let mut later_start = vec![0u32; n + 1];
            let mut earlier_count = vec![0u32; n];
            for &p in &unresolved {
                let (i, j) = pairs[p as usize];
                later_start[j as usize + 1] += 1;
                earlier_count[i as usize] += 1;
            }
            for r in 0..n {
                later_start[r + 1] += later_start[r];
            }
            let mut fill = later_start.clone();
            let mut by_later = vec![0u32; unresolved.len()];
            for &p in &unresolved {
                let j = pairs[p as usize].1 as usize;
                by_later[fill[j] as usize] = p;
                fill[j] += 1;
            }
            drop(fill);

            let mut resident: HashMap<u32, (ShingleSet, u32)> = HashMap::new();
            let mut held = 0usize;
            let want = |g: u64| {
                let g = g as usize;
                g < n && (earlier_count[g] > 0 || later_start[g + 1] > later_start[g])
            };
            texts.scan(what, &want, &mut |chunk| {
                // The chunk's shingle sets in parallel; then, in record
                // order, each record's pairs with the resident earlier
                // records, and its admission.
                let sets: Vec<ShingleSet> = chunk
                    .par_iter()
                    .map(|(_, text)| ShingleSet::from_text(hasher, text, width))
                    .collect();
                for ((g, _), set) in chunk.iter().zip(sets) {
                    let r = *g as usize;
                    let list = &by_later[later_start[r] as usize..later_start[r + 1] as usize];
                    let check = |&p: &u32| {
                        let i = pairs[p as usize].0;
                        let (earlier, _) = resident.get(&i)?;
                        Some((p, similarity(&set, earlier, floor)))
                    };
                    let checked: Vec<(u32, f64)> = if list.len() > 64 {
                        list.par_iter().filter_map(check).collect()
                    } else {
                        list.iter().filter_map(check).collect()
                    };
                    for (p, j) in checked {
                        result[p as usize] = j;
                        let i = pairs[p as usize].0;
                        if let Some((earlier, remaining)) = resident.get_mut(&i) {
                            *remaining -= 1;
                            if *remaining == 0 {
                                held -= bytes(earlier);
                                resident.remove(&i);
                            }
                        }
                    }
                    let n_later = earlier_count[r];
                    if n_later > 0 {
                        let size = bytes(&set);
                        if resident.is_empty() || held + size <= budget {
                            held += size;
                            resident.insert(r as u32, (set, n_later));
                        }
                    }
                }
            })?;
        }
        Ok((result, passes))
    }
}

/// The Jaccard similarity of `a` and `b`, or, when it is below `floor` (and
/// `floor` is above 0), a bound of it that is below `floor` too: the bound
/// their sizes alone give, or the one the merge of their sorted hashes
/// reaches once too few of them are left to match (the merge stops there).
/// A value at or above `floor` is always the exact similarity.
fn similarity(a: &ShingleSet, b: &ShingleSet, floor: f64) -> f64 {
    let (small, large) = (a.len().min(b.len()), a.len().max(b.len()));
    if floor <= 0.0 || large == 0 {
        return a.jaccard(b);
    }
    let bound = small as f64 / large as f64;
    if bound < floor {
        return bound;
    }
    // The Jaccard of `common` shared hashes, as `ShingleSet::jaccard`
    // computes it: it grows with `common`, so a bound of `common` gives a
    // bound of the similarity, in floating point too.
    let total = a.len() + b.len();
    let of = |common: usize| common as f64 / (total - common) as f64;
    let (a, b) = (a.hashes(), b.hashes());
    let (mut i, mut j, mut common) = (0, 0, 0usize);
    while i < a.len() && j < b.len() {
        match a[i].cmp(&b[j]) {
            std::cmp::Ordering::Equal => {
                common += 1;
                i += 1;
                j += 1;
                continue;
            }
            std::cmp::Ordering::Less => i += 1,
            std::cmp::Ordering::Greater => j += 1,
        }
        // A hash matched nothing: at most this many can still be shared.
        let most = common + (a.len() - i).min(b.len() - j);
        let at_most = of(most);
        if at_most < floor {
            return at_most;
        }
    }
    of(common)
}

/// The bytes a shingle set counts for against the check's budget.
fn bytes(set: &ShingleSet) -> usize {
    set.len() * 8 + 64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn band_candidates_pair_shared_keys_once_and_bound_huge_buckets() {
        // Two bands; records 0, 2 and 4 share band 0's key, 1 and 4 band 1's,
        // 3 is blank and shares everything.
        let keys = [7, 1, 8, 2, 7, 3, 7, 1, 7, 1];
        let blank = [false, false, false, true, false];
        let order: Vec<u32> = (0..5).collect();
        assert_eq!(
            band_candidates(&keys, 2, &blank, &order),
            vec![(0, 2), (0, 4), (2, 4)]
        );
        // One key shared by many records: each is paired with the first
        // BUCKET_WINDOW in keep order and the BUCKET_WINDOW before it.
        let n = 1000usize;
        let keys = vec![5u32; n];
        let blank = vec![false; n];
        let order: Vec<u32> = (0..n as u32).rev().collect();
        let pairs = band_candidates(&keys, 1, &blank, &order);
        let w = BUCKET_WINDOW;
        let expected: usize = (1..n).map(|j| j.min(w) + (j - j.min(w)).min(w)).sum();
        assert_eq!(pairs.len(), expected);
        assert!(pairs.len() <= 2 * w * n);
        // The first record in keep order (the last by number) meets everyone.
        let last = (n - 1) as u32;
        assert_eq!(pairs.iter().filter(|p| p.1 == last).count(), n - 1);
        assert!(pairs.windows(2).all(|p| p[0] < p[1]));
        assert!(pairs.iter().all(|&(a, b)| a < b));
        // Band 0: one key shared by all; band 1: records 100 and 500 alone
        // share a key. Their pair lies outside band 0's windows and must
        // still come from band 1.
        let mut keys = vec![0u32; 2 * n];
        for i in 0..n {
            keys[2 * i] = 5;
            keys[2 * i + 1] = 10_000 + i as u32;
        }
        keys[2 * 500 + 1] = keys[2 * 100 + 1];
        let order: Vec<u32> = (0..n as u32).collect();
        let pairs = band_candidates(&keys, 2, &blank, &order);
        assert!(pairs.binary_search(&(100, 500)).is_ok());
        assert!(pairs.binary_search(&(101, 500)).is_err());
        assert_eq!(pairs.len(), expected + 1);
        assert_eq!(
            merge_unique(&[(1, 2), (3, 4)], &[(0, 9), (3, 4), (5, 0)]),
            vec![(0, 9), (1, 2), (3, 4), (5, 0)]
        );
    }

    #[test]
    fn similarity_is_exact_at_or_above_the_floor_and_a_bound_below_it() {
        // Sets of 0 to 199 shingles of a text of 300 words, overlapping by
        // chance.
        let hasher = Simhasher::default();
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut sets = Vec::new();
        for _ in 0..300 {
            let n = (next() % 200) as usize;
            let base = next() % 100;
            let text: Vec<String> = (0..n as u64 + 4)
                .map(|t| format!("w{}", (base + t) % 300))
                .collect();
            let text = if next() % 7 == 0 {
                String::new()
            } else {
                text.join(" ")
            };
            sets.push(ShingleSet::from_text(&hasher, &text, 5));
        }
        let mut below = 0;
        for a in &sets {
            for b in sets.iter().take(60) {
                for floor in [0.0, 0.3, 0.5, 0.8, 0.95, 1.0] {
                    let exact = a.jaccard(b);
                    let got = similarity(a, b, floor);
                    if exact >= floor {
                        assert_eq!(got.to_bits(), exact.to_bits());
                    } else {
                        assert!(got < floor && got >= exact, "{got} {exact} {floor}");
                        below += 1;
                    }
                }
            }
        }
        assert!(below > 1000);
    }

    #[test]
    fn components_join_transitively() {
        let groups = components(6, &[(0, 3), (3, 5), (1, 2)]);
        assert_eq!(groups, vec![vec![0, 3, 5], vec![1, 2]]);
        assert!(components(3, &[]).is_empty());
    }

    #[test]
    fn components_keep_their_first_member_in_keep_order() {
        let order = [5, 4, 3, 2, 1, 0];
        let outcome = by_components(6, &[(0, 3), (3, 5), (1, 2)], &order);
        assert_eq!(outcome.kept_of_group, vec![5, 2]);
        assert_eq!(outcome.fate[0], Fate::Duplicate { of: 5 });
        assert_eq!(outcome.similarity(0), None);
    }
}
