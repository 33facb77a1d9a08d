//! Load harness for `simhashdb serve` (docs/BENCHMARKS.md, "The HTTP
//! service"): single-document checks per second with p50/p99 latency at 1,
//! 16 and 64 concurrent connections, and batched checks of 1,000 documents
//! per request, against the same index called in-process (the baseline), in
//! one run. Loopback only; every phase is bounded in time.
//!
//! ```text
//! cargo build --release --bin simhashdb
//! cargo run --release --example serve_load -- [--seconds 5] [--preload 1000000] [--fan-in 3]
//! ```
//!
//! `--fan-in` is the merge fan-in of both the in-process index and the
//! server (`serve --merge-fan-in`); the default is the server's.
//! `SERVE_BIN=PATH` drives another build's `simhashdb` (the index is this
//! harness's). `PHASES=inproc,t1,t16,t64,b1,b4,e16,e64` runs only the
//! phases named (`t`: a thread per connection; `b`: 1,000 documents per
//! request; `e`: one client thread's event loop; the number: connections);
//! `many`, which only runs when named, runs `Index::insert_if_new_many` of
//! 1,000 alone on the preloaded index, before any other phase (`inproc`'s
//! own `insert_if_new_many` phase comes after three phases that insert
//! too: both print the documents indexed at their start and end);
//! `m16`, which only runs when named, runs `e16`'s single checks beside
//! one more connection, from a client thread of its own, sending batches
//! of 1,000 (the single checks' figures, then the batches');
//! `floor`, which only runs when named, drives the same clients against
//! five trivial HTTP servers of this harness instead (`--floor-server`;
//! `FLOORS=4,5` runs only those named): what a request costs the kernel,
//! tokio and hyper before any of `serve`'s work.
//!
//! The client threads run on the same machine as the server, so on a small
//! machine they take CPU from it: the figures are a lower bound of what the
//! server does with clients elsewhere. The server's CPU time per document is
//! printed too.
//!
//! Two clients: one blocking thread per connection (`tests/common/http.rs`,
//! which writes a request's head and body in two writes), and one thread
//! serving all its connections from an event loop, as load generators such
//! as `wrk` do (tokio's single-threaded runtime; each request one write of
//! head and body, `Content-Length`, keep-alive, one document, its response
//! read whole and its status checked before the next request on that
//! connection). The second takes less of the two cores: a response wakes
//! one client thread, not one per connection.

mod common;
#[path = "../tests/common/http.rs"]
#[allow(dead_code)]
mod http;

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use simhashdb::engine::policy::TieredMergePolicy;
use simhashdb::{Index, Options};

use common::{arg, splitmix64};
use http::Client;

/// Ids of phase `phase`, worker `worker`: disjoint across phases and
/// workers, so every checked document is fresh (random fingerprints are
/// almost never within 3 bits of another: every check inserts).
fn doc(phase: u64, worker: u64, i: u64) -> (u64, u64) {
    let id = (phase << 56) | (worker << 40) | i;
    (id, splitmix64(id ^ 0x5eed))
}

/// Writes into `body` (cleared first) the `POST /v1/check` request of
/// `batch` documents of `worker`, its `i`-th and those after it.
fn check_body(body: &mut Vec<u8>, phase: u64, worker: u64, i: u64, batch: u64) {
    body.clear();
    body.extend_from_slice(b"{\"documents\":[");
    for j in 0..batch {
        let (id, fp) = doc(phase, worker, i + j);
        if j > 0 {
            body.push(b',');
        }
        body.extend_from_slice(format!("{{\"id\":{id},\"fingerprint\":{fp}}}").as_bytes());
    }
    body.extend_from_slice(b"]}");
}

/// The index's options: the default ones with the run's merge fan-in.
fn options() -> Options {
    Options::default().merge_policy(Some(std::sync::Arc::new(TieredMergePolicy {
        fan_in: arg("--fan-in", 3) as usize,
    })))
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

fn percentile(sorted: &[u32], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i] as f64 / 1e6
}

/// Throughput and latency of one phase.
struct Figures {
    docs: u64,
    requests: u64,
    seconds: f64,
    /// Per request (or per call of the in-process loop), in nanoseconds.
    latencies_ns: Vec<u32>,
    errors: u64,
}

