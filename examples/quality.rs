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

use std::collections::HashMap;
use std::fmt::Write as _;
use std::io::Read;
use std::path::{Path, PathBuf};

use simhashdb::Simhasher;
use simhashdb::fingerprint::{IdfTable, Tokenizer, Weighting, fmix64, fnv1a64};
use simhashdb::recheck::ShingleSet;

/// Largest k of the corpus tables.
const KMAX: u32 = 10;
/// Largest candidate k tried for short texts with verification.
const KCAND_MAX: u32 = 24;
const THRESHOLDS: [f64; 3] = [0.5, 0.8, 0.9];
const LENGTHS: [usize; 4] = [50, 140, 500, 5000];

struct Args {
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

fn die(msg: &str) -> ! {
    eprintln!("quality: {msg}");
    std::process::exit(2)
}

// ---------------------------------------------------------------- loading

struct Doc {
    path: String,
    text: String,
}

fn path_key(p: &Path) -> u64 {
    fmix64(fnv1a64(p.to_string_lossy().as_bytes()))
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            walk(&p, out);
        } else if p.is_file() {
            out.push(p);
        }
    }
}

/// Files of each argument (a directory is sampled down to `cap` files).
fn list_files(paths: &[PathBuf], cap: usize) -> (Vec<PathBuf>, Vec<String>) {
    let mut files = Vec::new();
    let mut notes = Vec::new();
    let mut singles = 0;
    for p in paths {
        if p.is_dir() {
            let mut all = Vec::new();
            walk(p, &mut all);
            let total = all.len();
            all.sort_by_key(|f| path_key(f));
            all.truncate(cap);
            notes.push(format!(
                "`{}`: {} of {} files",
                p.display(),
                all.len(),
                total
            ));
            files.extend(all);
        } else {
            singles += 1;
            files.push(p.clone());
        }
    }
    if singles > 0 {
        notes.push(format!("{singles} files named one by one"));
    }
    files.sort();
    files.dedup();
    (files, notes)
}

fn read_doc(path: &Path, max_bytes: usize) -> Option<String> {
    let raw = std::fs::read(path).ok()?;
    if path.extension().is_some_and(|e| e == "mo") {
        return mo_translations(&raw);
    }
    let bytes = if path.extension().is_some_and(|e| e == "gz") {
        let mut out = Vec::new();
        flate2::read::MultiGzDecoder::new(&raw[..])
            .read_to_end(&mut out)
            .ok()?;
        out
    } else {
        raw
    };
    let mut text = String::from_utf8(bytes).ok()?;
    let is_man = path.components().any(|c| {
        c.as_os_str().to_str().is_some_and(|s| {
            s == "man" || (s.starts_with("man") && s[3..].starts_with(|c: char| c.is_ascii_digit()))
        })
    });
    if is_man {
        text = strip_troff(&text);
    }
    if text.len() > max_bytes {
        let mut cut = max_bytes;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
    }
    Some(text)
}

/// The translated messages of a GNU gettext catalog (`.mo`), one paragraph
/// each.
fn mo_translations(raw: &[u8]) -> Option<String> {
    let word = |at: usize, le: bool| -> Option<usize> {
        let b: [u8; 4] = raw.get(at..at + 4)?.try_into().ok()?;
        Some(if le {
            u32::from_le_bytes(b)
        } else {
            u32::from_be_bytes(b)
        } as usize)
    };
    let le = match word(0, true)? {
        0x9504_12de => true,
        0xde12_0495 => false,
        _ => return None,
    };
    let (n, table) = (word(8, le)?, word(16, le)?);
    let mut out = String::new();
    for i in 0..n {
        let (len, off) = (word(table + 8 * i, le)?, word(table + 8 * i + 4, le)?);
        let msg = std::str::from_utf8(raw.get(off..off + len)?).ok()?;
        // Plural forms are separated by NUL; keep the first. Skip the header.
        let msg = msg.split('\0').next().unwrap_or("");
        if !msg.is_empty() && !msg.starts_with("Project-Id-Version") {
            out.push_str(msg);
            out.push_str("\n\n");
        }
    }
    Some(out)
}

/// Removes troff comments, request names and font/escape sequences, keeping
/// the words.
fn strip_troff(src: &str) -> String {
    let mut out = String::with_capacity(src.len());
    for line in src.lines() {
        let line = line.trim_end();
        if line.starts_with(".\\\"") || line.starts_with("'\\\"") || line == "." {
            continue;
        }
        let body = if let Some(rest) = line.strip_prefix('.').or_else(|| line.strip_prefix('\'')) {
            // Drop the request name, keep its arguments.
            match rest.split_once(char::is_whitespace) {
                Some((_, args)) => args.replace('"', ""),
                None => {
                    // A paragraph request: a paragraph break.
                    out.push('\n');
                    continue;
                }
            }
        } else {
            line.to_owned()
        };
        let mut chars = body.chars().peekable();
        while let Some(c) = chars.next() {
            if c != '\\' {
                out.push(c);
                continue;
            }
            match chars.next() {
                Some('f') => {
                    // \fB, \f(CW, \f[...]
                    match chars.next() {
                        Some('(') => {
                            chars.next();
                            chars.next();
                        }
                        Some('[') => {
                            for c in chars.by_ref() {
                                if c == ']' {
                                    break;
                                }
                            }
                        }
                        _ => {}
                    }
                }
                Some('(') => {
                    let a = chars.next();
                    let b = chars.next();
                    out.push_str(match (a, b) {
                        (Some('e'), Some('m')) | (Some('e'), Some('n')) => "-",
                        (Some('b'), Some('u')) => "*",
                        _ => " ",
                    });
                }
                Some('-') => out.push('-'),
                Some('e') | Some('\\') => out.push('\\'),
                Some('&') | Some('c') | Some('%') => {}
                Some(' ') => out.push(' '),
                Some('*') => {
                    if chars.next() == Some('(') {
                        chars.next();
                        chars.next();
                    }
                }
                Some(_) | None => {}
            }
        }
        out.push('\n');
    }
    out
}

