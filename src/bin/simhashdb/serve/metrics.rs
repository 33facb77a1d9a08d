//! Counters and latency histograms, rendered in the Prometheus text
//! exposition format (version 0.0.4) for `GET /metrics`.

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use simhashdb::Stats;

/// The routes, as metric labels: `(method, route)`.
pub const ENDPOINTS: [(&str, &str); 17] = [
    ("POST", "/v1/check"),
    ("POST", "/v1/documents"),
    ("GET", "/v1/documents"),
    ("DELETE", "/v1/documents"),
    ("GET", "/v1/documents/{id}"),
    ("DELETE", "/v1/documents/{id}"),
    ("POST", "/v1/query"),
    ("GET", "/v1/stats"),
    ("POST", "/v1/compact"),
    ("POST", "/v1/sync"),
    ("POST", "/v1/backup"),
    ("GET", "/healthz"),
    ("GET", "/readyz"),
    ("GET", "/metrics"),
    ("GET", "/openapi.json"),
    ("GET", "/"),
    // Anything else: no route, or a method the route does not have.
    ("", "other"),
];

/// The label index of a request.
pub fn endpoint(method: &str, route: Option<&str>) -> usize {
    route
        .and_then(|route| {
            ENDPOINTS
                .iter()
                .position(|&(m, r)| m == method && r == route)
        })
        .unwrap_or(ENDPOINTS.len() - 1)
}

/// Status codes counted one by one; any other goes under `other`.
const STATUSES: [u16; 12] = [200, 400, 401, 403, 404, 405, 408, 413, 415, 422, 500, 503];

/// Upper bounds of the latency buckets, in seconds.
const BUCKETS: [f64; 16] = [
    0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
    1.0, 2.5, 10.0,
];

#[derive(Default)]
struct EndpointMetrics {
    /// By `STATUSES` index, then one for the others.
    statuses: [AtomicU64; STATUSES.len() + 1],
    /// Cumulative counts are computed when rendering; these are per bucket,
    /// then one for `+Inf`.
    buckets: [AtomicU64; BUCKETS.len() + 1],
    micros_sum: AtomicU64,
}

/// Everything `/metrics` reports besides the index's own sizes.
#[derive(Default)]
pub struct Metrics {
    endpoints: [EndpointMetrics; ENDPOINTS.len()],
    pub checked_new: AtomicU64,
    pub checked_duplicate: AtomicU64,
    pub checked_blank: AtomicU64,
    pub inserted: AtomicU64,
    pub deleted: AtomicU64,
    pub queries: AtomicU64,
    pub syncs: AtomicU64,
    pub compactions: AtomicU64,
}

/// Adds one to a counter (relaxed: counters order nothing).
pub fn bump(counter: &AtomicU64, n: u64) {
    counter.fetch_add(n, Ordering::Relaxed);
}

impl Metrics {
    /// Records one request's answer and how long it took.
    pub fn record(&self, endpoint: usize, status: u16, elapsed: Duration) {
        let m = &self.endpoints[endpoint];
        let s = STATUSES
            .iter()
            .position(|&c| c == status)
            .unwrap_or(STATUSES.len());
        bump(&m.statuses[s], 1);
        let seconds = elapsed.as_secs_f64();
        let b = BUCKETS
            .iter()
            .position(|&le| seconds <= le)
            .unwrap_or(BUCKETS.len());
        bump(&m.buckets[b], 1);
        bump(&m.micros_sum, elapsed.as_micros() as u64);
    }

    /// The text of `/metrics`, with the index's current sizes.
    pub fn render(&self, stats: &Stats) -> String {
        let mut out = String::with_capacity(16 * 1024);
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);

        header(
            &mut out,
            "simhashdb_http_requests_total",
            "counter",
            "HTTP requests answered, by route and status code.",
        );
        for (e, &(method, route)) in ENDPOINTS.iter().enumerate() {
            let m = &self.endpoints[e];
            for (s, count) in m.statuses.iter().enumerate() {
                let count = get(count);
                if count == 0 {
                    continue;
                }
                let status = STATUSES
                    .get(s)
                    .map_or("other".to_string(), |c| c.to_string());
                let _ = writeln!(
                    out,
                    "simhashdb_http_requests_total{{method=\"{method}\",route=\"{route}\",status=\"{status}\"}} {count}"
                );
            }
        }