impl Figures {
    /// `cpu`: the server's and the client's (this process's) CPU seconds
    /// over the phase, each with the part spent in the kernel.
    fn print(&self, label: &str, cpu: Option<[(f64, f64); 2]>) {
        let mut lat = self.latencies_ns.clone();
        lat.sort_unstable();
        let cpu = cpu.map_or(String::new(), |[server, client]| {
            format!(
                "  server CPU {:.2} µs/doc (kernel {:.2})  client CPU {:.2} µs/request (kernel {:.2})",
                server.0 * 1e6 / self.docs.max(1) as f64,
                server.1 * 1e6 / self.docs.max(1) as f64,
                client.0 * 1e6 / self.requests.max(1) as f64,
                client.1 * 1e6 / self.requests.max(1) as f64,
            )
        });
        println!(
            "{label:<44} {:>10.0} docs/s {:>9.0} req/s  p50 {:>8.3} ms  p99 {:>8.3} ms  errors {}{cpu}",
            self.docs as f64 / self.seconds,
            self.requests as f64 / self.seconds,
            percentile(&lat, 0.50),
            percentile(&lat, 0.99),
            self.errors,
        );
    }
}

/// Runs `work(worker, stop)` on `threads` threads for `seconds`; each
/// returns (docs, requests, latencies, errors).
fn run_phase<F>(threads: u64, seconds: f64, work: F) -> Figures
where
    F: Fn(u64, &AtomicBool) -> (u64, u64, Vec<u32>, u64) + Sync,
{
    let stop = AtomicBool::new(false);
    let start = Instant::now();
    let results = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let work = &work;
                let stop = &stop;
                scope.spawn(move || work(t, stop))
            })
            .collect();
        std::thread::sleep(Duration::from_secs_f64(seconds));
        stop.store(true, Ordering::Relaxed);
        handles
            .into_iter()
            .map(|h| h.join().expect("worker"))
            .collect::<Vec<_>>()
    });
    let elapsed = start.elapsed().as_secs_f64();
    let mut figures = Figures {
        docs: 0,
        requests: 0,
        seconds: elapsed,
        latencies_ns: Vec::new(),
        errors: 0,
    };
    for (docs, requests, lat, errors) in results {
        figures.docs += docs;
        figures.requests += requests;
        figures.latencies_ns.extend(lat);
        figures.errors += errors;
    }
    figures
}

fn in_process(dir: &Path, phase: u64, threads: u64, batch: u64, seconds: f64) -> Figures {
    let index = Index::open(dir, options()).expect("open");
    let k = index.plan().k();
    let figures = run_phase(threads, seconds, |t, stop| {
        let mut lat = Vec::new();
        let mut i = 0;
        let mut requests = 0;
        while !stop.load(Ordering::Relaxed) {
            let start = Instant::now();
            for _ in 0..batch {
                let (id, fp) = doc(phase, t, i);
                i += 1;
                index.insert_if_new(id, fp, k).expect("insert_if_new").ok();
            }
            lat.push(start.elapsed().as_nanos().min(u32::MAX as u128) as u32);
            requests += 1;
        }
        (i, requests, lat, 0)
    });
    drop(index);
    figures
}

/// The documents `index` holds (fresh ids: no version replaced).
fn indexed(index: &Index) -> u64 {
    let stats = index.stats();
    stats.segment_docs + stats.memtable_docs as u64 + stats.flushing_docs as u64
}

/// One `Index::insert_if_new_many` call per `batch` documents: what
/// `POST /v1/check` does per request. Also returns the documents indexed
/// at the phase's start and end (every check inserts), and the flushes and
/// merges the phase's index made (counted from its open, before the close
/// waits for the last merge).
fn in_process_many(dir: &Path, phase: u64, batch: u64, seconds: f64) -> (Figures, [u64; 4]) {
    let index = Index::open(dir, options()).expect("open");
    let k = index.plan().k();
    let start = indexed(&index);
    let figures = run_phase(1, seconds, |t, stop| {
        let mut lat = Vec::new();
        let mut i = 0;
        let mut requests = 0;
        while !stop.load(Ordering::Relaxed) {
            let docs: Vec<(u64, u64, Option<String>)> = (0..batch)
                .map(|j| {
                    let (id, fp) = doc(phase, t, i + j);
                    (id, fp, None)
                })
                .collect();
            let start = Instant::now();
            index
                .insert_if_new_many(docs, k)
                .expect("insert_if_new_many");
            lat.push(start.elapsed().as_nanos().min(u32::MAX as u128) as u32);
            i += batch;
            requests += 1;
        }
        (i, requests, lat, 0)
    });
    let end = indexed(&index);
    let stats = index.stats();
    drop(index);
    (figures, [start, end, stats.flushes, stats.merges])
}

