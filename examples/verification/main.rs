//! The verification value: which small value, stored with each document
//! next to its fingerprint, best tells a near-duplicate text from a near
//! fingerprint (docs/QUALITY.md, "Verified answers: the verification
//! value").
//!
//! ```sh
//! cargo run --release --example verification -- [OPTIONS] PATH...
//! ```
//!
//! PATHs are the corpus, read as `examples/quality/` reads it (the same
//! reader, cap and sampling). Options:
//!
//! - `--cap N`: at most N files from each directory argument (default 1500);
//! - `--max-bytes N`: keep at most the first N bytes of a document (200000);
//! - `--zh PATH`, `--zh-fallback PATH`: Chinese sources for the edited
//!   windows, as for `examples/quality/`;
//! - `--zh-news FILE`: Chinese news text, paragraphs separated by blank
//!   lines, for the sets `zh-news-150` and `zh-news-500` (500 windows with
//!   one copy each, 1–5 % of the characters edited, among 2,000 other
//!   windows);
//! - `--bases N`: base texts of each synthetic set (default 200);
//! - `--out FILE`: the full tables in Markdown (default
//!   `docs/quality/verification.md`); `--tsv FILE`: the same figures, one
//!   line per set and rule.
//!
//! Each set is a **stream** of texts in a fixed shuffled order. Truth: the
//! Jaccard similarity of word 5-shingle sets (default tokenizer), for the
//! Chinese sets of character 5-grams (whitespace removed), exact for all
//! pairs. A rule is a candidate distance k on the default fingerprint and,
//! except for the plain rule, a value and a threshold that a candidate's
//! value must pass. Two framings are scored:
//!
//! - **stream** (a crawler's `check`): each text is checked against the
//!   texts before it that were answered `new` (a `dup` is not inserted); it is
//!   answered `dup` when a candidate passes, naming the passing candidate with
//!   the highest estimated similarity (plain: the nearest fingerprint).
//!   Recall: the share of `dup` answers among the texts that have an earlier
//!   text at Jaccard >= 0.9 (Chinese: 0.75). Precision: the share of `dup`
//!   answers naming a text at Jaccard >= 0.5.
//! - **all inserted**: the same, with every text inserted whatever its
//!   answer (each text checked against all texts before it).
//! - **pairs**: every pair within k that passes is reported. Recall: the
//!   share of the pairs at Jaccard >= 0.9 (0.75) reported; precision: the
//!   share of reported pairs at Jaccard >= 0.5.
//!
//! Nothing here is run by `cargo test`.

#[allow(dead_code)]
#[path = "../quality/configs.rs"]
mod configs;
#[allow(dead_code)]
#[path = "../quality/corpus.rs"]
mod corpus;
#[allow(dead_code)]
#[path = "../quality/edits.rs"]
mod edits;
#[allow(dead_code)]
#[path = "../quality/truth.rs"]
mod truth;
mod values;

use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Instant;

use simhashdb::Simhasher;
use simhashdb::recheck::ShingleSet;
use simhashdb::sketch::{Sketch, TextValues};

use crate::corpus::load;
use crate::edits::{Edit, Lang, Rng, Units, apply, plausible, units_of, windows};
use crate::truth::similar_pairs;
use crate::values::{Kind, Maker, Value, passes, similarity};

/// Candidate distances on the default fingerprint.
const KS: [u32; 6] = [3, 4, 5, 6, 7, 8];
/// Truth thresholds: a reported pair is right at Jaccard >= this.
const PRECISION_AT: f64 = 0.5;

struct Args {
    paths: Vec<PathBuf>,
    zh: Vec<PathBuf>,
    zh_fallback: Vec<PathBuf>,
    zh_news: Option<PathBuf>,
    cap: usize,
    max_bytes: usize,
    bases: usize,
    out: PathBuf,
    tsv: Option<PathBuf>,
}

fn die(msg: &str) -> ! {
    eprintln!("verification: {msg}");
    std::process::exit(2)
}

