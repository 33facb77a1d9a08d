//! `simhashdb serve`: one process owns the index and answers JSON over HTTP
//! (docs/SERVER.md). The handlers parse, call the library, and serialise.

mod api;
mod error;
mod group;
mod handlers;
mod metrics;
mod process;
// Over the fault-injecting file system, which the crate's dev-dependency on
// itself turns on (a published crate's tests build without it).
#[cfg(all(test, feature = "fault-injection"))]
mod tests;

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{DefaultBodyLimit, MatchedPath, Request, State};
use axum::http::header::{AUTHORIZATION, HOST, WWW_AUTHENTICATE};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use simhashdb::engine::policy::TieredMergePolicy;
use simhashdb::{Durability, Index, Options, Simhasher};
use tower::limit::GlobalConcurrencyLimitLayer;

use crate::docs;
use crate::error::CliError;
use crate::index_cmd::Db;
use error::ApiError;
use metrics::Metrics;

#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    db: Db,
    /// Address to listen on (port 0: any free port; the address bound is
    /// printed on standard output).
    #[arg(long, default_value = "127.0.0.1:7700", value_name = "ADDR:PORT")]
    listen: SocketAddr,
    /// Sync every write to the device before acknowledging it (survives
    /// power loss, not only a crash of the process).
    #[arg(long)]
    sync: bool,
    /// Require `Authorization: Bearer TOKEN` (the scheme in any case) on
    /// every request but `/healthz` and `/readyz`, with TOKEN the first line
    /// of this file.
    #[arg(long, value_name = "FILE")]
    token_file: Option<PathBuf>,
    /// Answer `GET /metrics` without the token of --token-file (Prometheus
    /// scrapers are often configured apart from the API's clients). The
    /// metrics hold counts and sizes, never documents or ids.
    #[arg(long)]
    metrics_public: bool,
    /// Also serve requests whose `Host` header names NAME (repeatable; `*`:
    /// any). By default only the address listened on (any IP address when
    /// it is 0.0.0.0 or ::) and `localhost` (on loopback) are served (403
    /// otherwise), so a web page reached through a rebound DNS name cannot
    /// use the server.
    #[arg(long, value_name = "NAME")]
    allow_host: Vec<String>,
    /// Largest request body, in bytes (413 past it, before the body is
    /// read); at most 128 MiB, so that a request's documents fit one write.
    #[arg(long, default_value_t = 16 << 20, value_name = "BYTES",
          value_parser = clap::value_parser!(u64).range(1..=128 << 20))]
    max_body_bytes: u64,
    /// Most documents (or queries) in one request, counted while the body
    /// is parsed (413 past it); at most 1,000,000.
    #[arg(long, default_value_t = 10_000, value_name = "N",
          value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    max_documents: u64,
    /// Most matches one `/v1/query` request may return, over all its
    /// queries (a query returns at most its `limit`, default 100).
    #[arg(long, default_value_t = 100_000, value_name = "N",
          value_parser = clap::value_parser!(u64).range(1..))]
    max_matches: u64,
    /// Most requests served at once; more wait for a turn (`/healthz` and
    /// `/readyz` do not).
    #[arg(long, default_value_t = 64, value_name = "N",
          value_parser = clap::value_parser!(u64).range(1..))]
    max_concurrent_requests: u64,
    /// Most connections open at once; more are answered 503 and closed.
    /// Lowered, with a warning, to the open-file limit (`ulimit -n`) less
    /// 128.
    #[arg(long, default_value_t = 512, value_name = "N",
          value_parser = clap::value_parser!(u64).range(1..))]
    max_connections: u64,
    /// A connection must send a request's whole head within this many
    /// seconds of the previous response (or of connecting): idle
    /// connections are closed after it.
    #[arg(long, default_value_t = 30, value_name = "SECONDS",
          value_parser = clap::value_parser!(u64).range(1..))]
    header_timeout: u64,
    /// A request's whole body must arrive within this many seconds of the
    /// server starting to read it (408 and the connection closed past it);
    /// a client that takes nothing of an answer for as long is let go.
    #[arg(long, default_value_t = 60, value_name = "SECONDS",
          value_parser = clap::value_parser!(u64).range(1..))]
    body_timeout: u64,
    /// Segments of one size merged together at a time. Every check searches
    /// every segment, so a low fan-in keeps checks fast; each document is
    /// then rewritten by merges more often (docs/SERVER.md, "Merges").
    #[arg(long, default_value_t = SERVE_FAN_IN, value_name = "N",
          value_parser = clap::value_parser!(u16).range(2..=64))]
    merge_fan_in: u16,
    /// Threads that serve connections, each connection's requests on one
    /// of them from its accept to its close (the library's merges, flushes
    /// and searches of large batches run on threads of their own). Default:
    /// half the cores, at least one (docs/SERVER.md, "Threads").
    #[arg(long, value_name = "N",
          value_parser = clap::value_parser!(u16).range(1..=1024))]
    threads: Option<u16>,
    /// After SIGTERM or SIGINT, wait at most this many seconds for the
    /// requests in flight before closing their connections.
    #[arg(long, default_value_t = 30, value_name = "SECONDS")]
    shutdown_timeout: u64,
    /// Log level on standard error: error, warn, info or debug (debug logs
    /// every request).
    #[arg(long, default_value = "info", value_name = "LEVEL")]
    log: tracing::Level,
}