fn over_http(addr: SocketAddr, phase: u64, threads: u64, batch: u64, seconds: f64) -> Figures {
    run_phase(threads, seconds, |t, stop| {
        let mut client = Client::connect(addr).expect("connect");
        let mut lat = Vec::new();
        let mut body = Vec::with_capacity(batch as usize * 64);
        let mut i = 0;
        let mut requests = 0;
        let mut errors = 0;
        while !stop.load(Ordering::Relaxed) {
            check_body(&mut body, phase, t, i, batch);
            let start = Instant::now();
            let reply = client.post("/v1/check", &body).expect("request");
            lat.push(start.elapsed().as_nanos().min(u32::MAX as u128) as u32);
            if reply.status == 200 {
                i += batch;
            } else {
                errors += 1;
            }
            requests += 1;
        }
        (i, requests, lat, errors)
    })
}

/// `over_http`'s requests, each connection a task of one client thread's
/// event loop (tokio's single-threaded runtime). Every request is one
/// `POST /v1/check` of `batch` documents, head and body in one write, and
/// its response is read whole (`Content-Length`) and its status checked
/// before the connection's next request.
fn over_http_event_loop(
    addr: SocketAddr,
    phase: u64,
    connections: u64,
    batch: u64,
    seconds: f64,
) -> Figures {
    run_phase(1, seconds, |_, stop| {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .build()
            .expect("runtime");
        runtime.block_on(async {
            let tasks: Vec<_> = (0..connections)
                .map(|t| connection_loop(addr, phase, t, batch, stop))
                .collect();
            let mut totals = (0, 0, Vec::new(), 0);
            for (docs, requests, lat, errors) in join_all(tasks).await {
                totals.0 += docs;
                totals.1 += requests;
                totals.2.extend(lat);
                totals.3 += errors;
            }
            totals
        })
    })
}

/// Awaits every future of `futures` on the current task, polling each when
/// woken (the harness has no futures crate).
async fn join_all<F: std::future::Future>(futures: Vec<F>) -> Vec<F::Output> {
    let mut futures: Vec<_> = futures.into_iter().map(Box::pin).collect();
    let mut outputs: Vec<Option<F::Output>> = futures.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (future, output) in futures.iter_mut().zip(outputs.iter_mut()) {
            if output.is_none() {
                match future.as_mut().poll(cx) {
                    std::task::Poll::Ready(o) => *output = Some(o),
                    std::task::Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            std::task::Poll::Pending
        } else {
            std::task::Poll::Ready(())
        }
    })
    .await;
    outputs.into_iter().map(|o| o.expect("ready")).collect()
}

