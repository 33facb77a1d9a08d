//! Group-level quality of deduplication on real text: of the records a
//! dedup drops, the share whose kept representative is a true near-duplicate
//! (precision), and the share of true near-duplicate pairs that end in one
//! group (recall), for plain simhash at several k and for candidates at k
//! checked by an exact Jaccard rule.
//!
//! ```sh
//! cargo run --release --example dedup_quality -- [OPTIONS] PATH...
//! ```
//!
//! PATHs are read as `examples/quality.rs` reads them (the same corpus, see
//! docs/QUALITY.md). Options:
//!
//! - `--cap N`: at most N files from each directory argument (default 1500);
//! - `--inject N`: edited copies are added for N documents of the corpus
//!   (default 300; 0 for none), see [`inject`];
//! - `--kmax K`: largest candidate k (default 16);
//! - `--shingle N`, `--binary`: the fingerprints' word shingle width and
//!   binary weighting (default: single words, term frequency), as the CLI's
//!   `--shingle` and `--weighting binary`;
//! - `--tool BIN`: also run `BIN dedup` end to end on the sets written as
//!   JSONL, once for each `--tool-args "ARGS"` (repeatable; default: no
//!   extra arguments), and score the records it drops (`--emit drop`);
//! - `--out FILE`: the results in Markdown (default: standard output).
//!
//! Ground truth, as in docs/QUALITY.md: two records are near-duplicates when
//! the Jaccard similarity of their sets of word 5-shingles is at least T
//! (T = 0.5 and 0.8), computed exactly for all pairs.
//!
//! Which record is kept: the first in record order (the tool's default
//! rule). Two ways of grouping the checked pairs are scored:
//!
//! - `components`: connected components of the pairs (union-find); every
//!   member but the first is dropped, with the first as its representative;
//! - `direct`: records in order; a record is dropped when a pair links it to
//!   an earlier record that is kept, and that record (the earliest) is its
//!   representative. A dropped record never represents another, so every
//!   drop is backed by one checked pair with its representative.
//!
//! Nothing here is run by `cargo test`.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::io::{BufRead, Write as _};
use std::path::PathBuf;
use std::time::Instant;

#[path = "common/textfiles.rs"]
mod textfiles;

use simhashdb::batch::find_all;
use simhashdb::fingerprint::fmix64;
use simhashdb::hamming;
use simhashdb::plan::{Budget, Plan};
use simhashdb::recheck::ShingleSet;
use simhashdb::{Simhasher, Weighting};
use textfiles::{load, similar_pairs};

const TRUTH: [f64; 2] = [0.8, 0.5];
const KS: [u32; 9] = [0, 1, 2, 3, 4, 5, 6, 8, 10];
const RULE_KS: [u32; 7] = [3, 4, 5, 6, 8, 10, 12];
/// Verification rules: (shingle width, threshold).
const RULES: [(usize, f64); 12] = [
    (2, 0.5),
    (2, 0.6),
    (2, 0.7),
    (2, 0.8),
    (3, 0.5),
    (3, 0.6),
    (3, 0.7),
    (3, 0.8),
    (5, 0.5),
    (5, 0.6),
    (5, 0.7),
    (5, 0.8),
];

struct Args {
    paths: Vec<PathBuf>,
    cap: usize,
    inject: usize,
    kmax: u32,
    shingle: usize,
    binary: bool,
    tool: Option<PathBuf>,
    tool_args: Vec<String>,
    out: Option<PathBuf>,
}

fn die(msg: &str) -> ! {
    eprintln!("dedup_quality: {msg}");
    std::process::exit(2)
}

