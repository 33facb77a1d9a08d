//! `simhashdb serve` as a real process over loopback HTTP: every endpoint
//! against a brute-force model, bad requests, and the token.
#![cfg(feature = "serve")]

mod common;

use serde_json::{Value, json};
use simhashdb::fingerprint::fnv1a64;
use simhashdb::{Index, Options, Simhasher, hamming};

use common::http::{Client, Reply};
use common::server::Server;
use common::{Model, Rng, brute_force, live_docs};

fn post(client: &mut Client, path: &str, body: &Value) -> Reply {
    client
        .post(path, body.to_string().as_bytes())
        .expect("request")
}

fn ok_json(reply: Reply) -> Value {
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(reply.content_type, "application/json");
    reply.json()
}

/// The matches of a response, as the library's `Match`es.
fn matches(value: &Value) -> Vec<simhashdb::Match> {
    value["matches"]
        .as_array()
        .expect("matches")
        .iter()
        .map(|m| simhashdb::Match {
            id: m["id"].as_u64().expect("id"),
            fingerprint: m["fingerprint"].as_u64().expect("fingerprint"),
            distance: m["distance"].as_u64().expect("distance") as u32,
            name: m["name"].as_str().map(str::to_owned),
            sketch: None,
        })
        .collect()
}

/// Creates an index at `db` with the library's defaults (k = 3), as users
/// of fingerprints do: `serve` itself creates an index of texts (k = 6).
fn index_of_fingerprints(db: &std::path::Path) {
    Index::open(db, Options::new())
        .expect("create")
        .close()
        .expect("close");
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

fn assert_queries_match(client: &mut Client, model: &Model, fps: &[u64]) {
    for &fp in fps {
        for k in 0..=3 {
            let reply = post(client, "/v1/query", &json!({"fingerprint": fp, "k": k}));
            assert_eq!(
                matches(&ok_json(reply)),
                brute_force(model, fp, k),
                "query {fp:#x} k {k}"
            );
        }
    }
    // The same as one batch, fingerprints as decimal strings, default k.
    let queries: Vec<Value> = fps
        .iter()
        .map(|fp| json!({"fingerprint": fp.to_string()}))
        .collect();
    let batch = ok_json(post(client, "/v1/query", &json!({ "queries": queries })));
    let results = batch["results"].as_array().expect("results");
    assert_eq!(results.len(), fps.len());
    for (result, &fp) in results.iter().zip(fps) {
        assert_eq!(matches(result), brute_force(model, fp, 3), "batch {fp:#x}");
    }
    // And a batch of more than 64 queries (answered on the blocking pool):
    // the fingerprints again and again.
    let many: Vec<u64> = fps
        .iter()
        .copied()
        .cycle()
        .take(65.max(fps.len()))
        .collect();
    let queries: Vec<Value> = many.iter().map(|fp| json!({"fingerprint": fp})).collect();
    let batch = ok_json(post(client, "/v1/query", &json!({ "queries": queries })));
    let results = batch["results"].as_array().expect("results");
    assert_eq!(results.len(), many.len());
    for (result, &fp) in results.iter().zip(&many) {
        assert_eq!(matches(result), brute_force(model, fp, 3), "batch {fp:#x}");
    }
}

#[test]
fn every_endpoint_answers_as_brute_force_says() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("index");
    index_of_fingerprints(&db);
    let mut server = Server::start(&db, &[]);
    let mut client = server.client();
    let mut model = Model::new();
    let mut rng = Rng(16);

    // POST /v1/documents: 300 documents near four centres, ids as numbers
    // or strings, some named; then a replacement of 20 of them.
    let mut docs = Vec::new();
    for id in 0..300u64 {
        let fp = rng.fingerprint();
        let name = (id % 3 == 0).then(|| format!("https://example.com/{id}"));
        let mut doc = json!({"id": id, "fingerprint": fp});
        if id % 2 == 0 {
            doc["id"] = json!(id.to_string());
        }
        if let Some(name) = &name {
            doc["name"] = json!(name);
        }
        docs.push(doc);
        model.insert(id, (fp, name));
    }
    let reply = ok_json(post(
        &mut client,
        "/v1/documents",
        &json!({ "documents": docs }),
    ));
    assert_eq!(reply["inserted"], 300);
    let mut replaced = Vec::new();
    for id in (0..300u64).step_by(15) {
        let fp = rng.fingerprint();
        replaced.push(json!({"id": id, "fingerprint": fp, "name": format!("replaced {id}")}));
        model.insert(id, (fp, Some(format!("replaced {id}"))));
    }
    let reply = ok_json(post(
        &mut client,
        "/v1/documents",
        &json!({ "documents": replaced, "sync": true }),
    ));
    assert_eq!(reply["inserted"], 20);

    let probes: Vec<u64> = (0..40).map(|_| rng.fingerprint()).collect();
    assert_queries_match(&mut client, &model, &probes);

    // POST /v1/check: the nearest existing document, or inserted.
    let mut new = 0;
    for i in 0..60u64 {
        let (id, fp) = (
            1000 + i,
            rng.fingerprint() ^ (rng.next() & rng.next() & rng.next()),
        );
        let reply = ok_json(post(
            &mut client,
            "/v1/check",
            &json!({"documents": [{"id": id, "fingerprint": fp}]}),
        ));
        let result = &reply["results"][0];
        assert_eq!(result["id"], id);
        assert_eq!(result["fingerprint"], fp);
        let expected = brute_force(&model, fp, 3);
        match expected.first() {
            Some(nearest) => {
                assert_eq!(result["status"], "duplicate", "{result}");
                assert_eq!(result["match"]["id"], nearest.id);
                assert_eq!(result["match"]["fingerprint"], nearest.fingerprint);
                assert_eq!(result["match"]["distance"], nearest.distance);
                assert_eq!(result["match"]["name"].as_str(), nearest.name.as_deref());
            }
            None => {
                assert_eq!(result["status"], "new", "{result}");
                model.insert(id, (fp, None));
                new += 1;
            }
        }
    }
    assert!(
        new > 0,
        "every check was a duplicate: the test checks nothing"
    );

    // Texts: the id is FNV-1a 64 of the name, the fingerprint the default
    // Simhasher's, as the command line's `add` and `check` make them.
    let hasher = Simhasher::default();
    let texts = [
        (
            "https://a.example/1",
            "a crawler fetched this page about rust storage engines and their file formats today",
        ),
        (
            "https://a.example/2",
            "a crawler fetched this page about rust storage engines and their file formats yesterday",
        ),
        (
            "https://b.example/3",
            "an unrelated page lists recipes for bread, cakes and other things baked in an oven",
        ),
    ];
    let docs: Vec<Value> = texts
        .iter()
        .map(|(name, text)| json!({"name": name, "text": text}))
        .collect();
    let reply = ok_json(post(
        &mut client,
        "/v1/check",
        &json!({ "documents": docs }),
    ));
    let results = reply["results"].as_array().expect("results");
    for ((name, text), result) in texts.iter().zip(results) {
        let (id, fp) = (fnv1a64(name.as_bytes()), hasher.fingerprint(text));
        assert_eq!(result["id"], id);
        assert_eq!(result["fingerprint"], fp);
        let expected = brute_force(&model, fp, 3);
        match expected.first() {
            Some(nearest) => {
                assert_eq!(result["status"], "duplicate");
                assert_eq!(result["match"]["id"], nearest.id);
            }
            None => {
                assert_eq!(result["status"], "new");
                model.insert(id, (fp, Some(name.to_string())));
            }
        }
    }
    assert!(
        hamming(
            hasher.fingerprint(texts[0].1),
            hasher.fingerprint(texts[1].1)
        ) <= 3,
        "the two near-identical texts should be a duplicate pair"
    );
    assert_eq!(results[1]["status"], "duplicate");
    assert_eq!(results[1]["match"]["name"], texts[0].0);
    let reply = ok_json(post(&mut client, "/v1/query", &json!({"text": texts[1].1})));
    assert_eq!(
        matches(&reply),
        brute_force(&model, hasher.fingerprint(texts[1].1), 3)
    );

    // GET by id and by name; 404 for what is not there.
    for (&id, (fp, name)) in model.iter().step_by(7) {
        let doc = ok_json(client.get(&format!("/v1/documents/{id}")).expect("get"));
        assert_eq!(doc["id"], id);
        assert_eq!(doc["fingerprint"], *fp);
        assert_eq!(doc["name"].as_str(), name.as_deref());
    }
    let doc = ok_json(
        client
            .get("/v1/documents?name=https%3A%2F%2Fa.example%2F1")
            .expect("get"),
    );
    assert_eq!(doc["id"], fnv1a64(b"https://a.example/1"));
    assert_eq!(
        error_code(&client.get("/v1/documents/999999").expect("get"), 404),
        "not_found"
    );
    assert_eq!(
        error_code(&client.get("/v1/documents?name=nobody").expect("get"), 404),
        "not_found"
    );

    // DELETE by id and by name.
    for id in [3u64, 4, 5] {
        let reply = ok_json(
            client
                .delete(&format!("/v1/documents/{id}"))
                .expect("delete"),
        );
        assert_eq!(reply["deleted"]["id"], id);
        model.remove(&id);
        assert_eq!(
            error_code(
                &client.get(&format!("/v1/documents/{id}")).expect("get"),
                404
            ),
            "not_found"
        );
    }
    let reply = ok_json(
        client
            .delete("/v1/documents?name=https%3A%2F%2Fa.example%2F1")
            .expect("delete"),
    );
    assert_eq!(reply["deleted"]["name"], "https://a.example/1");
    model.remove(&fnv1a64(b"https://a.example/1"));
    assert_eq!(
        error_code(&client.delete("/v1/documents/3").expect("delete"), 404),
        "not_found"
    );
    assert_queries_match(&mut client, &model, &probes);

    // Stats, sync, compact (queries unchanged after it), health, metrics.
    let stats = ok_json(client.get("/v1/stats").expect("stats"));
    assert_eq!(stats["k"], 3);
    assert_eq!(stats["durability"], "buffered");
    assert!(stats["memtable_entries"].as_u64().expect("entries") > 0);
    assert_eq!(
        ok_json(post(&mut client, "/v1/sync", &json!({})))["synced"],
        true
    );
    let compacted = ok_json(post(&mut client, "/v1/compact", &json!({})));
    assert_eq!(compacted["segments"], 1);
    let stats = ok_json(client.get("/v1/stats").expect("stats"));
    assert_eq!(stats["segments"], 1);
    assert_eq!(stats["memtable_entries"], 0);
    assert_queries_match(&mut client, &model, &probes);
    assert_eq!(
        ok_json(client.get("/healthz").expect("health"))["status"],
        "ok"
    );
    let metrics = client.get("/metrics").expect("metrics");
    assert_eq!(metrics.status, 200);
    assert!(
        metrics
            .content_type
            .starts_with("text/plain; version=0.0.4")
    );
    let text = metrics.text();
    let value = |name: &str| -> u64 {
        text.lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {name} in\n{text}"))
    };
    assert_eq!(
        value("simhashdb_checked_documents_total{result=\"new\"}"),
        new + results.iter().filter(|r| r["status"] == "new").count() as u64
    );
    assert_eq!(value("simhashdb_inserted_documents_total"), 320);
    assert_eq!(value("simhashdb_deleted_documents_total"), 4);
    assert_eq!(value("simhashdb_segments"), 1);
    // The compaction flushed the memtable and merged: counted in /metrics
    // as in /v1/stats, and nothing failed.
    let stats = ok_json(client.get("/v1/stats").expect("stats"));
    let flushes = value("simhashdb_flushes_total{result=\"ok\"}");
    let merges = value("simhashdb_merges_total{result=\"ok\"}");
    assert!(flushes >= 1 && merges >= 1, "{flushes} {merges}");
    assert_eq!(stats["flushes"], flushes);
    assert_eq!(stats["merges"], merges);
    assert_eq!(value("simhashdb_flushes_total{result=\"failed\"}"), 0);
    assert_eq!(value("simhashdb_merges_total{result=\"failed\"}"), 0);
    assert_eq!(
        (&stats["flush_failures"], &stats["merge_failures"]),
        (&json!(0), &json!(0))
    );
    assert_eq!(
        value("simhashdb_http_requests_total{method=\"POST\",route=\"/v1/check\",status=\"200\"}"),
        61
    );
    assert!(text.contains(
        "simhashdb_http_request_duration_seconds_count{method=\"POST\",route=\"/v1/query\"}"
    ));

    // After a graceful stop the index holds exactly the model.
    drop(client);
    server.signal("TERM");
    assert!(server.wait().success(), "{}", server.stderr());
    let index = Index::open(&db, Options::default()).expect("reopen");
    assert_eq!(live_docs(&index), model);
}

