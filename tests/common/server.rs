//! Running `simhashdb serve` as a real process on an ephemeral loopback
//! port, for the server tests. Every wait is bounded.

use std::ffi::OsString;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::http::Client;

/// How long a server may take to start, or to exit after a signal.
pub const PROCESS_TIMEOUT: Duration = Duration::from_secs(60);

/// A running server; killed (SIGKILL) when dropped if still running.
pub struct Server {
    child: Child,
    pub addr: SocketAddr,
    stderr: Arc<Mutex<String>>,
    stderr_lines: Mutex<Receiver<String>>,
    token: Option<String>,
}

impl Server {
    /// Starts `simhashdb serve --db DB --listen 127.0.0.1:0 EXTRA...` and
    /// waits for the address it prints.
    pub fn start(db: &Path, extra: &[&str]) -> Server {
        Server::spawn(
            Command::new(env!("CARGO_BIN_EXE_simhashdb")),
            &serve_args(db, extra),
        )
    }

    /// [`Server::start`] with a soft limit of `files` open files
    /// (`ulimit -n`), set by sh(1).
    pub fn start_with_open_files(db: &Path, extra: &[&str], files: u32) -> Server {
        let mut sh = Command::new("sh");
        sh.arg("-c")
            .arg(format!("ulimit -n {files} && exec \"$0\" \"$@\""))
            .arg(env!("CARGO_BIN_EXE_simhashdb"));
        Server::spawn(sh, &serve_args(db, extra))
    }

    /// Starts `simhashdb ARGS...` (a command that serves, listening on a
    /// loopback address it prints) and waits for the address it prints.
    pub fn start_args(args: &[OsString]) -> Server {
        Server::spawn(Command::new(env!("CARGO_BIN_EXE_simhashdb")), args)
    }

    fn spawn(mut command: Command, args: &[OsString]) -> Server {
        let mut child = command
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn simhashdb serve");
        let stdout = child.stdout.take().expect("stdout");
        let (addr_tx, addr_rx) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let _ = addr_tx.send(line);
            }
        });
        let stderr = Arc::new(Mutex::new(String::new()));
        let (line_tx, stderr_lines) = channel();
        {
            let pipe = child.stderr.take().expect("stderr");
            let stderr = Arc::clone(&stderr);
            std::thread::spawn(move || {
                for line in BufReader::new(pipe).lines() {
                    let Ok(line) = line else { break };
                    {
                        let mut all = stderr.lock().expect("stderr");
                        all.push_str(&line);
                        all.push('\n');
                    }
                    let _ = line_tx.send(line);
                }
            });
        }
        let first = match addr_rx.recv_timeout(PROCESS_TIMEOUT) {
            Ok(line) => line,
            Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "the server printed no address; stderr:\n{}",
                    stderr.lock().expect("stderr")
                );
            }
        };
        let addr = first
            .strip_prefix("listening on http://")
            .and_then(|a| a.parse().ok())
            .unwrap_or_else(|| panic!("unexpected first line {first:?}"));
        Server {
            child,
            addr,
            stderr,
            stderr_lines: Mutex::new(stderr_lines),
            token: None,
        }
    }

    /// Later clients send this token.
    pub fn with_token(mut self, token: &str) -> Server {
        self.token = Some(token.to_string());
        self
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// A new connection (with the token, if one was set).
    pub fn client(&self) -> Client {
        let client = Client::connect(self.addr).expect("connect to the server");
        match &self.token {
            Some(token) => client.with_token(token),
            None => client,
        }
    }

    /// Everything the server wrote to standard error so far.
    pub fn stderr(&self) -> String {
        self.stderr.lock().expect("stderr").clone()
    }

    /// Waits until the server writes a line of standard error containing
    /// `needle` (lines seen by an earlier wait do not count).
    pub fn wait_for_stderr(&self, needle: &str) {
        let deadline = Instant::now() + PROCESS_TIMEOUT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = self.stderr_lines.lock().expect("lines").recv_timeout(left);
            match line {
                Ok(line) if line.contains(needle) => return,
                Ok(_) => {}
                Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => {
                    panic!("no {needle:?} on the server's stderr:\n{}", self.stderr())
                }
            }
        }
    }

    /// Sends a signal (`TERM`, `INT`, `KILL`) with kill(1).
    pub fn signal(&self, name: &str) {
        let status = Command::new("kill")
            .arg(format!("-{name}"))
            .arg(self.child.id().to_string())
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -{name} failed");
    }

    /// Waits for the process to exit.
    pub fn wait(&mut self) -> ExitStatus {
        let deadline = Instant::now() + PROCESS_TIMEOUT;
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "the server did not exit; stderr:\n{}",
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// `serve --db DB --listen 127.0.0.1:0 --log debug EXTRA...`.
fn serve_args(db: &Path, extra: &[&str]) -> Vec<OsString> {
    let mut args: Vec<OsString> = vec!["serve".into(), "--db".into(), db.into()];
    args.extend(["--listen", "127.0.0.1:0", "--log", "debug"].map(OsString::from));
    args.extend(extra.iter().map(OsString::from));
    args
}