/// One keep-alive connection's requests until `stop`: (documents checked,
/// requests, latencies, errors).
async fn connection_loop(
    addr: SocketAddr,
    phase: u64,
    worker: u64,
    batch: u64,
    stop: &AtomicBool,
) -> (u64, u64, Vec<u32>, u64) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    stream.set_nodelay(true).expect("nodelay");
    let (mut lat, mut i, mut requests, mut errors) = (Vec::new(), 0, 0, 0);
    let mut body = Vec::new();
    let mut request = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    while !stop.load(Ordering::Relaxed) {
        check_body(&mut body, phase, worker, i, batch);
        request.clear();
        request.extend_from_slice(
            format!(
                "POST /v1/check HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n\
                 Content-Length: {}\r\n\r\n",
                body.len()
            )
            .as_bytes(),
        );
        request.extend_from_slice(&body);
        let start = Instant::now();
        stream.write_all(&request).await.expect("write");
        // The response: its head, then `Content-Length` bytes of body.
        let mut filled = 0;
        let (status, end) = loop {
            let n = stream.read(&mut buf[filled..]).await.expect("read");
            assert!(n > 0, "the server closed the connection");
            filled += n;
            if let Some(head) = buf[..filled].windows(4).position(|w| w == b"\r\n\r\n") {
                let head_text = std::str::from_utf8(&buf[..head]).expect("head");
                let status: u16 = head_text
                    .split(' ')
                    .nth(1)
                    .and_then(|s| s.parse().ok())
                    .expect("status");
                let length: usize = head_text
                    .lines()
                    .find_map(|l| {
                        let (name, value) = l.split_once(':')?;
                        name.eq_ignore_ascii_case("content-length")
                            .then(|| value.trim().parse().ok())?
                    })
                    .expect("content-length");
                break (status, head + 4 + length);
            }
            if filled == buf.len() {
                buf.resize(buf.len() * 2, 0);
            }
        };
        if buf.len() < end {
            buf.resize(end, 0);
        }
        while filled < end {
            let n = stream.read(&mut buf[filled..end]).await.expect("read");
            assert!(n > 0, "the server closed the connection");
            filled += n;
        }
        assert_eq!(filled, end, "bytes past the response");
        lat.push(start.elapsed().as_nanos().min(u32::MAX as u128) as u32);
        if status == 200 {
            i += batch;
        } else {
            errors += 1;
        }
        requests += 1;
    }
    (i, requests, lat, errors)
}

/// User + system CPU seconds of process `pid` (a number, or `self`) so
/// far, and the system part (Linux).
fn cpu_of(pid: &str) -> (f64, f64) {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let fields: Vec<f64> = stat
        .rsplit(')')
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .map(|f| f.parse().unwrap_or(f64::NAN))
        .collect();
    let ticks = |i: usize| fields.get(i).copied().unwrap_or(f64::NAN) / 100.0;
    (ticks(11) + ticks(12), ticks(12))
}

/// The servers started: process id and address.
static SERVERS: std::sync::Mutex<Vec<(u32, SocketAddr)>> = std::sync::Mutex::new(Vec::new());

fn server_addr(pid: u32) -> SocketAddr {
    SERVERS
        .lock()
        .expect("servers")
        .iter()
        .find(|s| s.0 == pid)
        .expect("a started server")
        .1
}

struct ServerProcess {
    child: Child,
    addr: SocketAddr,
}

fn start_server(binary: &Path, dir: &Path) -> ServerProcess {
    let mut command = Command::new(binary);
    command
        .args(["serve", "--listen", "127.0.0.1:0", "--log", "warn", "--db"])
        .arg(dir)
        .args(["--merge-fan-in", &arg("--fan-in", 3).to_string()]);
    spawn_server(command, binary)
}

/// This harness again, as a trivial HTTP server (`--floor-server N`).
fn start_floor_server(variant: u64) -> ServerProcess {
    let binary = std::env::current_exe().expect("current exe");
    let mut command = Command::new(&binary);
    command.args(["--floor-server", &variant.to_string()]);
    spawn_server(command, &binary)
}

fn spawn_server(mut command: Command, binary: &Path) -> ServerProcess {
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap_or_else(|e| {
            panic!(
                "cannot start {} ({e}); run `cargo build --release --bin simhashdb` first",
                binary.display()
            )
        });
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("read the address");
    let addr = line
        .trim()
        .strip_prefix("listening on http://")
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| panic!("unexpected first line {line:?}"));
    ServerProcess { child, addr }
}