fn parse_args() -> Args {
    let mut args = Args {
        paths: Vec::new(),
        zh: Vec::new(),
        zh_fallback: Vec::new(),
        zh_news: None,
        cap: 1500,
        max_bytes: 200_000,
        bases: 200,
        out: PathBuf::from("docs/quality/verification.md"),
        tsv: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let mut value = || {
            it.next()
                .unwrap_or_else(|| die(&format!("{a} needs a value")))
        };
        match a.as_str() {
            "--cap" => args.cap = value().parse().unwrap_or_else(|_| die("--cap N")),
            "--max-bytes" => {
                args.max_bytes = value().parse().unwrap_or_else(|_| die("--max-bytes N"))
            }
            "--bases" => args.bases = value().parse().unwrap_or_else(|_| die("--bases N")),
            "--zh" => args.zh.push(PathBuf::from(value())),
            "--zh-fallback" => args.zh_fallback.push(PathBuf::from(value())),
            "--zh-news" => args.zh_news = Some(PathBuf::from(value())),
            "--out" => args.out = PathBuf::from(value()),
            "--tsv" => args.tsv = Some(PathBuf::from(value())),
            _ if a.starts_with("--") => die(&format!("unknown option {a}")),
            _ => args.paths.push(PathBuf::from(a)),
        }
    }
    if args.paths.is_empty() {
        die("usage: verification [OPTIONS] PATH..");
    }
    args
}

/// A stream of texts.
struct Set {
    name: String,
    lang: Lang,
    texts: Vec<String>,
    note: String,
}

fn shuffle<T>(v: &mut [T], rng: &mut Rng) {
    for i in (1..v.len()).rev() {
        let j = rng.below(i + 1);
        v.swap(i, j);
    }
}

/// Edits of 1–5 % of the characters (Chinese sets).
fn zh_edits() -> Vec<Edit> {
    let mut v = Vec::new();
    for r in [1, 2, 3, 5] {
        v.extend([Edit::Substitute(r), Edit::Insert(r), Edit::Delete(r)]);
    }
    v
}

/// Windows of about `len` characters cut from `sources`; `bases` of them
/// (word-bigram Jaccard < 0.2 with each other) get edited copies (every edit
/// of `edits`, or `copies` drawn from it), `distractors` more windows are
/// added unedited; everything shuffled.
#[allow(clippy::too_many_arguments)]
fn edited_set(
    name: &str,
    sources: &[&str],
    lang: Lang,
    len: usize,
    bases: usize,
    edits: &[Edit],
    copies: Option<usize>,
    distractors: usize,
    seed: u64,
) -> Set {
    let mut rng = Rng(seed);
    let mut cands: Vec<Units> = sources
        .iter()
        .flat_map(|s| windows(s, lang, len))
        .filter(|u| plausible(u, lang))
        .collect();
    shuffle(&mut cands, &mut rng);
    let wh = Simhasher::default();
    let mut kept: Vec<(Units, ShingleSet)> = Vec::new();
    let mut rest: Vec<Units> = Vec::new();
    for c in cands {
        if kept.len() >= bases {
            rest.push(c);
            continue;
        }
        let set = ShingleSet::from_text(&wh, &c.render(lang), 2);
        if kept.iter().all(|(_, s)| s.jaccard(&set) < 0.2) {
            kept.push((c, set));
        } else {
            rest.push(c);
        }
    }
    let vocab: Vec<String> = kept
        .iter()
        .flat_map(|(u, _)| u.paras.iter().flatten().cloned())
        .collect();
    let mut texts = Vec::new();
    let mut n_copies = 0;
    for (base, _) in &kept {
        texts.push(base.render(lang));
        let chosen: Vec<Edit> = match copies {
            None => edits.to_vec(),
            Some(c) => (0..c).map(|_| edits[rng.below(edits.len())]).collect(),
        };
        for e in chosen {
            texts.push(apply(base, e, &vocab, &mut rng).render(lang));
            n_copies += 1;
        }
    }
    let n_distract = rest.len().min(distractors);
    texts.extend(rest.iter().take(distractors).map(|u| u.render(lang)));
    shuffle(&mut texts, &mut rng);
    Set {
        name: name.to_owned(),
        lang,
        note: format!(
            "{} bases of about {len} characters, {n_copies} edited copies, {n_distract} other windows",
            kept.len()
        ),
        texts,
    }
}