/// The server's merge fan-in: lower than the library's 16, which suits bulk
/// ingest; a check searches every segment (docs/SERVER.md, "Merges";
/// docs/BENCHMARKS.md, "Fewer segments, checks answered together" and
/// "A merge fan-in of 3 for the server").
const SERVE_FAN_IN: u16 = 3;

/// Request limits.
pub struct Limits {
    pub max_body_bytes: usize,
    pub max_documents: usize,
    pub max_matches: usize,
    pub body_timeout: Duration,
}

impl Default for Limits {
    /// The command line's defaults.
    fn default() -> Limits {
        Limits {
            max_body_bytes: 16 << 20,
            max_documents: 10_000,
            max_matches: 100_000,
            body_timeout: Duration::from_secs(60),
        }
    }
}

/// The `Host` headers a request may carry (docs/SERVER.md, "Cross-site
/// requests"): a web page that reaches the server through a DNS name it
/// rebound to the server's address sends that name.
pub struct Hosts {
    /// The address listened on.
    bound: SocketAddr,
    /// Names allowed besides (`--allow-host`).
    names: Vec<String>,
    /// `--allow-host '*'`.
    any: bool,
}

impl Hosts {
    pub fn new(bound: SocketAddr, names: &[String]) -> Hosts {
        Hosts {
            bound,
            any: names.iter().any(|n| n == "*"),
            names: names.iter().map(|n| n.to_ascii_lowercase()).collect(),
        }
    }

    /// Every host.
    #[cfg(test)]
    pub fn any() -> Hosts {
        Hosts::new(SocketAddr::from(([127, 0, 0, 1], 0)), &["*".to_string()])
    }

    /// Whether a request with `Host: host` is served: the address listened
    /// on, or any IP address when listening on all of them; `localhost` when
    /// listening on loopback or all addresses; a name allowed; no `Host` at
    /// all (HTTP/1.0; a browser always sends one). The port is not checked.
    fn allows(&self, host: Option<&[u8]>) -> bool {
        let Some(host) = host else { return true };
        if self.any {
            return true;
        }
        let Ok(host) = std::str::from_utf8(host) else {
            return false;
        };
        let name = match host.strip_prefix('[') {
            // An IPv6 literal: `[::1]` or `[::1]:7700`.
            Some(rest) => match rest.split_once(']') {
                Some((ip, port)) if port.is_empty() || port.starts_with(':') => ip,
                _ => return false,
            },
            None => host.rsplit_once(':').map_or(host, |(name, _)| name),
        };
        // Compared without regard to ASCII case, with nothing allocated
        // (the names allowed are kept in lower case).
        let ip = self.bound.ip();
        match name.parse::<std::net::IpAddr>() {
            Ok(given) => ip.is_unspecified() || given == ip,
            Err(_) => {
                (name.eq_ignore_ascii_case("localhost")
                    && (ip.is_loopback() || ip.is_unspecified()))
                    || self.names.iter().any(|n| n.eq_ignore_ascii_case(name))
            }
        }
    }
}

/// What every request shares: the index and the rules to use it by.
pub struct Server {
    index: Index,
    /// The index's recorded fingerprint configuration.
    hasher: Simhasher,
    durability: Durability,
    limits: Limits,
    hosts: Hosts,
    token: Option<String>,
    /// `--metrics-public`: `/metrics` answers without the token.
    metrics_public: bool,
    metrics: Metrics,
    /// Held exclusively by a compaction, shared by every other write.
    compaction: tokio::sync::RwLock<()>,
    /// Checks waiting to be answered.
    checks: group::CheckQueue,
}

impl Server {
    fn new(
        index: Index,
        durability: Durability,
        limits: Limits,
        hosts: Hosts,
        token: Option<String>,
    ) -> Result<Server, CliError> {
        let hasher = docs::hasher_for(&index)?;
        Ok(Server {
            index,
            hasher,
            durability,
            limits,
            hosts,
            token,
            metrics_public: false,
            metrics: Metrics::default(),
            compaction: tokio::sync::RwLock::new(()),
            checks: group::CheckQueue::default(),
        })
    }
}

