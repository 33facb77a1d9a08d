//! Detection quality of simhash on real text: precision and recall against k.
//!
//! ```sh
//! cargo run --release --example quality -- [OPTIONS] PATH...
//! ```
//!
//! Each PATH is a file or a directory (read recursively; `.gz` files are
//! decompressed; man pages — paths under a `man` directory — have their troff
//! markup stripped). Options:
//!
//! - `--cap N`: read at most N files from each directory argument, a
//!   deterministic sample (by a hash of the path); default 1500.
//! - `--max-bytes N`: keep at most the first N bytes of each document
//!   (default 200000).
//! - `--zh PATH`: Chinese sources for the synthetic edits (repeatable);
//!   gettext catalogs (`.mo`) contribute their translated messages.
//! - `--zh-fallback PATH`: more Chinese sources, added only for a length at
//!   which the `--zh` sources give fewer than half the wanted bases.
//! - `--bases N`: base texts per language and length for the synthetic edits
//!   (default 200).
//! - `--out DIR`: where `results.md` and the SVG plots go (default
//!   `docs/quality`).
//!
//! Part 1 (corpus): exact near-duplicate pairs by the Jaccard similarity of
//! word 5-shingles (all pairs, via a prefix-filtered inverted index), against
//! simhash pairs within k = 0..=10 for each feature configuration.
//!
//! Part 2 (synthetic edits): base texts of 50, 140, 500 and 5000 characters,
//! English and Chinese, each edited (substitute, insert, delete 1/2/5/10 % of
//! the words, or move a block); recall of (base, edit) pairs and precision
//! against all pairs of different bases, plain and with candidate generation at
//! a larger k followed by exact Jaccard verification.
//!
//! Environment: `QUALITY_CHECK_TRUTH=1` also computes the Jaccard similarity
//! of every pair by brute force and checks that the indexed join found
//! exactly the same pairs; `QUALITY_DEBUG=1` prints the corpus pairs that the
//! default configuration puts within 3 bits although they share under half
//! of their 5-shingles, a few bases of each synthetic set, and the unrelated
//! synthetic pairs found within 1 bit.
//!
//! Nothing here is run by `cargo test`.

mod configs;
mod corpus;
mod edits;
mod measures;
mod plot;
mod report;
mod truth;

use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Instant;

use simhashdb::recheck::ShingleSet;

use crate::configs::{Config, configs};
use crate::corpus::{Doc, load};
use crate::edits::{Lang, build_pool};
use crate::measures::{CorpusResult, PoolResult, VERIFY, corpus_run, pool_run};
use crate::plot::{Panel, nan, plot_grid};
use crate::report::{SHORT_PLOTTED, report_pool, short_target};
use crate::truth::{similar_pairs, words_hasher};

/// Largest k of the corpus tables.
pub(crate) const KMAX: u32 = 10;
/// Largest candidate k tried for short texts with verification.
pub(crate) const KCAND_MAX: u32 = 24;
pub(crate) const THRESHOLDS: [f64; 3] = [0.5, 0.8, 0.9];
pub(crate) const LENGTHS: [usize; 4] = [50, 140, 500, 5000];

pub(crate) struct Args {
    paths: Vec<PathBuf>,
    zh: Vec<PathBuf>,
    zh_fallback: Vec<PathBuf>,
    cap: usize,
    max_bytes: usize,
    bases: usize,
    out: PathBuf,
}

fn parse_args() -> Args {
    let mut args = Args {
        paths: Vec::new(),
        zh: Vec::new(),
        zh_fallback: Vec::new(),
        cap: 1500,
        max_bytes: 200_000,
        bases: 200,
        out: PathBuf::from("docs/quality"),
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
            "--out" => args.out = PathBuf::from(value()),
            _ if a.starts_with("--") => die(&format!("unknown option {a}")),
            _ => args.paths.push(PathBuf::from(a)),
        }
    }
    if args.paths.is_empty() {
        die(
            "usage: quality [--cap N] [--max-bytes N] [--zh PATH].. [--bases N] [--out DIR] PATH..",
        );
    }
    args
}

pub(crate) fn die(msg: &str) -> ! {
    eprintln!("quality: {msg}");
    std::process::exit(2)
}

fn main() {
    let args = parse_args();
    let started = std::time::Instant::now();
    std::fs::create_dir_all(&args.out).unwrap_or_else(|e| die(&format!("{e}")));
    let mut md = report::header();
    let (docs, cfgs, results) = corpus_part(&args, &mut md, started);
    report::corpus_tables(&mut md, &results, &args.out);
    let texts: Vec<&str> = docs.iter().map(|d| d.text.as_str()).collect();
    synthetic_part(&args, &mut md, &texts, &cfgs, started);
    writeln!(md, "Run time: {:.0} s.", started.elapsed().as_secs_f64()).unwrap();
    std::fs::write(args.out.join("results.md"), md).unwrap_or_else(|e| die(&format!("{e}")));
    eprintln!("wrote {}", args.out.join("results.md").display());
}