fn parse_args() -> Args {
    let mut args = Args {
        paths: Vec::new(),
        cap: 1500,
        inject: 300,
        kmax: 16,
        shingle: 1,
        binary: false,
        tool: None,
        tool_args: Vec::new(),
        out: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let mut value = || {
            it.next()
                .unwrap_or_else(|| die(&format!("{a} needs a value")))
        };
        match a.as_str() {
            "--cap" => args.cap = value().parse().unwrap_or_else(|_| die("--cap N")),
            "--inject" => args.inject = value().parse().unwrap_or_else(|_| die("--inject N")),
            "--kmax" => args.kmax = value().parse().unwrap_or_else(|_| die("--kmax K")),
            "--shingle" => {
                args.shingle = value()
                    .parse()
                    .ok()
                    .filter(|&w| w >= 1)
                    .unwrap_or_else(|| die("--shingle N (N >= 1)"))
            }
            "--binary" => args.binary = true,
            "--tool" => args.tool = Some(PathBuf::from(value())),
            "--tool-args" => args.tool_args.push(value()),
            "--out" => args.out = Some(PathBuf::from(value())),
            _ if a.starts_with("--") => die(&format!("unknown option {a}")),
            _ => args.paths.push(PathBuf::from(a)),
        }
    }
    if args.paths.is_empty() {
        die(
            "usage: dedup_quality [--cap N] [--inject N] [--kmax K] [--shingle N] [--binary] [--tool BIN [--tool-args ARGS]..] [--out FILE] PATH..",
        );
    }
    if args.tool.is_some() && args.tool_args.is_empty() {
        args.tool_args.push(String::new());
    }
    args
}

// ---------------------------------------------------------------- injected edits

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        fmix64(self.0)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

#[derive(Clone, Copy, Debug)]
enum Edit {
    Substitute(u32),
    Insert(u32),
    Delete(u32),
    Move,
    Truncate(u32),
}

impl Edit {
    const ALL: [Edit; 10] = [
        Edit::Substitute(1),
        Edit::Substitute(2),
        Edit::Substitute(5),
        Edit::Substitute(10),
        Edit::Insert(5),
        Edit::Delete(5),
        Edit::Move,
        Edit::Truncate(95),
        Edit::Truncate(80),
        Edit::Truncate(50),
    ];
}

/// An edited copy of `text`: words (runs of non-space) substituted, inserted
/// or deleted at random positions (at least one), a paragraph (or a quarter
/// of the words) moved, or the text cut to a share of its words.
fn apply(text: &str, edit: Edit, vocab: &[&str], rng: &mut Rng) -> String {
    if let Edit::Move = edit {
        let paras: Vec<&str> = text
            .split("\n\n")
            .filter(|p| !p.trim().is_empty())
            .collect();
        if paras.len() >= 3 {
            let mut paras = paras;
            let from = rng.below(paras.len());
            let p = paras.remove(from);
            let mut to = rng.below(paras.len() + 1);
            if to == from {
                to = (to + 1) % (paras.len() + 1);
            }
            paras.insert(to, p);
            return paras.join("\n\n");
        }
    }
    let mut words: Vec<&str> = text.split_whitespace().collect();
    let n = words.len();
    let count = |pct: u32| ((n as u64 * pct as u64).div_ceil(100) as usize).max(1);
    match edit {
        Edit::Substitute(p) => {
            for _ in 0..count(p) {
                let at = rng.below(words.len());
                words[at] = vocab[rng.below(vocab.len())];
            }
        }
        Edit::Insert(p) => {
            for _ in 0..count(p) {
                let at = rng.below(words.len() + 1);
                words.insert(at, vocab[rng.below(vocab.len())]);
            }
        }
        Edit::Delete(p) => {
            for _ in 0..count(p).min(n.saturating_sub(1)) {
                let at = rng.below(words.len());
                words.remove(at);
            }
        }
        Edit::Move => {
            let len = (n / 4).max(1);
            let from = rng.below(n - len + 1);
            let block: Vec<&str> = words.drain(from..from + len).collect();
            let to = rng.below(words.len() + 1);
            words.splice(to..to, block);
        }
        Edit::Truncate(p) => words.truncate((n * p as usize / 100).max(1)),
    }
    words.join(" ")
}

/// A record of a set: its text and, for an injected copy, the record it
/// was made from and how.
struct Record {
    text: String,
    /// For a document of the corpus, its position there.
    corpus: Option<usize>,
    /// For an injected copy, the document (position in the corpus) and the edit.
    origin: Option<(usize, Edit)>,
}

