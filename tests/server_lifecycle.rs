//! Stopping `simhashdb serve`: SIGTERM and SIGINT finish the requests in
//! flight, flush, release the lock and exit 0; SIGKILL under load with
//! `--sync` loses no acknowledged document.
#![cfg(feature = "serve")]

mod common;

use std::io::Write;
use std::net::TcpStream;
use std::path::PathBuf;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::json;
use simhashdb::{Index, Options};

use common::http::Client;
use common::server::Server;
use common::{Model, Rng, live_docs};

/// A server on a new index in a temporary directory (removed when the
/// first value is dropped), and the index's path.
fn start(extra: &[&str]) -> (tempfile::TempDir, PathBuf, Server) {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("index");
    let server = Server::start(&db, extra);
    (dir, db, server)
}

/// Sends the head of a `POST /v1/documents` of `body` and the first half of
/// the body, and waits until the server has started on the request; returns
/// the half not sent.
fn send_half<'a>(server: &Server, client: &mut Client, body: &'a str) -> &'a [u8] {
    let (head, tail) = body.as_bytes().split_at(body.len() / 2);
    client
        .send_head(
            "POST",
            "/v1/documents",
            Some("application/json"),
            body.len(),
        )
        .expect("head");
    client.stream().write_all(head).expect("half the body");
    server.wait_for_stderr("request started method=POST uri=/v1/documents");
    tail
}