fn stop_server(mut server: ServerProcess) {
    let _ = Command::new("kill")
        .args(["-TERM", &server.child.id().to_string()])
        .status();
    let deadline = Instant::now() + Duration::from_secs(120);
    while Instant::now() < deadline {
        if let Ok(Some(status)) = server.child.try_wait() {
            assert!(status.success(), "server exited with {status}");
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = server.child.kill();
    panic!("the server did not stop within 120 s of SIGTERM");
}

/// The answer of the floor servers: the size of `POST /v1/check`'s to one
/// new document.
const FLOOR_BODY: &[u8] =
    b"{\"results\":[{\"id\":12345678901234567890,\"status\":\"new\",\"fingerprint\":12345678901234567890}]}";

/// `--floor-server N`: a trivial HTTP server on loopback, to measure what a
/// request costs before any of `serve`'s work: every request is read whole
/// (its head, then `Content-Length` bytes) and answered 200 with
/// [`FLOOR_BODY`], on tokio's multi-threaded runtime (but `5`). `1`:
/// the request parsed by hand, the answer one write; `2`: hyper serving an
/// axum router of one route, configured as `serve` configures them (no
/// index, no JSON, no middleware); `3`: hyper serving a function that reads
/// the body and answers (what `serve`'s `POST /v1/check` stands on: it is
/// answered before the router), configured as `serve` configures hyper;
/// `4`: the same without hyper's header-read timeout (`serve`'s
/// `--header-timeout`), which arms a timer for every request; `5`: `4` on
/// tokio's runtime of one thread (as `serve` runs on two cores).
fn floor_server(variant: u64) {
    let runtime = if variant == 5 {
        tokio::runtime::Builder::new_current_thread()
    } else {
        tokio::runtime::Builder::new_multi_thread()
    }
    .enable_all()
    .build()
    .expect("runtime");
    runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        println!(
            "listening on http://{}",
            listener.local_addr().expect("addr")
        );
        use std::io::Write;
        std::io::stdout().flush().expect("flush");
        let app = axum::Router::new().route(
            "/v1/check",
            axum::routing::post(|_body: axum::body::Bytes| async {
                (
                    [(axum::http::header::CONTENT_TYPE, "application/json")],
                    FLOOR_BODY,
                )
            }),
        );
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("signal");
        loop {
            let (stream, _) = tokio::select! {
                _ = term.recv() => return,
                accepted = listener.accept() => accepted.expect("accept"),
            };
            stream.set_nodelay(true).expect("nodelay");
            if variant == 1 {
                tokio::spawn(floor_connection(stream));
            } else if variant >= 3 {
                tokio::spawn(async move {
                    let mut http = hyper::server::conn::http1::Builder::new();
                    if variant == 3 {
                        http.timer(hyper_util::rt::TokioTimer::new())
                            .header_read_timeout(Duration::from_secs(30));
                    }
                    let _ = http
                        .serve_connection(
                            hyper_util::rt::TokioIo::new(stream),
                            hyper::service::service_fn(floor_answer),
                        )
                        .await;
                });
            } else {
                let app = app.clone();
                tokio::spawn(async move {
                    let mut http = hyper::server::conn::http1::Builder::new();
                    http.timer(hyper_util::rt::TokioTimer::new())
                        .header_read_timeout(Duration::from_secs(30));
                    let _ = http
                        .serve_connection(
                            hyper_util::rt::TokioIo::new(stream),
                            hyper_util::service::TowerToHyperService::new(app),
                        )
                        .await;
                });
            }
        }
    });
}

/// The answer of the floor servers `3` and `4`: the request's body read
/// whole, then [`FLOOR_BODY`] (not copied, not boxed).
async fn floor_answer(
    req: hyper::Request<hyper::body::Incoming>,
) -> Result<hyper::Response<FloorBody>, std::convert::Infallible> {
    use hyper::body::Body;
    let mut body = req.into_body();
    let mut read = 0usize;
    while let Some(frame) =
        std::future::poll_fn(|cx| std::pin::Pin::new(&mut body).poll_frame(cx)).await
    {
        if let Ok(data) = frame.map(hyper::body::Frame::into_data)
            && let Ok(data) = data
        {
            read += data.len();
        }
    }
    let mut response =
        hyper::Response::new(FloorBody(Some(axum::body::Bytes::from_static(FLOOR_BODY))));
    response.headers_mut().insert(
        axum::http::header::CONTENT_TYPE,
        axum::http::HeaderValue::from_static("application/json"),
    );
    std::hint::black_box(read);
    Ok(response)
}

/// A body of one piece.
struct FloorBody(Option<axum::body::Bytes>);

impl hyper::body::Body for FloorBody {
    type Data = axum::body::Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<axum::body::Bytes>, Self::Error>>> {
        std::task::Poll::Ready(
            self.get_mut()
                .0
                .take()
                .map(|b| Ok(hyper::body::Frame::data(b))),
        )
    }