/// Reads the token: the file's first line, which must not be empty.
fn read_token(path: &PathBuf) -> Result<String, CliError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| CliError::read(&path.display().to_string(), e))?;
    let token = text.lines().next().unwrap_or("").trim();
    if token.is_empty() {
        return Err(CliError::Input(format!(
            "{}: the token file's first line is empty",
            path.display()
        )));
    }
    Ok(token.to_string())
}

/// Whether `a` equals `b`, in a time that does not depend on where they differ.
fn same_secret(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The credentials of `Authorization: Bearer TOKEN`: the scheme's name in
/// any case (RFC 7235), then spaces.
fn bearer(value: &[u8]) -> Option<&[u8]> {
    let (scheme, rest) = value.split_at_checked(6)?;
    if !scheme.eq_ignore_ascii_case(b"bearer") || rest.first() != Some(&b' ') {
        return None;
    }
    let start = rest.iter().position(|&b| b != b' ')?;
    rest.get(start..)
}

fn authorized(server: &Server, headers: &HeaderMap) -> bool {
    let Some(token) = &server.token else {
        return true;
    };
    headers
        .get(AUTHORIZATION)
        .and_then(|v| bearer(v.as_bytes()))
        .is_some_and(|given| same_secret(given, token.as_bytes()))
}

/// The probes and the descriptions of the server, which need no token.
fn is_public(route: Option<&str>) -> bool {
    matches!(route, Some("/healthz" | "/readyz" | "/" | "/openapi.json"))
}

/// The answer to a request refused before its route runs: its `Host` not
/// allowed (403), or the token missing or wrong (401); `None`: let in.
fn refusal(server: &Server, headers: &HeaderMap, route: Option<&str>) -> Option<Response> {
    let host = headers.get(HOST).map(HeaderValue::as_bytes);
    if !server.hosts.allows(host) {
        return Some(
            ApiError::new(
                StatusCode::FORBIDDEN,
                "host_not_allowed",
                format!(
                    "this server does not answer requests for host {:?} (a web page reaching it \
                     through another name?); allow a name with --allow-host",
                    String::from_utf8_lossy(host.unwrap_or_default())
                ),
            )
            .into_response(),
        );
    }
    if is_public(route)
        || (server.metrics_public && route == Some("/metrics"))
        || authorized(server, headers)
    {
        return None;
    }
    let mut response = ApiError::new(
        StatusCode::UNAUTHORIZED,
        "unauthorized",
        "this server requires `Authorization: Bearer TOKEN` (see --token-file)",
    )
    .into_response();
    response
        .headers_mut()
        .insert(WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    Some(response)
}

/// Around every request the router answers: the host, the token, the
/// request's log line and metrics.
async fn observe(State(server): State<Arc<Server>>, req: Request, next: Next) -> Response {
    let start = Instant::now();
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map(MatchedPath::as_str);
    let endpoint = metrics::endpoint(req.method().as_str(), route);
    tracing::debug!(method = %req.method(), uri = %req.uri(), "request started");
    let response = match refusal(&server, req.headers(), route) {
        Some(refused) => refused,
        None => next.run(req).await,
    };
    server
        .metrics
        .record(endpoint, response.status().as_u16(), start.elapsed());
    response
}

/// What a connection's requests are answered with: `POST /v1/check`, the
/// request a client sends most, in one step ([`Connections::check`]), every
/// other request by the router.
struct Routes {
    server: Arc<Server>,
    router: Router,
    /// The turns of `--max-concurrent-requests`, shared with the router's
    /// limit.
    turns: Arc<tokio::sync::Semaphore>,
    /// The metrics' label of `POST /v1/check`.
    check: usize,
}

/// The service of a connection: the routes every connection shares, and
/// this connection's [`Pace`].
#[derive(Clone)]
struct Connections(Arc<Routes>, Arc<Pace>);

/// What a connection's header timeout (`--header-timeout`) is judged by:
/// the connection's requests and writes, noted as they happen, read by its
/// task's one timer when it fires ([`Pace::head_due`]). hyper's own
/// header-read timeout arms a timer (allocated, put in the runtime's timer
/// wheel and taken out again) for every request (docs/BENCHMARKS.md,
/// "The header timeout without a timer per request").
struct Pace {
    /// When the connection was accepted.
    opened: Instant,
    /// Requests whose head has arrived and whose answer is not yet handed
    /// to hyper (their body is read, or their answer made).
    serving: std::sync::atomic::AtomicU32,
    /// When the last write to the client returned, in nanoseconds since
    /// `opened` (0: none yet).
    written: std::sync::atomic::AtomicU64,
    /// Whether a write waits for the client to take what it was sent.
    stalled: std::sync::atomic::AtomicBool,
}

impl Pace {
    fn new() -> Pace {
        Pace {
            opened: Instant::now(),
            serving: std::sync::atomic::AtomicU32::new(0),
            written: std::sync::atomic::AtomicU64::new(0),
            stalled: std::sync::atomic::AtomicBool::new(false),
        }
    }

    fn wrote(&self) {
        let since = u64::try_from(self.opened.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.written
            .store(since, std::sync::atomic::Ordering::Relaxed);
    }

    /// When the connection's next head is due, asked at `now`: a request
    /// being served or an answer being written has none (asked again
    /// `timeout` later); otherwise `timeout` after the last write (the
    /// previous answer) or the connection. `None`: it is overdue, the
    /// connection is closed.
    fn head_due(&self, now: Instant, timeout: Duration) -> Option<Instant> {
        use std::sync::atomic::Ordering::Relaxed;
        if self.serving.load(Relaxed) > 0 || self.stalled.load(Relaxed) {
            return Some(now + timeout);
        }
        let due = self.opened + Duration::from_nanos(self.written.load(Relaxed)) + timeout;
        (due > now).then_some(due)
    }
}

/// A request of the connection being served ([`Pace::serving`]), until
/// its answer is handed to hyper or the request is dropped.
struct Serving(Arc<Pace>);

impl Serving {
    fn new(pace: &Arc<Pace>) -> Serving {
        pace.serving
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Serving(Arc::clone(pace))
    }
}

impl Drop for Serving {
    fn drop(&mut self) {
        self.0
            .serving
            .fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
}

type Answer = std::pin::Pin<
    Box<
        dyn std::future::Future<Output = Result<hyper::Response<Reply>, std::convert::Infallible>>
            + Send,
    >,
>;

/// The body of a response: a check's JSON answer as it was written (not
/// boxed, not copied into a `Bytes`: two allocations fewer per check), or
/// the body of the router's response.
enum Reply {
    /// Taken when sent.
    Answer(Option<Vec<u8>>),
    Routed(axum::body::Body),
}

/// A piece of a [`Reply`].
enum Piece {
    Answer(std::io::Cursor<Vec<u8>>),
    Routed(axum::body::Bytes),
}

impl hyper::body::Buf for Piece {
    fn remaining(&self) -> usize {
        match self {
            Piece::Answer(answer) => answer.remaining(),
            Piece::Routed(bytes) => bytes.remaining(),
        }
    }

    fn chunk(&self) -> &[u8] {
        match self {
            Piece::Answer(answer) => answer.chunk(),
            Piece::Routed(bytes) => bytes.chunk(),
        }
    }

    fn advance(&mut self, n: usize) {
        match self {
            Piece::Answer(answer) => answer.advance(n),
            Piece::Routed(bytes) => bytes.advance(n),
        }
    }
}

impl hyper::body::Body for Reply {
    type Data = Piece;
    type Error = axum::Error;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Piece>, axum::Error>>> {
        match self.get_mut() {
            Reply::Answer(answer) => std::task::Poll::Ready(answer.take().map(|a| {
                Ok(hyper::body::Frame::data(Piece::Answer(
                    std::io::Cursor::new(a),
                )))
            })),
            Reply::Routed(body) => std::pin::Pin::new(body)
                .poll_frame(cx)
                .map(|frame| frame.map(|f| f.map(|f| f.map_data(Piece::Routed)))),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            Reply::Answer(answer) => answer.is_none(),
            Reply::Routed(body) => body.is_end_stream(),
        }
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        match self {
            Reply::Answer(answer) => {
                hyper::body::SizeHint::with_exact(answer.as_ref().map_or(0, |a| a.len() as u64))
            }
            Reply::Routed(body) => body.size_hint(),
        }
    }
}

impl Routes {
    fn new(server: Arc<Server>, max_concurrent: usize) -> Arc<Routes> {
        let turns = Arc::new(tokio::sync::Semaphore::new(max_concurrent));
        let router = router_with(Arc::clone(&server), Arc::clone(&turns));
        Arc::new(Routes {
            server,
            router,
            turns,
            check: metrics::endpoint("POST", Some("/v1/check")),
        })
    }
}

impl Connections {
    /// The service of a connection accepted now.
    fn of_connection(routes: &Arc<Routes>) -> Connections {
        Connections(Arc::clone(routes), Arc::new(Pace::new()))
    }

    /// `POST /v1/check` as the router answers it, with what its layers do
    /// done here, once, in the same order: the request's log line, the
    /// host, the token, a turn among `--max-concurrent-requests`, then the
    /// handler's work ([`handlers::check_request`]), and the metrics. The
    /// router's boxed layers and services cost about as much as the rest
    /// of a single document's check (docs/BENCHMARKS.md, "`POST /v1/check`
    /// before the router").
    async fn check(self, req: hyper::Request<hyper::body::Incoming>) -> hyper::Response<Reply> {
        let routes = &*self.0;
        let server = &routes.server;
        let start = Instant::now();
        tracing::debug!(method = %req.method(), uri = %req.uri(), "request started");
        let (mut parts, body) = req.into_parts();
        let response = match refusal(server, &parts.headers, Some("/v1/check")) {
            Some(refused) => refused.map(Reply::Routed),
            None => {
                // The semaphore is never closed.
                let _turn = routes.turns.acquire().await.ok();
                match handlers::check_request(server, &parts.headers, body).await {
                    Ok(answer) => {
                        // The request's header map, emptied, holds the
                        // answer's: no allocation (hyper keeps the answer's,
                        // emptied, for the connection's next request).
                        let mut headers = std::mem::take(&mut parts.headers);
                        headers.clear();
                        headers.insert(
                            axum::http::header::CONTENT_TYPE,
                            HeaderValue::from_static("application/json"),
                        );
                        let mut response = hyper::Response::new(Reply::Answer(Some(answer)));
                        *response.headers_mut() = headers;
                        response
                    }
                    Err(e) => e.into_response().map(Reply::Routed),
                }
            }
        };
        server
            .metrics
            .record(routes.check, response.status().as_u16(), start.elapsed());
        response
    }
}

impl hyper::service::Service<hyper::Request<hyper::body::Incoming>> for Connections {
    type Response = hyper::Response<Reply>;
    type Error = std::convert::Infallible;
    type Future = Answer;

    fn call(&self, req: hyper::Request<hyper::body::Incoming>) -> Answer {
        let serving = Serving::new(&self.1);
        if req.method() == axum::http::Method::POST && req.uri().path() == "/v1/check" {
            let this = self.clone();
            Box::pin(async move {
                let answer = this.check(req).await;
                drop(serving);
                Ok(answer)
            })
        } else {
            // The router is always ready.
            let mut router = self.0.router.clone();
            let routed = tower::Service::call(&mut router, req);
            Box::pin(async move {
                let answer = routed.await.map(|r| r.map(Reply::Routed));
                drop(serving);
                answer
            })
        }
    }
}

#[cfg(test)]
fn router(server: Arc<Server>, max_concurrent: usize) -> Router {
    router_with(
        server,
        Arc::new(tokio::sync::Semaphore::new(max_concurrent)),
    )
}

/// Every route, `turns` the turns of `--max-concurrent-requests`.
fn router_with(server: Arc<Server>, turns: Arc<tokio::sync::Semaphore>) -> Router {
    use handlers as h;
    let body_limit = server.limits.max_body_bytes;
    // The probes answer without waiting for a turn: requests that hold
    // every turn (slow bodies, a long compaction) do not make the server
    // look dead.
    let probes = Router::new()
        .route("/healthz", get(h::healthz))
        .route("/readyz", get(h::readyz))
        .route("/", get(h::root))
        .route("/openapi.json", get(h::openapi));
    Router::new()
        .route("/v1/check", post(h::check))
        .route(
            "/v1/documents",
            post(h::insert)
                .get(h::get_by_name)
                .delete(h::delete_by_name),
        )
        .route(
            "/v1/documents/{id}",
            get(h::get_by_id).delete(h::delete_by_id),
        )
        .route("/v1/query", post(h::query))
        .route("/v1/stats", get(h::stats))
        .route("/v1/compact", post(h::compact))
        .route("/v1/sync", post(h::sync))
        .route("/v1/backup", post(h::backup))
        .route("/metrics", get(h::metrics))
        .route_layer(GlobalConcurrencyLimitLayer::with_semaphore(turns))
        .merge(probes)
        .fallback(h::no_route)
        .method_not_allowed_fallback(h::wrong_method)
        .layer(middleware::from_fn_with_state(Arc::clone(&server), observe))
        .layer(DefaultBodyLimit::max(body_limit))
        .with_state(server)
}

/// Resolves on SIGTERM or SIGINT. Registered before the address is
/// printed, so a signal sent from then on shuts down gracefully.
fn shutdown_signal() -> std::io::Result<impl std::future::Future<Output = &'static str>> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    Ok(async move {
        tokio::select! {
            _ = term.recv() => "SIGTERM",
            _ = int.recv() => "SIGINT",
        }
    })
}

/// Connections refused at the limit that may be answered at once; past
/// them a connection is closed without an answer.
const REFUSING: usize = 64;

/// Answers a connection over `--max-connections` with a 503 and closes it,
/// within a second.
async fn refuse(mut stream: tokio::net::TcpStream, max: usize) {
    use tokio::io::AsyncWriteExt;
    let body = serde_json::json!({"error": {
        "code": "too_many_connections",
        "message": format!(
            "the server has {max} connections open, its limit (--max-connections); \
             retry later, or reuse a connection"
        ),
    }})
    .to_string();
    let response = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n\
         content-length: {}\r\nconnection: close\r\nretry-after: 1\r\n\r\n{body}",
        body.len()
    );
    // The request the client may be sending is read and dropped after the
    // answer, so that it does not turn the close into a reset that could
    // discard the answer before the client reads it.
    let _ = tokio::time::timeout(Duration::from_secs(1), async {
        use tokio::io::AsyncReadExt;
        stream.write_all(response.as_bytes()).await?;
        stream.shutdown().await?;
        let mut sink = [0u8; 1024];
        while stream.read(&mut sink).await? > 0 {}
        std::io::Result::Ok(())
    })
    .await;
}