/// Connecting is refused once the server has stopped accepting.
fn wait_until_refused(server: &Server) {
    for _ in 0..1000 {
        if TcpStream::connect_timeout(&server.addr, Duration::from_secs(1)).is_err() {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!("the server still accepts connections after the signal");
}

#[test]
fn sigterm_finishes_the_request_in_flight_then_flushes_and_exits_0() {
    let (_dir, db, mut server) = start(&[]);
    let mut client = server.client();
    let first = client
        .post(
            "/v1/check",
            json!({"documents": [{"id": 1, "fingerprint": 1}]})
                .to_string()
                .as_bytes(),
        )
        .expect("check");
    assert_eq!(first.status, 200);

    // A request whose body has only half arrived when the signal comes.
    let body = json!({"documents": [
        {"id": 2, "fingerprint": u64::MAX},
        {"id": 3, "fingerprint": 0xf0f0_f0f0_f0f0_f0f0u64},
        {"name": "https://example.com/late", "text": "the last words in flight"},
    ]})
    .to_string();
    let tail = send_half(&server, &mut client, &body);
    server.signal("TERM");
    server.wait_for_stderr("shutting down");
    wait_until_refused(&server);
    client
        .stream()
        .write_all(tail)
        .expect("the rest of the body");
    let reply = client.read_reply().expect("the answer in flight");
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(reply.json()["inserted"], 3);

    let status = server.wait();
    assert_eq!(status.code(), Some(0), "{}", server.stderr());
    // The lock is released (a writer opens it), and everything was flushed
    // to a segment: nothing is left to replay from the write-ahead log.
    let index = Index::open(&db, Options::default()).expect("open after shutdown");
    let stats = index.stats();
    assert_eq!(stats.memtable_docs, 0, "{stats:?}");
    assert_eq!(stats.segment_docs, 4, "{stats:?}");
    assert_eq!(index.get(2).expect("get"), Some(u64::MAX));
    assert_eq!(
        index
            .get(simhashdb::fingerprint::fnv1a64(b"https://example.com/late"))
            .expect("get"),
        Some(simhashdb::Simhasher::default().fingerprint("the last words in flight"))
    );
}

#[test]
fn sigint_shuts_down_gracefully_too() {
    let (_dir, db, mut server) = start(&[]);
    let mut client = server.client();
    let reply = client
        .post(
            "/v1/documents",
            json!({"documents": [{"id": 9, "fingerprint": 99}]})
                .to_string()
                .as_bytes(),
        )
        .expect("insert");
    assert_eq!(reply.status, 200);
    // An idle keep-alive connection does not hold the shutdown up.
    server.signal("INT");
    assert_eq!(server.wait().code(), Some(0), "{}", server.stderr());
    assert!(
        server.stderr().contains("signal=\"SIGINT\""),
        "{}",
        server.stderr()
    );
    let index = Index::open(&db, Options::default()).expect("open after shutdown");
    assert_eq!(index.get(9).expect("get"), Some(99));
    drop(client);
}

/// Requests each client may send at most; the kill comes long before.
const MAX_REQUESTS: usize = 20_000;

#[test]
fn sigkill_under_load_with_sync_loses_no_acknowledged_document() {
    let (_dir, db, mut server) = start(&["--sync"]);
    let acknowledged = Mutex::new(Model::new());
    let stop = AtomicBool::new(false);
    let addr = server.addr;
    let killed = std::thread::scope(|scope| {
        for c in 0..4u64 {
            let (acknowledged, stop) = (&acknowledged, &stop);
            scope.spawn(move || {
                let mut rng = Rng(c + 100);
                let mut client = Client::connect(addr).expect("connect");
                for n in 0..MAX_REQUESTS as u64 {
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                    // Random fingerprints: every document is new.
                    let docs: Vec<(u64, u64)> = (0..1 + rng.below(3))
                        .map(|j| ((c << 32) | (n << 2) | j, rng.next()))
                        .collect();
                    let body = json!({"documents": docs
                        .iter()
                        .map(|&(id, fp)| json!({"id": id, "fingerprint": fp}))
                        .collect::<Vec<_>>()});
                    let path = if n % 2 == 0 {
                        "/v1/check"
                    } else {
                        "/v1/documents"
                    };
                    let Ok(reply) = client.post(path, body.to_string().as_bytes()) else {
                        break; // killed
                    };
                    assert_eq!(reply.status, 200, "{}", reply.text());
                    if path == "/v1/check" {
                        let answer = reply.json();
                        for result in answer["results"].as_array().expect("results") {
                            assert_eq!(result["status"], "new", "{result}");
                        }
                    }
                    let mut model = acknowledged.lock().expect("model");
                    for (id, fp) in docs {
                        model.insert(id, (fp, None));
                    }
                }
            });
        }
        // Kill once a few hundred documents are acknowledged (bounded).
        let deadline = Instant::now() + Duration::from_secs(120);
        while acknowledged.lock().expect("model").len() < 300 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        server.signal("KILL");
        let status = server.wait();
        stop.store(true, Ordering::Relaxed);
        status
    });
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&killed),
        Some(9)
    );
    let acknowledged = acknowledged.into_inner().expect("model");
    assert!(
        acknowledged.len() >= 300,
        "only {} acknowledged",
        acknowledged.len()
    );

    // A restarted server has every acknowledged document.
    let mut server = Server::start(&db, &["--sync"]);
    let mut client = server.client();
    for (id, (fp, _)) in &acknowledged {
        let reply = client.get(&format!("/v1/documents/{id}")).expect("get");
        assert_eq!(reply.status, 200, "acknowledged document {id} lost");
        assert_eq!(reply.json()["fingerprint"], *fp);
    }
    drop(client);
    server.signal("TERM");
    assert_eq!(server.wait().code(), Some(0));
    // Nothing else either: every live document was sent by a client
    // (acknowledged, or in a request the kill cut off).
    let index = Index::open(&db, Options::default()).expect("reopen");
    let live = live_docs(&index);
    for (id, doc) in &acknowledged {
        assert_eq!(live.get(id), Some(doc));
    }
    assert!(live.keys().all(|id| (id >> 32) < 4));
}