        header(
            &mut out,
            "simhashdb_http_request_duration_seconds",
            "histogram",
            "Time from a request's arrival at the router to its response, by route.",
        );
        for (e, &(method, route)) in ENDPOINTS.iter().enumerate() {
            let m = &self.endpoints[e];
            let labels = format!("method=\"{method}\",route=\"{route}\"");
            let mut cumulative = 0;
            for (b, count) in m.buckets.iter().enumerate() {
                cumulative += get(count);
                let le = BUCKETS
                    .get(b)
                    .map_or("+Inf".to_string(), |le| le.to_string());
                let _ = writeln!(
                    out,
                    "simhashdb_http_request_duration_seconds_bucket{{{labels},le=\"{le}\"}} {cumulative}"
                );
            }
            let sum = get(&m.micros_sum) as f64 / 1e6;
            let _ = writeln!(
                out,
                "simhashdb_http_request_duration_seconds_sum{{{labels}}} {sum}"
            );
            let _ = writeln!(
                out,
                "simhashdb_http_request_duration_seconds_count{{{labels}}} {cumulative}"
            );
        }

        header(
            &mut out,
            "simhashdb_checked_documents_total",
            "counter",
            "Documents answered by /v1/check, by result.",
        );
        let _ = writeln!(
            out,
            "simhashdb_checked_documents_total{{result=\"new\"}} {}",
            get(&self.checked_new)
        );
        let _ = writeln!(
            out,
            "simhashdb_checked_documents_total{{result=\"duplicate\"}} {}",
            get(&self.checked_duplicate)
        );
        let _ = writeln!(
            out,
            "simhashdb_checked_documents_total{{result=\"blank\"}} {}",
            get(&self.checked_blank)
        );
        let counters = [
            (
                "simhashdb_inserted_documents_total",
                "Documents inserted or replaced by POST /v1/documents.",
                get(&self.inserted),
            ),
            (
                "simhashdb_deleted_documents_total",
                "Documents deleted.",
                get(&self.deleted),
            ),
            (
                "simhashdb_queries_total",
                "Fingerprints looked up by /v1/query.",
                get(&self.queries),
            ),
            (
                "simhashdb_syncs_total",
                "Syncs of the index requested (POST /v1/sync and \"sync\": true).",
                get(&self.syncs),
            ),
            (
                "simhashdb_compactions_total",
                "Compactions run by POST /v1/compact.",
                get(&self.compactions),
            ),
        ];
        for (name, help, value) in counters {
            header(&mut out, name, "counter", help);
            let _ = writeln!(out, "{name} {value}");
        }
        let activity = [
            (
                "simhashdb_flushes_total",
                "Memtables written to segments since the server opened the index, by result (a failure poisons the index).",
                stats.flushes,
                stats.flush_failures,
            ),
            (
                "simhashdb_merges_total",
                "Merges of segments since the server opened the index (background and POST /v1/compact), by result.",
                stats.merges,
                stats.merge_failures,
            ),
        ];
        for (name, help, ok, failed) in activity {
            header(&mut out, name, "counter", help);
            let _ = writeln!(out, "{name}{{result=\"ok\"}} {ok}");
            let _ = writeln!(out, "{name}{{result=\"failed\"}} {failed}");
        }

