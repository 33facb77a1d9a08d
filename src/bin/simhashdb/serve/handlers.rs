//! The endpoints: each parses its request, calls the library, and
//! serialises the answer (docs/SERVER.md).

use std::sync::Arc;

use axum::body::Bytes;
use axum::body::HttpBody;
use axum::extract::{FromRequest, Path, Request, State};
use axum::http::header::{CONTENT_LENGTH, CONTENT_TYPE};
use axum::http::{HeaderMap, HeaderValue, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::json;

use super::Server;
use super::api::{
    BackupRequest, CheckRequest, CheckResult, DocOut, Document, DocumentIn, InsertRequest,
    MatchOut, QueryIn, QueryRequest, Resolved, U64, VerifiedOut, check_threshold, parse_bounded,
    parse_decimal,
};
use super::error::ApiError;
use super::group;
use super::metrics::bump;
use simhashdb::doc_id;

type Shared = State<Arc<Server>>;

/// Whether the request says its body is JSON: a type a browser cannot
/// send across origins without asking first (a preflight this server never
/// answers).
fn is_json(headers: &HeaderMap) -> bool {
    headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|essence| essence.trim().eq_ignore_ascii_case("application/json"))
}

fn not_json() -> ApiError {
    ApiError::new(
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        "unsupported_media_type",
        "the body must be JSON, sent with `Content-Type: application/json`",
    )
}

fn body_too_large(limit: usize) -> ApiError {
    ApiError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        "body_too_large",
        format!("the body is larger than the server's limit of {limit} bytes (--max-body-bytes)"),
    )
}

/// Why a body could not be read whole.
enum Unread {
    /// Past the limit.
    TooLarge,
    /// The connection failed, or the body was malformed.
    Failed(String),
}

/// A body's bytes, whole, at most `limit` of them. A body of one piece
/// (the usual request, read with its head) is that piece itself, not a
/// copy.
async fn collect<B>(mut body: B, limit: usize) -> Result<Bytes, Unread>
where
    B: HttpBody<Data = Bytes> + Unpin,
    B::Error: std::fmt::Display,
{
    let mut first = None::<Bytes>;
    let mut joined = Vec::new();
    let mut len = 0usize;
    while let Some(frame) =
        std::future::poll_fn(|cx| std::pin::Pin::new(&mut body).poll_frame(cx)).await
    {
        let frame = frame.map_err(|e| Unread::Failed(e.to_string()))?;
        // Trailers are not part of the body.
        let Ok(data) = frame.into_data() else {
            continue;
        };
        len = len.saturating_add(data.len());
        if len > limit {
            return Err(Unread::TooLarge);
        }
        match first.take() {
            None if joined.is_empty() => first = Some(data),
            taken => {
                if let Some(taken) = taken {
                    joined.extend_from_slice(&taken);
                }
                joined.extend_from_slice(&data);
            }
        }
    }
    Ok(match first {
        Some(first) => first,
        None => Bytes::from(joined),
    })
}

/// A request's body, whole. A `Content-Length` over the limit is refused
/// before a byte is read (a client waiting for `100 Continue` gets the 413
/// instead); a body that has not arrived within `--body-timeout` is
/// refused with 408. Either closes the connection.
async fn read_body<B>(headers: &HeaderMap, body: B, state: &Server) -> Result<Bytes, ApiError>
where
    B: HttpBody<Data = Bytes> + Unpin,
    B::Error: std::fmt::Display,
{
    let limit = state.limits.max_body_bytes;
    let declared = headers
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if declared.is_some_and(|len| len > limit as u64) {
        return Err(body_too_large(limit).closing());
    }
    let timeout = state.limits.body_timeout;
    match tokio::time::timeout(timeout, collect(body, limit)).await {
        Ok(Ok(bytes)) => Ok(bytes),
        Ok(Err(Unread::TooLarge)) => Err(body_too_large(limit).closing()),
        Ok(Err(Unread::Failed(e))) => Err(ApiError::invalid(format!(
            "cannot read the body: Failed to buffer the request body: {e}"
        ))
        .closing()),
        Err(_) => Err(ApiError::new(
            StatusCode::REQUEST_TIMEOUT,
            "body_timeout",
            format!(
                "the body did not arrive within {} seconds (--body-timeout)",
                timeout.as_secs()
            ),
        )
        .closing()),
    }
}

