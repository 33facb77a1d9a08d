//! `simhashdb serve` against hostile clients and careless operators, as a
//! real process over loopback: names that are not UTF-8, a directory
//! removed under the server, slow bodies, idle connections, matches by the
//! thousand, bodies of millions of items, cross-site requests, and the
//! smaller edges of HTTP (docs/RELIABILITY.md, "The server, hostile II").
#![cfg(feature = "serve")]

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use serde_json::{Value, json};
use simhashdb::doc_id;

use common::http::{Client, IO_TIMEOUT, Reply};
use common::server::Server;
use common::{Model, brute_force};

fn post(client: &mut Client, path: &str, body: &Value) -> Reply {
    client
        .post(path, body.to_string().as_bytes())
        .expect("request")
}

fn ok_json(reply: Reply) -> Value {
    assert_eq!(reply.status, 200, "{}", reply.text());
    reply.json()
}

/// The error code of an error response with `status`.
fn error_code(reply: &Reply, status: u16) -> String {
    assert_eq!(reply.status, status, "{}", reply.text());
    assert_eq!(reply.content_type, "application/json");
    let body = reply.json();
    assert!(
        !body["error"]["message"]
            .as_str()
            .expect("message")
            .is_empty(),
        "{body}"
    );
    body["error"]["code"].as_str().expect("code").to_string()
}

/// Writes 400 documents at fingerprint 42 with names of 60 KB: a query of
/// 42 with a limit of 400 has an answer of 24 MB, more than the sockets'
/// buffers hold.
fn write_large_answer(client: &mut Client) {
    for part in 0..4u64 {
        let docs: Vec<Value> = (0..100u64)
            .map(|i| {
                let mut name = format!("{part}/{i}/");
                name.push_str(&"n".repeat(60_000));
                json!({"id": part * 100 + i, "fingerprint": 42, "name": name})
            })
            .collect();
        ok_json(post(client, "/v1/documents", &json!({ "documents": docs })));
    }
}

/// A server on a new index in a temporary directory (removed when the
/// first value is dropped), and the index's path.
fn start(extra: &[&str]) -> (tempfile::TempDir, std::path::PathBuf, Server) {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("index");
    let server = Server::start(&db, extra);
    (dir, db, server)
}

/// Sends `raw` bytes on a new connection and reads one response.
fn raw(server: &Server, raw: &[u8]) -> Reply {
    let mut client = server.client();
    client.stream().write_all(raw).expect("send");
    client.read_reply().expect("reply")
}

/// A connection that sent nothing: connected, not yet accepted maybe.
fn connect(server: &Server) -> TcpStream {
    let stream = TcpStream::connect_timeout(&server.addr, IO_TIMEOUT).expect("connect");
    stream.set_read_timeout(Some(IO_TIMEOUT)).expect("timeout");
    stream
}

/// Whether the server closed `stream`: a read ends (no byte, or a reset)
/// rather than waiting; an answer the server sent before closing (a 408)
/// is read first.
fn closed_by_server(stream: &mut TcpStream) -> bool {
    let mut buf = [0u8; 4096];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return true,
            Err(_) => return false,
        }
    }
}

#[test]
fn a_name_that_is_not_utf8_once_decoded_is_refused_not_replaced() {
    let (_dir, _db, server) = start(&[]);
    let mut client = server.client();
    // The document a lossy decoding of `%fe` would name: U+FFFD.
    let replacement = doc_id("\u{fffd}");
    let body = json!({"documents": [
        {"id": replacement, "fingerprint": 7, "name": "\u{fffd}"},
        {"id": doc_id("a b"), "fingerprint": 9, "name": "a b"},
    ]});
    ok_json(post(&mut client, "/v1/documents", &body));
    for path in [
        "/v1/documents?name=%fe",
        "/v1/documents?name=%C3",
        "/v1/documents?name=ok%zz",
        "/v1/documents?name=ok%4",
        "/v1/documents?name=a&name=b",
        "/v1/documents?nme=a",
        "/v1/documents",
    ] {
        let reply = client.delete(path).expect("delete");
        assert_eq!(error_code(&reply, 400), "invalid_request", "DELETE {path}");
        let reply = client.get(path).expect("get");
        assert_eq!(error_code(&reply, 400), "invalid_request", "GET {path}");
    }
    // Nothing was deleted; the names decode as a form's do.
    let got = ok_json(client.get("/v1/documents?name=%EF%BF%BD").expect("get"));
    assert_eq!(got["id"], replacement);
    let got = ok_json(client.get("/v1/documents?name=a+b").expect("get"));
    assert_eq!(got["name"], "a b");
    let got = ok_json(client.get("/v1/documents?name=a%20b&").expect("get"));
    assert_eq!(got["name"], "a b");
}

