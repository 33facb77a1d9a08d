//! The endpoints: each parses its request, calls the library, and
//! serialises the answer (docs/SERVER.md).

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{FromRequest, Path, Query, Request, State};
use axum::http::header::CONTENT_TYPE;
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::json;

use super::Server;
use super::api::{
    ByName, CheckRequest, CheckResult, DocOut, Document, DocumentIn, InsertRequest, MatchOut,
    QueryIn, QueryRequest, Resolved, parse_decimal,
};
use super::error::ApiError;
use super::group;
use super::metrics::bump;
use simhashdb::doc_id;

type Shared = State<Arc<Server>>;

/// A JSON request body: `Content-Type: application/json` (which a browser
/// cannot send across origins without asking first), at most the body
/// limit, and every field known.
pub struct JsonBody<T>(pub T);

impl<T: DeserializeOwned> FromRequest<Arc<Server>> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &Arc<Server>) -> Result<Self, ApiError> {
        let is_json = req
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split(';').next())
            .is_some_and(|essence| essence.trim().eq_ignore_ascii_case("application/json"));
        // Read the body even to refuse it, so the connection stays usable.
        let bytes = Bytes::from_request(req, state).await.map_err(|rejection| {
            if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
                ApiError::new(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    "body_too_large",
                    format!(
                        "the body is larger than the server's limit of {} bytes (--max-body-bytes)",
                        state.limits.max_body_bytes
                    ),
                )
            } else {
                ApiError::invalid(format!("cannot read the body: {rejection}"))
            }
        })?;
        if !is_json {
            return Err(ApiError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported_media_type",
                "the body must be JSON, sent with `Content-Type: application/json`",
            ));
        }
        serde_json::from_slice(&bytes).map(JsonBody).map_err(|e| {
            use serde_json::error::Category;
            match e.classify() {
                Category::Syntax | Category::Eof | Category::Io => ApiError::new(
                    StatusCode::BAD_REQUEST,
                    "malformed_json",
                    format!("the body is not valid JSON: {e}"),
                ),
                Category::Data => ApiError::invalid(format!("the request is not valid: {e}")),
            }
        })
    }
}

/// A JSON response body.
fn json_response<T: Serialize>(status: StatusCode, value: &T) -> Response {
    match serde_json::to_vec(value) {
        Ok(body) => (
            status,
            [(CONTENT_TYPE, HeaderValue::from_static("application/json"))],
            body,
        )
            .into_response(),
        Err(e) => ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            format!("cannot encode the answer: {e}"),
        )
        .into_response(),
    }
}

/// Runs `f` on the blocking thread pool, for index calls that may wait
/// for the disk (a sync, a compaction): they must not hold up the threads
/// that answer other requests (reads, `/healthz`).
async fn blocking<T: Send + 'static>(
    server: &Arc<Server>,
    f: impl FnOnce(&Server) -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    let server = Arc::clone(server);
    tokio::task::spawn_blocking(move || f(&server))
        .await
        .unwrap_or_else(|e| {
            Err(ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal",
                format!("the request's task failed: {e}"),
            ))
        })
}

/// Runs a write: on the thread that answers the request when it only
/// reaches the operating system (`Durability::Buffered`, no `sync`), which
/// costs half the CPU of handing it to the blocking pool (docs/SERVER.md,
/// "Threads"); on the blocking pool when it waits for the disk. Either way
/// it waits, without holding a thread, while a compaction runs: that holds
/// the index's writer lock for its whole length.
async fn write<T: Send + 'static>(
    server: &Arc<Server>,
    sync: bool,
    f: impl FnOnce(&Server) -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    let _no_compaction = server.compaction.read().await;
    if sync || server.durability == simhashdb::Durability::Sync {
        blocking(server, f).await
    } else {
        f(server)
    }
}