/// A connection whose writes fail once the client has taken nothing of
/// them for `stall`: a client that stops reading its answer is let go
/// rather than hold its connection for ever.
struct Stalling {
    stream: tokio::net::TcpStream,
    stall: Duration,
    /// Since when writes wait for the client.
    waiting: Option<std::pin::Pin<Box<tokio::time::Sleep>>>,
    /// The connection's writes, noted for its header timeout.
    pace: Arc<Pace>,
}

impl tokio::io::AsyncRead for Stalling {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl tokio::io::AsyncWrite for Stalling {
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        use std::task::Poll;
        let this = self.get_mut();
        match std::pin::Pin::new(&mut this.stream).poll_write(cx, buf) {
            Poll::Ready(written) => {
                if this.waiting.take().is_some() {
                    this.pace
                        .stalled
                        .store(false, std::sync::atomic::Ordering::Relaxed);
                }
                this.pace.wrote();
                Poll::Ready(written)
            }
            Poll::Pending => {
                this.pace
                    .stalled
                    .store(true, std::sync::atomic::Ordering::Relaxed);
                let stall = this.stall;
                let waiting = this
                    .waiting
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep(stall)));
                match waiting.as_mut().poll(cx) {
                    Poll::Ready(()) => Poll::Ready(Err(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        "the client took nothing of the answer within --body-timeout",
                    ))),
                    Poll::Pending => Poll::Pending,
                }
            }
        }
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