#[test]
fn durable_writes_into_a_removed_directory_fail_and_readiness_says_so() {
    let (_dir, db, mut server) = start(&[]);
    let mut client = server.client();
    let doc = |id: u64| json!({"documents": [{"id": id, "fingerprint": id * 977}], "sync": true});
    ok_json(post(&mut client, "/v1/documents", &doc(1)));
    assert_eq!(
        ok_json(client.get("/readyz").expect("readyz"))["status"],
        "ready"
    );

    std::fs::remove_dir_all(&db).expect("rm -rf the index");
    let reply = post(&mut client, "/v1/documents", &doc(2));
    assert_eq!(error_code(&reply, 503), "write_failed");
    assert!(reply.text().contains("deleted"), "{}", reply.text());
    let reply = post(&mut client, "/v1/check", &doc(3));
    assert_eq!(error_code(&reply, 503), "index_poisoned");
    let reply = post(&mut client, "/v1/sync", &json!({}));
    assert_eq!(error_code(&reply, 503), "index_poisoned");
    // Alive, not ready.
    assert_eq!(client.get("/healthz").expect("healthz").status, 200);
    let ready = client.get("/readyz").expect("readyz");
    assert_eq!(ready.status, 503, "{}", ready.text());
    assert_eq!(ready.json()["status"], "not_ready");

    // And the shutdown does not promise the writes to a next open.
    server.signal("TERM");
    assert_eq!(server.wait().code(), Some(1));
    let stderr = server.stderr();
    assert!(stderr.contains("no longer exists"), "{stderr}");
    assert!(!stderr.contains("the next open replays"), "{stderr}");
}

#[test]
fn a_server_with_sync_refuses_writes_into_a_removed_directory() {
    let (_dir, db, server) = start(&["--sync"]);
    let mut client = server.client();
    let check = |id: u64| json!({"documents": [{"id": id, "fingerprint": id.wrapping_mul(0x9e37_79b9_7f4a_7c15)}]});
    ok_json(post(&mut client, "/v1/check", &check(1)));
    std::fs::remove_dir_all(&db).expect("rm -rf the index");
    // Not ready even before a write finds it out.
    let ready = client.get("/readyz").expect("readyz");
    assert_eq!(ready.status, 503, "{}", ready.text());
    assert!(
        ready.text().contains("has been deleted"),
        "{}",
        ready.text()
    );
    let reply = post(&mut client, "/v1/check", &check(2));
    assert_eq!(error_code(&reply, 503), "write_failed");
    assert_eq!(client.get("/readyz").expect("readyz").status, 503);
}

#[test]
fn slow_bodies_are_cut_off_and_the_probes_answer_meanwhile() {
    let (_dir, _db, server) = start(&["--max-concurrent-requests", "4", "--body-timeout", "2"]);
    // Four requests that hold every turn: a head, one byte of 100.
    let mut slow: Vec<Client> = (0..4)
        .map(|_| {
            let mut client = server.client();
            client
                .send_head("POST", "/v1/check", Some("application/json"), 100)
                .expect("head");
            client.stream().write_all(b"{").expect("a byte");
            client
        })
        .collect();
    for _ in 0..4 {
        server.wait_for_stderr("request started method=POST uri=/v1/check");
    }
    // Liveness and readiness wait for no turn.
    let mut probe = server.client();
    assert_eq!(probe.get("/healthz").expect("healthz").status, 200);
    assert_eq!(probe.get("/readyz").expect("readyz").status, 200);
    // Each slow body is refused once its time is up, and its connection
    // closed (the rest of its body would be read as a request).
    for client in &mut slow {
        let reply = client.read_reply().expect("an answer");
        assert_eq!(error_code(&reply, 408), "body_timeout");
        assert!(closed_by_server(client.stream()));
    }
    // The turns are free again.
    assert_eq!(probe.get("/v1/stats").expect("stats").status, 200);
}

