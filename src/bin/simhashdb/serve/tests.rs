//! The server over loopback HTTP with its index on the fault-injecting file
//! system: a failed write poisons the index, and then writes get 503 while
//! reads go on. (The process-level tests are in `tests/server*.rs`.)

#[path = "../../../../tests/common/http.rs"]
#[allow(dead_code)]
mod http;

use std::sync::Arc;

use serde_json::{Value, json};
use simhashdb::engine::fault::{Fault, FaultFs, FaultKind, Op};
use simhashdb::{Durability, Index, Options};

use super::{Hosts, Limits, Server, router};
use http::Client;

fn post(client: &mut Client, path: &str, body: Value) -> (u16, Value) {
    let reply = client
        .post(path, body.to_string().as_bytes())
        .expect("request");
    (reply.status, reply.json())
}

fn get(client: &mut Client, path: &str) -> (u16, Value) {
    let reply = client.get(path).expect("request");
    (reply.status, reply.json())
}

#[test]
fn a_poisoned_index_answers_writes_with_503_and_reads_go_on() {
    let fs = FaultFs::new();
    // The index lives in the fault-injecting file system; `/readyz` also
    // looks for its directory on the real one, so the path exists there.
    let real = tempfile::tempdir().expect("tempdir");
    let index = Index::open(
        real.path(),
        Options::new().file_system(Arc::new(fs.clone())),
    )
    .expect("open");
    let limits = Limits {
        max_body_bytes: 1 << 20,
        max_documents: 100,
        ..Limits::default()
    };
    let server = Arc::new(
        Server::new(index, Durability::Buffered, limits, Hosts::any(), None).expect("server"),
    );
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let listener = runtime
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    runtime.spawn(async move {
        axum::serve(listener, router(server, 16))
            .await
            .expect("serve");
    });
    let mut client = Client::connect(addr).expect("connect");
    let check = |id: u64, fp: u64| json!({"documents": [{"id": id, "fingerprint": fp}]});

    let (status, body) = post(&mut client, "/v1/check", check(1, 0xff));
    assert_eq!(
        (status, &body["results"][0]["status"]),
        (200, &json!("new"))
    );

    assert_eq!(
        get(&mut client, "/readyz"),
        (200, json!({"status": "ready"}))
    );

    // Every write to a file fails from now on.
    fs.inject(Fault::new(FaultKind::Eio).on(&[Op::Write]).sticky());
    let (status, body) = post(&mut client, "/v1/check", check(2, 0xff00));
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["error"]["code"], "write_failed");
    for (path, body) in [
        ("/v1/check", check(3, 0xff_0000)),
        ("/v1/documents", check(4, 0xff_0000_0000)),
        ("/v1/sync", json!({})),
    ] {
        let (status, body) = post(&mut client, path, body);
        assert_eq!(status, 503, "{path}: {body}");
        assert_eq!(body["error"]["code"], "index_poisoned", "{path}");
        assert!(
            body["error"]["message"]
                .as_str()
                .expect("message")
                .contains("reads are still served"),
            "{body}"
        );
    }
    let reply = client.delete("/v1/documents/1").expect("delete");
    assert_eq!(reply.status, 503, "{}", reply.text());

    // Reads go on, and see that nothing after the failure was written.
    let (status, body) = post(&mut client, "/v1/query", json!({"fingerprint": 0xff}));
    assert_eq!(status, 200);
    assert_eq!(body["matches"][0]["id"], 1);
    assert_eq!(get(&mut client, "/v1/documents/1").0, 200);
    for id in [2, 3, 4] {
        assert_eq!(get(&mut client, &format!("/v1/documents/{id}")).0, 404);
    }
    assert_eq!(get(&mut client, "/v1/stats").0, 200);
    // Alive, not ready: a load balancer sends writes elsewhere.
    assert_eq!(get(&mut client, "/healthz").0, 200);
    let (status, body) = get(&mut client, "/readyz");
    assert_eq!(
        (status, &body["status"]),
        (503, &json!("not_ready")),
        "{body}"
    );
    assert!(
        body["reason"]
            .as_str()
            .expect("reason")
            .contains("refuses further writes"),
        "{body}"
    );
    drop(client);
    runtime.shutdown_background();
}
