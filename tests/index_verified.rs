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

/// (id, rule, similarity) of each match, by similarity (highest first),
/// then id; matches by fingerprint last, by (distance, id).
type Answer = Vec<(u64, Rule, Option<f64>)>;

/// The reference: every stored text's values computed from the text.
fn reference(
    hasher: &Simhasher,
    stored: &[(u64, String, bool)],
    query: &str,
    plan_k: u32,
    k: u32,
) -> Answer {
    reference_at(
        hasher,
        stored,
        query,
        plan_k,
        k,
        Sketch::threshold_for(query),
    )
}

/// [`reference`] at a given threshold.
fn reference_at(
    hasher: &Simhasher,
    stored: &[(u64, String, bool)],
    query: &str,
    plan_k: u32,
    k: u32,
    threshold: f64,
) -> Answer {
    reference_with_distances(hasher, stored, query, plan_k, k, threshold)
        .into_iter()
        .map(|(_, id, r, s)| (id, r, s))
        .collect()
}

/// [`reference_at`] with each match's distance first.
fn reference_with_distances(
    hasher: &Simhasher,
    stored: &[(u64, String, bool)],
    query: &str,
    plan_k: u32,
    k: u32,
    threshold: f64,
) -> Vec<(u32, u64, Rule, Option<f64>)> {
    let values = TextValues::of(hasher, query);
    let Some(fp) = hasher.fingerprint_checked(query) else {
        return Vec::new();
    };
    let sketch = Sketch::from_text(hasher, query);
    assert_eq!(values.sketch, sketch);
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
    // Highest similarity first, then id; by fingerprint (no similarity)
    // last, by distance, then id.
    out.sort_by(|a, b| match (a.3, b.3) {
        (Some(x), Some(y)) => y.total_cmp(&x).then(a.1.cmp(&b.1)),
        (Some(_), None) => std::cmp::Ordering::Less,
        (None, Some(_)) => std::cmp::Ordering::Greater,
        (None, None) => (a.0, a.1).cmp(&(b.0, b.1)),
    });
    out
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

/// The stream of [`texts`] checked in batches of several sizes (one, a
/// few, more than a search run of 64): each text is inserted unless the
/// reference, over the texts inserted before it (in the index or earlier in
/// its batch), finds a near-duplicate; the answer names the same documents
/// in the same order, with the same rules and similarities.
#[test]
fn verified_check_and_insert_answers_as_the_reference_over_a_stream() {
    let texts = texts();
    let temp = tempfile::tempdir().unwrap();
    let plan_k = 6;
    let index = Index::open(
        temp.path().join("index"),
        Options::default().k(plan_k).merge_policy(None),
    )
    .unwrap();
    let hasher = index.simhasher().unwrap();
    // Every fifth text first stored by its fingerprint alone.
    let mut stored: Vec<(u64, String, bool)> = Vec::new();
    for (i, text) in texts.iter().enumerate().step_by(5) {
        let id = 100_000 + i as u64;
        index
            .insert(id, hasher.fingerprint_checked(text).unwrap())
            .unwrap();
        stored.push((id, text.clone(), false));
    }
    let k = 3;
    let (mut news, mut dups, mut by_rule) = (0, 0, [0usize; 2]);
    let mut at = 0;
    for (round, size) in [1usize, 7, 90, 1, 33, 200, 5].iter().cycle().enumerate() {
        if at >= texts.len() {
            break;
        }
        let batch: Vec<(u64, &String)> = (at..(at + size).min(texts.len()))
            .map(|i| (i as u64, &texts[i]))
            .collect();
        at += batch.len();
        let answers = if batch.len() == 1 {
            vec![
                index
                    .insert_text_if_new(batch[0].0, batch[0].1, None, k)
                    .unwrap(),
            ]
        } else {
            let docs = batch
                .iter()
                .map(|&(id, text)| (id, index.text_values(text).unwrap(), None::<String>));
            index
                .insert_if_new_many_verified(docs, k, usize::MAX)
                .unwrap()
        };
        assert_eq!(answers.len(), batch.len());
        for ((id, text), answer) in batch.iter().zip(answers) {
            let want = reference(&hasher, &stored, text, plan_k, k);
            match answer {
                Ok(()) => {
                    assert!(want.is_empty(), "round {round}, {id}: new, want {want:?}");
                    stored.push((*id, (*text).clone(), true));
                    news += 1;
                }
                Err(matches) => {
                    let got: Answer = matches
                        .iter()
                        .map(|m| (m.doc.id, m.rule, m.similarity))
                        .collect();
                    assert_eq!(got, want, "round {round}, {id}: {text:.60}");
                    for m in &matches {
                        by_rule[usize::from(m.rule == Rule::Fingerprint)] += 1;
                    }
                    dups += 1;
                }
            }
        }
        if round == 3 {
            index.flush().unwrap();
        }
    }
    assert!(news > 10 && dups > 10, "{news} new, {dups} dup");
    assert!(by_rule[0] > 0 && by_rule[1] > 0, "{by_rule:?}");
    // What was inserted is what the reference kept: the same documents,
    // each with its sketch.
    let mut kept: Vec<u64> = index.docs().unwrap().map(|d| d.id).collect();
    kept.sort_unstable();
    let mut want: Vec<u64> = stored.iter().map(|s| s.0).collect();
    want.sort_unstable();
    assert_eq!(kept, want);
    for (id, text, sketched) in &stored {
        let doc = index.get_doc(*id).unwrap().unwrap();
        let expected = sketched.then(|| Sketch::from_text(&hasher, text));
        assert_eq!(doc.sketch, expected, "{id}");
    }
}

/// A caller's threshold replaces the default, in queries and in checks;
/// with a limit, a duplicate gets the nearest of the accepted documents and
/// the same verdict.
#[test]
fn verified_answers_follow_the_callers_threshold_and_limit() {
    let texts = texts();
    let temp = tempfile::tempdir().unwrap();
    let plan_k = 6;
    let index = Index::open(
        temp.path().join("index"),
        Options::default().k(plan_k).merge_policy(None),
    )
    .unwrap();
    let hasher = index.simhasher().unwrap();
    let mut stored = Vec::new();
    for (i, text) in texts.iter().enumerate().filter(|(i, _)| i % 5 != 1) {
        index.insert_text(i as u64, text, None).unwrap();
        stored.push((i as u64, text.clone(), true));
    }
    let (mut narrower, mut wider) = (0, 0);
    for text in &texts {
        for threshold in [0.5, 0.9] {
            let mut values = index.text_values(text).unwrap();
            values.threshold = threshold;
            let got: Answer = index
                .query_verified(&values, 3)
                .unwrap()
                .into_iter()
                .map(|m| (m.doc.id, m.rule, m.similarity))
                .collect();
            let want = reference_at(&hasher, &stored, text, plan_k, 3, threshold);
            assert_eq!(got, want, "threshold {threshold}: {text:.60}");
            let default = reference(&hasher, &stored, text, plan_k, 3);
            if threshold > 0.7 && got.len() < default.len() {
                narrower += 1;
            }
            if threshold < 0.6 && got.len() > default.len() {
                wider += 1;
            }
        }
    }
    assert!(narrower > 0 && wider > 0, "{narrower} {wider}");
    // Checks of the texts left out, at threshold 0.9 and limit 1: nothing
    // is written by a refused call, and each answer is the reference's
    // verdict with its nearest accepted document.
    for (i, text) in texts.iter().enumerate().filter(|(i, _)| i % 5 == 1) {
        let mut values = index.text_values(text).unwrap();
        values.threshold = 0.9;
        let want = reference_with_distances(&hasher, &stored, text, plan_k, 3, 0.9);
        let answer = index
            .insert_if_new_many_verified([(i as u64, values, None::<String>)], 3, 1)
            .unwrap()
            .pop()
            .unwrap();
        match answer {
            Ok(()) => {
                assert!(want.is_empty(), "{i}");
                stored.push((i as u64, text.clone(), true));
            }
            Err(matches) => {
                let nearest = want.iter().map(|w| (w.0, w.1)).min().unwrap();
                assert_eq!(matches.len(), 1);
                assert_eq!((matches[0].doc.distance, matches[0].doc.id), nearest, "{i}");
            }
        }
    }
    let before = index.len().unwrap();
    let mut bad = index.text_values(&texts[0]).unwrap();
    bad.threshold = 1.5;
    let refused = index.insert_if_new_many_verified(
        [
            (
                900_001,
                index.text_values("fresh words never seen").unwrap(),
                None::<String>,
            ),
            (900_002, bad, None),
        ],
        3,
        usize::MAX,
    );
    let message = refused.unwrap_err().to_string();
    assert!(
        message.contains("900002") && message.contains("threshold"),
        "{message}"
    );
    let empty = index.insert_if_new_many_verified(
        [(900_003, index.text_values("   ").unwrap(), None::<String>)],
        3,
        usize::MAX,
    );
    assert!(empty.unwrap_err().to_string().contains("900003"));
    assert_eq!(index.len().unwrap(), before);
    assert!(index.query_verified(&bad, 3).is_err());
}
