//! docs/SERVER.md's shell examples run as written, with curl against a real
//! server, and print what the comments under them show (`...` stands for
//! any text: ids of the moment, timestamps).
#![cfg(feature = "serve")]

mod common;

use std::path::Path;
use std::process::Command;

use common::server::Server;

/// The `sh` block of the "Examples" section.
fn examples() -> String {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/SERVER.md"))
        .expect("read docs/SERVER.md");
    let section = doc
        .split("\n## Examples\n")
        .nth(1)
        .expect("an Examples section");
    section
        .split("```sh\n")
        .nth(1)
        .and_then(|b| b.split("\n```").next())
        .expect("a sh block")
        .to_string()
}

/// A command (continuation lines joined) and the lines its comment shows.
#[derive(Debug)]
struct Step {
    command: String,
    shown: Vec<String>,
    /// After "# With --token-file token.txt:".
    with_token: bool,
}

fn steps(block: &str) -> Vec<Step> {
    let mut steps: Vec<Step> = Vec::new();
    let mut with_token = false;
    let mut pending = String::new();
    for line in block.lines() {
        if line.starts_with("# With --token-file") {
            with_token = true;
        } else if let Some(shown) = line.strip_prefix("# ") {
            steps
                .last_mut()
                .expect("a comment under a command")
                .shown
                .push(shown.to_string());
        } else if !line.trim().is_empty() {
            pending.push_str(line.trim_end_matches('\\'));
            if !line.ends_with('\\') {
                steps.push(Step {
                    command: std::mem::take(&mut pending),
                    shown: Vec::new(),
                    with_token,
                });
            }
        }
    }
    steps
}

/// Whether `text` matches `pattern`, where `...` matches any text.
fn matches(pattern: &str, text: &str) -> bool {
    let parts: Vec<&str> = pattern.split("...").collect();
    let Some((first, rest)) = parts.split_first() else {
        return text.is_empty();
    };
    let Some(mut tail) = text.strip_prefix(first) else {
        return false;
    };
    for (i, part) in rest.iter().enumerate() {
        if i == rest.len() - 1 {
            return tail.ends_with(part);
        }
        match tail.find(part) {
            Some(at) => tail = &tail[at + part.len()..],
            None => return false,
        }
    }
    tail.is_empty()
}

fn curl(dir: &Path, command: &str, server: &Server) -> String {
    let command = command.replace("localhost:7700", &server.addr.to_string());
    let out = Command::new("bash")
        .args(["-c", &command])
        .current_dir(dir)
        .output()
        .expect("run bash (is curl installed? .ci/test installs it)");
    assert!(
        out.status.success(),
        "`{command}` failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8")
}

#[test]
fn the_examples_of_the_server_document_answer_as_shown() {
    let tmp = tempfile::tempdir().expect("tempdir");
    std::fs::write(tmp.path().join("token.txt"), "s3cret\n").expect("token");
    let steps = steps(&examples());
    let (serve, rest) = steps.split_first().expect("steps");
    assert!(
        serve.command.starts_with("simhashdb serve --db crawl.idx"),
        "{serve:?}"
    );
    let server = Server::start(&tmp.path().join("crawl.idx"), &[]);
    let tokened = Server::start(
        &tmp.path().join("other.idx"),
        &[
            "--token-file",
            tmp.path().join("token.txt").to_str().expect("utf-8"),
        ],
    );
    let mut ran = 0;
    for step in rest {
        assert!(step.command.starts_with("curl "), "{step:?}");
        let target = if step.with_token { &tokened } else { &server };
        let printed = curl(tmp.path(), &step.command, target);
        let printed: Vec<&str> = printed.lines().collect();
        assert_eq!(
            printed.len(),
            step.shown.len(),
            "`{}` printed {printed:?}, the document shows {:?}",
            step.command,
            step.shown
        );
        for (line, shown) in printed.iter().zip(&step.shown) {
            assert!(
                matches(shown, line),
                "`{}` printed\n{line}\nthe document shows\n{shown}",
                step.command
            );
        }
        ran += 1;
    }
    assert!(ran >= 8, "{ran} commands");
}

#[test]
fn the_pattern_matches_what_it_should() {
    assert!(matches("{\"a\":...,\"b\":2}", "{\"a\":17,\"b\":2}"));
    assert!(matches("{...,\"k\":3,...}", "{\"j\":1,\"k\":3,\"l\":4}"));
    assert!(!matches("{...,\"k\":3,...}", "{\"j\":1,\"k\":4,\"l\":4}"));
    assert!(!matches("{\"a\":1}", "{\"a\":1} "));
    assert!(matches("x", "x"));
    assert!(!matches("x...y", "xz"));
}