/// Part 1: reads the corpus (dropping byte-identical copies), finds the true
/// pairs, describes the corpus in `md`, and measures every configuration.
fn corpus_part(
    args: &Args,
    md: &mut String,
    started: Instant,
) -> (Vec<Doc>, Vec<Config>, Vec<CorpusResult>) {
    // ---- Part 1: corpus.
    let (raw_docs, notes) = load(&args.paths, args.cap, args.max_bytes);
    let loaded = raw_docs.len();
    let mut seen = std::collections::HashSet::new();
    let docs: Vec<Doc> = raw_docs
        .into_iter()
        .filter(|d| seen.insert(d.text.clone()))
        .collect();
    let wh = words_hasher();
    let sets: Vec<ShingleSet> = docs
        .iter()
        .map(|d| ShingleSet::from_tokens(&wh.tokens(&d.text), 5))
        .collect();
    let texts: Vec<&str> = docs.iter().map(|d| d.text.as_str()).collect();
    let truth = similar_pairs(&sets, THRESHOLDS[0]);
    if std::env::var_os("QUALITY_CHECK_TRUTH").is_some() {
        // Brute force over all pairs: the prefix filter must find them all.
        let mut brute = 0;
        for i in 0..sets.len() {
            for j in i + 1..sets.len() {
                if sets[i].is_empty() || sets[j].is_empty() {
                    continue;
                }
                let jac = sets[i].jaccard(&sets[j]);
                if jac >= THRESHOLDS[0] {
                    brute += 1;
                    assert_eq!(truth.get(&(i as u32, j as u32)), Some(&jac), "pair {i} {j}");
                }
            }
        }
        assert_eq!(brute, truth.len());
        eprintln!("truth checked by brute force: {brute} pairs");
    }
    let n = docs.len();
    let bytes: usize = texts.iter().map(|t| t.len()).sum();
    writeln!(md, "## Corpus\n").unwrap();
    for note in &notes {
        writeln!(md, "- {note}").unwrap();
    }
    writeln!(
        md,
        "- {loaded} documents read; {n} distinct after dropping byte-identical copies, {:.1} MB; {} pairs",
        bytes as f64 / 1e6,
        n * (n - 1) / 2
    )
    .unwrap();
    for &th in &THRESHOLDS {
        writeln!(
            md,
            "- pairs with word 5-shingle Jaccard >= {th}: {}",
            truth.values().filter(|&&x| x >= th).count()
        )
        .unwrap();
    }
    writeln!(md).unwrap();
    eprintln!(
        "corpus: {n} docs, {} true pairs at 0.5 ({:.1?})",
        truth.len(),
        started.elapsed()
    );

    let vsets: Vec<Vec<ShingleSet>> = [2usize, 3]
        .iter()
        .map(|&w| {
            docs.iter()
                .map(|d| ShingleSet::from_tokens(&wh.tokens(&d.text), w))
                .collect()
        })
        .collect();
    let cfgs = configs(&texts, false);
    if std::env::var_os("QUALITY_DEBUG").is_some() {
        // The default's pairs within 3 bits that share under half their 5-shingles.
        let fps: Vec<u64> = texts
            .iter()
            .map(|t| cfgs[0].hasher.fingerprint(t))
            .collect();
        for i in 0..fps.len() {
            for j in i + 1..fps.len() {
                let d = (fps[i] ^ fps[j]).count_ones();
                if d <= 3 && !truth.contains_key(&(i as u32, j as u32)) {
                    eprintln!(
                        "FALSE d={d} J={:.2} {} {}",
                        sets[i].jaccard(&sets[j]),
                        docs[i].path,
                        docs[j].path
                    );
                }
            }
        }
    }
    let mut results = Vec::new();
    for c in &cfgs {
        results.push(corpus_run(c, &texts, &truth, &vsets));
        eprintln!("  {} done ({:.1?})", c.name, started.elapsed());
    }
    (docs, cfgs, results)
}