/// File descriptors left to the index, the runtime and the refusals when
/// connections are limited by the open-file limit.
const OTHER_FILES: u64 = 128;

/// This process's limit on open files (the soft `RLIMIT_NOFILE`, from
/// `/proc/self/limits`); `None` where it cannot be read, or unlimited.
fn open_file_limit() -> Option<u64> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line.strip_prefix("Max open files")?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// `--max-connections`, lowered (with a warning) to what the open-file
/// limit leaves: a connection accepted past it would fail to be accepted,
/// unanswered, instead of being refused with a 503.
fn connection_limit(asked: u64, open_files: Option<u64>) -> usize {
    let fit = open_files.map_or(asked, |files| files.saturating_sub(OTHER_FILES).max(1));
    if fit < asked {
        tracing::warn!(
            max_connections = asked,
            open_files = open_files.unwrap_or_default(),
            "--max-connections lowered to {fit}: the open-file limit (ulimit -n) leaves no more; \
             raise it to serve more connections"
        );
    }
    usize::try_from(fit.min(asked)).unwrap_or(usize::MAX)
}

/// Serves connections until SIGTERM or SIGINT, then finishes the requests
/// in flight (at most `--shutdown-timeout` seconds). Each connection has
/// `--header-timeout` to send each request's head (so idle connections
/// close), and at most `--max-connections` are open at once.
async fn serve(
    server: Arc<Server>,
    args: &Args,
    listener: std::net::TcpListener,
    workers: &Workers,
) -> Result<(), CliError> {
    use hyper_util::rt::TokioIo;

    let listener = tokio::net::TcpListener::from_std(listener)
        .map_err(|e| CliError::Failure(format!("cannot listen on {}: {e}", args.listen)))?;
    let addr = server.hosts.bound;
    let signal =
        shutdown_signal().map_err(|e| CliError::Failure(format!("cannot handle signals: {e}")))?;
    if !addr.ip().is_loopback() && server.token.is_none() {
        tracing::warn!(
            %addr,
            "listening beyond loopback without --token-file: anyone who can reach it can write"
        );
    }
    let mut out = std::io::stdout().lock();
    writeln!(out, "listening on http://{addr}")
        .and_then(|()| out.flush())
        .map_err(|e| CliError::write("standard output", e))?;
    drop(out);
    tracing::info!(%addr, db = %args.db.db.display(), "serving");
    let max_connections = connection_limit(args.max_connections, open_file_limit());
    let max_concurrent = usize::try_from(args.max_concurrent_requests).unwrap_or(usize::MAX);
    let routes = Routes::new(Arc::clone(&server), max_concurrent);
    let mut http = hyper::server::conn::http1::Builder::new();
    // `--header-timeout` is kept by each connection's task ([`Pace`]).
    http.header_read_timeout(None);
    let header_timeout = Duration::from_secs(args.header_timeout);
    let connections = Arc::new(tokio::sync::Semaphore::new(max_connections));
    let refusing = Arc::new(tokio::sync::Semaphore::new(REFUSING));
    // Every connection's task holds a receiver: `open.closed()` resolves
    // once they have all ended.
    let (stop, stopping) = tokio::sync::watch::channel(false);
    let (open, _) = tokio::sync::watch::channel(());
    let mut signal = std::pin::pin!(signal);
    let mut last_accept_error = None::<Instant>;
    let name = loop {
        let (stream, _peer) = tokio::select! {
            name = &mut signal => break name,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of file descriptors, say: wait for connections
                    // to close rather than spin or stop serving.
                    if last_accept_error.is_none_or(|t| t.elapsed() >= Duration::from_secs(10)) {
                        tracing::warn!("cannot accept a connection: {e}");
                        last_accept_error = Some(Instant::now());
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let Ok(permit) = Arc::clone(&connections).try_acquire_owned() else {
            if let Ok(refusal) = Arc::clone(&refusing).try_acquire_owned() {
                tokio::spawn(async move {
                    refuse(stream, max_connections).await;
                    drop(refusal);
                });
            }
            continue;
        };
        let _ = stream.set_nodelay(true);
        // Out of this thread's reactor, into that of the thread that
        // serves it.
        let stream = match stream.into_std() {
            Ok(stream) => stream,
            Err(e) => {
                tracing::warn!("cannot hand a connection to its thread: {e}");
                continue;
            }
        };
        let service = Connections::of_connection(&routes);
        let pace = Arc::clone(&service.1);
        let stall = Duration::from_secs(args.body_timeout);
        let http = http.clone();
        let mut stopping = stopping.clone();
        let open = open.subscribe();
        workers.spawn(async move {
            let stream = match tokio::net::TcpStream::from_std(stream) {
                Ok(stream) => stream,
                Err(e) => {
                    tracing::warn!("cannot serve a connection: {e}");
                    return;
                }
            };
            let stream = Stalling {
                stream,
                stall,
                waiting: None,
                pace: Arc::clone(&pace),
            };
            let connection = http.serve_connection(TokioIo::new(stream), service);
            let mut connection = std::pin::pin!(connection);
            // One timer for the connection's life: when it fires, the
            // head it waits for is overdue (the connection is closed) or
            // it is set again for when it will be.
            let mut head = std::pin::pin!(tokio::time::sleep(header_timeout));
            let mut stopped = false;
            loop {
                tokio::select! {
                    _ = connection.as_mut() => break,
                    () = async { let _ = stopping.wait_for(|&s| s).await; }, if !stopped => {
                        stopped = true;
                        connection.as_mut().graceful_shutdown();
                    }
                    () = head.as_mut() => {
                        let now = tokio::time::Instant::now();
                        match pace.head_due(now.into_std(), header_timeout) {
                            Some(due) => head.as_mut().reset(due.into()),
                            // Dropping the connection closes it.
                            None => break,
                        }
                    }
                }
            }
            drop(permit);
            drop(open);
        });
    };
    drop(listener);
    tracing::info!(
        signal = name,
        "shutting down: no new connections; finishing requests in flight"
    );
    let _ = stop.send(true);
    let grace = Duration::from_secs(args.shutdown_timeout);
    if tokio::time::timeout(grace, open.closed()).await.is_err() {
        tracing::warn!(
            seconds = args.shutdown_timeout,
            "requests still in flight after the shutdown timeout: closing their connections"
        );
    }
    Ok(())
}

/// The threads that serve connections by default: half the cores, at
/// least one, so that the other half is left to the library's merges,
/// flushes and searches of large batches (and, on a small machine, to the
/// clients). On two cores, one thread served single-document checks at 16
/// connections 1.1–1.3 times as fast as two threads of their own, or as
/// tokio's runtime of a worker per core (docs/BENCHMARKS.md, "One thread
/// serves the connections, and what bounds the two throughput goals").
fn default_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| (n.get() / 2).max(1))
}