impl Server {
    fn check_count(&self, what: &str, n: usize) -> Result<(), ApiError> {
        if n > self.limits.max_documents {
            return Err(ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "too_many_documents",
                format!(
                    "{n} {what} in one request, more than the server's limit of {} \
                     (--max-documents); split the request",
                    self.limits.max_documents
                ),
            ));
        }
        Ok(())
    }

    fn check_distance(&self, k: u32) -> Result<(), ApiError> {
        if k > self.index.plan().k() {
            return Err(ApiError::from_read(simhashdb::Error::DistanceTooLarge {
                requested: k,
                plan_k: self.index.plan().k(),
            }));
        }
        Ok(())
    }

    /// Every document resolved, or the first bad one's error: a request is
    /// checked whole before anything is written.
    fn resolve(&self, docs: Vec<DocumentIn>) -> Result<Vec<Resolved>, ApiError> {
        self.check_count("documents", docs.len())?;
        docs.into_iter()
            .enumerate()
            .map(|(i, d)| d.resolve(i, &self.hasher))
            .collect()
    }

    /// Like [`Server::resolve`], refusing blank texts (an insert cannot
    /// skip a document it was asked to store).
    fn resolve_non_blank(&self, docs: Vec<DocumentIn>) -> Result<Vec<Document>, ApiError> {
        self.check_count("documents", docs.len())?;
        docs.into_iter()
            .enumerate()
            .map(|(i, d)| d.resolve(i, &self.hasher)?.non_blank(i))
            .collect()
    }

    fn sync_if(&self, sync: bool) -> Result<(), ApiError> {
        if sync {
            self.index.sync().map_err(ApiError::from_write)?;
            bump(&self.metrics.syncs, 1);
        }
        Ok(())
    }
}

/// Each document of a check request: its id and fingerprint (`None`: blank).
type Checked = Vec<(u64, Option<u64>)>;

/// A check request's documents: each one's id and fingerprint in order, and
/// the ones the index checks.
fn resolve_checks(
    s: &Server,
    documents: Vec<DocumentIn>,
) -> Result<(Checked, Vec<group::Doc>), ApiError> {
    let docs = s.resolve(documents)?;
    let mut checked: Checked = Vec::with_capacity(docs.len());
    let mut batch = Vec::with_capacity(docs.len());
    for doc in docs {
        match doc {
            Resolved::Document(doc) => {
                checked.push((doc.id, Some(doc.fingerprint)));
                batch.push((doc.id, doc.fingerprint, doc.name));
            }
            Resolved::Blank { id } => checked.push((id, None)),
        }
    }
    Ok((checked, batch))
}

/// The check-and-insert of each document in order, as one call of the
/// library (one write for the request's new documents); the JSON answer.
/// For a request that syncs.
fn check_documents(
    s: &Server,
    documents: Vec<DocumentIn>,
    k: u32,
    sync: bool,
) -> Result<Vec<u8>, ApiError> {
    let (checked, batch) = resolve_checks(s, documents)?;
    let answers = s
        .index
        .insert_if_new_many(batch, k)
        .map_err(ApiError::from_write)?;
    let out = check_answer(s, checked, &answers)?;
    s.sync_if(sync)?;
    Ok(out)
}

/// The JSON answer to a check: each document's result, in order.
fn check_answer(
    s: &Server,
    checked: Checked,
    answers: &group::Answers,
) -> Result<Vec<u8>, ApiError> {
    let mut answers = answers.iter();
    let mut out = Vec::with_capacity(checked.len() * 64 + 16);
    out.extend_from_slice(b"{\"results\":[");
    let (mut new, mut duplicate, mut blank) = (0, 0, 0);
    for (i, (id, fingerprint)) in checked.into_iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        let result = match (fingerprint, fingerprint.and_then(|_| answers.next())) {
            (Some(fingerprint), Some(Ok(()))) => {
                new += 1;
                CheckResult::New { id, fingerprint }
            }
            (Some(fingerprint), Some(Err(matches))) => {
                duplicate += 1;
                CheckResult::Duplicate {
                    id,
                    fingerprint,
                    nearest: MatchOut::from(&matches[0]),
                }
            }
            (Some(_), None) => {
                return Err(ApiError::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "internal",
                    "the index answered fewer documents than it was given",
                ));
            }
            (None, _) => {
                blank += 1;
                CheckResult::Blank { id }
            }
        };
        serde_json::to_writer(&mut out, &result).map_err(|e| {
            ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string())
        })?;
    }
    bump(&s.metrics.checked_new, new);
    bump(&s.metrics.checked_duplicate, duplicate);
    bump(&s.metrics.checked_blank, blank);
    out.extend_from_slice(b"]}");
    Ok(out)
}

