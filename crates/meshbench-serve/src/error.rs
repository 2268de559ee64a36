//! The one error every endpoint answers with: a status and `{"error": ..., "field": ...}`,
//! the message the CLI gives for the same input. A leaf: the API, the pages and the guard all
//! use it.

use axum::response::{IntoResponse, Response};
use axum::Json;
use http::StatusCode;
use serde::Serialize;

/// An error as JSON: `{"error": ..., "field": ...}`.
#[derive(Debug, Clone, Serialize)]
pub struct ApiError {
    #[serde(skip)]
    pub status: StatusCode,
    pub error: String,
    /// The request field the error is about, when it is about one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
}

impl ApiError {
    pub fn new(status: StatusCode, error: impl Into<String>) -> Self {
        ApiError {
            status,
            error: error.into(),
            field: None,
        }
    }

    pub fn field(field: &str, error: impl Into<String>) -> Self {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            error: error.into(),
            field: Some(field.to_owned()),
        }
    }

    pub fn not_found(what: impl Into<String>) -> Self {
        ApiError::new(StatusCode::NOT_FOUND, what)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status, Json(&self)).into_response()
    }
}