/// The texts plus, for `n` of them (a deterministic sample of those with
/// `min_words` words or more), one copy per edit of [`Edit::ALL`];
/// the records are then shuffled so that a copy comes before its original
/// about half the time.
fn inject(texts: &[String], n: usize, min_words: usize, seed: u64) -> Vec<Record> {
    let mut rng = Rng(seed);
    let vocab: Vec<&str> = texts
        .iter()
        .flat_map(|t| t.split_whitespace())
        .step_by(97)
        .collect();
    let mut eligible: Vec<usize> = (0..texts.len())
        .filter(|&i| texts[i].split_whitespace().count() >= min_words)
        .collect();
    eligible.sort_by_key(|&i| fmix64(i as u64 ^ seed));
    eligible.truncate(n);
    let mut records: Vec<Record> = texts
        .iter()
        .enumerate()
        .map(|(i, t)| Record {
            text: t.clone(),
            corpus: Some(i),
            origin: None,
        })
        .collect();
    for &i in &eligible {
        for e in Edit::ALL {
            records.push(Record {
                text: apply(&texts[i], e, &vocab, &mut rng),
                corpus: None,
                origin: Some((i, e)),
            });
        }
    }
    // Fisher-Yates.
    for i in (1..records.len()).rev() {
        let j = rng.below(i + 1);
        records.swap(i, j);
    }
    records
}

// ---------------------------------------------------------------- grouping

struct UnionFind(Vec<usize>);

impl UnionFind {
    fn new(n: usize) -> Self {
        UnionFind((0..n).collect())
    }
    fn find(&mut self, mut x: usize) -> usize {
        while self.0[x] != x {
            self.0[x] = self.0[self.0[x]];
            x = self.0[x];
        }
        x
    }
    /// The smaller root wins, so the root is the component's first record.
    fn union(&mut self, a: usize, b: usize) {
        let (ra, rb) = (self.find(a), self.find(b));
        if ra != rb {
            let (lo, hi) = (ra.min(rb), ra.max(rb));
            self.0[hi] = lo;
        }
    }
}

/// Each record's representative (itself when kept), by connected components.
fn components(n: usize, pairs: &[(usize, usize)]) -> Vec<usize> {
    let mut uf = UnionFind::new(n);
    for &(a, b) in pairs {
        uf.union(a, b);
    }
    (0..n).map(|i| uf.find(i)).collect()
}

/// Each record's representative by the `direct` rule: the earliest kept
/// record it is paired with.
fn direct(n: usize, pairs: &[(usize, usize)]) -> Vec<usize> {
    let mut earlier: Vec<Vec<usize>> = vec![Vec::new(); n];
    for &(a, b) in pairs {
        let (lo, hi) = (a.min(b), a.max(b));
        earlier[hi].push(lo);
    }
    let mut rep: Vec<usize> = (0..n).collect();
    for i in 0..n {
        earlier[i].sort_unstable();
        if let Some(&k) = earlier[i].iter().find(|&&j| rep[j] == j) {
            rep[i] = k;
        }
    }
    rep
}

// ---------------------------------------------------------------- scoring

#[derive(Clone, Copy, Default)]
struct Score {
    dropped: usize,
    true_drops: usize,
    true_pairs: usize,
    /// True pairs whose two records end with the same representative.
    merged: usize,
    /// True pairs of which at most one record is kept.
    removed: usize,
}

impl Score {
    fn precision(&self) -> Option<f64> {
        (self.dropped > 0).then(|| self.true_drops as f64 / self.dropped as f64)
    }
    fn recall(&self) -> Option<f64> {
        (self.true_pairs > 0).then(|| self.merged as f64 / self.true_pairs as f64)
    }
    fn removed(&self) -> Option<f64> {
        (self.true_pairs > 0).then(|| self.removed as f64 / self.true_pairs as f64)
    }
    /// Precision / recall (pairs merged) / pairs with at most one kept.
    fn cell(&self) -> String {
        format!(
            "{} / {} / {}",
            fmt3(self.precision()),
            fmt3(self.recall()),
            fmt3(self.removed())
        )
    }
    fn meets_goal(&self) -> bool {
        self.precision().unwrap_or(0.0) >= 0.99 && self.recall().unwrap_or(0.0) >= 0.98
    }
}

fn fmt3(x: Option<f64>) -> String {
    x.map_or("–".to_owned(), |v| format!("{v:.3}"))
}