/// The corpus documents and edited copies of `n` of them (50 words or
/// more), each copy one of sub 1/2/5 %, ins 2 %, del 2 %, move.
fn corpus_edits(docs: &[String], n: usize, copies: usize, seed: u64) -> Set {
    let mut rng = Rng(seed);
    let edits = [
        Edit::Substitute(1),
        Edit::Substitute(2),
        Edit::Substitute(5),
        Edit::Insert(2),
        Edit::Delete(2),
        Edit::Move,
    ];
    let mut order: Vec<usize> = (0..docs.len()).collect();
    shuffle(&mut order, &mut rng);
    let chosen: Vec<Units> = order
        .iter()
        .map(|&i| Units {
            paras: units_of(&docs[i], Lang::English),
        })
        .filter(|u| u.len() >= 50)
        .take(n)
        .collect();
    let vocab: Vec<String> = chosen
        .iter()
        .flat_map(|u| u.paras.iter().flatten().cloned())
        .collect();
    let mut texts: Vec<String> = docs.to_vec();
    for u in &chosen {
        for _ in 0..copies {
            let e = edits[rng.below(edits.len())];
            texts.push(apply(u, e, &vocab, &mut rng).render(Lang::English));
        }
    }
    shuffle(&mut texts, &mut rng);
    Set {
        name: "corpus+edits".into(),
        lang: Lang::English,
        note: format!(
            "the corpus and {} edited copies of {} of its documents",
            chosen.len() * copies,
            chosen.len()
        ),
        texts,
    }
}

/// A rule: candidates within `k` of the default fingerprint, and, for
/// `Some((kind, t))`, a value passing threshold `t`.
#[derive(Clone, Copy)]
struct Rule {
    k: u32,
    value: Option<(usize, u32)>,
    /// Another threshold for texts mostly of Han characters
    /// (`Sketch::threshold_for`); the later text of a pair decides.
    han: Option<u32>,
    /// Candidates at the later text's `TextValues::candidate_k`, capped at
    /// `k` (an index's plan k), as `Index::query_verified` searches.
    by_length: bool,
}

impl Rule {
    /// The distance candidates of a text of `tokens` tokens are searched at.
    fn k_for(&self, tokens: usize) -> u32 {
        if self.by_length {
            let values = TextValues {
                fingerprint: None,
                sketch: Sketch::default(),
                tokens,
                threshold: Sketch::THRESHOLD,
            };
            values.candidate_k().min(self.k)
        } else {
            self.k
        }
    }
}

/// Token counts (default tokenizer) of the length buckets.
const LEN_BUCKETS: [usize; 6] = [0, 50, 100, 200, 500, 1000];

fn bucket(tokens: usize) -> usize {
    LEN_BUCKETS
        .iter()
        .rposition(|&b| tokens >= b)
        .expect("0 is first")
}

fn bucket_label(b: usize) -> String {
    match LEN_BUCKETS.get(b + 1) {
        Some(next) => format!("{}–{} tokens", LEN_BUCKETS[b], next - 1),
        None => format!(">= {} tokens", LEN_BUCKETS[b]),
    }
}

#[derive(Default, Clone, Copy)]
struct Score {
    pairs_reported: u64,
    pairs_right: u64,
    pairs_found: u64,
    pairs_true: u64,
    dups: u64,
    dups_wrong: u64,
    dups_found: u64,
    positives: u64,
    /// The stream with every text inserted, `dup` or not.
    all_dups: u64,
    all_wrong: u64,
    all_found: u64,
    /// Stream and all-inserted: found and positives by length bucket.
    by_len: [[u64; 3]; LEN_BUCKETS.len()],
}

fn ratio(a: u64, b: u64) -> String {
    if b == 0 {
        "–".into()
    } else {
        format!("{:.3}", a as f64 / b as f64)
    }
}

struct SetResult {
    name: String,
    describe: String,
    scores: Vec<Score>,
}