/// `POST /v1/check`: for each document in order, the atomic check-and-insert.
/// A check that need not sync is answered together with the others queued
/// at the same time ([`group`]); one that syncs runs on the blocking pool.
pub async fn check(
    State(server): Shared,
    JsonBody(req): JsonBody<CheckRequest>,
) -> Result<Response, ApiError> {
    let k = req.distance.unwrap_or(server.index.plan().k());
    server.check_distance(k)?;
    server.check_count("documents", req.documents.len())?;
    let sync = req.sync;
    let documents = req.documents;
    let body = if sync || server.durability == simhashdb::Durability::Sync {
        write(&server, sync, move |s| {
            check_documents(s, documents, k, sync)
        })
        .await?
    } else {
        let (checked, batch) = resolve_checks(&server, documents)?;
        let _no_compaction = server.compaction.read().await;
        let answers = group::check(&server, k, batch).await?;
        check_answer(&server, checked, &answers)?
    };
    Ok((
        [(CONTENT_TYPE, HeaderValue::from_static("application/json"))],
        body,
    )
        .into_response())
}

/// `POST /v1/documents`: insert or replace, as one write.
pub async fn insert(
    State(server): Shared,
    JsonBody(req): JsonBody<InsertRequest>,
) -> Result<Response, ApiError> {
    server.check_count("documents", req.documents.len())?;
    let sync = req.sync;
    let documents = req.documents;
    let n = write(&server, sync, move |s| {
        let docs = s.resolve_non_blank(documents)?;
        let n = docs.len();
        s.index
            .insert_batch(docs.into_iter().map(|d| (d.id, d.fingerprint, d.name)))
            .map_err(ApiError::from_write)?;
        bump(&s.metrics.inserted, n as u64);
        s.sync_if(sync)?;
        Ok(n)
    })
    .await?;
    Ok(json_response(StatusCode::OK, &json!({ "inserted": n })))
}

fn id_of_path(id: &str) -> Result<u64, ApiError> {
    parse_decimal(id).map(|v| v.0).ok_or_else(|| {
        ApiError::invalid(format!(
            "`{id}` is not a document id (a decimal unsigned 64-bit integer)"
        ))
    })
}

fn by_name(
    query: Result<Query<ByName>, axum::extract::rejection::QueryRejection>,
) -> Result<u64, ApiError> {
    let Query(ByName { name }) = query.map_err(|e| {
        ApiError::invalid(format!(
            "expected `?name=NAME` (URL-encoded) or the path /v1/documents/ID: {}",
            e.body_text()
        ))
    })?;
    Ok(doc_id(&name))
}

fn get_doc(server: &Server, id: u64) -> Result<Response, ApiError> {
    match server.index.get_doc(id).map_err(ApiError::from_read)? {
        Some(doc) => Ok(json_response(StatusCode::OK, &DocOut::from(&doc))),
        None => Err(ApiError::not_found(format!("no document with id {id}"))),
    }
}

/// `GET /v1/documents/{id}`.
pub async fn get_by_id(
    State(server): Shared,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    get_doc(&server, id_of_path(&id)?)
}