fn load(paths: &[PathBuf], cap: usize, max_bytes: usize) -> (Vec<Doc>, Vec<String>) {
    let (files, mut notes) = list_files(paths, cap);
    let mut docs = Vec::new();
    let mut unreadable = 0;
    for f in files {
        match read_doc(&f, max_bytes) {
            Some(text) if !text.trim().is_empty() => docs.push(Doc {
                path: f.display().to_string(),
                text,
            }),
            _ => unreadable += 1,
        }
    }
    if unreadable > 0 {
        notes.push(format!(
            "{unreadable} files skipped (empty, unreadable or not UTF-8)"
        ));
    }
    (docs, notes)
}

// ---------------------------------------------------------------- configs

struct Config {
    name: String,
    hasher: Simhasher,
}

fn builder(tokenizer: Tokenizer, shingle: usize) -> simhashdb::fingerprint::SimhasherBuilder {
    Simhasher::builder()
        .tokenizer(tokenizer)
        .shingle(shingle)
        .weighting(Weighting::TermFrequency)
}

/// The configurations measured; IDF tables are built from `idf_docs`.
fn configs(idf_docs: &[&str], chinese: bool) -> Vec<Config> {
    use Weighting::{Binary, TermFrequency as Tf};
    let mut bases: Vec<(&str, Tokenizer, usize, Weighting)> = vec![
        ("words", Tokenizer::Words, 1, Tf),
        ("words-2", Tokenizer::Words, 2, Tf),
        ("words-3", Tokenizer::Words, 3, Tf),
        ("words-4", Tokenizer::Words, 4, Tf),
        ("words-bin", Tokenizer::Words, 1, Binary),
        ("words-3-bin", Tokenizer::Words, 3, Binary),
        ("chars:3", Tokenizer::CharNgrams(3), 1, Tf),
        ("chars:5", Tokenizer::CharNgrams(5), 1, Tf),
    ];
    if chinese {
        bases.push(("chinese", Tokenizer::Chinese, 1, Tf));
        bases.push(("chinese-2", Tokenizer::Chinese, 2, Tf));
    }
    let mut out = Vec::new();
    for (name, tok, w, weighting) in bases {
        let b = builder(tok, w).weighting(weighting);
        let plain = b.clone().build().expect("valid config");
        let idf = IdfTable::from_documents(&plain, idf_docs.iter());
        out.push(Config {
            name: name.to_owned(),
            hasher: plain,
        });
        out.push(Config {
            name: format!("{name}+idf"),
            hasher: b.idf(idf).build().expect("valid config"),
        });
    }
    out
}

// ---------------------------------------------------------------- ground truth

fn words_hasher() -> Simhasher {
    builder(Tokenizer::Words, 1).build().expect("valid")
}

/// All pairs `(i, j)`, `i < j`, with Jaccard >= `tmin`, exactly: prefix
/// filtering over shingles ordered rarest first, then an exact merge.
fn similar_pairs(sets: &[ShingleSet], tmin: f64) -> HashMap<(u32, u32), f64> {
    let mut df: HashMap<u64, u32> = HashMap::new();
    for s in sets {
        for &h in s.hashes() {
            *df.entry(h).or_default() += 1;
        }
    }
    let mut index: HashMap<u64, Vec<u32>> = HashMap::new();
    let mut out = HashMap::new();
    let mut seen: Vec<u32> = vec![u32::MAX; sets.len()];
    for (i, s) in sets.iter().enumerate() {
        if s.is_empty() {
            continue;
        }
        let mut order: Vec<u64> = s.hashes().to_vec();
        order.sort_by_key(|h| (df[h], *h));
        let n = order.len();
        let prefix = n - (tmin * n as f64).ceil() as usize + 1;
        for &h in &order[..prefix.min(n)] {
            let list = index.entry(h).or_default();
            for &j in list.iter() {
                if seen[j as usize] != i as u32 {
                    seen[j as usize] = i as u32;
                    let jac = sets[j as usize].jaccard(s);
                    if jac >= tmin {
                        out.insert((j, i as u32), jac);
                    }
                }
            }
            list.push(i as u32);
        }
    }
    out
}

// ---------------------------------------------------------------- metrics

#[derive(Clone, Copy, Default)]
struct Prf {
    tp: u64,
    predicted: u64,
    actual: u64,
}

