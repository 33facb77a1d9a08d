//! `simhashdb serve`: one process owns the index and answers JSON over HTTP
//! (docs/SERVER.md). The handlers parse, call the library, and serialise.

mod api;
mod error;
mod group;
mod handlers;
mod metrics;
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
use axum::http::header::{AUTHORIZATION, WWW_AUTHENTICATE};
use axum::http::{HeaderValue, StatusCode};
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
    /// Require `Authorization: Bearer TOKEN` on every request but
    /// `/healthz`, with TOKEN the first line of this file.
    #[arg(long, value_name = "FILE")]
    token_file: Option<PathBuf>,
    /// Largest request body, in bytes.
    #[arg(long, default_value_t = 16 << 20, value_name = "BYTES")]
    max_body_bytes: usize,
    /// Most documents (or queries) in one request.
    #[arg(long, default_value_t = 10_000, value_name = "N")]
    max_documents: usize,
    /// Most requests served at once; more wait for a turn.
    #[arg(long, default_value_t = 1024, value_name = "N")]
    max_concurrent_requests: usize,
    /// Segments of one size merged together at a time. Every check searches
    /// every segment, so a low fan-in keeps checks fast; each document is
    /// then rewritten by merges more often (docs/SERVER.md, "Merges").
    #[arg(long, default_value_t = SERVE_FAN_IN, value_name = "N",
          value_parser = clap::value_parser!(u16).range(2..=64))]
    merge_fan_in: u16,
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
}

/// What every request shares: the index and the rules to use it by.
pub struct Server {
    index: Index,
    /// The index's recorded fingerprint configuration.
    hasher: Simhasher,
    durability: Durability,
    limits: Limits,
    token: Option<String>,
    metrics: Metrics,
    /// Held exclusively by a compaction, shared by every other write.
    compaction: tokio::sync::RwLock<()>,
    /// Checks waiting to be answered together.
    checks: group::CheckQueue,
}

impl Server {
    fn new(
        index: Index,
        durability: Durability,
        limits: Limits,
        token: Option<String>,
    ) -> Result<Server, CliError> {
        let hasher = docs::hasher_for(&index)?;
        Ok(Server {
            index,
            hasher,
            durability,
            limits,
            token,
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

fn authorized(server: &Server, req: &Request) -> bool {
    let Some(token) = &server.token else {
        return true;
    };
    req.headers()
        .get(AUTHORIZATION)
        .and_then(|v| v.as_bytes().strip_prefix(b"Bearer "))
        .is_some_and(|given| same_secret(given, token.as_bytes()))
}

/// Around every request: the token, the request's log line and metrics.
async fn observe(State(server): State<Arc<Server>>, req: Request, next: Next) -> Response {
    let start = Instant::now();
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map(MatchedPath::as_str);
    let endpoint = metrics::endpoint(req.method().as_str(), route);
    tracing::debug!(method = %req.method(), uri = %req.uri(), "request started");
    let response = if route == Some("/healthz") || authorized(&server, &req) {
        next.run(req).await
    } else {
        let mut response = ApiError::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "this server requires `Authorization: Bearer TOKEN` (see --token-file)",
        )
        .into_response();
        response
            .headers_mut()
            .insert(WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        response
    };
    server
        .metrics
        .record(endpoint, response.status().as_u16(), start.elapsed());
    response
}

fn router(server: Arc<Server>, max_concurrent: usize) -> Router {
    use handlers as h;
    let body_limit = server.limits.max_body_bytes;
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
        .route("/healthz", get(h::healthz))
        .route("/metrics", get(h::metrics))
        .fallback(h::no_route)
        .method_not_allowed_fallback(h::wrong_method)
        .layer(middleware::from_fn_with_state(Arc::clone(&server), observe))
        .layer(DefaultBodyLimit::max(body_limit))
        .layer(GlobalConcurrencyLimitLayer::new(max_concurrent))
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

async fn serve(server: Arc<Server>, args: &Args) -> Result<(), CliError> {
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .map_err(|e| CliError::Failure(format!("cannot listen on {}: {e}", args.listen)))?;
    let addr = listener
        .local_addr()
        .map_err(|e| CliError::Failure(format!("cannot listen on {}: {e}", args.listen)))?;
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
    let app = router(Arc::clone(&server), args.max_concurrent_requests);
    let (signalled, mut on_signal) = tokio::sync::watch::channel(false);
    let serving = axum::serve(listener, app).with_graceful_shutdown(async move {
        let name = signal.await;
        tracing::info!(
            signal = name,
            "shutting down: no new connections; finishing requests in flight"
        );
        let _ = signalled.send(true);
    });
    let grace = Duration::from_secs(args.shutdown_timeout);
    tokio::select! {
        served = serving => served
            .map_err(|e| CliError::Failure(format!("server failed: {e}"))),
        () = async {
            let _ = on_signal.wait_for(|&s| s).await;
            tokio::time::sleep(grace).await;
        } => {
            tracing::warn!(
                seconds = args.shutdown_timeout,
                "requests still in flight after the shutdown timeout: closing their connections"
            );
            Ok(())
        }
    }
}

/// `serve`: runs until SIGTERM or SIGINT, then finishes the requests in
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
    let index = Index::open(
        &args.db.db,
        // A write that fills the memtable hands it to the flush thread
        // instead of writing the segment itself: writes run on the
        // threads that answer requests (docs/SERVER.md, "Threads").
        Options::new()
            .durability(durability)
            .flush_thread(true)
            .merge_policy(Some(Arc::new(TieredMergePolicy {
                fan_in: usize::from(args.merge_fan_in),
            }))),
    )?;
    let limits = Limits {
        max_body_bytes: args.max_body_bytes,
        max_documents: args.max_documents,
    };
    let server = Arc::new(Server::new(index, durability, limits, token)?);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| CliError::Failure(format!("cannot start the server's threads: {e}")))?;
    let served = runtime.block_on(serve(Arc::clone(&server), args));
    // Waits for work on the blocking pool that outlived its request (a
    // client that went away mid-compaction).
    runtime.shutdown_timeout(Duration::from_secs(3600));
    let closed = close(server);
    served.and(closed)
}

/// Flushes the index to a segment (so the next start replays nothing) and
/// drops it, which waits for background merges and releases the lock.
fn close(server: Arc<Server>) -> Result<(), CliError> {
    let flushed = server.index.flush();
    drop(server);
    match flushed {
        Ok(()) => {
            tracing::info!("index flushed and closed");
            Ok(())
        }
        Err(e) => Err(CliError::Failure(format!(
            "cannot flush the index at shutdown ({e}); acknowledged writes are in its \
             write-ahead log and the next open replays them"
        ))),
    }
}
