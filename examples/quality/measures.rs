//! Precision and recall: of each configuration on the corpus and on each pool of synthetic edits.

use std::collections::HashMap;

use simhashdb::recheck::ShingleSet;

use crate::configs::Config;
use crate::edits::{Edit, Pool};
use crate::truth::words_hasher;
use crate::{KCAND_MAX, KMAX, THRESHOLDS};

#[derive(Clone, Copy, Default)]
pub(crate) struct Prf {
    pub(crate) tp: u64,
    pub(crate) predicted: u64,
    pub(crate) actual: u64,
}

impl Prf {
    pub(crate) fn precision(&self) -> Option<f64> {
        (self.predicted > 0).then(|| self.tp as f64 / self.predicted as f64)
    }
    pub(crate) fn recall(&self) -> Option<f64> {
        (self.actual > 0).then(|| self.tp as f64 / self.actual as f64)
    }
    pub(crate) fn f1(&self) -> Option<f64> {
        let (p, r) = (self.precision()?, self.recall()?);
        Some(if p + r == 0.0 {
            0.0
        } else {
            2.0 * p * r / (p + r)
        })
    }
}

pub(crate) fn fmt_opt(x: Option<f64>) -> String {
    x.map_or("–".to_owned(), |v| format!("{v:.3}"))
}

pub(crate) struct CorpusResult {
    pub(crate) name: String,
    /// [threshold][k]
    pub(crate) prf: Vec<Vec<Prf>>,
    /// With verification: [CORPUS_VERIFY][threshold][k].
    pub(crate) verified: Vec<Vec<Vec<Prf>>>,
    /// Distance histograms: true pairs (J >= 0.8) and all other pairs.
    pub(crate) hist_true: [u64; 65],
    pub(crate) hist_other: [u64; 65],
}

/// Verification settings tried on the corpus: (shingle width, threshold).
pub(crate) const CORPUS_VERIFY: [(usize, f64); 4] = [(2, 0.4), (2, 0.5), (2, 0.6), (3, 0.5)];

pub(crate) fn corpus_run(
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

/// Verification settings tried: (shingle width, Jaccard threshold).
pub(crate) const VERIFY: [(usize, f64); 6] =
    [(1, 0.5), (1, 0.6), (2, 0.3), (2, 0.4), (2, 0.5), (3, 0.3)];

pub(crate) struct PoolResult {
    pub(crate) config: String,
    /// Plain simhash, by k = 0..=KCAND_MAX.
    pub(crate) plain: Vec<Prf>,
    /// Recall of each edit at k = 0..=KCAND_MAX: [edit][k].
    pub(crate) per_edit: Vec<(Edit, Vec<f64>)>,
    /// With verification: [VERIFY][k].
    pub(crate) verified: Vec<Vec<Prf>>,
}

pub(crate) fn pool_run(pool: &Pool, config: &Config) -> PoolResult {
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
