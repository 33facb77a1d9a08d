//! `POST /v1/check` is answered before the server's router, in one step
//! (docs/SERVER.md, "Threads"): these tests hold it to what the router's
//! layers and extractors do for every other endpoint, as a real process
//! over loopback. Each refusal is compared byte for byte (but for the
//! `Date` header) with the same refusal of `POST /v1/documents`, which the
//! router answers.
#![cfg(feature = "serve")]

mod common;

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use serde_json::json;

use common::http::IO_TIMEOUT;
use common::server::Server;

const TOKEN: &str = "s3cret-token";

/// A server with a token, a body limit of 1,000 bytes and 2 documents per
/// request (and `extra`), on a new index in a temporary directory.
fn start(extra: &[&str]) -> (tempfile::TempDir, Server) {
    let dir = tempfile::tempdir().expect("tempdir");
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, format!("{TOKEN}\n")).expect("write token");
    let mut args = vec![
        "--token-file",
        token_file.to_str().expect("utf-8"),
        "--max-body-bytes",
        "1000",
        "--max-documents",
        "2",
    ];
    args.extend_from_slice(extra);
    let server = Server::start(&dir.path().join("index"), &args);
    (dir, server.with_token(TOKEN))
}

/// A response as sent: the status line, the headers but `Date` (lower
/// case, sorted), the body.
#[derive(Debug, PartialEq)]
struct Raw {
    status: String,
    headers: Vec<String>,
    body: String,
}

impl Raw {
    fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {self:?}"))
    }
}

fn connect(server: &Server) -> TcpStream {
    let stream = TcpStream::connect_timeout(&server.addr, IO_TIMEOUT).expect("connect");
    stream.set_read_timeout(Some(IO_TIMEOUT)).expect("timeout");
    stream
}

/// Reads one response with a `Content-Length` from `stream`.
fn read_raw(stream: &mut TcpStream) -> Raw {
    let mut bytes = Vec::new();
    let mut byte = [0u8; 1];
    while !bytes.ends_with(b"\r\n\r\n") {
        match stream.read(&mut byte) {
            Ok(0) => panic!("closed in the head: {}", String::from_utf8_lossy(&bytes)),
            Ok(_) => bytes.push(byte[0]),
            Err(e) => panic!("{e} in the head: {}", String::from_utf8_lossy(&bytes)),
        }
    }
    let head = String::from_utf8(bytes).expect("utf-8 head");
    let mut lines = head.trim_end().split("\r\n");
    let status = lines.next().expect("status line").to_string();
    let mut headers: Vec<String> = lines
        .map(str::to_ascii_lowercase)
        .filter(|h| !h.starts_with("date:"))
        .collect();
    headers.sort();
    let length: usize = headers
        .iter()
        .find_map(|h| h.strip_prefix("content-length:"))
        .expect("content-length")
        .trim()
        .parse()
        .expect("length");
    let mut body = vec![0u8; length];
    stream.read_exact(&mut body).expect("body");
    Raw {
        status,
        headers,
        body: String::from_utf8(body).expect("utf-8 body"),
    }
}

/// Sends `request` (with `PATH` for the path) on a new connection, once to
/// `/v1/check` and once to `/v1/documents`; both answers.
fn both(server: &Server, request: &[u8]) -> (Raw, Raw) {
    let answer = |path: &str| {
        let text = String::from_utf8_lossy(request).replace("PATH", path);
        let mut stream = connect(server);
        // The server may answer before the body and close: what it did
        // not read is not sent.
        let _ = stream.write_all(text.as_bytes());
        read_raw(&mut stream)
    };
    (answer("/v1/check"), answer("/v1/documents"))
}

/// A request's head with `headers` and a body of `len` bytes.
fn head(headers: &str, len: usize) -> String {
    format!("POST PATH HTTP/1.1\r\nHost: localhost\r\n{headers}Content-Length: {len}\r\n\r\n")
}

fn error_code(raw: &Raw) -> String {
    raw.json()["error"]["code"]
        .as_str()
        .expect("code")
        .to_string()
}