    fn is_end_stream(&self) -> bool {
        self.0.is_none()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        hyper::body::SizeHint::with_exact(self.0.as_ref().map_or(0, |b| b.len() as u64))
    }
}

/// A connection of the floor server `1`: each request read whole, parsed
/// by hand, answered in one write.
async fn floor_connection(mut stream: tokio::net::TcpStream) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut response = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
         date: Fri, 27 Nov 2026 12:00:00 GMT\r\n\r\n",
        FLOOR_BODY.len()
    )
    .into_bytes();
    response.extend_from_slice(FLOOR_BODY);
    let mut buf = vec![0u8; 64 * 1024];
    let mut filled = 0;
    loop {
        let end = loop {
            if let Some(head) = buf[..filled].windows(4).position(|w| w == b"\r\n\r\n") {
                let length = content_length(&buf[..head]);
                let end = head + 4 + length;
                if filled >= end {
                    break end;
                }
            }
            if filled == buf.len() {
                buf.resize(buf.len() * 2, 0);
            }
            match stream.read(&mut buf[filled..]).await {
                Ok(0) | Err(_) => return,
                Ok(n) => filled += n,
            }
        };
        buf.copy_within(end..filled, 0);
        filled -= end;
        if stream.write_all(&response).await.is_err() {
            return;
        }
    }
}

/// The `Content-Length` of a request's or response's head (0 without one).
fn content_length(head: &[u8]) -> usize {
    std::str::from_utf8(head)
        .expect("head")
        .lines()
        .find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.eq_ignore_ascii_case("content-length")
                .then(|| value.trim().parse().ok())?
        })
        .unwrap_or(0)
}

/// Whether phase `name` runs: all of them, or those `PHASES` lists
/// (comma-separated; `floor`, the floor servers' phases, `many` and `m16`
/// are off by default).
fn runs(name: &str) -> bool {
    match std::env::var("PHASES") {
        Ok(list) => list.split(',').any(|p| p.trim() == name),
        Err(_) => !["floor", "many", "m16"].contains(&name),
    }
}

