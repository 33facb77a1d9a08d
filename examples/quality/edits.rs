//! Synthetic edits: base texts cut from the sources, edited, in pools.

use simhashdb::fingerprint::fmix64;
use simhashdb::recheck::ShingleSet;

use crate::truth::words_hasher;

pub(crate) struct Rng(pub(crate) u64);

impl Rng {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        fmix64(self.0)
    }
    pub(crate) fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

#[derive(Clone, Copy, PartialEq)]
pub(crate) enum Lang {
    English,
    Chinese,
}

impl Lang {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Lang::English => "English",
            Lang::Chinese => "Chinese",
        }
    }
}

/// A text as paragraphs of units (English words or Chinese characters).
#[derive(Clone)]
pub(crate) struct Units {
    pub(crate) paras: Vec<Vec<String>>,
}

impl Units {
    pub(crate) fn render(&self, lang: Lang) -> String {
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
    pub(crate) fn len(&self) -> usize {
        self.paras.iter().map(Vec::len).sum()
    }
    /// (paragraph, index) of flat position `pos`.
    pub(crate) fn locate(&self, mut pos: usize) -> (usize, usize) {
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

pub(crate) fn units_of(text: &str, lang: Lang) -> Vec<Vec<String>> {
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
pub(crate) fn windows(text: &str, lang: Lang, len: usize) -> Vec<Units> {
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

pub(crate) fn is_han(c: char) -> bool {
    matches!(c as u32, 0x3400..=0x4DBF | 0x4E00..=0x9FFF | 0xF900..=0xFAFF | 0x20000..=0x2FA1F)
}

/// Mostly prose: at least 70 % letters (English) or 60 % Han characters
/// (Chinese) among the non-space characters, and at least 4 units.
pub(crate) fn plausible(u: &Units, lang: Lang) -> bool {
    let text = u.render(lang);
    let total = text.chars().filter(|c| !c.is_whitespace()).count();
    let good = match lang {
        Lang::English => text.chars().filter(|c| c.is_alphabetic()).count() * 10 >= total * 7,
        Lang::Chinese => text.chars().filter(|&c| is_han(c)).count() * 10 >= total * 6,
    };
    total > 0 && good && u.len() >= 4
}

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub(crate) enum Edit {
    Substitute(u32),
    Insert(u32),
    Delete(u32),
    Move,
}

impl Edit {
    pub(crate) fn all() -> Vec<Edit> {
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
    pub(crate) fn label(self) -> String {
        match self {
            Edit::Substitute(r) => format!("sub {r}%"),
            Edit::Insert(r) => format!("ins {r}%"),
            Edit::Delete(r) => format!("del {r}%"),
            Edit::Move => "move".into(),
        }
    }
}

pub(crate) fn apply(base: &Units, edit: Edit, vocab: &[String], rng: &mut Rng) -> Units {
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

pub(crate) struct Pool {
    pub(crate) lang: Lang,
    pub(crate) len: usize,
    /// Texts; family of each; edit of each (None for the base).
    pub(crate) texts: Vec<String>,
    pub(crate) family: Vec<u32>,
    pub(crate) edit: Vec<Option<Edit>>,
    pub(crate) bases: usize,
    /// Whether fallback sources were added.
    pub(crate) fallback: bool,
}

pub(crate) fn build_pool(sources: &[&str], lang: Lang, len: usize, want: usize, seed: u64) -> Pool {
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