/// A JSON request body: `Content-Type: application/json`, at most the body
/// limit, arriving within the body timeout ([`read_body`]), every field
/// known, and at most `--max-documents` items in its array, counted as it
/// is parsed.
pub struct JsonBody<T>(pub T);

impl<T: DeserializeOwned> FromRequest<Arc<Server>> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &Arc<Server>) -> Result<Self, ApiError> {
        let (parts, body) = req.into_parts();
        json_body(&parts.headers, body, state).await.map(JsonBody)
    }
}

/// The body of a request as [`JsonBody`] takes it.
async fn json_body<T, B>(headers: &HeaderMap, body: B, state: &Server) -> Result<T, ApiError>
where
    T: DeserializeOwned,
    B: HttpBody<Data = Bytes> + Unpin,
    B::Error: std::fmt::Display,
{
    let is_json = is_json(headers);
    // Read the body even to refuse it, so the connection stays usable.
    let bytes = read_body(headers, body, state).await?;
    if !is_json {
        return Err(not_json());
    }
    let max = state.limits.max_documents;
    parse_bounded(&bytes, max).map_err(|(e, over)| {
        use serde_json::error::Category;
        if over {
            return ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "too_many_documents",
                format!(
                    "more than {max} documents or queries in one request, the server's \
                     limit (--max-documents); split the request"
                ),
            );
        }
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

/// The body of a request that takes no arguments: none, or `{}`, sent as
/// `application/json` either way (so a web page's form cannot send it).
pub struct NoArguments;

impl FromRequest<Arc<Server>> for NoArguments {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &Arc<Server>) -> Result<Self, ApiError> {
        let (parts, body) = req.into_parts();
        let is_json = is_json(&parts.headers);
        let body = read_body(&parts.headers, body, state).await?;
        if !is_json {
            return Err(not_json());
        }
        if body.iter().all(u8::is_ascii_whitespace) {
            return Ok(NoArguments);
        }
        match serde_json::from_slice::<serde_json::Value>(&body) {
            Ok(serde_json::Value::Object(map)) if map.is_empty() => Ok(NoArguments),
            Ok(_) => Err(ApiError::invalid(
                "this endpoint takes no arguments: send no body or `{}`",
            )),
            Err(e) => Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                "malformed_json",
                format!("the body is not valid JSON: {e}"),
            )),
        }
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

/// Texts a request's documents may carry, in bytes, and still be
/// fingerprinted on the thread that serves its connection: about half a
/// millisecond of it at the 150 MB/s that fingerprinting and sketching
/// English text take (docs/BENCHMARKS.md; docs/SERVER.md, "Threads").
const TEXT_ON_THREAD_UP_TO: usize = 64 << 10;

/// Whether a request of `items` documents or queries and `text` bytes of
/// text to fingerprint runs on the blocking pool rather than the thread
/// that serves its connection, which serves others too: more than
/// [`group::ON_THREAD_UP_TO`] items, or more than [`TEXT_ON_THREAD_UP_TO`]
/// bytes.
fn too_large_for_the_thread(items: usize, text: usize) -> bool {
    items > group::ON_THREAD_UP_TO || text > TEXT_ON_THREAD_UP_TO
}

/// [`too_large_for_the_thread`] for a write of `documents`.
fn large(documents: &[DocumentIn]) -> bool {
    let text = documents.iter().map(DocumentIn::text_len).sum();
    too_large_for_the_thread(documents.len(), text)
}

/// Runs a write: on the thread that answers the request when it only
/// reaches the operating system (`Durability::Buffered`, no `sync`) and is
/// small, which costs half the CPU of handing it to the blocking pool
/// (docs/SERVER.md, "Threads"); on the blocking pool (`elsewhere`) when it
/// waits for the disk, or is [`large`], so that it does not hold up the
/// other connections of its thread. Either way it waits, without holding a
/// thread, while a compaction runs: that holds the index's writer lock for
/// its whole length.
async fn write<T: Send + 'static>(
    server: &Arc<Server>,
    elsewhere: bool,
    f: impl FnOnce(&Server) -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    let _no_compaction = server.compaction.read().await;
    if elsewhere || server.durability == simhashdb::Durability::Sync {
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

    /// Every document resolved, or the first bad one's error (a request
    /// is checked whole before anything is written), refusing blank texts
    /// (an insert cannot skip a document it was asked to store).
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
    threshold: Option<f64>,
) -> Result<(Checked, Vec<group::Doc>), ApiError> {
    let threshold = threshold
        .map(|t| check_threshold("the request", t))
        .transpose()?;
    s.check_count("documents", documents.len())?;
    let mut checked: Checked = Vec::with_capacity(documents.len());
    let mut batch = Vec::with_capacity(documents.len());
    for (i, doc) in documents.into_iter().enumerate() {
        match doc.resolve(i, &s.hasher)? {
            Resolved::Document(mut doc) => {
                if let (Some(values), Some(t)) = (&mut doc.values, threshold) {
                    values.threshold = t;
                }
                checked.push((doc.id, Some(doc.fingerprint)));
                batch.push((doc.id, doc.checked(), doc.name));
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
    threshold: Option<f64>,
    sync: bool,
) -> Result<Vec<u8>, ApiError> {
    let (checked, batch) = resolve_checks(s, documents, threshold)?;
    // Only the nearest accepted match is answered: the library keeps no
    // more.
    let answers = s
        .index
        .insert_if_new_many_verified(batch, k, 1)
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
    // A new document's result takes at most 78 bytes.
    let mut out = Vec::with_capacity(checked.len() * 96 + 16);
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
                    nearest: VerifiedOut::from(&matches[0]),
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
/// The server answers it before its router ([`check_request`]); this is
/// the same for the router alone.
pub async fn check(State(server): Shared, req: Request) -> Response {
    let (parts, body) = req.into_parts();
    match check_request(&server, &parts.headers, body).await {
        Ok(answer) => {
            let mut response = Response::new(axum::body::Body::from(answer));
            response
                .headers_mut()
                .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
            response
        }
        Err(e) => e.into_response(),
    }
}

/// `POST /v1/check` once the request is let in (its host, its token and
/// a turn among `--max-concurrent-requests`): its body read and parsed as
/// [`JsonBody`] does. A check that need not sync is answered together with
/// the others queued at the same time ([`group`]: on the thread that
/// serves its connection, or past [`group::ON_THREAD_UP_TO`] documents on
/// the blocking pool; a [`large`] one's texts fingerprinted there too); one
/// that syncs runs on the blocking pool. The answer: the JSON of the
/// response's body.
pub async fn check_request<B>(
    server: &Arc<Server>,
    headers: &HeaderMap,
    body: B,
) -> Result<Vec<u8>, ApiError>
where
    B: HttpBody<Data = Bytes> + Unpin,
    B::Error: std::fmt::Display,
{
    let req: CheckRequest = json_body(headers, body, server).await?;
    let k = req.distance.unwrap_or(server.index.plan().k());
    server.check_distance(k)?;
    let sync = req.sync;
    let threshold = req.threshold;
    let documents = req.documents.0;
    let body = if sync || server.durability == simhashdb::Durability::Sync {
        write(server, sync, move |s| {
            check_documents(s, documents, k, threshold, sync)
        })
        .await?
    } else {
        // A large check's texts are fingerprinted on the blocking pool, and
        // it is answered there ([`group`]).
        let (checked, batch) = if large(&documents) {
            blocking(server, move |s| resolve_checks(s, documents, threshold)).await?
        } else {
            resolve_checks(server, documents, threshold)?
        };
        let _no_compaction = server.compaction.read().await;
        let answers = group::check(server, k, batch).await?;
        check_answer(server, checked, &answers)?
    };
    Ok(body)
}

/// `POST /v1/documents`: insert or replace, as one write.
pub async fn insert(
    State(server): Shared,
    JsonBody(req): JsonBody<InsertRequest>,
) -> Result<Response, ApiError> {
    let sync = req.sync;
    let documents = req.documents.0;
    let elsewhere = sync || large(&documents);
    let n = write(&server, elsewhere, move |s| {
        let docs = s.resolve_non_blank(documents)?;
        let n = docs.len();
        s.index
            .insert_batch_sketched(
                docs.into_iter()
                    .map(|d| (d.id, d.fingerprint, d.values.map(|v| v.sketch), d.name)),
            )
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

/// The id of `?name=NAME`: the name URL-decoded (`+` is a space, as in a
/// form), which must then be UTF-8: a name cannot be replaced by another
/// (`%fe` is not U+FFFD). Any other parameter, or `name` twice, is refused.
fn by_name(uri: &Uri) -> Result<u64, ApiError> {
    let expected = |why: String| {
        ApiError::invalid(format!(
            "{why}; expected `?name=NAME` (URL-encoded UTF-8) or the path /v1/documents/ID"
        ))
    };
    let mut name = None;
    for pair in uri.query().unwrap_or_default().split('&') {
        if pair.is_empty() {
            continue;
        }
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        let key = url_decode(key).map_err(&expected)?;
        if key != b"name" {
            return Err(expected(format!(
                "unknown parameter `{}`",
                String::from_utf8_lossy(&key)
            )));
        }
        if name.is_some() {
            return Err(expected("`name` is given twice".into()));
        }
        let value = url_decode(value).map_err(&expected)?;
        name = Some(
            String::from_utf8(value)
                .map_err(|_| expected("the name is not valid UTF-8 once URL-decoded".into()))?,
        );
    }
    let name = name.ok_or_else(|| expected("no `name` parameter".into()))?;
    Ok(doc_id(&name))
}

/// `s` URL-decoded as a form field: `%XX` a byte, `+` a space.
fn url_decode(s: &str) -> Result<Vec<u8>, String> {
    let mut out = Vec::with_capacity(s.len());
    let mut bytes = s.bytes();
    while let Some(b) = bytes.next() {
        match b {
            b'+' => out.push(b' '),
            b'%' => {
                let hex = |b: Option<u8>| b.and_then(|b| char::from(b).to_digit(16));
                match (hex(bytes.next()), hex(bytes.next())) {
                    (Some(hi), Some(lo)) => out.push((hi * 16 + lo) as u8),
                    _ => return Err(format!("`{s}` holds a `%` not followed by two hex digits")),
                }
            }
            b => out.push(b),
        }
    }
    Ok(out)
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
pub async fn get_by_name(State(server): Shared, uri: Uri) -> Result<Response, ApiError> {
    get_doc(&server, by_name(&uri)?)
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
pub async fn delete_by_name(State(server): Shared, uri: Uri) -> Result<Response, ApiError> {
    delete_doc(&server, by_name(&uri)?).await
}

/// One query's answer: by fingerprint, its nearest matches; by text, the
/// documents the verified rule accepts, most similar first.
enum Found {
    Plain(Vec<simhashdb::Match>),
    Verified(Vec<simhashdb::VerifiedMatch>),
}

impl Found {
    fn len(&self) -> usize {
        match self {
            Found::Plain(m) => m.len(),
            Found::Verified(m) => m.len(),
        }
    }

    /// `{"matches": [...], "truncated": ...}`.
    fn to_json(&self, truncated: bool) -> serde_json::Value {
        let matches = match self {
            Found::Plain(m) => json!(m.iter().map(MatchOut::from).collect::<Vec<_>>()),
            Found::Verified(m) => json!(m.iter().map(VerifiedOut::from).collect::<Vec<_>>()),
        };
        json!({ "matches": matches, "truncated": truncated })
    }
}

/// A query's matches within its limit: asked for one more, to tell. The
/// one more of a verified query is the farthest of the accepted documents
/// (it keeps the nearest), which the sort by similarity may put anywhere.
fn limited(found: Found, limit: usize) -> (Found, bool) {
    let truncated = found.len() > limit;
    let found = match found {
        Found::Plain(mut m) => {
            m.truncate(limit);
            Found::Plain(m)
        }
        Found::Verified(mut m) => {
            if truncated
                && let Some(farthest) = m
                    .iter()
                    .enumerate()
                    .max_by_key(|(_, v)| (v.doc.distance, v.doc.id))
                    .map(|(i, _)| i)
            {
                m.remove(farthest);
            }
            Found::Verified(m)
        }
    };
    (found, truncated)
}

/// Matches a query returns unless it gives a `limit`.
const DEFAULT_LIMIT: usize = 100;

/// `POST /v1/query`: never inserts. Each query returns at most its `limit`
/// nearest matches (default 100, fewer in a batch so large that the batch
/// would return more than `--max-matches`), and a request whose queries may
/// return more than `--max-matches` in all is refused: the answer's memory
/// is bounded whatever the index holds.
///
/// A request [`too_large_for_the_thread`] is answered on the blocking pool,
/// so that it does not hold up the other connections of its thread.
pub async fn query(
    State(server): Shared,
    JsonBody(req): JsonBody<QueryRequest>,
) -> Result<Response, ApiError> {
    let queries = req.queries.as_ref().map_or(&[][..], |q| &q.0[..]);
    let text: usize = req.text.as_ref().map_or(0, String::len)
        + queries
            .iter()
            .map(|q| q.text.as_ref().map_or(0, String::len))
            .sum::<usize>();
    if too_large_for_the_thread(queries.len(), text) {
        blocking(&server, move |s| answer_query(s, req)).await
    } else {
        answer_query(&server, req)
    }
}

/// The answer to `POST /v1/query` ([`query`]).
fn answer_query(server: &Server, req: QueryRequest) -> Result<Response, ApiError> {
    let default_k = req.k.unwrap_or(server.index.plan().k());
    let default_threshold = req.threshold;
    let queries = match req.queries {
        Some(queries) => {
            if req.text.is_some() || req.fingerprint.is_some() {
                return Err(ApiError::invalid(
                    "give one query (\"text\" or \"fingerprint\") or \"queries\", not both",
                ));
            }
            server.check_count("queries", queries.0.len())?;
            Some(queries.0)
        }
        None => None,
    };
    let n = queries.as_ref().map_or(1, Vec::len);
    let max = server.limits.max_matches;
    let default_limit = match req.limit {
        Some(U64(limit)) => usize::try_from(limit).unwrap_or(usize::MAX),
        None => DEFAULT_LIMIT.min(max / n.max(1)).max(1),
    };
    let limit_of = |q: &QueryIn| {
        q.limit.map_or(default_limit, |U64(l)| {
            usize::try_from(l).unwrap_or(usize::MAX)
        })
    };
    let one = QueryIn {
        text: req.text,
        fingerprint: req.fingerprint,
        k: req.k,
        limit: req.limit,
        threshold: None,
    };
    let all: &[QueryIn] = queries.as_deref().unwrap_or(std::slice::from_ref(&one));
    let mut total: usize = 0;
    for (i, q) in all.iter().enumerate() {
        let limit = limit_of(q);
        if limit == 0 {
            return Err(ApiError::invalid(format!(
                "queries[{i}]: `limit` must be at least 1"
            )));
        }
        total = total.saturating_add(limit);
    }
    if total > max {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "too_many_matches",
            format!(
                "the queries' limits add up to {total} matches, more than the server's limit of \
                 {max} per request (--max-matches); lower `limit` or split the request"
            ),
        ));
    }
    let lookup = |q: &QueryIn, label: &str| {
        let (checked, k) = q.resolve(label, &server.hasher, default_k, default_threshold)?;
        let limit = limit_of(q);
        match checked {
            simhashdb::Checked::Fingerprint(fp) => server
                .index
                .query_nearest(fp, k, limit.saturating_add(1))
                .map(Found::Plain),
            simhashdb::Checked::Text(values) => server
                .index
                .query_verified_nearest(&values, k, limit.saturating_add(1))
                .map(Found::Verified),
        }
        .map(|found| limited(found, limit))
        .map_err(ApiError::from_read)
    };
    match queries {
        Some(queries) => {
            let found = queries
                .iter()
                .enumerate()
                .map(|(i, q)| lookup(q, &format!("queries[{i}]")))
                .collect::<Result<Vec<_>, _>>()?;
            bump(&server.metrics.queries, found.len() as u64);
            let results: Vec<serde_json::Value> = found
                .iter()
                .map(|(m, truncated)| m.to_json(*truncated))
                .collect();
            Ok(json_response(
                StatusCode::OK,
                &json!({ "results": results }),
            ))
        }
        None => {
            let (found, truncated) = lookup(&one, "the query")?;
            bump(&server.metrics.queries, 1);
            Ok(json_response(StatusCode::OK, &found.to_json(truncated)))
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
            "table_decodes": s.decodes,
            "flushes": s.flushes,
            "flush_failures": s.flush_failures,
            "merges": s.merges,
            "merge_failures": s.merge_failures,
        }),
    )
}

/// `POST /v1/compact`: merges every segment into one.
pub async fn compact(State(server): Shared, _: NoArguments) -> Result<Response, ApiError> {
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

/// `POST /v1/backup`: a consistent copy of the index into `path`, on the
/// server's machine ([`simhashdb::Index::backup`]). Writes wait only while
/// the backup takes its list of files.
pub async fn backup(
    State(server): Shared,
    JsonBody(req): JsonBody<BackupRequest>,
) -> Result<Response, ApiError> {
    if !req.path.is_absolute() {
        return Err(ApiError::invalid(format!(
            "\"path\" must be absolute (a path on the server's machine); got {}",
            req.path.display()
        )));
    }
    let report = blocking(&server, move |s| {
        s.index.backup(&req.path).map_err(|e| match e {
            e @ simhashdb::Error::Poisoned { .. } => ApiError::from_write(e),
            e => ApiError::from_read(e),
        })
    })
    .await?;
    Ok(json_response(
        StatusCode::OK,
        &json!({
            "path": report.dest.display().to_string(),
            "linked": report.linked,
            "copied": report.copied,
            "bytes": report.bytes,
            "copied_bytes": report.copied_bytes,
            "next_seq": report.next_seq,
            "generation": report.generation,
        }),
    ))
}

/// `POST /v1/sync`: every acknowledged write survives power loss afterwards.
pub async fn sync(State(server): Shared, _: NoArguments) -> Result<Response, ApiError> {
    blocking(&server, |s| s.sync_if(true)).await?;
    Ok(json_response(StatusCode::OK, &json!({ "synced": true })))
}

/// `GET /healthz`: liveness: the process answers (no index call, no token
/// needed, no turn waited for).
pub async fn healthz() -> Response {
    json_response(StatusCode::OK, &json!({ "status": "ok" }))
}

/// `GET /readyz`: readiness: 200 while the index accepts writes, 503 once a
/// failed write, sync, flush or merge has poisoned it (reads go on, but a
/// load balancer should send writes elsewhere; a restart reopens it).
/// The index's directory removed under the server is not ready either,
/// even before a sync finds it out (`Index::writable`).
pub async fn readyz(State(server): Shared) -> Response {
    match server.index.writable() {
        Ok(()) => json_response(StatusCode::OK, &json!({ "status": "ready" })),
        Err(e) => json_response(
            StatusCode::SERVICE_UNAVAILABLE,
            &json!({ "status": "not_ready", "reason": e.to_string() }),
        ),
    }
}

/// The API's OpenAPI 3.1 description (docs/SERVER.md), served as it is
/// kept; `tests/server_openapi.rs` checks it against the server.
pub const OPENAPI: &str = include_str!("openapi.json");

/// `GET /openapi.json`: no token needed.
pub async fn openapi() -> Response {
    (
        [(CONTENT_TYPE, HeaderValue::from_static("application/json"))],
        OPENAPI,
    )
        .into_response()
}

/// `GET /`: what this server is and where its description is; no token
/// needed.
pub async fn root() -> Response {
    json_response(
        StatusCode::OK,
        &json!({
            "name": "simhashdb",
            "version": env!("CARGO_PKG_VERSION"),
            "openapi": "/openapi.json",
            "docs": concat!(env!("CARGO_PKG_REPOSITORY"), "/blob/main/docs/SERVER.md"),
        }),
    )
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