fn main() {
    let floor = arg("--floor-server", 0);
    if floor > 0 {
        floor_server(floor);
        return;
    }
    let seconds = arg("--seconds", 5) as f64;
    let preload = arg("--preload", 1_000_000);
    let binary: PathBuf = std::env::current_exe()
        .expect("current exe")
        .parent()
        .and_then(Path::parent)
        .expect("target dir")
        .join("simhashdb");
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("index");
    println!(
        "simhashdb serve load: {} cores, {seconds} s per phase, {preload} documents preloaded, merge fan-in {}; load average {}",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        arg("--fan-in", 3),
        loadavg()
    );
    {
        let index = Index::open(&dir, options()).expect("create");
        let docs: Vec<(u64, u64, Option<String>)> = (0..preload)
            .map(|i| {
                let (id, fp) = doc(0, 0, i);
                (id, fp, None)
            })
            .collect();
        for chunk in docs.chunks(100_000) {
            index.insert_batch(chunk.iter().cloned()).expect("preload");
        }
        index.flush().expect("flush");
    }

    let print_many = |figures: Figures, [start, end, flushes, merges]: [u64; 4], label: &str| {
        figures.print(label, None);
        println!(
            "  (documents indexed: {start} at the phase's start, {end} at its end; {flushes} flushes, {merges} merges done in the phase)"
        );
    };
    if runs("many") {
        println!(
            "-- in process, Index::insert_if_new_many alone, on the preloaded index (before any other phase)"
        );
        let (figures, indexed) = in_process_many(&dir, 12, 1000, seconds);
        print_many(
            figures,
            indexed,
            "in-process, 1 thread, insert_if_new_many of 1,000, alone",
        );
    }
    if runs("inproc") {
        println!("-- in process (Index::insert_if_new called directly; the baseline)");
        let base1 = in_process(&dir, 1, 1, 1, seconds);
        base1.print("in-process, 1 thread, 1 doc per call", None);
        let base16 = in_process(&dir, 2, 16, 1, seconds);
        base16.print("in-process, 16 threads, 1 doc per call", None);
        let base_batch = in_process(&dir, 3, 1, 1000, seconds);
        base_batch.print("in-process, 1 thread, loop of 1,000 docs", None);
        let (base_many, indexed) = in_process_many(&dir, 9, 1000, seconds);
        print_many(
            base_many,
            indexed,
            "in-process, 1 thread, insert_if_new_many of 1,000",
        );
    }

    // The phases over HTTP: (name, phase, connections, documents per
    // request, whether the event-loop client drives them).
    let http_phases = [
        ("t1", 4, 1, 1, false),
        ("t16", 5, 16, 1, false),
        ("t64", 6, 64, 1, false),
        ("b1", 7, 1, 1000, false),
        ("b4", 8, 4, 1000, false),
        ("e16", 10, 16, 1, true),
        ("e64", 11, 64, 1, true),
    ];
    let measure = |pid: u32, label: &str, phase: u64, conns: u64, batch: u64, event_loop: bool| {
        let (server0, client0) = (cpu_of(&pid.to_string()), cpu_of("self"));
        let figures = if event_loop {
            over_http_event_loop(server_addr(pid), phase, conns, batch, seconds)
        } else {
            over_http(server_addr(pid), phase, conns, batch, seconds)
        };
        let (server1, client1) = (cpu_of(&pid.to_string()), cpu_of("self"));
        let spent = |a: (f64, f64), b: (f64, f64)| (b.0 - a.0, b.1 - a.1);
        figures.print(
            label,
            Some([spent(server0, server1), spent(client0, client1)]),
        );
    };
    if http_phases.iter().any(|p| runs(p.0)) || runs("m16") {
        println!(
            "-- over HTTP (POST /v1/check, keep-alive connections; t: a client thread per connection, e: one client thread's event loop, each request one write)"
        );
        // `SERVE_BIN`: another build's `simhashdb` to drive.
        let binary = std::env::var_os("SERVE_BIN").map_or(binary, PathBuf::from);
        let server = start_server(&binary, &dir);
        let pid = server.child.id();
        SERVERS.lock().expect("servers").push((pid, server.addr));
        for (name, phase, conns, batch, event_loop) in http_phases {
            if runs(name) {
                let label =
                    format!("{name}: HTTP, {conns} connection(s), {batch} doc(s) per request");
                measure(pid, &label, phase, conns, batch, event_loop);
            }
        }
        if runs("m16") {
            // e16's single checks while one more connection, a client
            // thread of its own, sends batches of 1,000: what a long
            // request costs the short ones.
            let addr = server_addr(pid);
            let (singles, batches) = std::thread::scope(|scope| {
                let batches = scope.spawn(|| over_http(addr, 14, 1, 1000, seconds));
                let singles = over_http_event_loop(addr, 13, 16, 1, seconds);
                (singles, batches.join().expect("batches"))
            });
            singles.print(
                "m16: HTTP, 16 connection(s), 1 doc(s) per request, beside m16's batches",
                None,
            );
            batches.print(
                "m16: HTTP, 1 connection, 1000 doc(s) per request, beside m16's checks",
                None,
            );
        }
        stop_server(server);
    }
    if runs("floor") {
        println!(
            "-- a trivial HTTP server's floor (this harness as the server; no index, no JSON)"
        );
        for (variant, what) in [
            (1, "by hand, one write"),
            (2, "hyper + axum, one route"),
            (3, "hyper, a function"),
            (4, "hyper, a function, no header timer"),
            (5, "hyper, a function, no header timer, one thread"),
        ] {
            if std::env::var("FLOORS")
                .is_ok_and(|f| !f.split(',').any(|v| v == variant.to_string()))
            {
                continue;
            }
            let server = start_floor_server(variant);
            let pid = server.child.id();
            SERVERS.lock().expect("servers").push((pid, server.addr));
            for (name, conns, event_loop) in
                [("t16", 16, false), ("e16", 16, true), ("e64", 64, true)]
            {
                let label = format!("floor {variant} ({what}), {name}");
                measure(pid, &label, 12, conns, 1, event_loop);
            }
            stop_server(server);
        }
    }
    println!("load average at the end: {}", loadavg());
}
