//! Blank texts over HTTP: `simhashdb serve` answers them as `simhashdb
//! check` does (`blank`, nothing stored) and refuses them where a document
//! must be stored or looked up, naming the document.
#![cfg(feature = "serve")]

mod common;

use serde_json::{Value, json};
use simhashdb::doc_id;

use common::http::{Client, Reply};
use common::server::Server;

const BLANKS: [&str; 5] = ["", "   ", "\n\t\r\n", "\u{a0}\u{3000}", "... -- !?"];

fn post(client: &mut Client, path: &str, body: &Value) -> Reply {
    client
        .post(path, body.to_string().as_bytes())
        .expect("request")
}

fn ok_json(reply: Reply) -> Value {
    assert_eq!(reply.status, 200, "{}", reply.text());
    reply.json()
}

fn assert_invalid(reply: &Reply, names: &str) {
    assert_eq!(reply.status, 400, "{}", reply.text());
    let body = reply.json();
    assert_eq!(body["error"]["code"], "invalid_request", "{body}");
    let message = body["error"]["message"].as_str().expect("message");
    assert!(
        message.starts_with(&format!("{names}: the text is blank")),
        "{message}"
    );
}

fn metric(text: &str, line_start: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix(line_start))
        .unwrap_or_else(|| panic!("no {line_start} in\n{text}"))
        .trim()
        .parse()
        .expect("a number")
}

#[test]
fn blank_texts_are_answered_blank_by_check_and_refused_by_inserts_and_queries() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("index");
    let server = Server::start(&db, &[]);
    let mut client = server.client();

    // One request mixing blank and real texts: each blank one is answered
    // `blank` with its name's id, none is a duplicate of another, and the
    // real ones are checked as usual.
    let mut documents = vec![json!({"name": "real 1", "text": "a page with real words on it"})];
    for (i, text) in BLANKS.iter().enumerate() {
        documents.push(json!({"name": format!("blank {i}"), "text": text}));
    }
    documents.push(json!({"name": "real 2", "text": "a page with real words on it"}));
    let reply = ok_json(post(
        &mut client,
        "/v1/check",
        &json!({ "documents": documents }),
    ));
    let results = reply["results"].as_array().expect("results");
    assert_eq!(results.len(), BLANKS.len() + 2);
    assert_eq!(results[0]["status"], "new");
    for (i, result) in results[1..=BLANKS.len()].iter().enumerate() {
        assert_eq!(
            result,
            &json!({"status": "blank", "id": doc_id(&format!("blank {i}"))}),
            "{result}"
        );
    }
    assert_eq!(results[BLANKS.len() + 1]["status"], "duplicate");
    assert_eq!(results[BLANKS.len() + 1]["match"]["id"], doc_id("real 1"));

    // Nothing blank was stored, so nothing answers at fingerprint 0.
    for i in 0..BLANKS.len() {
        let reply = client
            .get(&format!("/v1/documents?name=blank%20{i}"))
            .expect("get");
        assert_eq!(reply.status, 404, "{}", reply.text());
    }
    let stats = ok_json(client.get("/v1/stats").expect("stats"));
    assert_eq!(stats["memtable_entries"], 1, "{stats}");
    let near_zero = ok_json(post(&mut client, "/v1/query", &json!({"fingerprint": 0})));
    assert!(
        near_zero["matches"]
            .as_array()
            .expect("matches")
            .iter()
            .all(|m| m["id"] != doc_id("blank 0")),
        "{near_zero}"
    );

    // An insert with a blank text is refused whole, naming the document.
    let reply = post(
        &mut client,
        "/v1/documents",
        &json!({"documents": [
            {"name": "stored?", "text": "more real words here"},
            {"name": "blank", "text": " \n "},
        ]}),
    );
    assert_invalid(&reply, "documents[1]");
    assert_eq!(
        client
            .get("/v1/documents?name=stored%3F")
            .expect("get")
            .status,
        404
    );

    // A query with a blank text, alone or in a batch.
    assert_invalid(
        &post(&mut client, "/v1/query", &json!({"text": "  "})),
        "the query",
    );
    assert_invalid(
        &post(
            &mut client,
            "/v1/query",
            &json!({"queries": [{"text": "real words"}, {"text": "..."}]}),
        ),
        "queries[1]",
    );

    let metrics = client.get("/metrics").expect("metrics").text();
    assert_eq!(
        metric(
            &metrics,
            "simhashdb_checked_documents_total{result=\"blank\"}"
        ),
        BLANKS.len() as u64
    );
    assert_eq!(
        metric(
            &metrics,
            "simhashdb_checked_documents_total{result=\"new\"}"
        ),
        1
    );
}

/// The server's rule is the command line's: what `check` answers `blank`
/// for, the server does too, for the index's own tokenizer (digits are no
/// letters for the letter-run tokenizer).
#[test]
fn the_server_and_check_agree_on_blank_texts() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("index");
    let db_arg = db.to_str().expect("utf-8");
    common::cli::ok(&["create", "--db", db_arg, "--tokenizer", "letters"], b"");
    let texts = ["", "  ", "12 345", "...", "letters 42"];
    let mut lines = String::new();
    for (i, text) in texts.iter().enumerate() {
        lines.push_str(&format!("cli {i}\t{text}\n"));
    }
    let printed = common::cli::ok(&["check", "--db", db_arg], lines.as_bytes());
    let cli: Vec<&str> = printed.lines().collect();
    assert_eq!(cli, ["blank", "blank", "blank", "blank", "new"]);

    let server = Server::start(&db, &[]);
    let mut client = server.client();
    let documents: Vec<Value> = texts
        .iter()
        .enumerate()
        .map(|(i, text)| json!({"name": format!("http {i}"), "text": text}))
        .collect();
    let reply = ok_json(post(
        &mut client,
        "/v1/check",
        &json!({ "documents": documents }),
    ));
    let statuses: Vec<&str> = reply["results"]
        .as_array()
        .expect("results")
        .iter()
        .map(|r| r["status"].as_str().expect("status"))
        .collect();
    assert_eq!(statuses, ["blank", "blank", "blank", "blank", "duplicate"]);
}