/// Part 2: pools of synthetic edits of English (the corpus) and Chinese
/// sources, at each length, measured for every configuration, with the
/// short-text summary and plot.
fn synthetic_part(args: &Args, md: &mut String, texts: &[&str], cfgs: &[Config], started: Instant) {
    // ---- Part 2: synthetic edits.
    let mut zh_sources: Vec<String> = Vec::new();
    let (zh_docs, zh_notes) = load(&args.zh, usize::MAX, args.max_bytes);
    for d in &zh_docs {
        zh_sources.push(d.text.clone());
    }
    writeln!(md, "## Synthetic edits\n").unwrap();
    writeln!(
        md,
        "English sources: the corpus above. Chinese sources: {} files ({}).\n",
        zh_docs.len(),
        zh_notes.join("; ")
    )
    .unwrap();
    let zh_refs: Vec<&str> = zh_sources.iter().map(String::as_str).collect();
    let (fb_docs, fb_notes) = load(&args.zh_fallback, usize::MAX, args.max_bytes);
    if !fb_docs.is_empty() {
        writeln!(
            md,
            "Chinese fallback sources (used only where marked): {} files ({}).\n",
            fb_docs.len(),
            fb_notes.join("; ")
        )
        .unwrap();
    }
    let zh_all: Vec<&str> = zh_refs
        .iter()
        .copied()
        .chain(fb_docs.iter().map(|d| d.text.as_str()))
        .collect();
    let en_cfgs = cfgs;
    let zh_cfgs = configs(&zh_refs, cfg!(feature = "chinese"));

    let mut short_panels: Vec<Panel> = Vec::new();
    let mut short_summary = String::new();
    for lang in [Lang::English, Lang::Chinese] {
        let (sources, lang_cfgs) = match lang {
            Lang::English => (texts, en_cfgs),
            Lang::Chinese => (&zh_refs[..], &zh_cfgs[..]),
        };
        for &len in &LENGTHS {
            let seed = len as u64 * 31 + 7;
            let mut pool = build_pool(sources, lang, len, args.bases, seed);
            if lang == Lang::Chinese && pool.bases < args.bases / 2 && !fb_docs.is_empty() {
                pool = build_pool(&zh_all, lang, len, args.bases, seed);
                pool.fallback = true;
            }
            if pool.bases < 2 {
                writeln!(
                    md,
                    "### {} {len} characters: not enough source text\n",
                    lang.name()
                )
                .unwrap();
                continue;
            }
            let rs: Vec<PoolResult> = lang_cfgs.iter().map(|c| pool_run(&pool, c)).collect();
            eprintln!(
                "pool {} {len}: {} bases ({:.1?})",
                lang.name(),
                pool.bases,
                started.elapsed()
            );
            report_pool(md, &pool, &rs);
            if len <= 140 {
                for r in &rs {
                    short_target(&mut short_summary, &pool, r);
                    // Plot a few configurations only.
                    if !SHORT_PLOTTED.contains(&r.config.as_str()) {
                        continue;
                    }
                    let v = VERIFY.iter().position(|&x| x == (2, 0.4)).expect("listed");
                    short_panels.push((
                        format!("{} {len} {}", lang.name(), r.config),
                        vec![
                            (
                                "precision".to_owned(),
                                r.plain.iter().map(|p| nan(p.precision())).collect(),
                            ),
                            (
                                "recall".to_owned(),
                                r.plain.iter().map(|p| nan(p.recall())).collect(),
                            ),
                            (
                                "P, verified J2>=0.4".to_owned(),
                                r.verified[v].iter().map(|p| nan(p.precision())).collect(),
                            ),
                            (
                                "R, verified J2>=0.4".to_owned(),
                                r.verified[v].iter().map(|p| nan(p.recall())).collect(),
                            ),
                        ],
                    ));
                }
            }
        }
    }
    writeln!(
        md,
        "## Short texts: smallest candidate k meeting precision >= 0.95 at recall >= 0.90\n"
    )
    .unwrap();
    writeln!(
        md,
        "| pool | config | plain simhash | {} |",
        VERIFY
            .iter()
            .map(|(w, t)| format!("verified J{w}>={t}"))
            .collect::<Vec<_>>()
            .join(" | ")
    )
    .unwrap();
    writeln!(md, "|---|---|---|{}", "---|".repeat(VERIFY.len())).unwrap();
    md.push_str(&short_summary);
    writeln!(md, "\n(each cell: k, precision / recall at that k; `no` if no k <= {KCAND_MAX} meets the target)\n").unwrap();
    plot_grid(
        &args.out.join("short.svg"),
        "Short texts (<= 140 chars): plain simhash vs candidates + word-bigram Jaccard >= 0.4",
        &short_panels,
        KCAND_MAX,
    )
    .unwrap_or_else(|e| die(&format!("plot: {e}")));
    writeln!(md, "![plot](short.svg)\n").unwrap();
}