/// A bad request: method, path, content type, body, status, error code.
type Case<'a> = (&'a str, &'a str, Option<&'a str>, String, u16, &'a str);

/// A valid first document, so that a request that wrote anything shows.
const WITNESS: u64 = 777;

#[test]
fn bad_requests_get_json_errors_and_write_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("index");
    index_of_fingerprints(&db);
    let server = Server::start(&db, &["--max-body-bytes", "4096", "--max-documents", "5"]);
    let mut client = server.client();
    let witness = format!(r#"{{"id": {WITNESS}, "fingerprint": 1}}"#);
    let docs = |rest: &str| format!(r#"{{"documents": [{witness}, {rest}]}}"#);
    let json = Some("application/json");
    let cases: Vec<Case> = vec![
        (
            "POST",
            "/v1/check",
            json,
            format!("{{\"documents\": [{witness}"),
            400,
            "malformed_json",
        ),
        (
            "POST",
            "/v1/check",
            json,
            String::new(),
            400,
            "malformed_json",
        ),
        (
            "POST",
            "/v1/check",
            json,
            format!("{{\"documents\": [{witness},]}}"),
            400,
            "malformed_json",
        ),
        (
            "POST",
            "/v1/check",
            json,
            docs(r#"{"id": 1, "fingerprint": "abc"}"#),
            400,
            "invalid_request",
        ),
        (
            "POST",
            "/v1/check",
            json,
            docs(r#"{"id": 1, "fingerprint": -1}"#),
            400,
            "invalid_request",
        ),
        (
            "POST",
            "/v1/check",
            json,
            docs(r#"{"id": 1, "fingerprint": 1.5}"#),
            400,
            "invalid_request",
        ),
        (
            "POST",
            "/v1/check",
            json,
            docs(r#"{"id": 1, "fingerprint": 18446744073709551616}"#),
            400,
            "invalid_request",
        ),
        (
            "POST",
            "/v1/check",
            json,
            docs(r#"{"id": true, "fingerprint": 1}"#),
            400,
            "invalid_request",
        ),
        (
            "POST",
            "/v1/check",
            json,
            docs(r#"{"id": 1, "fingerprint": 1, "url": "x"}"#),
            400,
            "invalid_request",
        ),
        (
            "POST",
            "/v1/check",
            json,
            docs(r#"{"text": "no name"}"#),
            400,
            "invalid_request",
        ),
        (
            "POST",
            "/v1/check",
            json,
            docs(r#"{"name": "n", "text": "t", "id": 2}"#),
            400,
            "invalid_request",
        ),
        (
            "POST",
            "/v1/check",
            json,
            docs(r#"{"id": 2}"#),
            400,
            "invalid_request",
        ),
        (
            "POST",
            "/v1/check",
            json,
            docs(r#"{"name": 5, "text": "t"}"#),
            400,
            "invalid_request",
        ),
        (
            "POST",
            "/v1/check",
            json,
            format!(r#"{{"documents": [{witness}], "extra": 1}}"#),
            400,
            "invalid_request",
        ),
        (
            "POST",
            "/v1/check",
            json,
            format!(r#"{{"documents": [{witness}], "sync": "yes"}}"#),
            400,
            "invalid_request",
        ),
        (
            "POST",
            "/v1/check",
            json,
            format!(r#"{{"documents": [{witness}], "distance": 4}}"#),
            400,
            "distance_too_large",
        ),
        (
            "POST",
            "/v1/check",
            json,
            format!(r#"{{"documents": {witness}}}"#),
            400,
            "invalid_request",
        ),
        (
            "POST",
            "/v1/check",
            json,
            "{}".into(),
            400,
            "invalid_request",
        ),
        (
            "POST",
            "/v1/check",
            json,
            "[]".into(),
            400,
            "invalid_request",
        ),
        (
            "POST",
            "/v1/check",
            json,
            format!("{{\"documents\": [{}]}}", [witness.as_str(); 6].join(",")),
            413,
            "too_many_documents",
        ),
        (
            "POST",
            "/v1/check",
            json,
            docs(&format!(
                r#"{{"id": 1, "fingerprint": 1, "name": "{}"}}"#,
                "x".repeat(5000)
            )),
            413,
            "body_too_large",
        ),
        (
            "POST",
            "/v1/check",
            Some("text/plain"),
            docs(r#"{"id": 1, "fingerprint": 1}"#),
            415,
            "unsupported_media_type",
        ),
        (
            "POST",
            "/v1/check",
            None,
            docs(r#"{"id": 1, "fingerprint": 1}"#),
            415,
            "unsupported_media_type",
        ),
        (
            "POST",
            "/v1/documents",
            json,
            docs(r#"{"id": 1, "fingerprint": "1x"}"#),
            400,
            "invalid_request",
        ),
        (
            "POST",
            "/v1/documents",
            json,
            docs(r#"{"id": 1}"#),
            400,
            "invalid_request",
        ),
        (
            "POST",
            "/v1/documents",
            json,
            format!("{{\"documents\": [{}]}}", [witness.as_str(); 6].join(",")),
            413,
            "too_many_documents",
        ),
        (
            "POST",
            "/v1/query",
            json,
            r#"{"fingerprint": 1, "k": 9}"#.into(),
            400,
            "distance_too_large",
        ),
        (
            "POST",
            "/v1/query",
            json,
            r#"{"fingerprint": 1, "text": "t"}"#.into(),
            400,
            "invalid_request",
        ),
        (
            "POST",
            "/v1/query",
            json,
            r#"{}"#.into(),
            400,
            "invalid_request",
        ),
        (
            "POST",
            "/v1/query",
            json,
            r#"{"fingerprint": 1, "queries": []}"#.into(),
            400,
            "invalid_request",
        ),
        (
            "POST",
            "/v1/query",
            json,
            r#"{"queries": [{"fingerprint": 1, "limt": 3}]}"#.into(),
            400,
            "invalid_request",
        ),
        (
            "GET",
            "/v1/documents/abc",
            None,
            String::new(),
            400,
            "invalid_request",
        ),
        (
            "GET",
            "/v1/documents/-1",
            None,
            String::new(),
            400,
            "invalid_request",
        ),
        (
            "GET",
            "/v1/documents",
            None,
            String::new(),
            400,
            "invalid_request",
        ),
        (
            "GET",
            "/v1/documents?name=a&other=b",
            None,
            String::new(),
            400,
            "invalid_request",
        ),
        (
            "DELETE",
            "/v1/documents?id=777",
            None,
            String::new(),
            400,
            "invalid_request",
        ),
        (
            "POST",
            "/v1/sync",
            json,
            r#"{"now": true}"#.into(),
            400,
            "invalid_request",
        ),
        (
            "POST",
            "/v1/compact",
            json,
            "[1]".into(),
            400,
            "invalid_request",
        ),
        ("GET", "/v1/nothing", None, String::new(), 404, "not_found"),
        (
            "PUT",
            "/v1/check",
            json,
            docs(r#"{"id": 1, "fingerprint": 1}"#),
            405,
            "method_not_allowed",
        ),
        (
            "GET",
            "/v1/check",
            None,
            String::new(),
            405,
            "method_not_allowed",
        ),
    ];
    for (method, path, content_type, body, status, code) in &cases {
        let reply = match client.request(method, path, *content_type, body.as_bytes()) {
            Ok(reply) => reply,
            // The server may close a connection whose body it refused.
            Err(_) => {
                client = server.client();
                client
                    .request(method, path, *content_type, body.as_bytes())
                    .expect("request on a new connection")
            }
        };
        assert_eq!(
            error_code(&reply, *status),
            *code,
            "{method} {path} {body:.200}: {}",
            reply.text()
        );
        // A new connection after each refusal: the server may close one
        // whose body it did not read.
        client = server.client();
    }
    // Nothing was written, and the server still serves.
    assert_eq!(
        error_code(
            &client
                .get(&format!("/v1/documents/{WITNESS}"))
                .expect("get"),
            404
        ),
        "not_found"
    );
    let stats = ok_json(client.get("/v1/stats").expect("stats"));
    assert_eq!(stats["memtable_entries"], 0, "{stats}");
    assert_eq!(stats["segment_entries"], 0, "{stats}");
    let reply = ok_json(post(
        &mut client,
        "/v1/check",
        &json!({"documents": [{"id": WITNESS, "fingerprint": 1}]}),
    ));
    assert_eq!(reply["results"][0]["status"], "new");
}

#[test]
fn a_name_over_the_limit_is_refused_by_position() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&dir.path().join("index"), &[]);
    let mut client = server.client();
    let long = "n".repeat(simhashdb::format::MAX_NAME_LEN + 1);
    for path in ["/v1/check", "/v1/documents"] {
        let reply = post(
            &mut client,
            path,
            &json!({"documents": [
                {"id": 1, "fingerprint": 1},
                {"name": long, "text": "words"},
            ]}),
        );
        assert_eq!(error_code(&reply, 400), "invalid_request");
        assert!(reply.text().contains("documents[1]"), "{}", reply.text());
    }
    assert_eq!(client.get("/v1/documents/1").expect("get").status, 404);
}

#[test]
fn a_token_file_requires_the_bearer_token() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("index");
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, "s3cret-token\n").expect("write token");
    let server = Server::start(&db, &["--token-file", token_file.to_str().expect("utf-8")]);
    let check = json!({"documents": [{"id": 1, "fingerprint": 1}]}).to_string();

    let mut anonymous = server.client();
    let reply = anonymous.post("/v1/check", check.as_bytes()).expect("post");
    assert_eq!(error_code(&reply, 401), "unauthorized");
    // The server may close a connection whose body it did not read.
    let mut anonymous = server.client();
    for path in ["/v1/stats", "/metrics", "/v1/documents/1"] {
        assert_eq!(
            error_code(&anonymous.get(path).expect("get"), 401),
            "unauthorized"
        );
    }
    assert_eq!(anonymous.get("/healthz").expect("health").status, 200);
    let mut wrong = server.client().with_token("s3cret-tokem");
    assert_eq!(
        error_code(
            &wrong.post("/v1/check", check.as_bytes()).expect("post"),
            401
        ),
        "unauthorized"
    );
    let mut prefix = server.client().with_token("s3cret");
    assert_eq!(
        error_code(
            &prefix.post("/v1/check", check.as_bytes()).expect("post"),
            401
        ),
        "unauthorized"
    );

    let server = server.with_token("s3cret-token");
    let mut client = server.client();
    // The refused checks wrote nothing: this one is new.
    let reply = ok_json(client.post("/v1/check", check.as_bytes()).expect("post"));
    assert_eq!(reply["results"][0]["status"], "new");
    assert_eq!(client.get("/metrics").expect("metrics").status, 200);

    // An empty token file is refused at start.
    std::fs::write(&token_file, "\n").expect("write token");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_simhashdb"))
        .args(["serve", "--listen", "127.0.0.1:0", "--token-file"])
        .arg(&token_file)
        .arg("--db")
        .arg(dir.path().join("other"))
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("empty"));
}

#[test]
fn metrics_public_opens_metrics_only_and_metrics_name_the_build_and_process() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("index");
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, "s3cret-token\n").expect("write token");
    let server = Server::start(
        &db,
        &[
            "--token-file",
            token_file.to_str().expect("utf-8"),
            "--metrics-public",
        ],
    );
    let mut anonymous = server.client();
    let metrics = anonymous.get("/metrics").expect("metrics");
    assert_eq!(metrics.status, 200, "{}", metrics.text());
    let text = metrics.text();
    let value = |name: &str| -> f64 {
        text.lines()
            .find(|l| l.starts_with(name) && !l.starts_with('#'))
            .unwrap_or_else(|| panic!("no {name} in\n{text}"))
            .rsplit(' ')
            .next()
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{name}: not a number in\n{text}"))
    };
    let build = format!(
        "simhashdb_build_info{{version=\"{}\",format_version=\"5\",oldest_format_version=\"3\"}}",
        env!("CARGO_PKG_VERSION")
    );
    assert_eq!(value(&build), 1.0);
    assert!(value("process_resident_memory_bytes ") > 0.0);
    assert!(value("process_open_fds ") >= 3.0);
    assert!(value("process_max_fds ") >= value("process_open_fds "));
    assert!(value("process_cpu_seconds_total ") >= 0.0);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs_f64();
    let start = value("process_start_time_seconds ");
    assert!(
        start <= now + 1.0 && start >= now - 600.0,
        "{start} vs {now}"
    );
    assert_eq!(value("simhashdb_table_decodes_total "), 0.0);
    // Everything else still needs the token.
    for path in ["/v1/stats", "/v1/documents/1"] {
        assert_eq!(
            error_code(&anonymous.get(path).expect("get"), 401),
            "unauthorized"
        );
    }
    let check = json!({"documents": [{"id": 1, "fingerprint": 1}]}).to_string();
    let mut anonymous = server.client();
    assert_eq!(
        error_code(
            &anonymous.post("/v1/check", check.as_bytes()).expect("post"),
            401
        ),
        "unauthorized"
    );
}

#[test]
fn a_second_server_on_the_same_index_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("index");
    let _first = Server::start(&db, &[]);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_simhashdb"))
        .args(["serve", "--listen", "127.0.0.1:0", "--db"])
        .arg(&db)
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("locked"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The first Python block of a document in the repository.
fn python_example(file: &str) -> String {
    let path = format!("{}/{file}", env!("CARGO_MANIFEST_DIR"));
    let doc = std::fs::read_to_string(&path).expect("read the document");
    doc.split("```python\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .unwrap_or_else(|| panic!("no python block in {file}"))
        .to_string()
}

/// Runs `example` with python3 against `server`; its standard output.
fn run_python(example: &str, server: &Server) -> String {
    let script = example.replace("http://127.0.0.1:7700", &format!("http://{}", server.addr));
    assert_ne!(script, example, "the example names no server address");
    let out = std::process::Command::new("python3")
        .arg("-c")
        .arg(&script)
        .output()
        .expect("run python3");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8")
}

/// The Python examples of docs/SERVER.md and the README (standard library
/// only), run by a real interpreter against the server.
#[test]
fn the_python_examples_of_the_docs_check_documents() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&dir.path().join("index"), &[]);
    let example = python_example("docs/SERVER.md");
    assert_eq!(run_python(&example, &server), "new None\n");
    assert_eq!(
        run_python(&example, &server),
        "duplicate https://example.com/b\n"
    );
    // The README's checks the same document: a duplicate of itself.
    let printed = run_python(&python_example("README.md"), &server);
    assert!(printed.contains("'status': 'duplicate'"), "{printed}");
    assert!(
        printed.contains("'name': 'https://example.com/b'"),
        "{printed}"
    );
}

/// The server and the command line give a named text the same id and
/// fingerprint: what `add` stored, the server finds by name and reports as
/// a duplicate at distance 0, and what the server stored, `get NAME` finds.
#[test]
fn the_server_and_the_command_line_agree_on_ids_and_fingerprints() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("index");
    let db_arg = db.to_str().expect("utf-8");
    let (cli_name, cli_text) = (
        "https://cli.example/a",
        "pages added from the command line, then checked over http",
    );
    common::cli::ok(
        &["add", "--db", db_arg, "-"],
        format!("{cli_name}\t{cli_text}\n").as_bytes(),
    );

    let mut server = Server::start(&db, &[]);
    let mut client = server.client();
    let doc = ok_json(
        client
            .get("/v1/documents?name=https%3A%2F%2Fcli.example%2Fa")
            .expect("get"),
    );
    let reply = ok_json(post(
        &mut client,
        "/v1/check",
        &json!({"documents": [{"name": "https://cli.example/copy", "text": cli_text}]}),
    ));
    let result = &reply["results"][0];
    assert_eq!(result["status"], "duplicate", "{result}");
    assert_eq!(result["match"]["id"], doc["id"]);
    assert_eq!(result["match"]["distance"], 0);
    assert_eq!(result["fingerprint"], doc["fingerprint"]);
    let (http_name, http_text) = (
        "https://http.example/b",
        "a different page stored by the server for the command line",
    );
    let reply = ok_json(post(
        &mut client,
        "/v1/check",
        &json!({"documents": [{"name": http_name, "text": http_text}]}),
    ));
    assert_eq!(reply["results"][0]["status"], "new");
    let stored = &reply["results"][0];
    drop(client);
    server.signal("TERM");
    assert!(server.wait().success());

    // `get NAME` prints ID<TAB>FINGERPRINT<TAB>TIMESTAMP<TAB>NAME.
    let printed = common::cli::ok(&["get", "--db", db_arg, http_name], b"");
    let fields: Vec<&str> = printed.trim_end().split('\t').collect();
    assert_eq!(fields[0], stored["id"].to_string());
    assert_eq!(fields[1], stored["fingerprint"].to_string());
    assert_eq!(fields[3], http_name);
}