        let gauges = [
            (
                "simhashdb_segments",
                "Live segments (each flush adds one; merges reduce them).",
                stats.segments as u64,
            ),
            (
                "simhashdb_segment_entries",
                "Document versions in segments, including replaced and deleted ones until compaction drops them.",
                stats.segment_docs,
            ),
            (
                "simhashdb_segment_tombstones",
                "Tombstones in segments.",
                stats.tombstones,
            ),
            (
                "simhashdb_segment_bytes",
                "Bytes of segment and doc-map files.",
                stats.disk_bytes,
            ),
            (
                "simhashdb_memtable_entries",
                "Ids with a version in the memtable (written to the WAL, not yet flushed).",
                stats.memtable_docs as u64,
            ),
            (
                "simhashdb_memtable_bytes",
                "Approximate bytes of the memtable.",
                stats.memtable_bytes as u64,
            ),
            (
                "simhashdb_decoded_table_bytes",
                "Heap bytes of the small segments' decoded tables.",
                stats.decoded_table_bytes,
            ),
            (
                "simhashdb_flushing_entries",
                "Ids in a memtable being flushed to a segment now (0: no flush running).",
                stats.flushing_docs as u64,
            ),
        ];
        for (name, help, value) in gauges {
            header(&mut out, name, "gauge", help);
            let _ = writeln!(out, "{name} {value}");
        }
        header(
            &mut out,
            "simhashdb_table_decodes_total",
            "counter",
            "Small segments' tables decoded into heap copies since the server opened the index.",
        );
        let _ = writeln!(out, "simhashdb_table_decodes_total {}", stats.decodes);
        header(
            &mut out,
            "simhashdb_build_info",
            "gauge",
            "Always 1; the labels name the build: its version, the format version it writes and the oldest it opens.",
        );
        let _ = writeln!(
            out,
            "simhashdb_build_info{{version=\"{}\",format_version=\"{}\",oldest_format_version=\"{}\"}} 1",
            env!("CARGO_PKG_VERSION"),
            simhashdb::format::FORMAT_VERSION,
            simhashdb::format::OLDEST_READ_VERSION,
        );
        super::process::Process::read().render(&mut out);
        out
    }
}

pub fn header(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every route counted here is described in the OpenAPI document, and
    /// every operation described there is a route counted here.
    #[test]
    fn the_openapi_document_describes_every_route_and_no_other() {
        let doc: serde_json::Value =
            serde_json::from_str(super::super::handlers::OPENAPI).expect("valid JSON");
        let mut described: Vec<(String, String)> = Vec::new();
        for (path, item) in doc["paths"].as_object().expect("paths") {
            for method in item.as_object().expect("path item").keys() {
                described.push((method.to_ascii_uppercase(), path.clone()));
            }
        }
        described.sort();
        let mut routes: Vec<(String, String)> = ENDPOINTS[..ENDPOINTS.len() - 1]
            .iter()
            .map(|&(m, r)| (m.to_string(), r.to_string()))
            .collect();
        routes.sort();
        assert_eq!(described, routes);
        assert_eq!(doc["openapi"], "3.1.0");
        assert_eq!(doc["info"]["version"], env!("CARGO_PKG_VERSION"));
    }

    #[test]
    fn histogram_buckets_are_cumulative_and_counted_once() {
        let metrics = Metrics::default();
        let check = endpoint("POST", Some("/v1/check"));
        metrics.record(check, 200, Duration::from_micros(40));
        metrics.record(check, 200, Duration::from_millis(3));
        metrics.record(check, 413, Duration::from_secs(60));
        let stats = simhashdb::Index::open(
            tempfile::tempdir().expect("tempdir").path(),
            simhashdb::Options::default(),
        )
        .expect("open")
        .stats();
        let text = metrics.render(&stats);
        let line = |prefix: &str| {
            text.lines()
                .find(|l| l.starts_with(prefix))
                .unwrap_or_else(|| panic!("no {prefix} in\n{text}"))
                .rsplit(' ')
                .next()
                .expect("value")
                .to_string()
        };
        let labels = "method=\"POST\",route=\"/v1/check\"";
        assert_eq!(
            line(&format!(
                "simhashdb_http_request_duration_seconds_bucket{{{labels},le=\"0.00005\"}}"
            )),
            "1"
        );
        assert_eq!(
            line(&format!(
                "simhashdb_http_request_duration_seconds_bucket{{{labels},le=\"0.005\"}}"
            )),
            "2"
        );
        assert_eq!(
            line(&format!(
                "simhashdb_http_request_duration_seconds_bucket{{{labels},le=\"+Inf\"}}"
            )),
            "3"
        );
        assert_eq!(
            line(&format!(
                "simhashdb_http_request_duration_seconds_count{{{labels}}}"
            )),
            "3"
        );
        assert_eq!(
            line(&format!(
                "simhashdb_http_requests_total{{{labels},status=\"413\"}}"
            )),
            "1"
        );
        assert_eq!(endpoint("PUT", Some("/v1/check")), ENDPOINTS.len() - 1);
        assert_eq!(endpoint("GET", None), ENDPOINTS.len() - 1);
    }
}