/// The threads that serve connections: a tokio runtime of one thread each,
/// each connection served by one of them from its accept to its close, a
/// request's work (the library's calls included) on the thread of its
/// connection, and the checks of each thread's connections answered
/// together ([`group::CheckQueue`]). tokio's runtime of two workers cost
/// hyper about 2 µs more of the server's CPU per request, most of it the
/// kernel's, the workers waking each other to take tasks (docs/SERVER.md,
/// "Threads").
struct Workers {
    handles: Vec<tokio::runtime::Handle>,
    threads: Vec<(
        std::thread::JoinHandle<()>,
        tokio::sync::oneshot::Sender<()>,
    )>,
    /// The worker of the next connection: each in turn.
    next: std::sync::atomic::AtomicUsize,
}

impl Workers {
    /// Starts `count` workers (at least one).
    fn start(count: usize) -> std::io::Result<Workers> {
        let mut workers = Workers {
            handles: Vec::new(),
            threads: Vec::new(),
            next: std::sync::atomic::AtomicUsize::new(0),
        };
        for i in 0..count.max(1) {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            workers.handles.push(runtime.handle().clone());
            let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
            let thread = std::thread::Builder::new()
                .name(format!("simhashdb-serve-{i}"))
                .spawn(move || {
                    group::set_thread(i);
                    let _ = runtime.block_on(stopped);
                    // Closes the connections still open, and waits for the
                    // blocking pool's work.
                    runtime.shutdown_timeout(Duration::from_secs(3600));
                })?;
            workers.threads.push((thread, stop));
        }
        Ok(workers)
    }