#[test]
fn a_request_that_never_completes_does_not_hold_the_shutdown_up() {
    let (_dir, db, mut server) = start(&["--shutdown-timeout", "1"]);
    let mut client = server.client();
    let body = json!({"documents": [{"id": 5, "fingerprint": 5}]}).to_string();
    send_half(&server, &mut client, &body);
    server.signal("TERM");
    assert_eq!(server.wait().code(), Some(0), "{}", server.stderr());
    assert!(
        server.stderr().contains("shutdown timeout"),
        "{}",
        server.stderr()
    );
    // The connection was closed without an answer, and nothing was written.
    assert!(client.read_reply().is_err());
    let index = Index::open(&db, Options::default()).expect("open after shutdown");
    assert_eq!(index.get(5).expect("get"), None);
}

/// `--merge-fan-in N` merges N segments of one size: each run of the server
/// below ends in a flush (one more segment). A close does not wait for the
/// merge its flush calls for, but the next open asks for it again: with a
/// fan-in of 2 the third start merges the two segments into one, which a
/// fan-in of 3 leaves apart. Every document stays found either way.
#[test]
fn the_merge_fan_in_decides_when_segments_merge() {
    for (fan_in, segments) in [("2", 1), ("3", 2)] {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = dir.path().join("index");
        for run in 0..2u64 {
            let mut server = Server::start(&db, &["--merge-fan-in", fan_in]);
            let reply = server
                .client()
                .post(
                    "/v1/documents",
                    json!({"documents": [{"id": run, "fingerprint": run << 32}]})
                        .to_string()
                        .as_bytes(),
                )
                .expect("insert");
            assert_eq!(reply.status, 200);
            server.signal("TERM");
            assert_eq!(server.wait().code(), Some(0), "{}", server.stderr());
        }
        let mut server = Server::start(&db, &["--merge-fan-in", fan_in]);
        let mut client = server.client();
        let mut held = 0;
        for _ in 0..3000 {
            let stats = client.get("/v1/stats").expect("stats").json();
            held = stats["segments"].as_u64().expect("segments");
            // A fan-in of 3 never merges two: it is 2 at once.
            if held == segments {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(held, segments, "fan-in {fan_in}");
        for id in 0..2u64 {
            let doc = client.get(&format!("/v1/documents/{id}")).expect("get");
            assert_eq!(doc.json()["fingerprint"], id << 32, "fan-in {fan_in}");
        }
        server.signal("TERM");
        assert_eq!(server.wait().code(), Some(0), "{}", server.stderr());
    }
    // A fan-in below 2 is refused before anything is opened.
    refused_before_anything_is_opened("--merge-fan-in", "1");
}

/// `serve FLAG VALUE` exits 2 naming FLAG, and creates no index.
fn refused_before_anything_is_opened(flag: &str, value: &str) {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_simhashdb"))
        .args(["serve", flag, value, "--db"])
        .arg(dir.path().join("index"))
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains(flag));
    assert!(!dir.path().join("index").exists());
}

/// `--threads` sets the threads that serve connections: with two, requests
/// on several connections are answered and the server stops cleanly; none
/// is refused before anything is opened.
#[test]
fn threads_serve_connections_and_zero_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("index");
    let mut server = Server::start(&db, &["--threads", "2"]);
    // Far from each other (about 32 bits apart).
    let fp = |id: u64| id.wrapping_add(1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    // Four connections, two per thread, each kept open over its requests.
    let mut clients: Vec<_> = (0..4).map(|_| server.client()).collect();
    for round in 0..3u64 {
        for (c, client) in clients.iter_mut().enumerate() {
            let id = round * 10 + c as u64;
            let body = serde_json::json!({"documents": [{"id": id, "fingerprint": fp(id)}]});
            let reply = client
                .post("/v1/check", body.to_string().as_bytes())
                .expect("check");
            assert_eq!(reply.status, 200, "{}", reply.text());
            assert_eq!(reply.json()["results"][0]["status"], "new");
        }
    }
    // Every connection sees what the others wrote, and a check of one's
    // document from another is a duplicate naming it.
    for (c, client) in clients.iter_mut().enumerate() {
        for round in 0..3u64 {
            for other in 0..4u64 {
                let id = round * 10 + other;
                let doc = client.get(&format!("/v1/documents/{id}")).expect("get");
                assert_eq!(doc.status, 200, "{}", doc.text());
                assert_eq!(doc.json()["fingerprint"], fp(id));
            }
        }
        let other = (c as u64 + 1) % 4;
        let body = serde_json::json!({"documents": [{"id": 100 + c, "fingerprint": fp(other)}]});
        let reply = client
            .post("/v1/check", body.to_string().as_bytes())
            .expect("check");
        let result = &reply.json()["results"][0];
        assert_eq!(result["status"], "duplicate", "{result}");
        assert_eq!(result["match"]["id"], other, "{result}");
    }
    drop(clients);
    server.signal("TERM");
    assert_eq!(server.wait().code(), Some(0), "{}", server.stderr());
    refused_before_anything_is_opened("--threads", "0");
}

/// A check of a long text (fingerprinted on the blocking pool, past 64 KiB
/// of text) and checks of more than 64 documents are answered as any
/// other, beside single checks on other connections: the long text is new,
/// then a duplicate of itself, and a query of it finds it; every document
/// of the large checks is new, then each a duplicate of itself.
#[test]
fn long_texts_and_large_checks_are_answered_beside_single_checks() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("index");
    let mut server = Server::start(&db, &[]);
    let mut words = Rng(0x7e47);
    let text: String = (0..20_000)
        .map(|_| format!("w{} ", words.next() % 5_000))
        .collect();
    assert!(text.len() > 64 << 10);
    let fp = |id: u64| id.wrapping_add(1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    let check = |client: &mut Client, body: serde_json::Value| -> serde_json::Value {
        let reply = client
            .post("/v1/check", body.to_string().as_bytes())
            .expect("check");
        assert_eq!(reply.status, 200, "{}", reply.text());
        reply.json()
    };
    std::thread::scope(|scope| {
        let server = &server;
        let text = &text;
        let long = scope.spawn(move || {
            let mut client = server.client();
            let body = json!({"documents": [{"name": "long", "text": text}]});
            let first = check(&mut client, body.clone());
            let again = check(&mut client, body);
            (first, again)
        });
        let large = scope.spawn(move || {
            let mut client = server.client();
            let docs: Vec<_> = (1000..1100u64)
                .map(|id| json!({"id": id, "fingerprint": fp(id)}))
                .collect();
            let body = json!({ "documents": docs });
            (check(&mut client, body.clone()), check(&mut client, body))
        });
        let mut client = server.client();
        for id in 0..200u64 {
            let answer = check(
                &mut client,
                json!({"documents": [{"id": id, "fingerprint": fp(id)}]}),
            );
            assert_eq!(answer["results"][0]["status"], "new", "{answer}");
        }
        let (first, again) = long.join().expect("long");
        assert_eq!(first["results"][0]["status"], "new", "{first}");
        assert_eq!(again["results"][0]["status"], "duplicate", "{again}");
        assert_eq!(again["results"][0]["match"]["name"], "long", "{again}");
        // A query of the long text (answered on the blocking pool too).
        let reply = client
            .post("/v1/query", json!({ "text": text }).to_string().as_bytes())
            .expect("query");
        assert_eq!(reply.status, 200, "{}", reply.text());
        let found = reply.json();
        assert_eq!(found["matches"][0]["name"], "long", "{found}");
        assert_eq!(found["matches"][0]["distance"], 0, "{found}");
        let (first, again) = large.join().expect("large");
        let (first, again) = (&first["results"], &again["results"]);
        for i in 0..100 {
            assert_eq!(first[i]["status"], "new", "{}", first[i]);
            assert_eq!(again[i]["status"], "duplicate", "{}", again[i]);
            assert_eq!(again[i]["match"]["id"], first[i]["id"], "{}", again[i]);
        }
    });
    server.signal("TERM");
    assert_eq!(server.wait().code(), Some(0), "{}", server.stderr());
}
