//! Verified queries by text (`Index::query_text`) against a brute-force
//! reference that computes the same values (fingerprint, sketch,
//! similarity) from the texts: a document with a sketch is a match when its
//! similarity reaches the threshold among the candidates within the search
//! distance; one without a sketch when its fingerprint lies within k.

use simhashdb::sketch::{Sketch, TextValues};
use simhashdb::{Index, Options, Rule, Simhasher, hamming};

fn words_of(path: &str) -> Vec<String> {
    let text = std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(path))
        .unwrap();
    text.split_whitespace().map(str::to_owned).collect()
}

fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// `words` with about `percent` % of them replaced by other words of the
/// same text (a shared vocabulary).
fn edited(words: &[String], percent: u64, state: &mut u64) -> String {
    words
        .iter()
        .map(|w| {
            if splitmix(state) % 100 < percent {
                words[(splitmix(state) % words.len() as u64) as usize].clone()
            } else {
                w.clone()
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Windows of two license texts and a Chinese text, and edited copies:
/// texts of one vocabulary at every distance.
fn texts() -> Vec<String> {
    let mut state = 38;
    let mut out = Vec::new();
    for (path, len, step) in [
        ("tests/data/apache-2.0.txt", 40, 97),
        ("tests/data/mpl-2.0.txt", 120, 211),
        ("tests/data/apache-2.0.txt", 600, 700),
    ] {
        let words = words_of(path);
        let mut start = 0;
        while start + len <= words.len() {
            let window = &words[start..start + len];
            out.push(window.join(" "));
            for percent in [1, 3, 10, 40] {
                out.push(edited(window, percent, &mut state));
            }
            start += step;
        }
    }
    let zh: Vec<char> = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/zh-prose.txt"),
    )
    .unwrap()
    .chars()
    .filter(|c| !c.is_whitespace())
    .collect();
    for start in (0..zh.len().saturating_sub(300)).step_by(400).take(12) {
        let window: String = zh[start..start + 300].iter().collect();
        out.push(window.clone());
        // Edited reposts: 2 % and 5 % of the characters substituted.
        for percent in [2, 5] {
            let copy: String = window
                .chars()
                .map(|c| {
                    if splitmix(&mut state) % 100 < percent {
                        zh[(splitmix(&mut state) % zh.len() as u64) as usize]
                    } else {
                        c
                    }
                })
                .collect();
            out.push(copy);
        }
    }
    out
}

/// (id, rule, similarity) of each match, by (distance, id).
type Answer = Vec<(u64, Rule, Option<f64>)>;

/// The reference: every stored text's values computed from the text.
fn reference(
    hasher: &Simhasher,
    stored: &[(u64, String, bool)],
    query: &str,
    plan_k: u32,
    k: u32,
) -> Answer {
    let values = TextValues::of(hasher, query);
    let Some(fp) = hasher.fingerprint_checked(query) else {
        return Vec::new();
    };
    let sketch = Sketch::from_text(hasher, query);
    assert_eq!(values.sketch, sketch);
    let threshold = Sketch::threshold_for(query);
    let tokens = hasher.tokens(query).len();
    let candidate_k = match tokens {
        0..50 => 8,
        50..500 => 6,
        _ => 4,
    };
    let search_k = u32::min(candidate_k, plan_k).max(k);
    let mut out: Vec<(u32, u64, Rule, Option<f64>)> = Vec::new();
    for (id, text, sketched) in stored {
        let theirs = hasher.fingerprint_checked(text).unwrap();
        let d = hamming(theirs, fp);
        if d > search_k {
            continue;
        }
        if *sketched {
            let s = Sketch::from_text(hasher, text).similarity(&sketch);
            if s >= threshold {
                out.push((d, *id, Rule::Sketch, Some(s)));
            }
        } else if d <= k {
            out.push((d, *id, Rule::Fingerprint, None));
        }
    }
    out.sort_by_key(|&(d, id, _, _)| (d, id));
    out.into_iter().map(|(_, id, r, s)| (id, r, s)).collect()
}

fn answer(index: &Index, query: &str, k: u32) -> Answer {
    index
        .query_text(query, k)
        .unwrap()
        .into_iter()
        .map(|m| (m.doc.id, m.rule, m.similarity))
        .collect()
}

#[test]
fn verified_queries_answer_as_the_reference_computed_from_the_texts() {
    let texts = texts();
    assert!(texts.len() > 100, "{}", texts.len());
    let temp = tempfile::tempdir().unwrap();
    let plan_k = 6;
    let index = Index::open(
        temp.path().join("index"),
        Options::default().k(plan_k).merge_policy(None),
    )
    .unwrap();
    let hasher = index.simhasher().unwrap();
    // Two of every three texts stored with their sketch, the third by its
    // fingerprint alone; queries are every text.
    let mut stored = Vec::new();
    for (i, text) in texts.iter().enumerate() {
        let id = i as u64;
        let sketched = i % 3 != 2;
        if sketched {
            index.insert_text(id, text, None).unwrap();
        } else {
            index
                .insert(id, hasher.fingerprint_checked(text).unwrap())
                .unwrap();
        }
        stored.push((id, text.clone(), sketched));
        if i == texts.len() / 2 {
            index.flush().unwrap();
        }
    }
    let mut rules = [0usize; 2];
    let mut rejected = 0usize;
    for stage in ["memtable and a segment", "compacted"] {
        if stage == "compacted" {
            index.flush().unwrap();
            index.compact().unwrap();
        }
        for k in [3, plan_k] {
            for query in &texts {
                let want = reference(&hasher, &stored, query, plan_k, k);
                let got = answer(&index, query, k);
                assert_eq!(got, want, "{stage}, k {k}: {query:.60}");
                for (_, rule, _) in &got {
                    rules[usize::from(*rule == Rule::Fingerprint)] += 1;
                }
                let plain = index
                    .query(hasher.fingerprint_checked(query).unwrap(), k)
                    .unwrap();
                rejected += plain
                    .iter()
                    .filter(|m| m.sketch.is_some() && !got.iter().any(|g| g.0 == m.id))
                    .count();
            }
        }
    }
    // Both rules decided some answers, and the sketch turned away some
    // documents that the fingerprint alone would have answered.
    assert!(rules[0] > 0 && rules[1] > 0, "{rules:?}");
    assert!(rejected > 0);
}

#[test]
fn documents_of_a_plain_index_are_answered_on_their_fingerprint_as_query_does() {
    let temp = tempfile::tempdir().unwrap();
    let index = Index::open(temp.path().join("index"), Options::default()).unwrap();
    let hasher = index.simhasher().unwrap();
    let texts = texts();
    for (i, text) in texts.iter().enumerate() {
        index
            .insert(i as u64, hasher.fingerprint_checked(text).unwrap())
            .unwrap();
    }
    for text in texts.iter().step_by(3) {
        let fp = hasher.fingerprint_checked(text).unwrap();
        let plain: Vec<u64> = index.query(fp, 3).unwrap().iter().map(|m| m.id).collect();
        let verified = index.query_text(text, 3).unwrap();
        assert!(verified.iter().all(|m| m.rule == Rule::Fingerprint));
        assert!(verified.iter().all(|m| m.similarity.is_none()));
        let ids: Vec<u64> = verified.iter().map(|m| m.doc.id).collect();
        assert_eq!(ids, plain);
    }
    // Above the plan's k is refused; a text without tokens has no match.
    assert!(index.query_text("some words here", 4).is_err());
    assert!(index.query_text("  ", 3).unwrap().is_empty());
    assert!(index.insert_text(1, " ", None).is_err());
}
