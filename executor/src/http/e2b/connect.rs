//! The Connect protocol's JSON codec, as E2B's sandbox daemon speaks it
//! (<https://connectrpc.com/docs/protocol>): unary calls are a JSON body each way; a
//! server-streaming call's request and response are envelopes (a flag byte, a 4-byte
//! big-endian length, JSON), the response ending with an end-of-stream envelope (flag 0x02)
//! that carries an error, if any.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

/// Flag of the envelope that ends a stream.
pub const END_STREAM: u8 = 0x02;

/// A Connect error code, and the HTTP status a unary call answers it with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Code {
    InvalidArgument,
    NotFound,
    FailedPrecondition,
    DeadlineExceeded,
    AlreadyExists,
    PermissionDenied,
    ResourceExhausted,
    Unimplemented,
    Internal,
}

impl Code {
    pub fn name(self) -> &'static str {
        match self {
            Code::InvalidArgument => "invalid_argument",
            Code::NotFound => "not_found",
            Code::FailedPrecondition => "failed_precondition",
            Code::DeadlineExceeded => "deadline_exceeded",
            Code::AlreadyExists => "already_exists",
            Code::PermissionDenied => "permission_denied",
            Code::ResourceExhausted => "resource_exhausted",
            Code::Unimplemented => "unimplemented",
            Code::Internal => "internal",
        }
    }

    fn status(self) -> StatusCode {
        match self {
            Code::InvalidArgument => StatusCode::BAD_REQUEST,
            Code::NotFound => StatusCode::NOT_FOUND,
            Code::FailedPrecondition => StatusCode::BAD_REQUEST,
            Code::DeadlineExceeded => StatusCode::GATEWAY_TIMEOUT,
            Code::AlreadyExists => StatusCode::CONFLICT,
            Code::PermissionDenied => StatusCode::FORBIDDEN,
            Code::ResourceExhausted => StatusCode::TOO_MANY_REQUESTS,
            Code::Unimplemented => StatusCode::NOT_IMPLEMENTED,
            Code::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

/// A Connect error.
#[derive(Debug, Clone)]
pub struct Error {
    pub code: Code,
    pub message: String,
}

impl Error {
    pub fn new(code: Code, message: impl Into<String>) -> Self {
        Error {
            code,
            message: message.into(),
        }
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::json!({ "code": self.code.name(), "message": self.message })
    }

    /// As a unary call's answer.
    pub fn unary(&self) -> Response {
        (
            self.code.status(),
            [(http::header::CONTENT_TYPE, "application/json")],
            self.json().to_string(),
        )
            .into_response()
    }
}

/// A unary call's successful answer.
pub fn unary_ok(v: serde_json::Value) -> Response {
    ([(http::header::CONTENT_TYPE, "application/json")], v.to_string()).into_response()
}

/// The single message of a streaming request (the first envelope), as JSON.
pub fn first_message(body: &[u8]) -> Result<serde_json::Value, Error> {
    let bad = |m: &str| Error::new(Code::InvalidArgument, format!("request body: {m}"));
    if body.len() < 5 {
        return Err(bad("not a Connect envelope (shorter than its 5-byte prefix)"));
    }
    if body[0] & 0x01 != 0 {
        return Err(bad("compressed messages are not accepted"));
    }
    let len = u32::from_be_bytes([body[1], body[2], body[3], body[4]]) as usize;
    let msg = body
        .get(5..5 + len)
        .ok_or_else(|| bad("the envelope is longer than the body"))?;
    serde_json::from_slice(msg).map_err(|e| bad(&e.to_string()))
}

/// One envelope holding `msg`.
pub fn envelope_bytes(flags: u8, msg: &serde_json::Value) -> Vec<u8> {
    let mut out = Vec::new();
    envelope(&mut out, flags, msg);
    out
}

fn envelope(out: &mut Vec<u8>, flags: u8, msg: &serde_json::Value) {
    let bytes = msg.to_string().into_bytes();
    out.push(flags);
    out.extend_from_slice(&(bytes.len() as u32).to_be_bytes());
    out.extend_from_slice(&bytes);
}

/// A whole server-streaming answer: `messages`, then the end of the stream (with `error`).
pub fn stream(messages: &[serde_json::Value], error: Option<&Error>) -> Response {
    let mut body = Vec::new();
    for m in messages {
        envelope(&mut body, 0, m);
    }
    let end = match error {
        Some(e) => serde_json::json!({ "error": e.json() }),
        None => serde_json::json!({}),
    };
    envelope(&mut body, END_STREAM, &end);
    ([(http::header::CONTENT_TYPE, "application/connect+json")], body).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn envelopes_round_trip_and_bad_ones_name_the_body() {
        let mut b = Vec::new();
        envelope(&mut b, 0, &serde_json::json!({"process": {"cmd": "/bin/bash"}}));
        assert_eq!(first_message(&b).unwrap()["process"]["cmd"], "/bin/bash");
        assert!(first_message(&b[..3]).unwrap_err().message.starts_with("request body"));
        assert!(first_message(&b[..b.len() - 1]).is_err(), "a cut envelope");
        let mut z = b.clone();
        z[0] = 1;
        assert!(first_message(&z).is_err(), "compressed");
    }
}