fn run_set(set: &Set, kinds: &[Kind], rules: &[Rule], maker: &Maker) -> SetResult {
    let started = Instant::now();
    let n = set.texts.len();
    let (recall_at, truth_sets): (f64, Vec<ShingleSet>) = match set.lang {
        Lang::English => (0.9, set.texts.iter().map(|t| maker.shingles(t)).collect()),
        Lang::Chinese => (
            0.75,
            set.texts
                .iter()
                .map(|t| {
                    let chars: Vec<String> = t
                        .chars()
                        .filter(|c| !c.is_whitespace())
                        .map(String::from)
                        .collect();
                    ShingleSet::from_tokens(&chars, 5)
                })
                .collect(),
        ),
    };
    let truth = similar_pairs(&truth_sets, PRECISION_AT);
    let han: Vec<bool> = set
        .texts
        .iter()
        .map(|t| Sketch::threshold_for(t) == Sketch::THRESHOLD_HAN)
        .collect();
    let tokens: Vec<usize> = set
        .texts
        .iter()
        .map(|t| Simhasher::default().tokens(t).len())
        .collect();
    let fps: Vec<u64> = set
        .texts
        .iter()
        .map(|t| Simhasher::default().fingerprint(t))
        .collect();
    let shingles: Vec<ShingleSet> = set.texts.iter().map(|t| maker.shingles(t)).collect();
    let vals: Vec<Vec<Value>> = kinds
        .iter()
        .map(|&k| {
            set.texts
                .iter()
                .zip(&shingles)
                .map(|(t, s)| maker.value(k, t, s))
                .collect()
        })
        .collect();
    let kmax = *KS.iter().max().expect("ks");
    // Candidate pairs (i < j) within kmax, with each kind's similarity.
    let mut pairs: Vec<(u32, u32, u32)> = Vec::new();
    for j in 0..n {
        for i in 0..j {
            let d = (fps[i] ^ fps[j]).count_ones();
            if d <= kmax {
                pairs.push((i as u32, j as u32, d));
            }
        }
    }
    let sims: Vec<Vec<f64>> = kinds
        .iter()
        .enumerate()
        .map(|(ki, &kind)| {
            pairs
                .iter()
                .map(|&(i, j, _)| similarity(kind, &vals[ki][i as usize], &vals[ki][j as usize]))
                .collect()
        })
        .collect();
    let jac = |i: u32, j: u32| truth.get(&(i.min(j), i.max(j))).copied().unwrap_or(0.0);
    let pairs_true = truth.values().filter(|&&x| x >= recall_at).count() as u64;
    let mut positive = vec![false; n];
    for (&(_, b), &x) in &truth {
        if x >= recall_at {
            positive[b as usize] = true;
        }
    }
    let positives = positive.iter().filter(|&&p| p).count() as u64;
    // Pairs of each later text (pairs are in order of j, then i).
    let mut by_later: Vec<std::ops::Range<usize>> = vec![0..0; n];
    let mut at = 0;
    for (j, range) in by_later.iter_mut().enumerate() {
        let start = at;
        while at < pairs.len() && pairs[at].1 as usize == j {
            at += 1;
        }
        *range = start..at;
    }
    let scores = rules
        .iter()
        .map(|rule| {
            let pass = |p: usize| -> bool {
                let later = pairs[p].1 as usize;
                pairs[p].2 <= rule.k_for(tokens[later])
                    && rule.value.is_none_or(|(ki, t)| {
                        let t = match rule.han {
                            Some(h) if han[later] => h,
                            _ => t,
                        };
                        passes(kinds[ki], sims[ki][p], t)
                    })
            };
            let mut s = Score {
                pairs_true,
                positives,
                ..Score::default()
            };
            for j in 0..n {
                s.by_len[bucket(tokens[j])][2] += u64::from(positive[j]);
            }
            for (p, &(i, j, _)) in pairs.iter().enumerate() {
                if pass(p) {
                    s.pairs_reported += 1;
                    let x = jac(i, j);
                    s.pairs_right += u64::from(x >= PRECISION_AT);
                    s.pairs_found += u64::from(x >= recall_at);
                }
            }
            for j in 0..n {
                let mut best: Option<(f64, u32, u32)> = None;
                for p in by_later[j].clone() {
                    let (i, _, d) = pairs[p];
                    if !pass(p) {
                        continue;
                    }
                    let sim = rule.value.map_or(0.0, |(ki, _)| sims[ki][p]);
                    if best.is_none_or(|(bs, bd, _)| sim > bs || (sim == bs && d < bd)) {
                        best = Some((sim, d, i));
                    }
                }
                if let Some((_, _, i)) = best {
                    s.all_dups += 1;
                    s.all_wrong += u64::from(jac(i, j as u32) < PRECISION_AT);
                    s.all_found += u64::from(positive[j]);
                    s.by_len[bucket(tokens[j])][1] += u64::from(positive[j]);
                }
            }
            let mut inserted = vec![false; n];
            for j in 0..n {
                // The passing candidate with the highest similarity, then the
                // smallest distance, then the earliest.
                let mut best: Option<(f64, u32, u32)> = None;
                for p in by_later[j].clone() {
                    let (i, _, d) = pairs[p];
                    if !inserted[i as usize] || !pass(p) {
                        continue;
                    }
                    let sim = rule.value.map_or(0.0, |(ki, _)| sims[ki][p]);
                    let better = match best {
                        None => true,
                        Some((bs, bd, _)) => sim > bs || (sim == bs && d < bd),
                    };
                    if better {
                        best = Some((sim, d, i));
                    }
                }
                match best {
                    None => inserted[j] = true,
                    Some((_, _, i)) => {
                        s.dups += 1;
                        s.dups_wrong += u64::from(jac(i, j as u32) < PRECISION_AT);
                        s.dups_found += u64::from(positive[j]);
                        s.by_len[bucket(tokens[j])][0] += u64::from(positive[j]);
                    }
                }
            }
            s
        })
        .collect();
    let describe = format!(
        "{}: {} texts ({}), {:.1} MB; truth: {} at Jaccard >= {recall_at} ({} pairs; {} texts with an earlier one), {} pairs at >= {PRECISION_AT}; {} pairs within {kmax} bits",
        set.name,
        n,
        set.note,
        set.texts.iter().map(String::len).sum::<usize>() as f64 / 1e6,
        match set.lang {
            Lang::English => "word 5-shingles",
            Lang::Chinese => "character 5-grams",
        },
        pairs_true,
        positives,
        truth.len(),
        pairs.len()
    );
    eprintln!("{describe} ({:.1?})", started.elapsed());
    SetResult {
        name: set.name.clone(),
        describe,
        scores,
    }
}