#[test]
fn checks_are_refused_as_the_router_refuses_other_requests() {
    let (_dir, server) = start(&[]);
    let auth = format!("Authorization: Bearer {TOKEN}\r\n");
    let json = "Content-Type: application/json\r\n";
    let check = json!({"documents": [{"id": 1, "fingerprint": 7}]}).to_string();
    let with = |headers: &str, body: &str| format!("{}{body}", head(headers, body.len()));
    let cases: Vec<(&str, u16, &str, String)> = vec![
        (
            "a host not allowed",
            403,
            "host_not_allowed",
            with(&format!("{auth}{json}Host: evil.example\r\n"), &check).replacen(
                "Host: localhost\r\n",
                "",
                1,
            ),
        ),
        ("no token", 401, "unauthorized", with(json, &check)),
        (
            "a wrong token",
            401,
            "unauthorized",
            with(
                &format!("Authorization: Bearer s3cret-tokem\r\n{json}"),
                &check,
            ),
        ),
        (
            "a length over the limit",
            413,
            "body_too_large",
            head(&format!("{auth}{json}"), 5000),
        ),
        (
            "a chunked body over the limit",
            413,
            "body_too_large",
            format!(
                "POST PATH HTTP/1.1\r\nHost: localhost\r\n{auth}{json}\
                 Transfer-Encoding: chunked\r\n\r\n258\r\n{}\r\n258\r\n{}\r\n0\r\n\r\n",
                " ".repeat(600),
                " ".repeat(600)
            ),
        ),
        (
            "a body that is not JSON",
            415,
            "unsupported_media_type",
            with(&format!("{auth}Content-Type: text/plain\r\n"), &check),
        ),
        (
            "malformed JSON",
            400,
            "malformed_json",
            with(
                &format!("{auth}{json}"),
                r#"{"documents": [{"id": 1, "fingerprint": 7},"#,
            ),
        ),
        (
            "more documents than the limit",
            413,
            "too_many_documents",
            with(
                &format!("{auth}{json}"),
                &json!({"documents": [
                    {"id": 1, "fingerprint": 7},
                    {"id": 2, "fingerprint": 8},
                    {"id": 3, "fingerprint": 9},
                ]})
                .to_string(),
            ),
        ),
    ];
    for (what, status, code, request) in &cases {
        let (check, router) = both(&server, request.as_bytes());
        assert!(
            check.status.starts_with(&format!("HTTP/1.1 {status} ")),
            "{what}: {check:?}"
        );
        assert_eq!(error_code(&check), *code, "{what}");
        assert_eq!(check, router, "{what}");
    }
    // Nothing was written.
    let mut client = server.client();
    assert_eq!(client.get("/v1/documents/1").expect("get").status, 404);

    // Every refusal counted under the check's route.
    let metrics = client.get("/metrics").expect("metrics").text();
    for (status, count) in [(403, 1), (401, 2), (413, 3), (415, 1), (400, 1)] {
        let line = format!(
            "simhashdb_http_requests_total{{method=\"POST\",route=\"/v1/check\",status=\"{status}\"}} {count}"
        );
        assert!(metrics.lines().any(|l| l == line), "{line}\n{metrics}");
    }
}

/// A check whose body arrives in pieces (chunks, then a pause) is read
/// whole and answered as one sent at once.
#[test]
fn a_check_body_in_pieces_is_answered_whole() {
    let (_dir, server) = start(&[]);
    let body = json!({"documents": [{"id": 5, "fingerprint": 77}]}).to_string();
    let (a, b) = body.split_at(10);
    let (b, c) = b.split_at(12);
    let mut stream = connect(&server);
    write!(
        stream,
        "POST /v1/check HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {TOKEN}\r\n\
         Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n\
         {:x}\r\n{a}\r\n{:x}\r\n{b}\r\n",
        a.len(),
        b.len()
    )
    .expect("send");
    stream.flush().expect("flush");
    std::thread::sleep(Duration::from_millis(50));
    write!(stream, "{:x}\r\n{c}\r\n0\r\n\r\n", c.len()).expect("send");
    let reply = read_raw(&mut stream);
    assert!(reply.status.starts_with("HTTP/1.1 200 "), "{reply:?}");
    assert!(
        reply
            .headers
            .iter()
            .any(|h| h == "content-type: application/json"),
        "{reply:?}"
    );
    assert_eq!(
        reply.json(),
        json!({"results": [{"status": "new", "id": 5, "fingerprint": 77}]})
    );
    // The same connection serves the next request.
    write!(
        stream,
        "{}{body}",
        head(
            &format!("Authorization: Bearer {TOKEN}\r\nContent-Type: application/json\r\n"),
            body.len()
        )
        .replace("PATH", "/v1/check")
    )
    .expect("send");
    let again = read_raw(&mut stream);
    assert_eq!(again.json()["results"][0]["status"], "duplicate");
}