/// The answer to a connection that sends nothing, read to its end.
fn answer_unasked(server: &Server) -> String {
    let mut stream = connect(server);
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    String::from_utf8_lossy(&answer).into_owned()
}

/// `/healthz` on new connections until one is answered 200 (connections
/// may still be closing), each other answer a refusal at the limit.
fn healthz_until_answered(server: &Server) {
    for _ in 0..1000 {
        let reply = server.client().get("/healthz").expect("an answer");
        if reply.status == 200 {
            return;
        }
        assert_eq!(error_code(&reply, 503), "too_many_connections");
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!("the server did not answer once the connections closed");
}

#[test]
fn connections_over_the_limit_are_refused_and_the_server_stays_up() {
    let (_dir, _db, server) = start(&["--max-connections", "8"]);
    // Eight idle connections take every place; the server accepts them in
    // order, so the ninth and later are over the limit: each is answered
    // 503 at once and closed.
    let idle: Vec<TcpStream> = (0..8).map(|_| connect(&server)).collect();
    for _ in 0..40 {
        let answer = answer_unasked(&server);
        assert!(
            answer.starts_with("HTTP/1.1 503") && answer.contains("too_many_connections"),
            "{answer}"
        );
    }
    // A client that sends its request at once reads the refusal too.
    let reply = server.client().get("/healthz").expect("an answer");
    assert_eq!(error_code(&reply, 503), "too_many_connections");
    // The clients that held the places go away: the server answers again.
    drop(idle);
    healthz_until_answered(&server);
}

#[test]
fn idle_connections_and_slow_heads_are_closed_by_the_server() {
    let (_dir, _db, server) = start(&["--max-connections", "16", "--header-timeout", "1"]);
    // Idle, a head sent in part, and a connection idle after a request:
    // the server closes each once the header timeout passes.
    let mut idle: Vec<TcpStream> = (0..12).map(|_| connect(&server)).collect();
    let mut partial = connect(&server);
    partial
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nX-Slow: ")
        .expect("part of a head");
    let mut kept = server.client();
    assert_eq!(kept.get("/healthz").expect("healthz").status, 200);
    for stream in &mut idle {
        assert!(closed_by_server(stream), "an idle connection stayed open");
    }
    assert!(closed_by_server(&mut partial), "a partial head stayed open");
    assert!(
        closed_by_server(kept.stream()),
        "a kept-alive connection stayed open"
    );
    // Their places are free again.
    healthz_until_answered(&server);
}

/// A head sent a byte at a time keeps its connection busy but does not
/// arrive whole within the header timeout: the server closes the
/// connection before the head is complete, as it closes an idle one.
#[test]
fn a_head_sent_a_byte_at_a_time_is_cut_off_at_the_header_timeout() {
    let (_dir, _db, server) = start(&["--header-timeout", "1"]);
    let mut slow = connect(&server);
    // 100 bytes, one every 50 ms: 5 seconds for the whole head.
    let head = format!(
        "GET /healthz HTTP/1.1\r\nHost: localhost\r\nX-Slow: {}\r\n\r\n",
        "x".repeat(48)
    );
    assert_eq!(head.len(), 100);
    slow.set_nonblocking(true).expect("nonblocking");
    let mut sent = 0;
    let mut closed = false;
    for byte in head.as_bytes() {
        let mut buf = [0u8; 64];
        match slow.read(&mut buf) {
            Ok(0) => closed = true,
            Ok(n) => panic!("answered a head not yet sent: {:?}", &buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(_) => closed = true,
        }
        if closed || slow.write_all(std::slice::from_ref(byte)).is_err() {
            closed = true;
            break;
        }
        sent += 1;
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(closed, "a head that took 5 s was read whole");
    assert!(sent < head.len(), "{sent}");
}

/// The header timeout counts from the previous answer, not from the
/// request: a request whose body takes longer than the header timeout to
/// arrive (within the body timeout) is answered, and the connection then
/// serves another request.
#[test]
fn a_request_longer_than_the_header_timeout_is_answered() {
    let (_dir, _db, server) = start(&["--header-timeout", "1", "--body-timeout", "30"]);
    let mut client = server.client();
    let body = json!({"documents": [{"id": 1, "fingerprint": 12345}]}).to_string();
    client
        .send_head("POST", "/v1/check", Some("application/json"), body.len())
        .expect("head");
    // The body in three pieces over 2.4 s: more than the header timeout.
    let (a, rest) = body.split_at(5);
    let (b, c) = rest.split_at(5);
    for piece in [a, b, c] {
        client
            .stream()
            .write_all(piece.as_bytes())
            .expect("a piece");
        std::thread::sleep(Duration::from_millis(800));
    }
    let answer = ok_json(client.read_reply().expect("an answer"));
    assert_eq!(answer["results"][0]["status"], "new", "{answer}");
    let again = ok_json(post(
        &mut client,
        "/v1/check",
        &json!({"documents": [{"id": 2, "fingerprint": 12345}]}),
    ));
    assert_eq!(again["results"][0]["status"], "duplicate", "{again}");
}

/// Nor does it run while an answer waits for the client to take it: a
/// client that pauses longer than the header timeout (within the body
/// timeout) before reading a large answer gets all of it.
#[test]
fn an_answer_taken_after_a_pause_longer_than_the_header_timeout_is_sent_whole() {
    let (_dir, _db, server) = start(&["--header-timeout", "1", "--body-timeout", "30"]);
    let mut client = server.client();
    write_large_answer(&mut client);
    let body = json!({"fingerprint": 42, "limit": 400}).to_string();
    client
        .send_head("POST", "/v1/query", Some("application/json"), body.len())
        .expect("head");
    client.stream().write_all(body.as_bytes()).expect("body");
    std::thread::sleep(Duration::from_millis(2500));
    let answer = ok_json(client.read_reply().expect("the whole answer"));
    // Every document, at distance 0 (the brute force's answer).
    let mut got = found(&answer);
    got.sort_unstable();
    let want: Vec<(u64, u64)> = (0..400).map(|id| (id, 0)).collect();
    assert_eq!(got, want);
}

#[test]
fn a_check_answers_the_nearest_of_thousands_of_copies() {
    let (_dir, _db, server) = start(&[]);
    let mut client = server.client();
    let fp: u64 = 0x0123_4567_89ab_cdef;
    let mut model = Model::new();
    // 3,000 copies of one fingerprint, and a few near it, in a segment and
    // the memtable (ids decreasing, so the nearest is not the first
    // stored).
    for chunk in 0..3u64 {
        let docs: Vec<Value> = (0..1000u64)
            .map(|i| {
                let id = 10_000 - (chunk * 1000 + i);
                let f = if i % 100 == 7 { fp ^ 0b101 } else { fp };
                model.insert(id, (f, Some(format!("copy {id}"))));
                json!({"id": id, "fingerprint": f, "name": format!("copy {id}")})
            })
            .collect();
        ok_json(post(
            &mut client,
            "/v1/documents",
            &json!({ "documents": docs }),
        ));
        if chunk < 2 {
            ok_json(post(&mut client, "/v1/compact", &json!({})));
        }
    }
    // 2,000 checks of fingerprints within 3 of the copies: each answer is
    // the brute force's nearest (smallest distance, then id).
    let checks: Vec<Value> = (0..2000u64)
        .map(|i| json!({"id": 1_000_000 + i, "fingerprint": fp ^ (1 << (i % 64))}))
        .collect();
    let answer = ok_json(post(
        &mut client,
        "/v1/check",
        &json!({ "documents": checks }),
    ));
    let results = answer["results"].as_array().expect("results");
    assert_eq!(results.len(), 2000);
    for (i, result) in results.iter().enumerate() {
        let checked = fp ^ (1 << (i % 64));
        let nearest = &brute_force(&model, checked, 3)[0];
        assert_eq!(result["status"], "duplicate", "{result}");
        assert_eq!(result["match"]["id"], nearest.id, "{result}");
        assert_eq!(result["match"]["distance"], nearest.distance, "{result}");
    }
    // The same with "sync": true (answered apart from the group).
    let checks: Vec<Value> = (0..64u64)
        .map(|i| json!({"id": 2_000_000 + i, "fingerprint": fp ^ (0b11 << i.min(62))}))
        .collect();
    let answer = ok_json(post(
        &mut client,
        "/v1/check",
        &json!({ "documents": checks, "sync": true }),
    ));
    for (i, result) in answer["results"]
        .as_array()
        .expect("results")
        .iter()
        .enumerate()
    {
        let checked = fp ^ (0b11 << (i as u64).min(62));
        let nearest = &brute_force(&model, checked, 3)[0];
        assert_eq!(result["match"]["id"], nearest.id, "{result}");
    }
}

/// The matches of a query's answer, as (id, distance).
fn found(value: &Value) -> Vec<(u64, u64)> {
    value["matches"]
        .as_array()
        .expect("matches")
        .iter()
        .map(|m| {
            (
                m["id"].as_u64().expect("id"),
                m["distance"].as_u64().expect("distance"),
            )
        })
        .collect()
}

fn nearest(model: &Model, fp: u64, k: u32, limit: usize) -> (Vec<(u64, u64)>, bool) {
    let all = brute_force(model, fp, k);
    let truncated = all.len() > limit;
    let kept = all
        .iter()
        .take(limit)
        .map(|m| (m.id, u64::from(m.distance)))
        .collect();
    (kept, truncated)
}

#[test]
fn queries_return_at_most_their_limit_nearest_first() {
    let (_dir, _db, server) = start(&["--max-matches", "500"]);
    let mut client = server.client();
    let fp: u64 = 0xfeed_f00d_dead_beef;
    let mut model = Model::new();
    let docs: Vec<Value> = (0..600u64)
        .map(|id| {
            let f = fp ^ (id % 7) ^ ((id % 3) << 40);
            model.insert(id, (f, None));
            json!({"id": id, "fingerprint": f})
        })
        .collect();
    ok_json(post(
        &mut client,
        "/v1/documents",
        &json!({ "documents": docs }),
    ));

    for (limit, k) in [(1, 3), (5, 3), (37, 2), (500, 3), (500, 0)] {
        let answer = ok_json(post(
            &mut client,
            "/v1/query",
            &json!({"fingerprint": fp, "k": k, "limit": limit}),
        ));
        let (want, truncated) = nearest(&model, fp, k, limit);
        assert_eq!(found(&answer), want, "limit {limit} k {k}");
        assert_eq!(answer["truncated"], truncated, "limit {limit} k {k}");
    }
    // Default: 100.
    let answer = ok_json(post(&mut client, "/v1/query", &json!({"fingerprint": fp})));
    assert_eq!(found(&answer), nearest(&model, fp, 3, 100).0);
    assert_eq!(answer["truncated"], true);
    // A batch: a limit of its own, the batch's, or 500 / 10 = 50 each.
    let queries: Vec<Value> = (0..10u64)
        .map(|i| match i {
            0 => json!({"fingerprint": fp ^ i, "limit": 3}),
            _ => json!({"fingerprint": fp ^ i}),
        })
        .collect();
    let answer = ok_json(post(
        &mut client,
        "/v1/query",
        &json!({ "queries": queries }),
    ));
    for (i, result) in answer["results"]
        .as_array()
        .expect("results")
        .iter()
        .enumerate()
    {
        let limit = if i == 0 { 3 } else { 50 };
        let (want, truncated) = nearest(&model, fp ^ i as u64, 3, limit);
        assert_eq!(found(result), want, "query {i}");
        assert_eq!(result["truncated"], truncated, "query {i}");
    }
    // Past the server's maximum, or 0: refused, saying why.
    for body in [
        json!({"fingerprint": fp, "limit": 501}),
        // 3 + 9 × 60 = 543.
        json!({"queries": queries, "limit": 60}),
        json!({"queries": [{"fingerprint": 1, "limit": 400}, {"fingerprint": 2, "limit": 101}]}),
    ] {
        let reply = post(&mut client, "/v1/query", &body);
        assert_eq!(error_code(&reply, 400), "too_many_matches", "{body}");
        assert!(reply.text().contains("--max-matches"), "{}", reply.text());
    }
    let reply = post(
        &mut client,
        "/v1/query",
        &json!({"fingerprint": fp, "limit": 0}),
    );
    assert_eq!(error_code(&reply, 400), "invalid_request");
}

#[test]
fn the_document_limit_is_enforced_while_the_body_is_parsed() {
    let (_dir, _db, server) = start(&["--max-documents", "10"]);
    let mut client = server.client();
    // Eleven documents, then a body that is not even JSON: the count is
    // past the limit before the parser reaches the end.
    let doc = r#"{"id": 1, "fingerprint": 2}"#;
    let eleven = [doc; 11].join(",");
    for (path, body) in [
        ("/v1/check", format!(r#"{{"documents": [{eleven}, {{"x"#)),
        (
            "/v1/documents",
            format!(r#"{{"documents": [{eleven}, nonsense"#),
        ),
        (
            "/v1/query",
            format!(
                r#"{{"queries": [{}, ["#,
                [r#"{"fingerprint": 1}"#; 11].join(",")
            ),
        ),
    ] {
        let reply = client.post(path, body.as_bytes()).expect("post");
        assert_eq!(error_code(&reply, 413), "too_many_documents", "{path}");
        assert!(reply.text().contains("--max-documents"), "{}", reply.text());
    }
    // Millions of `{}`, refused as such.
    let mut huge = String::from(r#"{"documents": ["#);
    huge.push_str(&vec!["{}"; 2_000_000].join(","));
    huge.push_str("]}");
    let reply = client.post("/v1/check", huge.as_bytes()).expect("post");
    assert_eq!(error_code(&reply, 413), "too_many_documents");
    // Ten are served, and nothing of the refused ones was written.
    let ten = [doc; 10].join(",");
    let answer = ok_json(
        client
            .post(
                "/v1/check",
                format!(r#"{{"documents": [{ten}]}}"#).as_bytes(),
            )
            .expect("post"),
    );
    assert_eq!(answer["results"][0]["status"], "new");
}

#[test]
fn cross_site_requests_are_refused() {
    let (_dir, _db, server) = start(&["--allow-host", "index.internal"]);
    let port = server.addr.port();
    // A web page's form, or a fetch with no body: no JSON content type.
    for (path, content_type, body) in [
        ("/v1/compact", Some("text/plain"), "{}"),
        ("/v1/compact", Some("application/x-www-form-urlencoded"), ""),
        ("/v1/sync", None, ""),
        ("/v1/compact", None, ""),
    ] {
        let reply = server
            .client()
            .request("POST", path, content_type, body.as_bytes())
            .expect("post");
        assert_eq!(
            error_code(&reply, 415),
            "unsupported_media_type",
            "{path} {content_type:?}"
        );
    }
    assert_eq!(
        ok_json(server.client().post("/v1/compact", b"").expect("post"))["compacted"],
        true
    );
    // A page of a rebound DNS name sends that name as the Host.
    for host in [
        "attacker.example",
        "attacker.example:7700",
        "127.0.0.2",
        "[::1]",
    ] {
        let reply = raw(
            &server,
            format!("GET /v1/stats HTTP/1.1\r\nHost: {host}\r\n\r\n").as_bytes(),
        );
        assert_eq!(error_code(&reply, 403), "host_not_allowed", "{host}");
    }
    for host in [
        format!("127.0.0.1:{port}"),
        "127.0.0.1".to_string(),
        format!("LOCALHOST:{port}"),
        "index.internal".to_string(),
        format!("Index.Internal:{port}"),
    ] {
        let reply = raw(
            &server,
            format!("GET /v1/stats HTTP/1.1\r\nHost: {host}\r\n\r\n").as_bytes(),
        );
        assert_eq!(reply.status, 200, "{host}: {}", reply.text());
    }
    // Any host, when asked.
    let (_dir, _db, any) = start(&["--allow-host", "*"]);
    let reply = raw(
        &any,
        b"GET /v1/stats HTTP/1.1\r\nHost: attacker.example\r\n\r\n",
    );
    assert_eq!(reply.status, 200, "{}", reply.text());
}

#[test]
fn expect_100_continue_with_a_huge_length_is_answered_413_at_once() {
    let (_dir, _db, server) = start(&[]);
    let mut client = server.client();
    client
        .stream()
        .write_all(
            b"POST /v1/check HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n\
              Content-Length: 10000000000\r\nExpect: 100-continue\r\n\r\n",
        )
        .expect("head");
    // The first answer is the refusal, not `100 Continue`.
    let reply = client.read_reply().expect("reply");
    assert_eq!(error_code(&reply, 413), "body_too_large");
    assert!(closed_by_server(client.stream()));
    // Without Expect too: refused before the body is read.
    let mut client = server.client();
    client
        .send_head("POST", "/v1/documents", Some("application/json"), 1 << 40)
        .expect("head");
    let reply = client.read_reply().expect("reply");
    assert_eq!(error_code(&reply, 413), "body_too_large");
}

#[test]
fn the_bearer_scheme_is_case_insensitive() {
    let dir = tempfile::tempdir().expect("tempdir");
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, "s3cret\n").expect("write token");
    let server = Server::start(
        &dir.path().join("index"),
        &["--token-file", token_file.to_str().expect("utf-8")],
    );
    for (authorization, status) in [
        ("Bearer s3cret", 200),
        ("bearer s3cret", 200),
        ("BEARER  s3cret", 200),
        ("bEaReR s3cret", 200),
        ("Bearer s3cre", 401),
        ("Bearers3cret", 401),
        ("Basic s3cret", 401),
        ("bearer", 401),
    ] {
        let reply = raw(
            &server,
            format!("GET /v1/stats HTTP/1.1\r\nHost: localhost\r\nAuthorization: {authorization}\r\n\r\n")
                .as_bytes(),
        );
        assert_eq!(reply.status, status, "{authorization:?}: {}", reply.text());
    }
    // The probes need no token.
    let reply = raw(&server, b"GET /readyz HTTP/1.1\r\nHost: localhost\r\n\r\n");
    assert_eq!(reply.status, 200);
}

#[test]
fn endpoints_without_arguments_take_no_body_or_an_empty_object_only() {
    let (_dir, _db, server) = start(&[]);
    let mut client = server.client();
    for path in ["/v1/sync", "/v1/compact"] {
        for body in ["[]", "null", "0", "\"\"", r#"{"now": true}"#, "[{}]"] {
            let reply = client.post(path, body.as_bytes()).expect("post");
            assert_eq!(error_code(&reply, 400), "invalid_request", "{path} {body}");
        }
        let reply = client.post(path, b"{").expect("post");
        assert_eq!(error_code(&reply, 400), "malformed_json", "{path}");
        for body in ["", " \n", "{}", " { } "] {
            assert_eq!(
                client.post(path, body.as_bytes()).expect("post").status,
                200,
                "{path} {body:?}"
            );
        }
    }
}

#[test]
fn serve_binds_before_it_creates_the_index_directory() {
    let dir = tempfile::tempdir().expect("tempdir");
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = taken.local_addr().expect("addr").to_string();
    let db = dir.path().join("new-index");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_simhashdb"))
        .args(["serve", "--listen", &addr, "--db"])
        .arg(&db)
        .output()
        .expect("run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("cannot listen"), "{stderr}");
    assert!(!db.exists(), "a refused serve left {} behind", db.display());
}

#[test]
fn a_client_that_stops_reading_its_answer_is_let_go() {
    let (_dir, _db, server) = start(&["--max-connections", "2", "--body-timeout", "1"]);
    let mut loader = server.client();
    write_large_answer(&mut loader);
    // A client asks for them all and reads nothing.
    let mut stalled = server.client();
    let body = json!({"fingerprint": 42, "limit": 400}).to_string();
    stalled
        .send_head("POST", "/v1/query", Some("application/json"), body.len())
        .expect("head");
    stalled.stream().write_all(body.as_bytes()).expect("body");
    server.wait_for_stderr("request started method=POST uri=/v1/query");
    // The loader and the stalled client hold both places until the server
    // lets the stalled one go; then a new client is served.
    healthz_until_answered(&server);
    drop(loader);
}

#[test]
fn connections_past_the_open_file_limit_are_refused_not_left_unanswered() {
    // 256 open files, and the default --max-connections of 512: the
    // server lowers its limit to what the files leave, and says so.
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start_with_open_files(&dir.path().join("index"), &[], 256);
    server.wait_for_stderr("--max-connections lowered to 128");
    let idle: Vec<TcpStream> = (0..128).map(|_| connect(&server)).collect();
    // Past them, each connection is answered at once, however many come.
    for _ in 0..200 {
        let answer = answer_unasked(&server);
        assert!(
            answer.starts_with("HTTP/1.1 503") && answer.contains("too_many_connections"),
            "{answer}"
        );
    }
    drop(idle);
    healthz_until_answered(&server);
}