/// `GET /v1/documents?name=N`.
pub async fn get_by_name(
    State(server): Shared,
    query: Result<Query<ByName>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, ApiError> {
    get_doc(&server, by_name(query)?)
}

async fn delete_doc(server: &Arc<Server>, id: u64) -> Result<Response, ApiError> {
    write(server, false, move |s| {
        let Some(doc) = s.index.get_doc(id).map_err(ApiError::from_read)? else {
            return Err(ApiError::not_found(format!("no document with id {id}")));
        };
        s.index.delete(id).map_err(ApiError::from_write)?;
        bump(&s.metrics.deleted, 1);
        Ok(json_response(
            StatusCode::OK,
            &json!({ "deleted": DocOut::from(&doc) }),
        ))
    })
    .await
}

/// `DELETE /v1/documents/{id}`.
pub async fn delete_by_id(
    State(server): Shared,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    delete_doc(&server, id_of_path(&id)?).await
}

/// `DELETE /v1/documents?name=N`.
pub async fn delete_by_name(
    State(server): Shared,
    query: Result<Query<ByName>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, ApiError> {
    delete_doc(&server, by_name(query)?).await
}

#[derive(Serialize)]
struct Matches<'a> {
    matches: Vec<MatchOut<'a>>,
}

/// `POST /v1/query`: never inserts.
pub async fn query(
    State(server): Shared,
    JsonBody(req): JsonBody<QueryRequest>,
) -> Result<Response, ApiError> {
    let default_k = req.k.unwrap_or(server.index.plan().k());
    let lookup = |q: &QueryIn, label: &str| {
        let (fp, k) = q.resolve(label, &server.hasher, default_k)?;
        server.index.query(fp, k).map_err(ApiError::from_read)
    };
    match req.queries {
        Some(queries) => {
            if req.text.is_some() || req.fingerprint.is_some() {
                return Err(ApiError::invalid(
                    "give one query (\"text\" or \"fingerprint\") or \"queries\", not both",
                ));
            }
            server.check_count("queries", queries.len())?;
            let found = queries
                .iter()
                .enumerate()
                .map(|(i, q)| lookup(q, &format!("queries[{i}]")))
                .collect::<Result<Vec<_>, _>>()?;
            bump(&server.metrics.queries, found.len() as u64);
            let results: Vec<Matches> = found
                .iter()
                .map(|m| Matches {
                    matches: m.iter().map(MatchOut::from).collect(),
                })
                .collect();
            Ok(json_response(
                StatusCode::OK,
                &json!({ "results": results }),
            ))
        }
        None => {
            let q = QueryIn {
                text: req.text,
                fingerprint: req.fingerprint,
                k: req.k,
            };
            let found = lookup(&q, "the query")?;
            bump(&server.metrics.queries, 1);
            Ok(json_response(
                StatusCode::OK,
                &Matches {
                    matches: found.iter().map(MatchOut::from).collect(),
                },
            ))
        }
    }
}

/// `GET /v1/stats`.
pub async fn stats(State(server): Shared) -> Response {
    let s = server.index.stats();
    json_response(
        StatusCode::OK,
        &json!({
            "plan": s.plan.to_string(),
            "k": s.plan.k(),
            "tables": s.plan.tables().len(),
            "fingerprint_config": s.fingerprint_config,
            "durability": match server.durability {
                simhashdb::Durability::Sync => "sync",
                simhashdb::Durability::Buffered => "buffered",
            },
            "segments": s.segments,
            "segment_entries": s.segment_docs,
            "memtable_entries": s.memtable_docs,
            "flushing_entries": s.flushing_docs,
            "tombstones": s.tombstones,
            "segment_bytes": s.disk_bytes,
            "memtable_bytes": s.memtable_bytes,
            "table_bytes_per_key": s.table_bytes_per_key,
            "decoded_table_bytes": s.decoded_table_bytes,
            "flushes": s.flushes,
            "flush_failures": s.flush_failures,
            "merges": s.merges,
            "merge_failures": s.merge_failures,
        }),
    )
}

/// The body of a request that takes no arguments: none, or `{}`.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NoArguments {}

/// Reads (and so consumes) a body that must be empty or `{}`.
fn no_arguments(body: Result<Bytes, BytesRejection>) -> Result<(), ApiError> {
    let body = body.map_err(|rejection| {
        ApiError::new(
            rejection.status(),
            "invalid_request",
            format!("cannot read the body: {}", rejection.body_text()),
        )
    })?;
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(());
    }
    serde_json::from_slice::<NoArguments>(&body)
        .map(|_| ())
        .map_err(|e| ApiError::invalid(format!("this endpoint takes no arguments: {e}")))
}

/// `POST /v1/compact`: merges every segment into one.
pub async fn compact(
    State(server): Shared,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    no_arguments(body)?;
    let _no_writes = server.compaction.write().await;
    let segments = blocking(&server, |s| {
        s.index.compact().map_err(ApiError::from_write)?;
        bump(&s.metrics.compactions, 1);
        Ok(s.index.stats().segments)
    })
    .await?;
    Ok(json_response(
        StatusCode::OK,
        &json!({ "compacted": true, "segments": segments }),
    ))
}

/// `POST /v1/sync`: every acknowledged write survives power loss afterwards.
pub async fn sync(
    State(server): Shared,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    no_arguments(body)?;
    blocking(&server, |s| s.sync_if(true)).await?;
    Ok(json_response(StatusCode::OK, &json!({ "synced": true })))
}

/// `GET /healthz`: the process answers (no index call, no token needed).
pub async fn healthz() -> Response {
    json_response(StatusCode::OK, &json!({ "status": "ok" }))
}

/// `GET /metrics`.
pub async fn metrics(State(server): Shared) -> Response {
    let text = server.metrics.render(&server.index.stats());
    (
        [(
            CONTENT_TYPE,
            HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
        )],
        text,
    )
        .into_response()
}

/// No such route.
pub async fn no_route(req: Request) -> ApiError {
    ApiError::not_found(format!("no endpoint {} {}", req.method(), req.uri().path()))
}

/// A route without this method.
pub async fn wrong_method(req: Request) -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        format!("{} does not accept {}", req.uri().path(), req.method()),
    )
}
