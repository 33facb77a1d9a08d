//! Many clients of `simhashdb serve` checking overlapping near-duplicate
//! documents at once: exactly one of each near-duplicate set is `new`.
#![cfg(feature = "serve")]

mod common;

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Value, json};
use simhashdb::{Index, Options, hamming};

use common::server::Server;
use common::{Model, Rng, brute_force, live_docs};

const SETS: u64 = 40;
const MEMBERS: u64 = 6;
const CLIENTS: u64 = 8;

/// Set `s`'s members: its base and the base with one of bits 0..5 flipped,
/// so any two members are within 2 bits; bases are more than 8 apart, so
/// members of different sets are more than 2 * 3 + 2 bits apart.
fn sets() -> Vec<Vec<(u64, u64)>> {
    let mut rng = Rng(0x5e75);
    let mut bases: Vec<u64> = Vec::new();
    while bases.len() < SETS as usize {
        let candidate = rng.next() & !0x3f;
        if bases.iter().all(|&b| hamming(b, candidate) > 8) {
            bases.push(candidate);
        }
    }
    bases
        .iter()
        .enumerate()
        .map(|(s, &base)| {
            (0..MEMBERS)
                .map(|m| {
                    let fp = if m == 0 { base } else { base ^ (1 << (m - 1)) };
                    (s as u64 * 100 + m, fp)
                })
                .collect()
        })
        .collect()
}

#[test]
fn concurrent_checks_keep_exactly_one_document_per_near_duplicate_set() {
    one_document_per_near_duplicate_set(&[], 0);
}

/// The same with three of the clients sending requests of 65 to 120
/// documents: checks of more than 64 documents are answered on the
/// blocking pool, in rounds of their own, beside the small ones answered
/// on the thread serving their connections.
#[test]
fn large_and_small_checks_at_once_keep_exactly_one_document_per_set() {
    one_document_per_near_duplicate_set(&[], 3);
}

/// The same with three threads serving connections (`--threads`; one on a
/// two-core machine by default): each thread's checks are answered in
/// rounds of their own, and the library orders the rounds of all three.
#[test]
fn concurrent_checks_on_three_threads_keep_exactly_one_document_per_set() {
    one_document_per_near_duplicate_set(&["--threads", "3"], 0);
}

/// Clients `0..large` send requests of 65 to 120 documents, the others of
/// 1 to 7.
fn one_document_per_near_duplicate_set(extra: &[&str], large: u64) {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("index");
    let mut server = Server::start(&db, extra);
    let sets = sets();
    let set_of: BTreeMap<u64, usize> = sets
        .iter()
        .enumerate()
        .flat_map(|(s, members)| members.iter().map(move |&(id, _)| (id, s)))
        .collect();

    // Every client sends every member of every set (so the same id also
    // arrives from several clients), in its own order, in requests of 1 to
    // 7 documents (or, the large clients, of 65 to 120).
    let answers: Vec<Vec<Value>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..CLIENTS)
            .map(|c| {
                let server = &server;
                let sets = &sets;
                scope.spawn(move || {
                    let mut rng = Rng(c + 1);
                    let mut docs: Vec<(u64, u64)> = sets.iter().flatten().copied().collect();
                    for i in (1..docs.len()).rev() {
                        docs.swap(i, rng.index(i + 1));
                    }
                    let mut client = server.client();
                    let mut results = Vec::new();
                    let mut rest = &docs[..];
                    while !rest.is_empty() {
                        let n = if c < large {
                            65 + rng.index(56)
                        } else {
                            1 + rng.index(7)
                        };
                        let n = n.min(rest.len());
                        let (batch, tail) = rest.split_at(n);
                        rest = tail;
                        let body = json!({"documents": batch
                            .iter()
                            .map(|&(id, fp)| json!({"id": id, "fingerprint": fp}))
                            .collect::<Vec<_>>()});
                        let reply = client
                            .post("/v1/check", body.to_string().as_bytes())
                            .expect("check");
                        assert_eq!(reply.status, 200, "{}", reply.text());
                        let answer = reply.json();
                        let got = answer["results"].as_array().expect("results");
                        assert_eq!(got.len(), batch.len());
                        for (result, &(id, _)) in got.iter().zip(batch) {
                            assert_eq!(result["id"], id, "results are in request order");
                        }
                        results.extend(got.iter().cloned());
                    }
                    results
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("client"))
            .collect()
    });

    let mut new_by_set: BTreeMap<usize, Vec<u64>> = BTreeMap::new();
    let mut matched_by_set: BTreeMap<usize, BTreeSet<u64>> = BTreeMap::new();
    let mut total = 0;
    for result in answers.iter().flatten() {
        total += 1;
        let id = result["id"].as_u64().expect("id");
        let set = set_of[&id];
        match result["status"].as_str().expect("status") {
            "new" => new_by_set.entry(set).or_default().push(id),
            "duplicate" => {
                let matched = result["match"]["id"].as_u64().expect("match id");
                assert_eq!(set_of.get(&matched), Some(&set), "{result}");
                matched_by_set.entry(set).or_default().insert(matched);
            }
            other => panic!("status {other}"),
        }
    }
    assert_eq!(total, (SETS * MEMBERS * CLIENTS) as usize);
    let mut winners = Model::new();
    for (s, members) in sets.iter().enumerate() {
        let new = new_by_set.get(&s).cloned().unwrap_or_default();
        assert_eq!(new.len(), 1, "set {s}: new for {new:?}");
        // Every other answer names the one kept.
        assert_eq!(
            matched_by_set.get(&s).cloned().unwrap_or_default(),
            BTreeSet::from([new[0]]),
            "set {s}"
        );
        let fp = members
            .iter()
            .find(|(id, _)| *id == new[0])
            .expect("member")
            .1;
        winners.insert(new[0], (fp, None));
    }

    // The index holds the winners and nothing else, over HTTP and after a
    // graceful stop.
    let mut client = server.client();
    for members in &sets {
        for &(_, fp) in members {
            let reply = client
                .post(
                    "/v1/query",
                    json!({ "fingerprint": fp }).to_string().as_bytes(),
                )
                .expect("query");
            let found: Vec<u64> = reply.json()["matches"]
                .as_array()
                .expect("matches")
                .iter()
                .map(|m| m["id"].as_u64().expect("id"))
                .collect();
            let expected: Vec<u64> = brute_force(&winners, fp, 3).iter().map(|m| m.id).collect();
            assert_eq!(found, expected);
        }
    }
    drop(client);
    server.signal("TERM");
    assert!(server.wait().success(), "{}", server.stderr());
    let index = Index::open(&db, Options::default()).expect("reopen");
    assert_eq!(live_docs(&index), winners);
}