impl Prf {
    fn precision(&self) -> Option<f64> {
        (self.predicted > 0).then(|| self.tp as f64 / self.predicted as f64)
    }
    fn recall(&self) -> Option<f64> {
        (self.actual > 0).then(|| self.tp as f64 / self.actual as f64)
    }
    fn f1(&self) -> Option<f64> {
        let (p, r) = (self.precision()?, self.recall()?);
        Some(if p + r == 0.0 {
            0.0
        } else {
            2.0 * p * r / (p + r)
        })
    }
}

fn fmt_opt(x: Option<f64>) -> String {
    x.map_or("–".to_owned(), |v| format!("{v:.3}"))
}

struct CorpusResult {
    name: String,
    /// [threshold][k]
    prf: Vec<Vec<Prf>>,
    /// With verification: [CORPUS_VERIFY][threshold][k].
    verified: Vec<Vec<Vec<Prf>>>,
    /// Distance histograms: true pairs (J >= 0.8) and all other pairs.
    hist_true: [u64; 65],
    hist_other: [u64; 65],
}

/// Verification settings tried on the corpus: (shingle width, threshold).
const CORPUS_VERIFY: [(usize, f64); 4] = [(2, 0.4), (2, 0.5), (2, 0.6), (3, 0.5)];

fn corpus_run(
    config: &Config,
    docs: &[&str],
    truth: &HashMap<(u32, u32), f64>,
    vsets: &[Vec<ShingleSet>],
) -> CorpusResult {
    let fps: Vec<u64> = docs.iter().map(|d| config.hasher.fingerprint(d)).collect();
    let kn = KMAX as usize + 1;
    let mut vpred = vec![vec![0u64; kn]; CORPUS_VERIFY.len()];
    let mut vtp = vec![vec![vec![0u64; kn]; THRESHOLDS.len()]; CORPUS_VERIFY.len()];
    let mut predicted = [0u64; KMAX as usize + 1];
    let mut tp = vec![[0u64; KMAX as usize + 1]; THRESHOLDS.len()];
    let mut hist_true = [0u64; 65];
    let mut hist_other = [0u64; 65];
    for i in 0..fps.len() {
        for j in i + 1..fps.len() {
            let d = (fps[i] ^ fps[j]).count_ones();
            let jac = truth.get(&(i as u32, j as u32)).copied();
            match jac {
                Some(x) if x >= 0.8 => hist_true[d as usize] += 1,
                Some(_) => {}
                None => hist_other[d as usize] += 1,
            }
            if d <= KMAX {
                predicted[d as usize] += 1;
                if let Some(x) = jac {
                    for (t, &th) in THRESHOLDS.iter().enumerate() {
                        if x >= th {
                            tp[t][d as usize] += 1;
                        }
                    }
                }
                for (v, &(w, vt)) in CORPUS_VERIFY.iter().enumerate() {
                    let sets = &vsets[w - 2];
                    if sets[i].jaccard(&sets[j]) >= vt {
                        vpred[v][d as usize] += 1;
                        for (t, &th) in THRESHOLDS.iter().enumerate() {
                            if jac.is_some_and(|x| x >= th) {
                                vtp[v][t][d as usize] += 1;
                            }
                        }
                    }
                }
            }
        }
    }
    let mut verified = Vec::new();
    for v in 0..CORPUS_VERIFY.len() {
        let mut per_t = Vec::new();
        for (t, &th) in THRESHOLDS.iter().enumerate() {
            let actual = truth.values().filter(|&&x| x >= th).count() as u64;
            let (mut cp, mut ct) = (0, 0);
            per_t.push(
                (0..kn)
                    .map(|k| {
                        cp += vpred[v][k];
                        ct += vtp[v][t][k];
                        Prf {
                            tp: ct,
                            predicted: cp,
                            actual,
                        }
                    })
                    .collect::<Vec<_>>(),
            );
        }
        verified.push(per_t);
    }
    let mut prf = Vec::new();
    for (t, &th) in THRESHOLDS.iter().enumerate() {
        let actual = truth.values().filter(|&&x| x >= th).count() as u64;
        let mut row = Vec::new();
        let (mut cp, mut ct) = (0, 0);
        for k in 0..=KMAX as usize {
            cp += predicted[k];
            ct += tp[t][k];
            row.push(Prf {
                tp: ct,
                predicted: cp,
                actual,
            });
        }
        prf.push(row);
    }
    CorpusResult {
        name: config.name.clone(),
        prf,
        verified,
        hist_true,
        hist_other,
    }
}

// ---------------------------------------------------------------- synthetic edits

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

#[derive(Clone, Copy, PartialEq)]
enum Lang {
    English,
    Chinese,
}

impl Lang {
    fn name(self) -> &'static str {
        match self {
            Lang::English => "English",
            Lang::Chinese => "Chinese",
        }
    }
}

/// A text as paragraphs of units (English words or Chinese characters).
#[derive(Clone)]
struct Units {
    paras: Vec<Vec<String>>,
}