/// A candidate pair within the largest k, with its distance and the
/// Jaccard similarity of its word 2-, 3- and 5-shingles.
struct Candidate {
    a: usize,
    b: usize,
    distance: u32,
    jaccard: [f64; 3],
}

fn width_slot(w: usize) -> usize {
    match w {
        2 => 0,
        3 => 1,
        5 => 2,
        _ => unreachable!("widths are 2, 3 and 5"),
    }
}

struct Set {
    name: String,
    records: Vec<Record>,
    fps: Vec<u64>,
    /// Word 5-shingles (the truth's).
    shingles5: Vec<ShingleSet>,
    /// Pairs with 5-shingle Jaccard >= 0.5, and that Jaccard.
    truth: HashMap<(u32, u32), f64>,
    candidates: Vec<Candidate>,
}

impl Set {
    fn new(name: &str, records: Vec<Record>, hasher: &Simhasher, kmax: u32) -> Set {
        let tokens: Vec<Vec<String>> = records.iter().map(|r| hasher.tokens(&r.text)).collect();
        let by_width: Vec<Vec<ShingleSet>> = [2, 3, 5]
            .iter()
            .map(|&w| {
                tokens
                    .iter()
                    .map(|t| ShingleSet::from_tokens(t, w))
                    .collect()
            })
            .collect();
        let fps: Vec<u64> = records
            .iter()
            .map(|r| hasher.fingerprint(&r.text))
            .collect();
        let truth = similar_pairs(&by_width[2], 0.5);
        let plan = Plan::choose(fps.len() as u64, kmax, Budget::Unprobed).expect("plan");
        let mut candidates: Vec<Candidate> = find_all(&fps, &plan)
            .into_iter()
            .map(|(a, b)| Candidate {
                a,
                b,
                distance: hamming(fps[a], fps[b]),
                jaccard: [0, 1, 2].map(|s| by_width[s][a].jaccard(&by_width[s][b])),
            })
            .collect();
        candidates.sort_by_key(|c| (c.distance, c.a, c.b));
        let shingles5 = by_width.into_iter().nth(2).expect("three widths");
        Set {
            name: name.to_owned(),
            records,
            fps,
            shingles5,
            truth,
            candidates,
        }
    }

    fn len(&self) -> usize {
        self.records.len()
    }

    /// The candidate pairs within `k` that pass `rule` (width, threshold).
    fn pairs(
        &self,
        k: &dyn Fn(usize, usize) -> u32,
        rule: Option<(usize, f64)>,
    ) -> Vec<(usize, usize)> {
        self.candidates
            .iter()
            .filter(|c| c.distance <= k(c.a, c.b))
            .filter(|c| rule.is_none_or(|(w, t)| c.jaccard[width_slot(w)] >= t))
            .map(|c| (c.a, c.b))
            .collect()
    }

    /// Scores the representatives `rep` against the truth at `t`, counting
    /// the true pairs whose shorter text's length (bytes) is in `lens`.
    fn score_in(&self, rep: &[usize], t: f64, lens: std::ops::Range<usize>) -> Score {
        let mut s = Score::default();
        for (i, &r) in rep.iter().enumerate() {
            if r != i {
                s.dropped += 1;
                if self.shingles5[i].jaccard(&self.shingles5[r]) >= t {
                    s.true_drops += 1;
                }
            }
        }
        for (&(a, b), &j) in &self.truth {
            let (a, b) = (a as usize, b as usize);
            let len = self.records[a].text.len().min(self.records[b].text.len());
            if j >= t && lens.contains(&len) {
                s.true_pairs += 1;
                if rep[a] == rep[b] {
                    s.merged += 1;
                }
                if rep[a] != a || rep[b] != b {
                    s.removed += 1;
                }
            }
        }
        s
    }

    fn score(&self, rep: &[usize], t: f64) -> Score {
        self.score_in(rep, t, 0..usize::MAX)
    }

    /// Share of the true pairs at `t` within distance `k`, by length bucket.
    fn candidate_recall(&self, t: f64, k: u32, lens: std::ops::Range<usize>) -> (usize, usize) {
        let (mut found, mut all) = (0, 0);
        for (&(a, b), &j) in &self.truth {
            let (a, b) = (a as usize, b as usize);
            let len = self.records[a].text.len().min(self.records[b].text.len());
            if j >= t && lens.contains(&len) {
                all += 1;
                if hamming(self.fps[a], self.fps[b]) <= k {
                    found += 1;
                }
            }
        }
        (found, all)
    }
}