/// Single-document checks from many connections at once, which the server
/// answers together in rounds of the connections ready at the same time:
/// every answer is the one a sequential brute-force model gives in any
/// order (each set's members lie within 2 bits of each other and far from
/// every other set's): exactly one member of a set is new, and every other
/// is a duplicate naming it, at its true distance.
#[test]
fn concurrent_single_document_checks_answer_as_one_at_a_time() {
    single_document_checks_answer_as_one_at_a_time(&[]);
}

/// The same with three threads serving the 16 connections.
#[test]
fn concurrent_single_document_checks_on_three_threads_answer_as_one_at_a_time() {
    single_document_checks_answer_as_one_at_a_time(&["--threads", "3"]);
}

fn single_document_checks_answer_as_one_at_a_time(extra: &[&str]) {
    const SINGLE_CLIENTS: u64 = 16;
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("index");
    let mut server = Server::start(&db, extra);
    let bases: Vec<u64> = sets().iter().map(|members| members[0].1).collect();
    // Client `c` sends its own member of every set: the base with bit
    // `c % 6` flipped (client 0..5 twice over), ids distinct per client.
    let member =
        |s: usize, c: u64| -> (u64, u64) { (s as u64 * 1000 + c, bases[s] ^ (1 << (c % 6))) };
    let answers: Vec<Vec<(usize, u64, u64, Value)>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..SINGLE_CLIENTS)
            .map(|c| {
                let server = &server;
                let bases = &bases;
                scope.spawn(move || {
                    let mut rng = Rng(c + 100);
                    let mut order: Vec<usize> = (0..bases.len()).collect();
                    for i in (1..order.len()).rev() {
                        order.swap(i, rng.index(i + 1));
                    }
                    let mut client = server.client();
                    order
                        .into_iter()
                        .map(|s| {
                            let (id, fp) = member(s, c);
                            let body = json!({"documents": [{"id": id, "fingerprint": fp}]});
                            let reply = client
                                .post("/v1/check", body.to_string().as_bytes())
                                .expect("check");
                            assert_eq!(reply.status, 200, "{}", reply.text());
                            let result = reply.json()["results"][0].clone();
                            assert_eq!(result["id"], id);
                            (s, id, fp, result)
                        })
                        .collect()
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("client"))
            .collect()
    });

    let mut winners: BTreeMap<usize, (u64, u64)> = BTreeMap::new();
    for &(s, id, fp, ref result) in answers.iter().flatten() {
        if result["status"] == "new" {
            assert_eq!(winners.insert(s, (id, fp)), None, "set {s}: two new");
        }
    }
    assert_eq!(winners.len(), bases.len(), "every set has one new member");
    for &(s, id, fp, ref result) in answers.iter().flatten() {
        let (winner, winner_fp) = winners[&s];
        if id == winner {
            continue;
        }
        assert_eq!(result["status"], "duplicate", "{result}");
        assert_eq!(result["match"]["id"], winner, "{result}");
        assert_eq!(
            result["match"]["distance"],
            hamming(fp, winner_fp),
            "{result}"
        );
    }
    drop(answers);
    server.signal("TERM");
    assert!(server.wait().success(), "{}", server.stderr());
    let index = Index::open(&db, Options::default()).expect("reopen");
    let mut model = Model::new();
    for &(id, fp) in winners.values() {
        model.insert(id, (fp, None));
    }
    assert_eq!(live_docs(&index), model);
    for &base in &bases {
        let found: Vec<u64> = index
            .query(base, 3)
            .expect("query")
            .iter()
            .map(|m| m.id)
            .collect();
        let expected: Vec<u64> = brute_force(&model, base, 3).iter().map(|m| m.id).collect();
        assert_eq!(found, expected);
    }
}