impl Units {
    fn render(&self, lang: Lang) -> String {
        self.paras
            .iter()
            .map(|p| match lang {
                Lang::English => p.join(" "),
                Lang::Chinese => {
                    // Characters of Chinese text are written together; two
                    // neighbouring runs of other characters keep a space.
                    let mut out = String::new();
                    let mut prev_han = true;
                    for u in p {
                        let han = u.chars().next().is_some_and(is_han);
                        if !han && !prev_han {
                            out.push(' ');
                        }
                        out.push_str(u);
                        prev_han = han;
                    }
                    out
                }
            })
            .collect::<Vec<_>>()
            .join("\n\n")
    }
    fn len(&self) -> usize {
        self.paras.iter().map(Vec::len).sum()
    }
    /// (paragraph, index) of flat position `pos`.
    fn locate(&self, mut pos: usize) -> (usize, usize) {
        for (p, para) in self.paras.iter().enumerate() {
            if pos < para.len() {
                return (p, pos);
            }
            pos -= para.len();
        }
        let last = self.paras.len() - 1;
        (last, self.paras[last].len())
    }
}

fn units_of(text: &str, lang: Lang) -> Vec<Vec<String>> {
    text.split("\n\n")
        .map(|p| match lang {
            Lang::English => p.split_whitespace().map(str::to_owned).collect(),
            Lang::Chinese => {
                // Each Han character is a unit; so is each maximal run of
                // other non-space characters.
                let mut units = Vec::new();
                for piece in p.split_whitespace() {
                    let mut run = String::new();
                    for c in piece.chars() {
                        if is_han(c) {
                            if !run.is_empty() {
                                units.push(std::mem::take(&mut run));
                            }
                            units.push(c.to_string());
                        } else {
                            run.push(c);
                        }
                    }
                    if !run.is_empty() {
                        units.push(run);
                    }
                }
                units
            }
        })
        .filter(|p: &Vec<String>| !p.is_empty())
        .collect()
}

/// Cuts non-overlapping windows of about `len` characters (whole units, whole
/// paragraphs kept apart) from a source text.
fn windows(text: &str, lang: Lang, len: usize) -> Vec<Units> {
    let paras = units_of(text, lang);
    let mut out = Vec::new();
    let mut cur = Units { paras: Vec::new() };
    let mut chars = 0usize;
    let sep = usize::from(lang == Lang::English);
    for para in paras {
        if !cur.paras.is_empty() && cur.paras.last().is_some_and(|p| !p.is_empty()) {
            cur.paras.push(Vec::new());
            chars += 2;
        } else if cur.paras.is_empty() {
            cur.paras.push(Vec::new());
        }
        for u in para {
            let add = u.chars().count() + sep;
            if chars + add > len {
                cur.paras.retain(|p| !p.is_empty());
                if chars >= len * 9 / 10 && !cur.paras.is_empty() {
                    out.push(cur);
                }
                cur = Units {
                    paras: vec![Vec::new()],
                };
                chars = 0;
            }
            chars += add;
            cur.paras.last_mut().expect("one paragraph").push(u);
        }
    }
    out
}

fn is_han(c: char) -> bool {
    matches!(c as u32, 0x3400..=0x4DBF | 0x4E00..=0x9FFF | 0xF900..=0xFAFF | 0x20000..=0x2FA1F)
}

/// Mostly prose: at least 70 % letters (English) or 60 % Han characters
/// (Chinese) among the non-space characters, and at least 4 units.
fn plausible(u: &Units, lang: Lang) -> bool {
    let text = u.render(lang);
    let total = text.chars().filter(|c| !c.is_whitespace()).count();
    let good = match lang {
        Lang::English => text.chars().filter(|c| c.is_alphabetic()).count() * 10 >= total * 7,
        Lang::Chinese => text.chars().filter(|&c| is_han(c)).count() * 10 >= total * 6,
    };
    total > 0 && good && u.len() >= 4
}

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
enum Edit {
    Substitute(u32),
    Insert(u32),
    Delete(u32),
    Move,
}

impl Edit {
    fn all() -> Vec<Edit> {
        let mut v = Vec::new();
        for r in [1, 2, 5, 10] {
            v.push(Edit::Substitute(r));
        }
        for r in [1, 2, 5, 10] {
            v.push(Edit::Insert(r));
        }
        for r in [1, 2, 5, 10] {
            v.push(Edit::Delete(r));
        }
        v.push(Edit::Move);
        v
    }
    fn label(self) -> String {
        match self {
            Edit::Substitute(r) => format!("sub {r}%"),
            Edit::Insert(r) => format!("ins {r}%"),
            Edit::Delete(r) => format!("del {r}%"),
            Edit::Move => "move".into(),
        }
    }
}

