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
    /// Retry: on another executor, or later (Connect's `unavailable`, HTTP 503).
    Unavailable,
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
            Code::Unavailable => "unavailable",
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
            Code::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
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

/// The bytes one output stream may have handed to its connection and not yet seen written
/// to the client's socket. A stream reads more of its process's output only while its
/// window has room, so a client that never reads holds at most this much of the
/// executor's memory per stream (its output waits in the sandbox's files, not here).
#[derive(Clone)]
pub struct Window {
    sem: std::sync::Arc<tokio::sync::Semaphore>,
}

/// Each stream's [`Window`], bytes.
pub const WINDOW_BYTES: usize = 256 << 10;

/// The least a chunk takes of a window: so that at most 16 chunks are ever in flight, and
/// a channel of 16 never makes the stream wait.
const MIN_TAKE: usize = WINDOW_BYTES / 16;

impl Default for Window {
    fn default() -> Self {
        Window {
            sem: std::sync::Arc::new(tokio::sync::Semaphore::new(WINDOW_BYTES)),
        }
    }
}

/// A chunk's bytes and its share of its stream's window, given back when the connection
/// drops the chunk (written, or the connection gone).
struct Held {
    data: Vec<u8>,
    _room: tokio::sync::OwnedSemaphorePermit,
}

impl AsRef<[u8]> for Held {
    fn as_ref(&self) -> &[u8] {
        &self.data
    }
}

impl Window {
    /// Bytes the stream may still hand over.
    pub fn room(&self) -> usize {
        self.sem.available_permits()
    }

    /// `data` as a chunk holding its share of the window; None when the window has not
    /// room for it now (the caller reads nothing more until it has).
    pub fn hold(&self, data: Vec<u8>) -> Option<bytes::Bytes> {
        let n = data.len().clamp(MIN_TAKE, WINDOW_BYTES);
        let room = self.sem.clone().try_acquire_many_owned(u32::try_from(n).ok()?).ok()?;
        Some(bytes::Bytes::from_owner(Held { data, _room: room }))
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_window_is_given_back_when_its_chunks_are_dropped() {
        let w = Window::default();
        let a = w.hold(vec![1; WINDOW_BYTES / 2]).expect("room");
        let b = w.hold(vec![2; 10]).expect("room for a small one");
        assert_eq!(w.room(), WINDOW_BYTES / 2 - MIN_TAKE);
        assert!(w.hold(vec![3; WINDOW_BYTES / 2]).is_none(), "no room: nothing taken");
        assert_eq!(&a[..2], &[1, 1]);
        drop((a, b));
        assert_eq!(w.room(), WINDOW_BYTES);
    }

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