/// Whether `stream` has an answer waiting, looking for `wait`.
fn answered_within(stream: &mut TcpStream, wait: Duration) -> bool {
    stream.set_read_timeout(Some(wait)).expect("timeout");
    let mut byte = [0u8; 1];
    let answered = match stream.peek(&mut byte) {
        Ok(n) => n > 0,
        Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => false,
        Err(e) => panic!("{e}"),
    };
    stream.set_read_timeout(Some(IO_TIMEOUT)).expect("timeout");
    answered
}

/// Checks and the router's requests take their turns from the same
/// `--max-concurrent-requests`: with one turn, a check whose body has not
/// arrived holds back a `GET /v1/stats`, and a `POST /v1/documents` whose
/// body has not arrived holds back a check, each answered once the first
/// request is.
///
/// The server logs "request started" before the request asks for its turn,
/// so the second request can, rarely, take the turn first and be answered.
/// The first request then waits in the turns' queue, which is first come,
/// first served: it holds the turn once that answer is sent, and another
/// second request is sent, up to ten. A server whose checks took no turn
/// would answer every one of them.
#[test]
fn checks_and_other_requests_share_the_turns() {
    let (_dir, server) = start(&["--max-concurrent-requests", "1"]);
    let headers = format!("Authorization: Bearer {TOKEN}\r\nContent-Type: application/json\r\n");
    let body = |id: u64| json!({"documents": [{"id": id, "fingerprint": id * 1000}]}).to_string();
    for (first, then) in [
        ("/v1/check", "GET /v1/stats"),
        ("/v1/documents", "POST /v1/check"),
    ] {
        let first_body = body(if first == "/v1/check" { 10 } else { 20 });
        let mut holder = connect(&server);
        write!(
            holder,
            "{}{}",
            head(&headers, first_body.len()).replace("PATH", first),
            &first_body[..1]
        )
        .expect("send");
        server.wait_for_stderr(&format!("request started method=POST uri={first}"));
        let (method, path) = then.split_once(' ').expect("method and path");
        let mut held_back = None;
        for attempt in 0..10u64 {
            let then_body = if method == "POST" {
                body(30 + attempt)
            } else {
                String::new()
            };
            let mut waiter = connect(&server);
            write!(
                waiter,
                "{method} {path} HTTP/1.1\r\nHost: localhost\r\n{headers}Content-Length: {}\r\n\r\n{then_body}",
                then_body.len()
            )
            .expect("send");
            server.wait_for_stderr(&format!("request started method={method} uri={path}"));
            if !answered_within(&mut waiter, Duration::from_millis(300)) {
                held_back = Some(waiter);
                break;
            }
            // The second request took the turn first: its answer is whole,
            // and the first request is about to hold the turn.
            let early = read_raw(&mut waiter);
            assert!(
                early.status.starts_with("HTTP/1.1 200 "),
                "{then}: {early:?}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        let Some(mut waiter) = held_back else {
            panic!("{then} was answered ten times while {first} held the only turn");
        };
        holder.write_all(&first_body.as_bytes()[1..]).expect("send");
        let held = read_raw(&mut holder);
        assert!(
            held.status.starts_with("HTTP/1.1 200 "),
            "{first}: {held:?}"
        );
        let waited = read_raw(&mut waiter);
        assert!(
            waited.status.starts_with("HTTP/1.1 200 "),
            "{then}: {waited:?}"
        );
    }
}