fn rule_label(rule: &Rule, kinds: &[Kind]) -> String {
    match rule.value {
        None => format!("plain, k = {}", rule.k),
        Some((ki, t)) if rule.by_length => format!(
            "{} {}{}, k by length, plan k = {}",
            kinds[ki].short(),
            kinds[ki].threshold_label(t),
            rule.han.map_or(String::new(), |h| format!(
                " (Han: {:.2})",
                f64::from(h) / 100.0
            )),
            rule.k
        ),
        Some((ki, t)) => format!(
            "{} {}{}, k = {}",
            kinds[ki].short(),
            kinds[ki].threshold_label(t),
            rule.han.map_or(String::new(), |h| format!(
                " (Han: {:.2})",
                f64::from(h) / 100.0
            )),
            rule.k
        ),
    }
}

/// Nanoseconds per text to compute the fingerprint alone, and the
/// fingerprint and each value.
fn timing(texts: &[String], kinds: &[Kind], maker: &Maker, md: &mut String) {
    let h = Simhasher::default();
    let reps = 3;
    let time = |f: &dyn Fn(&str) -> u64| -> f64 {
        let mut best = f64::INFINITY;
        for _ in 0..reps {
            let t = Instant::now();
            let mut acc = 0u64;
            for x in texts {
                acc = acc.wrapping_add(f(x));
            }
            std::hint::black_box(acc);
            best = best.min(t.elapsed().as_secs_f64());
        }
        best * 1e9 / texts.len() as f64
    };
    let base = time(&|t| h.fingerprint(t));
    let bytes = texts.iter().map(String::len).sum::<usize>() as f64 / texts.len() as f64;
    writeln!(
        md,
        "| value | ns per text | × fingerprint alone |\n|---|---:|---:|\n| fingerprint alone | {base:.0} | 1.00 |"
    )
    .unwrap();
    let with_shingles = time(&|t| {
        let (fp, s) = simhashdb::recheck::ShingleSet::with_fingerprint(&h, t, 5);
        fp.unwrap_or(0) ^ s.len() as u64
    });
    writeln!(
        md,
        "| fingerprint + sorted word 5-shingle set | {with_shingles:.0} | {:.2} |",
        with_shingles / base
    )
    .unwrap();
    let sketch = time(&|t| {
        let (fp, s) = simhashdb::sketch::Sketch::with_fingerprint(&h, t);
        fp.unwrap_or(0) ^ u64::from(s.to_bytes()[0])
    });
    writeln!(
        md,
        "| fingerprint + `sketch::Sketch` (MinHash 128 × 1 bit, the library's) | {sketch:.0} | {:.2} |",
        sketch / base
    )
    .unwrap();
    for &k in kinds {
        let ns = time(&|t| {
            let s = maker.shingles(t);
            let v = maker.value(k, t, &s);
            h.fingerprint(t)
                ^ match v {
                    Value::Simhash(x) => x,
                    Value::Bins(b) => b.len() as u64,
                }
        });
        writeln!(
            md,
            "| fingerprint + {} (unoptimised) | {ns:.0} | {:.2} |",
            k.name(),
            ns / base
        )
        .unwrap();
    }
    writeln!(
        md,
        "\n({} texts, {bytes:.0} bytes on average; best of {reps} passes.)\n",
        texts.len()
    )
    .unwrap();
}