fn apply(base: &Units, edit: Edit, vocab: &[String], rng: &mut Rng) -> Units {
    let mut u = base.clone();
    let n = u.len();
    let count = |r: u32| ((n as f64 * f64::from(r) / 100.0).round() as usize).max(1);
    match edit {
        Edit::Substitute(r) => {
            for _ in 0..count(r) {
                let (p, i) = u.locate(rng.below(u.len()));
                u.paras[p][i] = vocab[rng.below(vocab.len())].clone();
            }
        }
        Edit::Insert(r) => {
            for _ in 0..count(r) {
                let (p, i) = u.locate(rng.below(u.len() + 1));
                u.paras[p].insert(i, vocab[rng.below(vocab.len())].clone());
            }
        }
        Edit::Delete(r) => {
            for _ in 0..count(r).min(n.saturating_sub(1)) {
                let (p, i) = u.locate(rng.below(u.len()));
                u.paras[p].remove(i);
            }
            u.paras.retain(|p| !p.is_empty());
        }
        Edit::Move => {
            if u.paras.len() >= 3 {
                let from = rng.below(u.paras.len());
                let para = u.paras.remove(from);
                let mut to = rng.below(u.paras.len() + 1);
                if to == from {
                    to = (to + 1) % (u.paras.len() + 1);
                }
                u.paras.insert(to, para);
            } else {
                // Move a block of a quarter of the units to another place.
                let mut flat: Vec<String> = u.paras.concat();
                let block = (flat.len() / 4).max(1);
                let from = rng.below(flat.len() - block + 1);
                let moved: Vec<String> = flat.drain(from..from + block).collect();
                let mut to = rng.below(flat.len() + 1);
                if to == from {
                    to = if from == 0 { flat.len() } else { 0 };
                }
                flat.splice(to..to, moved);
                u.paras = vec![flat];
            }
        }
    }
    u
}

struct Pool {
    lang: Lang,
    len: usize,
    /// Texts; family of each; edit of each (None for the base).
    texts: Vec<String>,
    family: Vec<u32>,
    edit: Vec<Option<Edit>>,
    bases: usize,
    /// Whether fallback sources were added.
    fallback: bool,
}

fn build_pool(sources: &[&str], lang: Lang, len: usize, want: usize, seed: u64) -> Pool {
    let mut rng = Rng(seed);
    let mut cands: Vec<Units> = Vec::new();
    for s in sources {
        cands.extend(
            windows(s, lang, len)
                .into_iter()
                .filter(|u| plausible(u, lang)),
        );
    }
    // Deterministic shuffle.
    for i in (1..cands.len()).rev() {
        let j = rng.below(i + 1);
        cands.swap(i, j);
    }
    // Keep bases that are not near-duplicates of each other (word 2-shingle
    // Jaccard < 0.2), so that pairs of different bases are true negatives.
    let wh = words_hasher();
    let mut kept: Vec<(Units, ShingleSet)> = Vec::new();
    for c in cands {
        if kept.len() >= want {
            break;
        }
        let set = ShingleSet::from_text(&wh, &c.render(lang), 2);
        if kept.iter().all(|(_, s)| s.jaccard(&set) < 0.2) {
            kept.push((c, set));
        }
    }
    let vocab: Vec<String> = kept
        .iter()
        .flat_map(|(u, _)| u.paras.iter().flatten().cloned())
        .collect();
    let mut pool = Pool {
        lang,
        len,
        texts: Vec::new(),
        family: Vec::new(),
        edit: Vec::new(),
        bases: kept.len(),
        fallback: false,
    };
    for (f, (base, _)) in kept.iter().enumerate() {
        if f < 3 && std::env::var_os("QUALITY_DEBUG").is_some() {
            eprintln!(
                "BASE {} {len}: {:?}",
                lang.name(),
                base.render(lang).chars().take(160).collect::<String>()
            );
        }
        pool.texts.push(base.render(lang));
        pool.family.push(f as u32);
        pool.edit.push(None);
        for e in Edit::all() {
            pool.texts
                .push(apply(base, e, &vocab, &mut rng).render(lang));
            pool.family.push(f as u32);
            pool.edit.push(Some(e));
        }
    }
    pool
}

/// The configurations plotted for short texts.
const SHORT_PLOTTED: [&str; 4] = ["words", "words-bin", "chars:3", "chinese"];

/// Verification settings tried: (shingle width, Jaccard threshold).
const VERIFY: [(usize, f64); 6] = [(1, 0.5), (1, 0.6), (2, 0.3), (2, 0.4), (2, 0.5), (3, 0.3)];

struct PoolResult {
    config: String,
    /// Plain simhash, by k = 0..=KCAND_MAX.
    plain: Vec<Prf>,
    /// Recall of each edit at k = 0..=KCAND_MAX: [edit][k].
    per_edit: Vec<(Edit, Vec<f64>)>,
    /// With verification: [VERIFY][k].
    verified: Vec<Vec<Prf>>,
}

