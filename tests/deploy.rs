//! The files in `deploy/` run the server as they say: the systemd unit's
//! command line and the container's entrypoint start a real server (their
//! paths moved into a temporary directory, their port to a free loopback
//! one), which answers its probes, keeps the token the container asks for,
//! and stops with exit 0 on SIGTERM; the unit passes `systemd-analyze
//! verify` where systemd's tools are installed.
#![cfg(feature = "serve")]

mod common;

use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::server::Server;

fn deploy_file(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("deploy")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The value of the unit's one uncommented `KEY=` line.
fn unit_setting(unit: &str, key: &str) -> String {
    let prefix = format!("{key}=");
    let values: Vec<&str> = unit
        .lines()
        .filter_map(|line| line.strip_prefix(&prefix))
        .collect();
    assert_eq!(values.len(), 1, "the unit sets {key} once: {values:?}");
    values[0].to_owned()
}

/// The JSON array of the Containerfile's `INSTRUCTION [...]` line.
fn container_array(file: &str, instruction: &str) -> Vec<String> {
    let prefix = format!("{instruction} ");
    let lines: Vec<&str> = file
        .lines()
        .filter_map(|line| line.strip_prefix(&prefix))
        .collect();
    assert_eq!(lines.len(), 1, "one {instruction} line: {lines:?}");
    serde_json::from_str(lines[0]).unwrap_or_else(|e| panic!("{instruction} {}: {e}", lines[0]))
}

/// Runs `words` (a deployed command line, program first) as the test's
/// server: the program must be `simhashdb`, and each `(from, to)` of
/// `moves` replaces a whole argument.
fn start_deployed(words: &[String], moves: &[(&str, OsString)]) -> Server {
    let (program, args) = words.split_first().expect("a command");
    assert!(
        program == "simhashdb" || program.ends_with("/simhashdb"),
        "the deployed command runs simhashdb, not {program}"
    );
    let mut replaced = vec![false; moves.len()];
    let args: Vec<OsString> = args
        .iter()
        .map(|arg| match moves.iter().position(|(from, _)| from == arg) {
            Some(i) => {
                replaced[i] = true;
                moves[i].1.clone()
            }
            None => OsString::from(arg),
        })
        .collect();
    for ((from, _), done) in moves.iter().zip(replaced) {
        assert!(
            done,
            "the deployed command has no argument {from}: {words:?}"
        );
    }
    Server::start_args(&args)
}

fn stop_with_sigterm(mut server: Server) {
    server.signal("TERM");
    let status = server.wait();
    assert!(
        status.success(),
        "SIGTERM: {status:?}; stderr:\n{}",
        server.stderr()
    );
}

#[test]
fn the_systemd_units_command_serves_its_probes_and_stops_on_sigterm() {
    let unit = deploy_file("simhashdb.service");
    assert_eq!(unit_setting(&unit, "KillSignal"), "SIGTERM");
    assert_eq!(unit_setting(&unit, "DynamicUser"), "yes", "never as root");
    let state = unit_setting(&unit, "StateDirectory");
    let exec = unit_setting(&unit, "ExecStart");
    let words: Vec<String> = exec.split_whitespace().map(str::to_owned).collect();
    let dir = tempfile::tempdir().expect("tempdir");
    let db = "${STATE_DIRECTORY}/index";
    let server = start_deployed(
        &words,
        &[
            (db, dir.path().join(&state).join("index").into()),
            ("127.0.0.1:7700", "127.0.0.1:0".into()),
        ],
    );
    let mut client = server.client();
    assert_eq!(client.get("/healthz").expect("healthz").status, 200);
    let ready = client.get("/readyz").expect("readyz");
    assert_eq!(ready.status, 200, "{}", ready.text());
    let check = client
        .post(
            "/v1/check",
            br#"{"documents": [{"name": "a", "text": "the unit's server stores what it checks"}]}"#,
        )
        .expect("check");
    assert_eq!(check.status, 200, "{}", check.text());
    assert_eq!(check.json()["results"][0]["status"], "new");
    stop_with_sigterm(server);
    assert!(
        dir.path()
            .join(&state)
            .join("index")
            .join("MANIFEST")
            .exists(),
        "the index is where the unit's StateDirectory puts it"
    );
}

#[test]
fn the_systemd_unit_passes_systemd_analyze_verify() {
    if Command::new("systemd-analyze")
        .arg("--version")
        .output()
        .is_err()
    {
        eprintln!("systemd-analyze is not installed: the unit's syntax is not checked here");
        return;
    }
    // The unit names /usr/local/bin/simhashdb: verify a copy naming the
    // binary under test, which exists.
    let unit = deploy_file("simhashdb.service").replace(
        "/usr/local/bin/simhashdb",
        PathBuf::from(env!("CARGO_BIN_EXE_simhashdb"))
            .to_str()
            .expect("a UTF-8 path"),
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("simhashdb.service");
    std::fs::write(&path, unit).expect("write the unit");
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&path)
        .output()
        .expect("run systemd-analyze");
    assert!(
        out.status.success(),
        "systemd-analyze verify: {:?}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn the_containers_entrypoint_serves_with_its_token_and_stops_on_sigterm() {
    let file = deploy_file("Containerfile");
    let user: Vec<&str> = file
        .lines()
        .filter_map(|l| l.strip_prefix("USER "))
        .collect();
    assert_eq!(
        user,
        ["simhashdb"],
        "the image runs as its own user, not root"
    );
    assert!(file.lines().any(|l| l == "STOPSIGNAL SIGTERM"));
    assert!(file.lines().any(|l| l == "VOLUME /data"));
    let mut words = container_array(&file, "ENTRYPOINT");
    words.extend(container_array(&file, "CMD"));
    let dir = tempfile::tempdir().expect("tempdir");
    let token = dir.path().join("token");
    std::fs::write(&token, "s3cret\n").expect("write the token");
    let server = start_deployed(
        &words,
        &[
            ("/data/index", dir.path().join("index").into()),
            ("0.0.0.0:7700", "127.0.0.1:0".into()),
            ("/run/secrets/simhashdb-token", token.into()),
        ],
    );
    let mut client = server.client();
    assert_eq!(client.get("/healthz").expect("healthz").status, 200);
    assert_eq!(client.get("/readyz").expect("readyz").status, 200);
    assert_eq!(
        client.get("/v1/stats").expect("stats").status,
        401,
        "the token is required"
    );
    let mut client = server.client().with_token("s3cret");
    let stats = client.get("/v1/stats").expect("stats");
    assert_eq!(stats.status, 200, "{}", stats.text());
    // A container is reached by names the server cannot know.
    client
        .stream()
        .write_all(
            b"GET /v1/stats HTTP/1.1\r\nHost: simhashdb.internal:7700\r\n\
              Authorization: Bearer s3cret\r\n\r\n",
        )
        .expect("send");
    let named = client.read_reply().expect("stats by name");
    assert_eq!(named.status, 200, "{}", named.text());
    stop_with_sigterm(server);
}