fn main() {
    let args = parse_args();
    let started = Instant::now();
    let maker = Maker::new();
    let kinds = Kind::all();
    let mut rules: Vec<Rule> = KS
        .iter()
        .map(|&k| Rule {
            k,
            value: None,
            han: None,
            by_length: false,
        })
        .collect();
    let chosen = kinds
        .iter()
        .position(|&k| k == Kind::BBit { bins: 128, bits: 1 })
        .expect("measured");
    for (t, h) in [(70, 60), (70, 50)] {
        for &k in &KS {
            rules.push(Rule {
                k,
                value: Some((chosen, t)),
                han: Some(h),
                by_length: false,
            });
        }
    }
    // The default check of an index: candidates at the text's
    // `candidate_k`, capped at the plan's k.
    for plan_k in [3, 4, 5, 6, 8] {
        rules.push(Rule {
            k: plan_k,
            value: Some((chosen, 70)),
            han: Some(60),
            by_length: true,
        });
    }
    for (ki, kind) in kinds.iter().enumerate() {
        for &t in kind.thresholds() {
            for &k in &KS {
                rules.push(Rule {
                    k,
                    value: Some((ki, t)),
                    han: None,
                    by_length: false,
                });
            }
        }
    }

    // The sets.
    let (raw, notes) = load(&args.paths, args.cap, args.max_bytes);
    let mut seen = std::collections::HashSet::new();
    let mut docs: Vec<String> = raw
        .into_iter()
        .map(|d| d.text)
        .filter(|t| seen.insert(t.clone()))
        .collect();
    let mut rng = Rng(38);
    shuffle(&mut docs, &mut rng);
    let mut sets = vec![Set {
        name: "corpus".into(),
        lang: Lang::English,
        note: notes.join("; "),
        texts: docs.clone(),
    }];
    sets.push(corpus_edits(&docs, 300, 4, 381));
    let en: Vec<&str> = docs.iter().map(String::as_str).collect();
    for len in [150, 500, 5000] {
        sets.push(edited_set(
            &format!("en-{len}"),
            &en,
            Lang::English,
            len,
            args.bases,
            &Edit::all(),
            None,
            0,
            len as u64 * 31 + 7,
        ));
    }
    let (zh_docs, _) = load(&args.zh, usize::MAX, args.max_bytes);
    let (fb_docs, _) = load(&args.zh_fallback, usize::MAX, args.max_bytes);
    let zh: Vec<&str> = zh_docs.iter().map(|d| d.text.as_str()).collect();
    let zh_all: Vec<&str> = zh
        .iter()
        .copied()
        .chain(fb_docs.iter().map(|d| d.text.as_str()))
        .collect();
    if !zh.is_empty() {
        for len in [150, 500] {
            let name = format!("zh-{len}");
            let mut set = edited_set(
                &name,
                &zh,
                Lang::Chinese,
                len,
                args.bases,
                &zh_edits(),
                None,
                0,
                len as u64 * 37 + 3,
            );
            if set.texts.len() < args.bases / 2 * 13 && !fb_docs.is_empty() {
                set = edited_set(
                    &name,
                    &zh_all,
                    Lang::Chinese,
                    len,
                    args.bases,
                    &zh_edits(),
                    None,
                    0,
                    len as u64 * 37 + 3,
                );
                set.note.push_str(" (with the fallback sources)");
            }
            sets.push(set);
        }
    }
    if let Some(news) = &args.zh_news {
        let text = std::fs::read_to_string(news).unwrap_or_else(|e| die(&format!("{e}")));
        for len in [150, 500] {
            sets.push(edited_set(
                &format!("zh-news-{len}"),
                &[text.as_str()],
                Lang::Chinese,
                len,
                500,
                &zh_edits(),
                Some(1),
                2000,
                len as u64 * 41 + 5,
            ));
        }
    }
    eprintln!("sets built ({:.1?})", started.elapsed());

    // The library's sketch is the value `mh128x1` measured here.
    for s in &sets {
        for t in &s.texts {
            let shingles = maker.shingles(t);
            if shingles.is_empty() {
                continue;
            }
            let Value::Bins(bins) = maker.value(Kind::BBit { bins: 128, bits: 1 }, t, &shingles)
            else {
                unreachable!()
            };
            let lib = simhashdb::sketch::Sketch::from_text(&Simhasher::default(), t).to_bytes();
            let bits: Vec<u8> = (0..128).map(|i| (lib[i / 8] >> (i % 8)) & 1).collect();
            assert_eq!(bits, bins, "sketch of a text of {}", s.name);
        }
    }

    let results: Vec<SetResult> = sets
        .iter()
        .map(|s| run_set(s, &kinds, &rules, &maker))
        .collect();

    // Report.
    let mut md = String::new();
    // The command line, with the files named one by one counted.
    let mut cmd: Vec<String> = Vec::new();
    let (mut files, mut prev_option) = (0, false);
    for a in std::env::args().skip(1) {
        if !prev_option && !a.starts_with("--") && std::path::Path::new(&a).is_file() {
            files += 1;
        } else {
            cmd.push(a.clone());
        }
        prev_option = a.starts_with("--");
    }
    if files > 0 {
        cmd.push(format!("[{files} files]"));
    }
    writeln!(
        md,
        "# Verification values: full results\n\nGenerated by `cargo run --release --example verification -- {}`.\n",
        cmd.join(" ")
    )
    .unwrap();
    writeln!(md, "Values:\n").unwrap();
    for k in &kinds {
        writeln!(md, "- `{}`: {}, {} bytes", k.short(), k.name(), k.bytes()).unwrap();
    }
    writeln!(md, "\nSets (streams in a fixed shuffled order):\n").unwrap();
    for r in &results {
        writeln!(md, "- {}", r.describe).unwrap();
    }
    writeln!(md).unwrap();
    let mut tsv = String::from(
        "set\trule\tkind\tbytes\tk\tthreshold\tpairs_reported\tpairs_right\tpairs_found\tpairs_true\tdups\tdups_wrong\tdups_found\tpositives\tall_dups\tall_wrong\tall_found\n",
    );
    for r in &results {
        writeln!(
            md,
            "## {}\n\n| rule | bytes | stream P | stream R | wrong `dup` / `dup` | all inserted P | all inserted R | pairs P | pairs R |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|",
            r.name
        )
        .unwrap();
        for (rule, s) in rules.iter().zip(&r.scores) {
            let bytes = rule.value.map_or(0, |(ki, _)| kinds[ki].bytes());
            writeln!(
                md,
                "| {} | {bytes} | {} | {} | {} / {} | {} | {} | {} | {} |",
                rule_label(rule, &kinds),
                ratio(s.dups - s.dups_wrong, s.dups),
                ratio(s.dups_found, s.positives),
                s.dups_wrong,
                s.dups,
                ratio(s.all_dups - s.all_wrong, s.all_dups),
                ratio(s.all_found, s.positives),
                ratio(s.pairs_right, s.pairs_reported),
                ratio(s.pairs_found, s.pairs_true),
            )
            .unwrap();
            writeln!(
                tsv,
                "{}\t{}\t{}\t{bytes}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}",
                r.name,
                rule_label(rule, &kinds),
                rule.value
                    .map_or("plain".into(), |(ki, _)| kinds[ki].short()),
                rule.k,
                rule.value.map_or(0, |(_, t)| t),
                s.pairs_reported,
                s.pairs_right,
                s.pairs_found,
                s.pairs_true,
                s.dups,
                s.dups_wrong,
                s.dups_found,
                s.positives,
                s.all_dups,
                s.all_wrong,
                s.all_found
            )
            .unwrap();
        }
        writeln!(md).unwrap();
    }
    writeln!(
        md,
        "## Recall by length: `mh128x1` at 0.70 (Han: 0.60), all sets pooled\n\nTexts with an earlier text at Jaccard >= 0.9 (Chinese sets: 0.75), by their number of tokens (default tokenizer); each cell: stream recall / all-inserted recall.\n"
    )
    .unwrap();
    write!(md, "| k |").unwrap();
    for b in 0..LEN_BUCKETS.len() {
        write!(md, " {} |", bucket_label(b)).unwrap();
    }
    writeln!(md, "\n|---|{}", "---:|".repeat(LEN_BUCKETS.len())).unwrap();
    for (ri, rule) in rules.iter().enumerate() {
        if rule.value != Some((chosen, 70)) || rule.han != Some(60) {
            continue;
        }
        let mut pooled = [[0u64; 3]; LEN_BUCKETS.len()];
        for r in &results {
            for (b, cell) in pooled.iter_mut().enumerate() {
                for (c, add) in cell.iter_mut().zip(r.scores[ri].by_len[b]) {
                    *c += add;
                }
            }
        }
        write!(md, "| {} |", rule.k).unwrap();
        for cell in pooled {
            write!(
                md,
                " {} / {} |",
                ratio(cell[0], cell[2]),
                ratio(cell[1], cell[2])
            )
            .unwrap();
        }
        writeln!(md).unwrap();
    }
    let mut counts = [0u64; LEN_BUCKETS.len()];
    for r in &results {
        for (b, c) in counts.iter_mut().enumerate() {
            *c += r.scores[0].by_len[b][2];
        }
    }
    writeln!(
        md,
        "\n(texts per bucket: {})\n",
        counts.map(|c| c.to_string()).join(", ")
    )
    .unwrap();
    writeln!(md, "## Cost of computing the values\n").unwrap();
    writeln!(md, "On the texts of `corpus`:\n").unwrap();
    timing(&sets[0].texts, &kinds, &maker, &mut md);
    if let Some(s) = sets.iter().find(|s| s.name == "zh-news-500") {
        writeln!(md, "On the texts of `zh-news-500`:\n").unwrap();
        timing(&s.texts, &kinds, &maker, &mut md);
    }
    writeln!(md, "Run time: {:.0} s.", started.elapsed().as_secs_f64()).unwrap();
    std::fs::write(&args.out, md).unwrap_or_else(|e| die(&format!("{e}")));
    if let Some(p) = &args.tsv {
        std::fs::write(p, tsv).unwrap_or_else(|e| die(&format!("{e}")));
    }
    eprintln!("wrote {}", args.out.display());
}