fn pool_run(pool: &Pool, config: &Config) -> PoolResult {
    let fps: Vec<u64> = pool
        .texts
        .iter()
        .map(|t| config.hasher.fingerprint(t))
        .collect();
    let wh = words_hasher();
    let widths: &[usize] = if pool.len <= 140 { &[1, 2, 3] } else { &[] };
    let sets: Vec<Vec<ShingleSet>> = widths
        .iter()
        .map(|&w| {
            pool.texts
                .iter()
                .map(|t| ShingleSet::from_text(&wh, t, w))
                .collect()
        })
        .collect();
    let kn = KCAND_MAX as usize + 1;
    // Verification is measured on short texts only.
    let verify = pool.len <= 140;
    let mut pos_hist = vec![0u64; kn];
    let mut neg_hist = vec![0u64; kn];
    let mut pos_total = 0u64;
    let mut vpos = vec![vec![0u64; kn]; VERIFY.len()];
    let mut vneg = vec![vec![0u64; kn]; VERIFY.len()];
    let edits = Edit::all();
    let mut edit_hist: HashMap<Edit, (Vec<u64>, u64)> = HashMap::new();
    for i in 0..fps.len() {
        for j in i + 1..fps.len() {
            let same = pool.family[i] == pool.family[j];
            let positive = same && (pool.edit[i].is_none() || pool.edit[j].is_none());
            if same && !positive {
                continue; // two edits of one base: neither positive nor negative
            }
            if positive {
                pos_total += 1;
                let e = pool.edit[j].or(pool.edit[i]).expect("one is an edit");
                edit_hist.entry(e).or_insert_with(|| (vec![0; kn], 0)).1 += 1;
            }
            let d = (fps[i] ^ fps[j]).count_ones() as usize;
            if d >= kn {
                continue;
            }
            if positive {
                pos_hist[d] += 1;
                let e = pool.edit[j].or(pool.edit[i]).expect("one is an edit");
                edit_hist.get_mut(&e).expect("counted").0[d] += 1;
            } else {
                neg_hist[d] += 1;
                if d <= 1 && std::env::var_os("QUALITY_DEBUG").is_some() {
                    let cut = |t: &str| t.chars().take(200).collect::<String>();
                    eprintln!(
                        "NEG {} {} {} d={d}\n  A: {:?}\n  B: {:?}",
                        pool.lang.name(),
                        pool.len,
                        config.name,
                        cut(&pool.texts[i]),
                        cut(&pool.texts[j])
                    );
                }
            }
            if !verify {
                continue;
            }
            for (v, &(w, th)) in VERIFY.iter().enumerate() {
                if sets[w - 1][i].jaccard(&sets[w - 1][j]) >= th {
                    if positive {
                        vpos[v][d] += 1;
                    } else {
                        vneg[v][d] += 1;
                    }
                }
            }
        }
    }
    let cumulate = |pos: &[u64], neg: &[u64]| -> Vec<Prf> {
        let (mut tp, mut pr) = (0, 0);
        (0..kn)
            .map(|k| {
                tp += pos[k];
                pr += pos[k] + neg[k];
                Prf {
                    tp,
                    predicted: pr,
                    actual: pos_total,
                }
            })
            .collect()
    };
    let per_edit = edits
        .iter()
        .map(|&e| {
            let (h, total) = &edit_hist[&e];
            let mut acc = 0;
            let recalls = h
                .iter()
                .map(|&c| {
                    acc += c;
                    acc as f64 / (*total).max(1) as f64
                })
                .collect();
            (e, recalls)
        })
        .collect();
    PoolResult {
        config: config.name.clone(),
        plain: cumulate(&pos_hist, &neg_hist),
        per_edit,
        verified: (0..VERIFY.len())
            .map(|v| cumulate(&vpos[v], &vneg[v]))
            .collect(),
    }
}

// ---------------------------------------------------------------- plots

/// One plot panel: its title and its named series (a value per k).
type Panel = (String, Vec<(String, Vec<f64>)>);

fn plot_grid(
    path: &Path,
    title: &str,
    panels: &[Panel],
    kmax: u32,
) -> Result<(), Box<dyn std::error::Error>> {
    use plotters::prelude::*;
    let cols = 4usize;
    let rows = panels.len().div_ceil(cols);
    let root = SVGBackend::new(path, (1200, 40 + 260 * rows as u32)).into_drawing_area();
    root.fill(&WHITE)?;
    let root = root.titled(title, ("sans-serif", 20))?;
    let areas = root.split_evenly((rows, cols));
    let colors = [BLUE, RED, GREEN, MAGENTA, BLACK, CYAN];
    for (area, (name, series)) in areas.iter().zip(panels) {
        let mut chart = ChartBuilder::on(area)
            .caption(name, ("sans-serif", 15))
            .margin(8)
            .x_label_area_size(28)
            .y_label_area_size(36)
            .build_cartesian_2d(0u32..kmax, 0f64..1.02f64)?;
        chart
            .configure_mesh()
            .x_desc("k")
            .x_labels(kmax as usize / 2 + 1)
            .y_labels(6)
            .light_line_style(WHITE.mix(0.0))
            .draw()?;
        for (s, (label, ys)) in series.iter().enumerate() {
            let color = colors[s % colors.len()];
            chart
                .draw_series(LineSeries::new(
                    ys.iter()
                        .enumerate()
                        .filter(|(_, y)| y.is_finite())
                        .map(|(k, &y)| (k as u32, y)),
                    color.stroke_width(2),
                ))?
                .label(label.as_str())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], color));
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::LowerRight)
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .label_font(("sans-serif", 11))
            .draw()?;
    }
    root.present()?;
    Ok(())
}

fn nan(x: Option<f64>) -> f64 {
    x.unwrap_or(f64::NAN)
}

// ---------------------------------------------------------------- main

