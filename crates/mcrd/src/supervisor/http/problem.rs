//! Errors as problem documents (RFC 9457, `application/problem+json`):
//! the control protocol's error kind and message, the field at fault, and
//! the HTTP status that goes with the kind.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use mcr_core::control::{ControlError, ErrorKind};
use serde::Serialize;

/// A refused request; written as `{type, title, status, detail, kind,
/// field}`.
#[derive(Debug, Clone)]
pub struct Problem {
    /// The HTTP status.
    pub status: StatusCode,
    /// The kind, as the control protocol names it (`type` is
    /// `/api/problems#KIND`).
    pub kind: String,
    /// What is wrong and what to change (the control socket's message).
    pub detail: String,
    /// The field at fault (`outputs[0].interface`), when there is one.
    pub field: Option<String>,
}

/// The document as it is written.
#[derive(Serialize)]
struct Document<'a> {
    #[serde(rename = "type")]
    kind_uri: String,
    title: &'a str,
    status: u16,
    detail: &'a str,
    kind: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    field: Option<&'a str>,
}

impl Problem {
    /// A problem of `kind` (a word) with `status`.
    pub fn new(status: StatusCode, kind: &str, detail: impl Into<String>) -> Self {
        Problem {
            status,
            kind: kind.to_string(),
            detail: detail.into(),
            field: None,
        }
    }

    /// The JSON document.
    pub fn document(&self) -> serde_json::Value {
        serde_json::to_value(Document {
            kind_uri: format!("/api/problems#{}", self.kind),
            title: self.status.canonical_reason().unwrap_or("Error"),
            status: self.status.as_u16(),
            detail: &self.detail,
            kind: &self.kind,
            field: self.field.as_deref(),
        })
        .unwrap_or_default()
    }

    /// The same with the field at fault.
    pub fn at(mut self, field: impl Into<String>) -> Self {
        self.field = Some(field.into());
        self
    }
}

/// The status a control error is answered with.
pub fn status_of(kind: ErrorKind) -> StatusCode {
    match kind {
        ErrorKind::BadRequest | ErrorKind::Protocol => StatusCode::BAD_REQUEST,
        ErrorKind::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
        ErrorKind::InvalidRule | ErrorKind::InvalidRequest | ErrorKind::InvalidConfig => {
            StatusCode::UNPROCESSABLE_ENTITY
        }
        ErrorKind::NotFound => StatusCode::NOT_FOUND,
        ErrorKind::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        ErrorKind::Busy => StatusCode::SERVICE_UNAVAILABLE,
        ErrorKind::Permission => StatusCode::FORBIDDEN,
    }
}

impl From<ControlError> for Problem {
    fn from(e: ControlError) -> Self {
        let kind = serde_json::to_value(e.kind)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_else(|| "error".into());
        Problem {
            field: e.field,
            ..Problem::new(status_of(e.kind), &kind, e.message)
        }
    }
}

impl IntoResponse for Problem {
    fn into_response(self) -> Response {
        let status = self.status;
        let unauthorized = status == StatusCode::UNAUTHORIZED;
        let body = self.document().to_string();
        let mut r = (status, body).into_response();
        let h = r.headers_mut();
        h.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/problem+json"),
        );
        if unauthorized {
            h.insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"mcrd\""),
            );
        }
        if status == StatusCode::SERVICE_UNAVAILABLE {
            h.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_control_error_keeps_its_kind_field_and_message() {
        let mut e = ControlError::new(ErrorKind::InvalidRule, "no interface `x`");
        e.field = Some("outputs[0].interface".into());
        let p = Problem::from(e);
        assert_eq!(p.status, StatusCode::UNPROCESSABLE_ENTITY);
        let v = p.document();
        assert_eq!(v["type"], "/api/problems#invalid_rule");
        assert_eq!(v["kind"], "invalid_rule");
        assert_eq!(v["status"], 422);
        assert_eq!(v["field"], "outputs[0].interface");
        assert_eq!(v["detail"], "no interface `x`");
        assert_eq!(v["title"], "Unprocessable Entity");
    }
}