// ---------------------------------------------------------------- the tool

/// Runs `tool dedup` on the set written as JSONL and returns each record's
/// representative from its `--emit drop` output, with the wall time.
fn run_tool(tool: &PathBuf, extra: &str, set: &Set, dir: &std::path::Path) -> (Vec<usize>, f64) {
    let input = dir.join(format!("{}.jsonl", set.name));
    {
        let mut f = std::io::BufWriter::new(std::fs::File::create(&input).expect("create input"));
        for (i, r) in set.records.iter().enumerate() {
            let line = serde_json::json!({"id": i, "text": r.text});
            writeln!(f, "{line}").expect("write input");
        }
        f.flush().expect("write input");
    }
    let output = dir.join(format!("{}-drop.jsonl", set.name));
    let _ = std::fs::remove_file(&output);
    let mut cmd = std::process::Command::new(tool);
    cmd.arg("dedup")
        .arg(&input)
        .args(["--id-field", "id", "--emit", "drop", "--output"])
        .arg(&output)
        .args(extra.split_whitespace());
    let started = Instant::now();
    let status = cmd
        .status()
        .unwrap_or_else(|e| die(&format!("cannot run {}: {e}", tool.display())));
    let secs = started.elapsed().as_secs_f64();
    if !status.success() {
        die(&format!("{cmd:?} failed: {status}"));
    }
    let mut rep: Vec<usize> = (0..set.records.len()).collect();
    let f = std::fs::File::open(&output).expect("open drop output");
    for (n, line) in std::io::BufReader::new(f).lines().enumerate() {
        let line = line.expect("read drop output");
        let v: serde_json::Value = serde_json::from_str(&line)
            .unwrap_or_else(|e| die(&format!("drop output line {}: {e}", n + 1)));
        let id = |key: &str| -> usize {
            v[key]
                .as_u64()
                .unwrap_or_else(|| die(&format!("drop output line {}: no integer {key}", n + 1)))
                as usize
        };
        rep[id("id")] = id("duplicate_of");
    }
    // A representative that was itself dropped: follow it to the kept one.
    for i in 0..rep.len() {
        let mut r = rep[i];
        let mut hops = 0;
        while rep[r] != r && hops < rep.len() {
            r = rep[r];
            hops += 1;
        }
        rep[i] = r;
    }
    (rep, secs)
}

// ---------------------------------------------------------------- report

/// Lengths (bytes of the shorter text of a pair) for the recall by length
/// and the length-dependent k.
const BUCKETS: [std::ops::Range<usize>; 5] = [
    0..200,
    200..1_000,
    1_000..5_000,
    5_000..20_000,
    20_000..usize::MAX,
];

fn bucket_label(b: &std::ops::Range<usize>) -> String {
    if b.end == usize::MAX {
        format!(">= {}", b.start)
    } else {
        format!("{}–{}", b.start, b.end)
    }
}

fn bucket_of(len: usize) -> usize {
    BUCKETS
        .iter()
        .position(|b| b.contains(&len))
        .expect("buckets cover all lengths")
}

/// Paragraphs (blank-line separated, 100 to 2,000 bytes, mostly letters) of
/// the corpus, whitespace collapsed, distinct, a deterministic sample of `n`.
fn paragraphs(texts: &[String], n: usize) -> Vec<String> {
    let mut seen = std::collections::HashSet::new();
    let mut out: Vec<String> = texts
        .iter()
        .flat_map(|t| t.split("\n\n"))
        .map(|p| p.split_whitespace().collect::<Vec<_>>().join(" "))
        .filter(|p| {
            (100..2_000).contains(&p.len())
                && p.chars().filter(|c| c.is_alphabetic()).count() * 10 >= p.len() * 6
        })
        .filter(|p| seen.insert(p.clone()))
        .collect();
    out.sort_by_key(|p| fmix64(simhashdb::fingerprint::fnv1a64(p.as_bytes())));
    out.truncate(n);
    out
}