fn main() {
    let args = parse_args();
    let started = std::time::Instant::now();
    std::fs::create_dir_all(&args.out).unwrap_or_else(|e| die(&format!("{e}")));
    let mut md = String::new();
    // The command line, with files named one by one counted rather than listed.
    let mut cmdline: Vec<String> = Vec::new();
    let mut files = 0;
    let mut prev_option = false;
    for a in std::env::args().skip(1) {
        if !prev_option && !a.starts_with("--") && Path::new(&a).is_file() {
            files += 1;
        } else {
            cmdline.push(a.clone());
        }
        prev_option = a.starts_with("--");
    }
    if files > 0 {
        cmdline.push(format!("[{files} files]"));
    }
    writeln!(
        md,
        "# Quality results\n\nGenerated by `cargo run --release --example quality -- {}`.\n",
        cmdline.join(" ")
    )
    .unwrap();

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

    // Summary: best F1 per config and threshold.
    writeln!(
        md,
        "### Best k per configuration (largest F1; ties to the smaller k)\n"
    )
    .unwrap();
    write!(md, "| config |").unwrap();
    for th in THRESHOLDS {
        write!(md, " J>={th}: k | P | R | F1 |").unwrap();
    }
    writeln!(md).unwrap();
    writeln!(md, "|---|{}", "---|---|---|---|".repeat(THRESHOLDS.len())).unwrap();
    for r in &results {
        write!(md, "| {} |", r.name).unwrap();
        for t in 0..THRESHOLDS.len() {
            let (k, best) = r.prf[t]
                .iter()
                .enumerate()
                .max_by(|a, b| {
                    let fa = a.1.f1().unwrap_or(0.0);
                    let fb = b.1.f1().unwrap_or(0.0);
                    fa.partial_cmp(&fb).expect("finite").then(b.0.cmp(&a.0))
                })
                .expect("k values");
            write!(
                md,
                " {k} | {} | {} | {} |",
                fmt_opt(best.precision()),
                fmt_opt(best.recall()),
                fmt_opt(best.f1())
            )
            .unwrap();
        }
        writeln!(md).unwrap();
    }
    writeln!(md).unwrap();

    for (t, th) in THRESHOLDS.iter().enumerate() {
        writeln!(
            md,
            "### Precision / recall against k, true pairs: Jaccard >= {th}\n"
        )
        .unwrap();
        write!(md, "| k |").unwrap();
        for r in &results {
            write!(md, " {} |", r.name).unwrap();
        }
        writeln!(md).unwrap();
        writeln!(md, "|---|{}", "---|".repeat(results.len())).unwrap();
        for k in 0..=KMAX as usize {
            write!(md, "| {k} |").unwrap();
            for r in &results {
                let p = r.prf[t][k];
                write!(
                    md,
                    " {} / {} |",
                    fmt_opt(p.precision()),
                    fmt_opt(p.recall())
                )
                .unwrap();
            }
            writeln!(md).unwrap();
        }
        writeln!(md, "\n(each cell: precision / recall)\n").unwrap();
        let panels: Vec<Panel> = results
            .iter()
            .map(|r| {
                (
                    r.name.clone(),
                    vec![
                        (
                            "precision".to_owned(),
                            r.prf[t].iter().map(|p| nan(p.precision())).collect(),
                        ),
                        (
                            "recall".to_owned(),
                            r.prf[t].iter().map(|p| nan(p.recall())).collect(),
                        ),
                    ],
                )
            })
            .collect();
        let file = format!("corpus-j{:02}.svg", (th * 10.0).round() as u32);
        plot_grid(
            &args.out.join(&file),
            &format!(
                "Corpus: precision and recall against k (true pairs: 5-shingle Jaccard >= {th})"
            ),
            &panels,
            KMAX,
        )
        .unwrap_or_else(|e| die(&format!("plot: {e}")));
        writeln!(md, "![plot]({file})\n").unwrap();
    }

    writeln!(
        md,
        "### Distance distribution: true pairs (J >= 0.8) vs all other pairs\n"
    )
    .unwrap();
    writeln!(
        md,
        "Cumulative share of pairs within distance d.\n\n| config | pairs | d<=0 | d<=3 | d<=6 | d<=10 | d<=16 | median |"
    )
    .unwrap();
    writeln!(md, "|---|---|---|---|---|---|---|---|").unwrap();
    for r in &results {
        for (label, h) in [("true", &r.hist_true), ("other", &r.hist_other)] {
            let total: u64 = h.iter().sum();
            let cum = |d: usize| h[..=d].iter().sum::<u64>() as f64 / total.max(1) as f64;
            let mut acc = 0;
            let median = h
                .iter()
                .position(|&c| {
                    acc += c;
                    acc * 2 >= total
                })
                .unwrap_or(64);
            let fmt = |x: f64| {
                if x > 0.0 && x < 0.001 {
                    format!("{x:.1e}")
                } else {
                    format!("{x:.3}")
                }
            };
            writeln!(
                md,
                "| {} {label} | {total} | {} | {} | {} | {} | {} | {median} |",
                r.name,
                fmt(cum(0)),
                fmt(cum(3)),
                fmt(cum(6)),
                fmt(cum(10)),
                fmt(cum(16))
            )
            .unwrap();
        }
    }
    writeln!(md).unwrap();

    writeln!(
        md,
        "### Candidates within k, then verified by word-shingle Jaccard\n\n\
         A pair is reported when its fingerprints are within k and the Jaccard \
         similarity of its word w-shingles is at least T (`Jw>=T`). Cells: \
         precision / recall against the 5-shingle truth at 0.8 (and at 0.5).\n"
    )
    .unwrap();
    write!(md, "| config |").unwrap();
    for (w, vt) in CORPUS_VERIFY {
        for k in [3, 6, 10] {
            write!(md, " J{w}>={vt}, k={k} |").unwrap();
        }
    }
    writeln!(md).unwrap();
    writeln!(md, "|---|{}", "---|".repeat(CORPUS_VERIFY.len() * 3)).unwrap();
    for r in &results {
        write!(md, "| {} |", r.name).unwrap();
        for v in 0..CORPUS_VERIFY.len() {
            for k in [3, 6, 10] {
                let (a, b) = (r.verified[v][1][k], r.verified[v][0][k]);
                write!(
                    md,
                    " {} / {} ({} / {}) |",
                    fmt_opt(a.precision()),
                    fmt_opt(a.recall()),
                    fmt_opt(b.precision()),
                    fmt_opt(b.recall())
                )
                .unwrap();
            }
        }
        writeln!(md).unwrap();
    }
    writeln!(md).unwrap();

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
    let en_cfgs = &cfgs;
    let zh_cfgs = configs(&zh_refs, cfg!(feature = "chinese"));

    let mut short_panels: Vec<Panel> = Vec::new();
    let mut short_summary = String::new();
    for lang in [Lang::English, Lang::Chinese] {
        let (sources, lang_cfgs) = match lang {
            Lang::English => (&texts, en_cfgs),
            Lang::Chinese => (&zh_refs, &zh_cfgs),
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
            report_pool(&mut md, &pool, &rs);
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
    writeln!(md, "Run time: {:.0} s.", started.elapsed().as_secs_f64()).unwrap();
    std::fs::write(args.out.join("results.md"), md).unwrap_or_else(|e| die(&format!("{e}")));
    eprintln!("wrote {}", args.out.join("results.md").display());
}

fn short_target(out: &mut String, pool: &Pool, r: &PoolResult) {
    let meets = |p: &Prf| p.precision().unwrap_or(0.0) >= 0.95 && p.recall().unwrap_or(0.0) >= 0.90;
    let cell = |row: &[Prf]| -> String {
        match row.iter().position(meets) {
            Some(k) => format!(
                "{k}: {} / {}",
                fmt_opt(row[k].precision()),
                fmt_opt(row[k].recall())
            ),
            None => {
                let best = row
                    .iter()
                    .map(|p| p.recall().unwrap_or(0.0))
                    .fold(0.0, f64::max);
                format!("no (max R {best:.3})")
            }
        }
    };
    let _ = writeln!(
        out,
        "| {} {} | {} | {} | {} |",
        pool.lang.name(),
        pool.len,
        r.config,
        cell(&r.plain),
        r.verified
            .iter()
            .map(|v| cell(v))
            .collect::<Vec<_>>()
            .join(" | ")
    );
}

fn report_pool(md: &mut String, pool: &Pool, rs: &[PoolResult]) {
    let positives = pool.bases * Edit::all().len();
    let families = pool.family.len();
    let _ = writeln!(
        md,
        "### {} {} characters: {} bases, {} texts, {} true pairs (base, edit){}\n",
        pool.lang.name(),
        pool.len,
        pool.bases,
        families,
        positives,
        if pool.fallback {
            "; with the fallback sources"
        } else {
            ""
        }
    );
    let ks = [0usize, 1, 2, 3, 4, 5, 6, 8, 10, 12, 16, 20];
    let _ = writeln!(md, "Plain simhash, precision / recall against k:\n");
    let _ = write!(md, "| config |");
    for k in ks {
        let _ = write!(md, " k={k} |");
    }
    let _ = writeln!(md);
    let _ = writeln!(md, "|---|{}", "---|".repeat(ks.len()));
    for r in rs {
        let _ = write!(md, "| {} |", r.config);
        for k in ks {
            let p = r.plain[k];
            let _ = write!(
                md,
                " {} / {} |",
                fmt_opt(p.precision()),
                fmt_opt(p.recall())
            );
        }
        let _ = writeln!(md);
    }
    let _ = writeln!(md);
    let _ = writeln!(md, "Recall per edit at k = 3 and k = 6:\n");
    let _ = write!(md, "| config |");
    for (e, _) in &rs[0].per_edit {
        let _ = write!(md, " {} |", e.label());
    }
    let _ = writeln!(md);
    let _ = writeln!(md, "|---|{}", "---|".repeat(rs[0].per_edit.len()));
    for r in rs {
        let _ = write!(md, "| {} |", r.config);
        for (_, rec) in &r.per_edit {
            let _ = write!(md, " {:.2} / {:.2} |", rec[3], rec[6]);
        }
        let _ = writeln!(md);
    }
    let _ = writeln!(md);
}
