//! Errors as the API reports them: an HTTP status and a JSON body
//! `{"error": {"code": CODE, "message": MESSAGE}}` whose code is stable.

use axum::http::header::{CONNECTION, CONTENT_TYPE};
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::json;

/// A request that could not be served.
#[derive(Debug, Clone)]
pub struct ApiError {
    status: StatusCode,
    code: &'static str,
    message: String,
    /// Answered with `Connection: close` (the body was not read whole).
    close: bool,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            code,
            message: message.into(),
            close: false,
        }
    }

    /// The same, answered with `Connection: close`: for a refusal before
    /// the request's body was read whole, which leaves the connection in
    /// the middle of a request.
    pub fn closing(mut self) -> ApiError {
        self.close = true;
        self
    }

    /// A request that parsed as JSON but does not say something valid.
    pub fn invalid(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, "invalid_request", message)
    }

    pub fn not_found(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, "not_found", message)
    }

    /// An error of the index while reading.
    pub fn from_read(e: simhashdb::Error) -> ApiError {
        use simhashdb::Error;
        match e {
            Error::DistanceTooLarge { .. } => {
                ApiError::new(StatusCode::BAD_REQUEST, "distance_too_large", e.to_string())
            }
            Error::InvalidArgument(_) => ApiError::invalid(e.to_string()),
            Error::Corrupted { .. } => ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "index_corrupted",
                e.to_string(),
            ),
            Error::Io { .. } => {
                ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "io_error", e.to_string())
            }
            _ => ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string()),
        }
    }

    /// An error of the index while writing: a failed write or sync poisons
    /// the index, so it and every later write are 503 (reads go on).
    pub fn from_write(e: simhashdb::Error) -> ApiError {
        use simhashdb::Error;
        match e {
            Error::Poisoned { .. } => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "index_poisoned",
                format!("{e}; reads are still served; restart the server to reopen the index"),
            ),
            Error::Io { .. } => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "write_failed",
                format!(
                    "{e}; the index now refuses writes (reads are still served); \
                     restart the server to reopen it"
                ),
            ),
            e => ApiError::from_read(e),
        }
    }

    #[cfg(test)]
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if self.status.is_server_error() {
            tracing::error!(code = self.code, "{}", self.message);
        }
        let body = json!({"error": {"code": self.code, "message": self.message}});
        let mut response = (
            self.status,
            [(CONTENT_TYPE, HeaderValue::from_static("application/json"))],
            body.to_string(),
        )
            .into_response();
        if self.close {
            response
                .headers_mut()
                .insert(CONNECTION, HeaderValue::from_static("close"));
        }
        response
    }
}
