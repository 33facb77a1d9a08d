//! The README's command-line examples run as shown: every ```text block
//! that starts with a `$ ` line is a session whose commands run in a fresh
//! directory (with `examples/` of the repository in it and the built
//! `simhashdb` on the `PATH`), and each command prints exactly the lines
//! shown under it. The quick start's first command is run too and prints its
//! block. (The Rust blocks are doctests, the Python blocks run in
//! tests/server.rs and python/tests.)
#![cfg(feature = "cli")]

use std::path::{Path, PathBuf};
use std::process::Command;

fn readme() -> String {
    std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).expect("README")
}

/// The fenced blocks of a Markdown text: `(language, body)`.
fn blocks(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        let Some(lang) = line.strip_prefix("```") else {
            continue;
        };
        let mut body = String::new();
        for line in lines.by_ref() {
            if line.starts_with("```") {
                break;
            }
            body.push_str(line);
            body.push('\n');
        }
        out.push((lang.to_string(), body));
    }
    out
}

/// A fresh directory holding a link to the repository's `examples/`.
fn workdir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    std::os::unix::fs::symlink(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("examples"),
        dir.path().join("examples"),
    )
    .expect("link examples");
    dir
}

/// Runs a shell command line in `dir` with the built `simhashdb` first on
/// the `PATH`: its standard output and error.
fn run(dir: &Path, command: &str) -> (String, String) {
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_simhashdb"));
    let path = format!(
        "{}:{}",
        bin.parent().expect("bin dir").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = Command::new("bash")
        .args(["-c", command])
        .current_dir(dir)
        .env("PATH", path)
        .output()
        .expect("run bash");
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn every_shell_session_in_the_readme_prints_what_it_shows() {
    let mut sessions = 0;
    for (lang, body) in blocks(&readme()) {
        if lang != "text" || !body.starts_with("$ ") {
            continue;
        }
        sessions += 1;
        let dir = workdir();
        let mut commands: Vec<(String, String)> = Vec::new();
        for line in body.lines() {
            match line.strip_prefix("$ ") {
                Some(command) => commands.push((command.to_string(), String::new())),
                None => {
                    let (_, expected) = commands.last_mut().expect("a command first");
                    expected.push_str(line);
                    expected.push('\n');
                }
            }
        }
        for (command, expected) in commands {
            let (stdout, stderr) = run(dir.path(), &command);
            assert_eq!(
                stdout, expected,
                "README: `{command}` printed something else (stderr: {stderr})"
            );
        }
    }
    assert!(sessions >= 1, "no session found in the README");
}

#[test]
fn the_quick_start_prints_its_groups_and_summary() {
    let blocks = blocks(&readme());
    let at = blocks
        .iter()
        .position(|(lang, body)| {
            lang == "sh" && body.starts_with("cargo run --release -- dedup examples/corpus\n")
        })
        .expect("the quick start's commands");
    let (lang, shown) = &blocks[at + 1];
    assert_eq!(
        lang, "text",
        "the quick start's output follows its commands"
    );
    let dir = workdir();
    let (stdout, stderr) = run(dir.path(), "simhashdb dedup examples/corpus");
    assert_eq!(format!("{stdout}{stderr}"), *shown);
}
