//! One stream of texts through every door that checks texts — the library
//! (`Index::insert_if_new_many_verified`), the command line's `check` and a
//! real `serve` over loopback — each on a new index of its own with its
//! defaults: every door gives the same verdicts, by the same (verified)
//! rule, naming the same documents. (The Python package's `Index.check`
//! is held to the command line's answers on a stream of its own in
//! python/tests/test_verified_doors.py.)
#![cfg(feature = "serve")]

mod common;

use std::fs;

use serde_json::json;
use simhashdb::{Index, Options, Rule, doc_id};

use common::cli::ok;
use common::server::Server;

fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Windows of two license texts (one vocabulary: candidates that only
/// their sketches turn away) and of a Chinese text, each followed by
/// copies with some words or characters replaced, in a shuffled order.
fn stream() -> Vec<(String, String)> {
    let data = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data");
    let mut state = 38;
    let mut texts = Vec::new();
    for (file, len, step) in [("apache-2.0.txt", 40, 131), ("mpl-2.0.txt", 150, 250)] {
        let words: Vec<String> = fs::read_to_string(data.join(file))
            .unwrap()
            .split_whitespace()
            .map(str::to_owned)
            .collect();
        let mut start = 0;
        while start + len <= words.len() {
            let window = &words[start..start + len];
            texts.push(window.join(" "));
            for percent in [2, 5, 30] {
                let copy: Vec<&str> = window
                    .iter()
                    .map(|w| {
                        if splitmix(&mut state) % 100 < percent {
                            words[(splitmix(&mut state) % words.len() as u64) as usize].as_str()
                        } else {
                            w.as_str()
                        }
                    })
                    .collect();
                texts.push(copy.join(" "));
            }
            start += step;
        }
    }
    let zh: Vec<char> = fs::read_to_string(data.join("zh-prose.txt"))
        .unwrap()
        .chars()
        .filter(|c| !c.is_whitespace())
        .collect();
    for start in (0..zh.len().saturating_sub(200)).step_by(500).take(10) {
        let window = &zh[start..start + 200];
        texts.push(window.iter().collect());
        for percent in [2, 5] {
            texts.push(
                window
                    .iter()
                    .map(|&c| {
                        if splitmix(&mut state) % 100 < percent {
                            zh[(splitmix(&mut state) % zh.len() as u64) as usize]
                        } else {
                            c
                        }
                    })
                    .collect(),
            );
        }
    }
    // Shuffled, so that a copy may come before its original.
    for i in (1..texts.len()).rev() {
        let j = (splitmix(&mut state) % (i as u64 + 1)) as usize;
        texts.swap(i, j);
    }
    texts
        .into_iter()
        .enumerate()
        .map(|(i, t)| (format!("https://site.example/{i}"), t))
        .collect()
}

/// A door's verdict on one text: `None` (new), or the name of the document
/// it is a duplicate of, with the rule that decided.
type Verdict = Option<(String, String)>;

#[test]
fn every_door_gives_the_same_verdicts_by_the_verified_rule() {
    let texts = stream();
    assert!(texts.len() >= 100, "{}", texts.len());
    let dir = tempfile::tempdir().unwrap();

    // The library, with the options the doors create an index of texts
    // with; each text checked alone, as a crawler would.
    let index = Index::open(dir.path().join("library"), Options::for_texts()).unwrap();
    let k = index.plan().k();
    assert_eq!(k, Options::TEXT_K);
    let mut library: Vec<Verdict> = Vec::new();
    // For the server's answer: every document each duplicate matched.
    let mut accepted: Vec<Vec<(u32, u64, String)>> = Vec::new();
    for (name, text) in &texts {
        let values = index.text_values(text).unwrap();
        let answer = index
            .insert_if_new_many_verified(
                [(doc_id(name), values, Some(name.clone()))],
                k,
                usize::MAX,
            )
            .unwrap()
            .pop()
            .unwrap();
        match answer {
            Ok(()) => {
                library.push(None);
                accepted.push(Vec::new());
            }
            Err(matches) => {
                assert!(matches.iter().all(|m| m.rule == Rule::Sketch));
                let best = &matches[0];
                library.push(Some((best.doc.name.clone().unwrap(), "sketch".into())));
                accepted.push(
                    matches
                        .iter()
                        .map(|m| (m.doc.distance, m.doc.id, m.doc.name.clone().unwrap()))
                        .collect(),
                );
            }
        }
    }
    let dups = library.iter().filter(|v| v.is_some()).count();
    assert!(
        dups > 20 && dups + 20 < texts.len(),
        "{dups} duplicates of {}",
        texts.len()
    );

    // The command line: `check` on a new index, the whole stream on its
    // standard input.
    let db = dir.path().join("cli");
    let input: String = texts.iter().map(|(n, t)| format!("{n}\t{t}\n")).collect();
    let out = ok(&["check", "--db", db.to_str().unwrap()], input.as_bytes());
    let cli: Vec<Verdict> = out
        .lines()
        .map(|line| {
            let fields: Vec<&str> = line.split('\t').collect();
            match fields.as_slice() {
                ["new"] => None,
                ["dup", name, _distance, _similarity, rule] => {
                    Some(((*name).to_owned(), (*rule).to_owned()))
                }
                _ => panic!("unexpected line {line:?}"),
            }
        })
        .collect();
    assert_eq!(cli, library, "command line and library");

    // The server: a new index, one request per text.
    let server = Server::start(&dir.path().join("server"), &[]);
    let mut client = server.client();
    for (i, (name, text)) in texts.iter().enumerate() {
        let body = json!({"documents": [{"name": name, "text": text}]});
        let reply = client
            .post("/v1/check", body.to_string().as_bytes())
            .expect("request");
        assert_eq!(reply.status, 200, "{}", reply.text());
        let result = &reply.json()["results"][0];
        match result["status"].as_str() {
            Some("new") => assert_eq!(library[i], None, "{i}: the server says new"),
            Some("duplicate") => {
                let m = &result["match"];
                assert_eq!(m["rule"], "sketch", "{i}");
                assert!(m["similarity"].as_f64().is_some(), "{i}");
                // The server names the nearest document the rule accepted
                // (it keeps one); the library, the most similar of them.
                let nearest = accepted[i].iter().min().map(|a| a.2.clone());
                assert_eq!(m["name"].as_str().map(str::to_owned), nearest, "{i}");
                assert!(library[i].is_some(), "{i}");
            }
            other => panic!("{i}: status {other:?}"),
        }
    }
    let stats = client.get("/v1/stats").expect("stats").json();
    assert_eq!(stats["k"].as_u64(), Some(u64::from(Options::TEXT_K)));
}