    /// Runs `task` on the next worker.
    fn spawn(&self, task: impl std::future::Future<Output = ()> + Send + 'static) {
        let i = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % self.handles.len();
        drop(self.handles[i].spawn(task));
    }

    /// Stops the workers, closing the connections still open, once their
    /// blocking work has ended.
    fn stop(self) {
        for (thread, stop) in self.threads {
            let _ = stop.send(());
            let _ = thread.join();
        }
    }
}

/// `serve`: binds the address (before anything is created), opens the
/// index, runs until SIGTERM or SIGINT, then finishes the requests in
/// flight, flushes the index and releases its lock.
pub fn run(args: &Args) -> Result<(), CliError> {
    tracing_subscriber::fmt()
        .with_max_level(args.log)
        .with_writer(std::io::stderr)
        .with_target(false)
        .init();
    let token = args.token_file.as_ref().map(read_token).transpose()?;
    let durability = if args.sync {
        Durability::Sync
    } else {
        Durability::Buffered
    };
    // Bound first: an address in use leaves no new index directory.
    let listener = std::net::TcpListener::bind(args.listen)
        .and_then(|l| l.set_nonblocking(true).map(|()| l))
        .map_err(|e| CliError::Failure(format!("cannot listen on {}: {e}", args.listen)))?;
    let bound = listener
        .local_addr()
        .map_err(|e| CliError::Failure(format!("cannot listen on {}: {e}", args.listen)))?;
    let index = Index::open(
        &args.db.db,
        // A write that fills the memtable hands it to the flush thread
        // instead of writing the segment itself: writes run on the
        // threads that answer requests (docs/SERVER.md, "Threads").
        // A new index is one of texts (docs/QUALITY.md, "The default plan
        // k of an index of texts").
        Options::for_texts()
            .durability(durability)
            .flush_thread(true)
            .merge_policy(Some(Arc::new(TieredMergePolicy {
                fan_in: usize::from(args.merge_fan_in),
            }))),
    )?;
    let limits = Limits {
        max_body_bytes: usize::try_from(args.max_body_bytes).unwrap_or(usize::MAX),
        max_documents: usize::try_from(args.max_documents).unwrap_or(usize::MAX),
        max_matches: usize::try_from(args.max_matches).unwrap_or(usize::MAX),
        body_timeout: Duration::from_secs(args.body_timeout),
    };
    let hosts = Hosts::new(bound, &args.allow_host);
    let mut server = Server::new(index, durability, limits, hosts, token)?;
    server.metrics_public = args.metrics_public;
    let threads = args.threads.map_or_else(default_threads, usize::from);
    server.checks = group::CheckQueue::per_thread(threads);
    let server = Arc::new(server);
    let cannot_start = |e| CliError::Failure(format!("cannot start the server's threads: {e}"));
    let workers = Workers::start(threads).map_err(cannot_start)?;
    // This thread accepts the connections, and hands each to a worker.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(cannot_start)?;
    let served = runtime.block_on(serve(Arc::clone(&server), args, listener, &workers));
    drop(runtime);
    // Closes the connections left past the shutdown timeout, and waits for
    // work on the blocking pools that outlived its request (a client that
    // went away mid-compaction).
    workers.stop();
    let closed = close(server);
    served.and(closed)
}

/// Flushes the index to a segment (so the next start replays nothing) and
/// drops it, which waits for background merges and releases the lock.
fn close(server: Arc<Server>) -> Result<(), CliError> {
    let flushed = server.index.flush();
    let dir = server.index.dir().to_path_buf();
    drop(server);
    match flushed {
        Ok(()) => {
            tracing::info!("index flushed and closed");
            Ok(())
        }
        Err(e) if !dir.is_dir() => Err(CliError::Failure(format!(
            "cannot flush the index at shutdown ({e}); its directory {} no longer exists: \
             what it held, and the writes acknowledged since it was removed, are lost",
            dir.display()
        ))),
        Err(e) => Err(CliError::Failure(format!(
            "cannot flush the index at shutdown ({e}); acknowledged writes are in its \
             write-ahead log and the next open replays them"
        ))),
    }
}