fn main() {
    let args = parse_args();
    let started = Instant::now();
    let (raw, notes) = load(&args.paths, args.cap, 200_000);
    let loaded = raw.len();
    let mut seen = std::collections::HashSet::new();
    let texts: Vec<String> = raw
        .into_iter()
        .map(|d| d.text)
        .filter(|t| seen.insert(t.clone()))
        .collect();
    let hasher = Simhasher::builder()
        .shingle(args.shingle)
        .weighting(if args.binary {
            Weighting::Binary
        } else {
            Weighting::TermFrequency
        })
        .build()
        .unwrap_or_else(|e| die(&e.to_string()));
    let kmax = args.kmax;
    let originals = |texts: &[String]| -> Vec<Record> {
        texts
            .iter()
            .enumerate()
            .map(|(i, t)| Record {
                text: t.clone(),
                corpus: Some(i),
                origin: None,
            })
            .collect()
    };
    let paras = paragraphs(&texts, 4_000);
    let mut sets = vec![Set::new("corpus", originals(&texts), &hasher, kmax)];
    if args.inject > 0 {
        sets.push(Set::new(
            "corpus+edits",
            inject(&texts, args.inject, 50, 17),
            &hasher,
            kmax,
        ));
        sets.push(Set::new(
            "paragraphs+edits",
            inject(&paras, args.inject, 15, 29),
            &hasher,
            kmax,
        ));
    }
    eprintln!(
        "sets, truth and candidates in {:.1} s",
        started.elapsed().as_secs_f64()
    );

    let mut md = String::new();
    let cmdline: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a.starts_with("--") || !std::path::Path::new(a).is_file())
        .collect();
    let named = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--") && std::path::Path::new(a).is_file())
        .count();
    writeln!(
        md,
        "# Dedup quality results\n\nGenerated by `cargo run --release --example dedup_quality -- {}{}`.\n",
        cmdline.join(" "),
        if named > 0 {
            format!(" [{named} files]")
        } else {
            String::new()
        }
    )
    .unwrap();
    writeln!(
        md,
        "Cells are precision / recall / removed: precision = share of the dropped records whose \
         representative has word 5-shingle Jaccard (J5) >= T with them; recall = share of the \
         pairs with J5 >= T whose two records end with the same representative; removed = share \
         of those pairs of which at most one record is kept.\n"
    )
    .unwrap();
    for n in &notes {
        writeln!(md, "- {n}").unwrap();
    }
    writeln!(
        md,
        "- {loaded} documents read, {} distinct; {} distinct paragraphs of 100–2,000 bytes sampled from them",
        texts.len(),
        paras.len()
    )
    .unwrap();
    for set in &sets {
        let bytes: usize = set.records.iter().map(|r| r.text.len()).sum();
        let injected = set.records.iter().filter(|r| r.origin.is_some()).count();
        write!(
            md,
            "- set `{}`: {} records ({} injected copies), {:.1} MB, {} candidate pairs within {kmax} bits;",
            set.name,
            set.len(),
            injected,
            bytes as f64 / 1e6,
            set.candidates.len()
        )
        .unwrap();
        for t in TRUTH {
            write!(
                md,
                " {} pairs at J5 >= {t};",
                set.truth.values().filter(|&&j| j >= t).count()
            )
            .unwrap();
        }
        writeln!(md).unwrap();
    }
    writeln!(md).unwrap();

    // ---- Candidate recall by length, pooled over the sets: the k per length.
    writeln!(
        md,
        "## Candidates: share of the true pairs within k, by the length of the shorter text\n\n\
         All sets pooled; found / true pairs.\n"
    )
    .unwrap();
    let mut k_by_len: [u32; BUCKETS.len()] = [kmax; BUCKETS.len()];
    for t in TRUTH {
        writeln!(md, "J5 >= {t}:\n").unwrap();
        write!(md, "| k |").unwrap();
        for b in &BUCKETS {
            write!(md, " {} |", bucket_label(b)).unwrap();
        }
        writeln!(md, " all |").unwrap();
        writeln!(md, "|---|{}---|", "---|".repeat(BUCKETS.len())).unwrap();
        let mut fixed = [false; BUCKETS.len()];
        for k in 0..=kmax {
            write!(md, "| {k} |").unwrap();
            let (mut f_all, mut a_all) = (0, 0);
            for (bi, b) in BUCKETS.iter().enumerate() {
                let (mut f, mut a) = (0, 0);
                for set in &sets {
                    let (ff, aa) = set.candidate_recall(t, k, b.clone());
                    f += ff;
                    a += aa;
                }
                f_all += f;
                a_all += a;
                let share = f as f64 / a.max(1) as f64;
                write!(md, " {share:.3} ({f}/{a}) |").unwrap();
                if t == TRUTH[0] && !fixed[bi] && (a == 0 || share >= 0.995) {
                    fixed[bi] = true;
                    k_by_len[bi] = k;
                }
            }
            writeln!(md, " {:.3} |", f_all as f64 / a_all.max(1) as f64).unwrap();
        }
        writeln!(md).unwrap();
    }
    // A shorter text never gets a smaller k than a longer one.
    for i in (0..BUCKETS.len() - 1).rev() {
        k_by_len[i] = k_by_len[i].max(k_by_len[i + 1]);
    }
    let policy: Vec<String> = BUCKETS
        .iter()
        .zip(k_by_len)
        .map(|(b, k)| format!("{}: {k}", bucket_label(b)))
        .collect();
    writeln!(
        md,
        "Smallest k with 99.5 % of the J5 >= 0.8 pairs within it, per length (never smaller than \
         for a longer text): **{}** (`by length` below).\n",
        policy.join(", ")
    )
    .unwrap();

    type KFn<'a> = Box<dyn Fn(usize, usize) -> u32 + 'a>;
    let mut best: Vec<String> = Vec::new();
    for set in &sets {
        let n = set.len();
        let mut ks: Vec<(String, KFn)> = Vec::new();
        for k in RULE_KS.into_iter().filter(|&k| k <= kmax) {
            ks.push((format!("k={k}"), Box::new(move |_, _| k)));
        }
        let lens: Vec<usize> = set.records.iter().map(|r| r.text.len()).collect();
        ks.push((
            "by length".to_owned(),
            Box::new(move |a, b| k_by_len[bucket_of(lens[a].min(lens[b]))]),
        ));

        writeln!(md, "## Set `{}`\n", set.name).unwrap();
        writeln!(
            md,
            "Plain simhash (every pair within k merged, connected components, the first kept):\n"
        )
        .unwrap();
        writeln!(md, "| k | T = 0.8 | T = 0.5 | dropped | pairs within k |").unwrap();
        writeln!(md, "|---|---|---|---|---|").unwrap();
        for k in KS {
            let pairs = set.pairs(&|_, _| k, None);
            let rep = components(n, &pairs);
            let s8 = set.score(&rep, 0.8);
            writeln!(
                md,
                "| {k} | {} | {} | {} | {} |",
                s8.cell(),
                set.score(&rep, 0.5).cell(),
                s8.dropped,
                pairs.len()
            )
            .unwrap();
        }
        writeln!(md).unwrap();

        for (grouping, f) in [
            (
                "direct",
                direct as fn(usize, &[(usize, usize)]) -> Vec<usize>,
            ),
            ("components", components),
        ] {
            for t in TRUTH {
                writeln!(
                    md,
                    "Candidates within k checked by the rule, grouped `{grouping}`, truth T = {t}:\n"
                )
                .unwrap();
                write!(md, "| rule |").unwrap();
                for (name, _) in &ks {
                    write!(md, " {name} |").unwrap();
                }
                writeln!(md).unwrap();
                writeln!(md, "|---|{}", "---|".repeat(ks.len())).unwrap();
                for (w, th) in RULES {
                    write!(md, "| jaccard:{th}:{w} |").unwrap();
                    for (name, k) in &ks {
                        let rep = f(n, &set.pairs(k.as_ref(), Some((w, th))));
                        let s = set.score(&rep, t);
                        if s.meets_goal() {
                            best.push(format!(
                                "`{}`, T = {t}, `{grouping}`, {name}, jaccard:{th}:{w}: {}",
                                set.name,
                                s.cell()
                            ));
                        }
                        write!(md, " {} |", s.cell()).unwrap();
                    }
                    writeln!(md).unwrap();
                }
                writeln!(md).unwrap();
            }
        }

        // Per injected edit: copies that end with their original.
        if set.records.iter().any(|r| r.origin.is_some()) {
            let index_of: HashMap<usize, usize> = set
                .records
                .iter()
                .enumerate()
                .filter_map(|(i, r)| r.corpus.map(|c| (c, i)))
                .collect();
            writeln!(
                md,
                "Injected copies that end with the same representative as their original, \
                 candidates checked by jaccard:0.8:5 and grouped `direct` (median J5 of copy and \
                 original in brackets):\n"
            )
            .unwrap();
            let mut header = String::from("| k |");
            let mut per_edit: Vec<Vec<(usize, usize)>> = Vec::new();
            for e in Edit::ALL {
                let members: Vec<(usize, usize)> = set
                    .records
                    .iter()
                    .enumerate()
                    .filter_map(|(i, r)| match r.origin {
                        Some((o, ed)) if format!("{ed:?}") == format!("{e:?}") => {
                            Some((i, index_of[&o]))
                        }
                        _ => None,
                    })
                    .collect();
                let mut js: Vec<f64> = members
                    .iter()
                    .map(|&(a, b)| set.shingles5[a].jaccard(&set.shingles5[b]))
                    .collect();
                js.sort_by(f64::total_cmp);
                let median = js.get(js.len() / 2).copied().unwrap_or(f64::NAN);
                write!(header, " {e:?} ({median:.2}) |").unwrap();
                per_edit.push(members);
            }
            writeln!(md, "{header}").unwrap();
            writeln!(md, "|---|{}", "---|".repeat(Edit::ALL.len())).unwrap();
            for (name, k) in &ks {
                let rep = direct(n, &set.pairs(k.as_ref(), Some((5, 0.8))));
                write!(md, "| {name} |").unwrap();
                for members in &per_edit {
                    let merged = members.iter().filter(|&&(a, b)| rep[a] == rep[b]).count();
                    write!(md, " {:.2} |", merged as f64 / members.len().max(1) as f64).unwrap();
                }
                writeln!(md).unwrap();
            }
            writeln!(md).unwrap();
        }
        eprintln!(
            "{} scored at {:.0} s",
            set.name,
            started.elapsed().as_secs_f64()
        );
    }

    writeln!(
        md,
        "## Settings with precision >= 0.99 and recall >= 0.98\n"
    )
    .unwrap();
    if best.is_empty() {
        writeln!(md, "None.").unwrap();
    }
    for b in &best {
        writeln!(md, "- {b}").unwrap();
    }
    writeln!(md).unwrap();

    if let Some(tool) = &args.tool {
        let dir = std::env::temp_dir().join(format!("dedup-quality-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        writeln!(
            md,
            "## `dedup` end to end\n\nEach set written as JSONL (`{{\"id\": i, \"text\": ...}}`), then \
             `simhashdb dedup SET.jsonl --id-field id --emit drop --output OUT ARGS`; a dropped \
             record's representative is its `duplicate_of` (followed to a kept record).\n"
        )
        .unwrap();
        writeln!(
            md,
            "| set | ARGS | T = 0.8 | T = 0.5 | dropped | wall time |"
        )
        .unwrap();
        writeln!(md, "|---|---|---|---|---|---|").unwrap();
        for set in &sets {
            for extra in &args.tool_args {
                let (rep, secs) = run_tool(tool, extra, set, &dir);
                let s8 = set.score(&rep, 0.8);
                writeln!(
                    md,
                    "| {} | `{}` | {} | {} | {} | {secs:.2} s |",
                    set.name,
                    extra,
                    s8.cell(),
                    set.score(&rep, 0.5).cell(),
                    s8.dropped
                )
                .unwrap();
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
        writeln!(md).unwrap();
    }
    writeln!(md, "Run time: {:.0} s.", started.elapsed().as_secs_f64()).unwrap();

    match &args.out {
        Some(p) => std::fs::write(p, &md).unwrap_or_else(|e| die(&format!("{}: {e}", p.display()))),
        None => std::io::stdout()
            .write_all(md.as_bytes())
            .expect("write stdout"),
    }
}
