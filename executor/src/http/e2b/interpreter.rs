//! E2B's code interpreter (`e2b-code-interpreter`'s `run_code`): `POST /execute` runs a cell
//! in the sandbox's Python interpreter (a Python session's, so state is kept across calls)
//! and answers a stream of JSON lines: `stdout`, `stderr`, `result` (the value of a final
//! expression), `error` (name, value, traceback) and `number_of_executions`.
//!
//! A Python cell's `stdout` and `stderr` lines come as the cell writes them (the session's
//! driver copies them to the session's own directory, which the host reads while the call
//! runs); the rest when it ends. One context per sandbox: the default Python one
//! (`/contexts`).

use super::{E2b, Refused, plain, sandbox};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::{Json, extract::State};
use sandpool_proto::v1 as pb;
use serde::Deserialize;
use std::collections::BTreeMap;

/// The one context of a sandbox.
const DEFAULT_CONTEXT: &str = "default-python";

/// `POST /execute`'s body.
#[derive(Debug, Deserialize)]
pub struct ExecuteBody {
    code: String,
    context_id: Option<String>,
    language: Option<String>,
    env_vars: Option<BTreeMap<String, String>>,
}

fn timestamp() -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    format!("{}.{:06}", now.as_secs(), now.subsec_micros())
}

/// The exception's name and value from the last line of a Python traceback
/// (`NameError: name 'x' is not defined`).
pub fn exception(stderr: &str) -> (String, String) {
    let last = stderr.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or_default();
    match last.split_once(": ") {
        Some((name, value)) if !name.contains(' ') => (name.to_owned(), value.to_owned()),
        _ if !last.contains(' ') && !last.is_empty() => (last.to_owned(), String::new()),
        _ => ("Error".to_owned(), last.to_owned()),
    }
}

/// The lines an ended cell answers with, after the first `sent` bytes of its stdout and
/// stderr went out while it ran.
pub fn lines(r: &pb::RunInSessionResponse, execution_count: u32, sent: (usize, usize)) -> String {
    let result = r.result.clone().unwrap_or_default();
    let rest = |b: &[u8], n: usize| String::from_utf8_lossy(b.get(n..).unwrap_or_default()).into_owned();
    let stdout = rest(&result.stdout, sent.0);
    let verdict = pb::Verdict::try_from(r.verdict).unwrap_or(pb::Verdict::SandboxError);
    // A runtime error's traceback comes last on stderr and goes in the error line; what the
    // cell wrote to stderr before it is the cell's stderr.
    let whole_stderr = String::from_utf8_lossy(&result.stderr).into_owned();
    let (own, traceback) = match whole_stderr.rfind("Traceback (most recent call last):") {
        Some(i) if verdict == pb::Verdict::RuntimeError => whole_stderr.split_at(i),
        _ if verdict == pb::Verdict::RuntimeError => ("", whole_stderr.as_str()),
        _ => (whole_stderr.as_str(), ""),
    };
    let stderr = rest(own.as_bytes(), sent.1);
    let mut out = Vec::new();
    let ts = timestamp();
    if !stdout.is_empty() {
        out.push(serde_json::json!({"type": "stdout", "text": stdout, "timestamp": ts}));
    }
    let error = match verdict {
        pb::Verdict::Ok | pb::Verdict::OutputLimitExceeded => None,
        pb::Verdict::RuntimeError => {
            let (name, value) = exception(traceback);
            Some((name, value, traceback.to_owned()))
        }
        v => Some((
            v.as_str_name().to_owned(),
            if r.message.is_empty() {
                v.as_str_name().to_owned()
            } else {
                r.message.clone()
            },
            stderr.to_string(),
        )),
    };
    if !stderr.is_empty() {
        out.push(serde_json::json!({"type": "stderr", "text": stderr, "timestamp": ts}));
    }
    if !r.display.is_empty() {
        out.push(serde_json::json!({
            "type": "result", "text": r.display, "is_main_result": true, "extra": {},
        }));
    }
    if let Some((name, value, traceback)) = error {
        out.push(serde_json::json!({"type": "error", "name": name, "value": value, "traceback": traceback}));
    }
    out.push(serde_json::json!({"type": "number_of_executions", "execution_count": execution_count}));
    let mut s = String::new();
    for l in out {
        s.push_str(&l.to_string());
        s.push('\n');
    }
    s
}

/// The lines of a cell that did not run because the sandbox's interpreter had died since the
/// last one ([`crate::session::SessionError::Reset`]): the cell's error, named so.
fn reset_lines(why: &str) -> String {
    let error = serde_json::json!({"type": "error", "name": "SessionReset", "value": why, "traceback": ""});
    format!("{error}\n")
}

/// The most of one stream read at a time while a cell runs: its JSON line (at most 6
/// bytes a byte, escaped) must fit a stream's [`super::connect::Window`].
const READ_PIECE: u64 = 16 << 10;
/// The JSON lines of one poll's pieces, at most.
const PIECE_LINE: usize = 2 * (6 * READ_PIECE as usize + 256);

/// How often a running cell's output is looked at.
const LIVE_POLL: std::time::Duration = std::time::Duration::from_millis(30);

/// The text of `b` that is whole UTF-8 (a character cut at the end waits for the rest);
/// how many bytes that is.
fn whole_utf8(b: &[u8]) -> (String, usize) {
    match std::str::from_utf8(b) {
        Ok(s) => (s.to_owned(), b.len()),
        Err(e) if e.error_len().is_none() => (
            String::from_utf8_lossy(&b[..e.valid_up_to()]).into_owned(),
            e.valid_up_to(),
        ),
        Err(_) => (String::from_utf8_lossy(b).into_owned(), b.len()),
    }
}

/// Streams a Python cell: `stdout`/`stderr` lines as the cell writes them, then the rest
/// of what [`lines`] says once it ends. A sandbox that goes away mid-cell cuts the stream
/// (the SDK then asks whether the sandbox still runs, and says it was killed).
fn stream_cell(
    sessions: std::sync::Arc<crate::session::SessionManager>,
    sbx: super::Sandbox,
    code: String,
    cap: u64,
    permit: super::StreamPermit,
) -> Response {
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<bytes::Bytes, std::io::Error>>(16);
    // While the cell runs, what the client has not read stays in the live files: the stream
    // reads on only while its window has room.
    let window = super::connect::Window::default();
    tokio::spawn(async move {
        let _permit = permit;
        let Ok(live) = crate::session::random_hex() else { return };
        let run = sessions.run_live(&sbx.id, &sbx.owner, code, &live);
        tokio::pin!(run);
        let mut sent = (0usize, 0usize);
        let r = loop {
            tokio::select! {
                r = &mut run => break r,
                // The call (`run`) is not polled while this arm runs: nothing here may wait
                // on it (a read that waited for its /work to be made never returned).
                _ = tokio::time::sleep(LIVE_POLL) => {
                    if window.room() < PIECE_LINE {
                        continue; // the client has not read what it was sent
                    }
                    let mut out = String::new();
                    for (name, n) in [("stdout", &mut sent.0), ("stderr", &mut sent.1)] {
                        let path = format!("live/{live}/{name}");
                        let left = cap.saturating_sub(*n as u64).min(READ_PIECE);
                        if left > 0
                            && let Ok(Some(b)) = sessions.state_file(&sbx.id, &sbx.owner, &path, *n as u64, left).await
                            && !b.is_empty()
                        {
                            let (text, used) = whole_utf8(&b);
                            if used > 0 {
                                *n += used;
                                out.push_str(&serde_json::json!({"type": name, "text": text, "timestamp": timestamp()}).to_string());
                                out.push('\n');
                            }
                        }
                    }
                    if let Some(chunk) = (!out.is_empty()).then(|| window.hold(out.into_bytes())).flatten()
                        && tx.send(Ok(chunk)).await.is_err()
                    {
                        return;
                    }
                }
            }
        };
        match r {
            Ok(r) => {
                let count = sessions
                    .info(&sbx.id, &sbx.owner)
                    .map(|i| i.totals.calls.saturating_sub(r.calls_left))
                    .unwrap_or_default();
                let _ = tx.send(Ok(lines(&r, count, sent).into())).await;
            }
            Err(crate::session::SessionError::Reset(why)) => {
                let _ = tx.send(Ok(reset_lines(&why).into())).await;
            }
            Err(e) => {
                let _ = tx.send(Err(std::io::Error::other(e.to_string()))).await;
            }
        }
    });
    let body = axum::body::Body::from_stream(tokio_stream::wrappers::ReceiverStream::new(rx));
    ([(http::header::CONTENT_TYPE, "application/x-ndjson")], body).into_response()
}

/// `POST /execute`.
pub async fn execute(State(e): State<E2b>, headers: HeaderMap, body: bytes::Bytes) -> Response {
    let sbx = match sandbox(e.sessions.as_ref(), &headers) {
        Ok(s) => s,
        Err(r) => return r.response(),
    };
    let Some(sessions) = e.sessions.as_ref() else {
        return Refused::NoSessions.response();
    };
    let req: ExecuteBody = match super::json_body(&body) {
        Ok(r) => r,
        Err(err) => return plain(StatusCode::BAD_REQUEST, &err),
    };
    if let Some(c) = req.context_id.as_deref().filter(|c| *c != DEFAULT_CONTEXT) {
        return plain(
            StatusCode::BAD_REQUEST,
            &format!("context_id: {c:?} is not a context of this sandbox; it has one, {DEFAULT_CONTEXT:?}"),
        );
    }
    let input = match req.language.as_deref().unwrap_or("python") {
        "python" | "python3" => pb::run_in_session_request::Input::Code(req.code),
        "bash" | "sh" => pb::run_in_session_request::Input::Command(req.code),
        other => {
            return plain(
                StatusCode::BAD_REQUEST,
                &format!("language: {other:?} is not served; run_code takes python (or bash)"),
            );
        }
    };
    let input = match (input, req.env_vars.filter(|v| !v.is_empty())) {
        (i, None) => i,
        (pb::run_in_session_request::Input::Command(c), Some(env)) => {
            pb::run_in_session_request::Input::Command(format!("{}\n{c}", super::envd::exports(&env)))
        }
        (_, Some(_)) => {
            return plain(
                StatusCode::BAD_REQUEST,
                "env_vars: per-cell environment variables are not supported for python; set them with os.environ or at create (envs)",
            );
        }
    };
    // While this executor drains, a cell is answered whole, not streamed: a session the
    // drain pauses before the cell runs refuses it unrun (503), which the gateway retries
    // on another executor, where a stream already begun could only be cut.
    let input = match input {
        pb::run_in_session_request::Input::Code(code) if !e.engine.admission().is_draining() => {
            let permit = match e.stream_permit(&sbx) {
                Ok(p) => p,
                Err(err) => return plain(StatusCode::TOO_MANY_REQUESTS, &err.message),
            };
            // The driver copies at most the call's output limit; the file is the cell's to
            // write too, so the host reads no more than the executor's ceiling.
            return stream_cell(sessions.clone(), sbx, code, e.engine.policy().max.output, permit);
        }
        other => other,
    };
    let run = pb::RunInSessionRequest {
        session_id: sbx.id.clone(),
        input: Some(input),
        ..Default::default()
    };
    match sessions.run(run, &sbx.owner).await {
        Ok(r) => {
            // The cell's number: the session's calls so far (commands count too).
            let count = sessions
                .info(&sbx.id, &sbx.owner)
                .map(|i| i.totals.calls.saturating_sub(r.calls_left))
                .unwrap_or_default();
            (
                [(http::header::CONTENT_TYPE, "application/x-ndjson")],
                lines(&r, count, (0, 0)),
            )
                .into_response()
        }
        Err(crate::session::SessionError::NotFound) => Refused::NotFound(sbx.id).response(),
        Err(crate::session::SessionError::Reset(why)) => (
            [(http::header::CONTENT_TYPE, "application/x-ndjson")],
            reset_lines(&why),
        )
            .into_response(),
        Err(err) => super::api_session_error(err),
    }
}

/// The default context, as `/contexts` shows it.
fn context() -> serde_json::Value {
    serde_json::json!({"id": DEFAULT_CONTEXT, "language": "python", "cwd": super::HOME})
}

/// `GET /contexts`: the one context. The SDK sends no access token here, so it answers
/// for any sandbox id of this executor, and says nothing about the sandbox.
pub async fn list_contexts() -> Response {
    Json(serde_json::json!([context()])).into_response()
}

/// `POST /contexts`: only the default Python context exists; asking for it again returns it.
pub async fn create_context(body: bytes::Bytes) -> Response {
    #[derive(Deserialize, Default)]
    struct Body {
        language: Option<String>,
    }
    let b: Body = if body.is_empty() {
        Body::default()
    } else {
        match serde_json::from_slice(&body) {
            Ok(b) => b,
            Err(err) => return plain(StatusCode::BAD_REQUEST, &format!("request body: {err}")),
        }
    };
    match b.language.as_deref() {
        None | Some("python") | Some("python3") => Json(context()).into_response(),
        Some(other) => plain(
            StatusCode::BAD_REQUEST,
            &format!("language: {other:?}: a Sandpool sandbox has one context, the default Python one"),
        ),
    }
}

/// `DELETE /contexts/{id}`, `POST /contexts/{id}/restart`: a sandbox's one interpreter is
/// its state; it is not dropped or restarted on request.
pub async fn context_refused() -> Response {
    plain(
        StatusCode::BAD_REQUEST,
        "contexts cannot be removed or restarted in Sandpool: a sandbox has one interpreter, which restarts only when a cell kills it; kill the sandbox and create another",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_exception_is_the_tracebacks_last_line() {
        let tb = "Traceback (most recent call last):\n  File \"<cell>\", line 1\nZeroDivisionError: division by zero\n";
        assert_eq!(exception(tb), ("ZeroDivisionError".into(), "division by zero".into()));
        assert_eq!(
            exception("KeyboardInterrupt\n"),
            ("KeyboardInterrupt".into(), String::new())
        );
        assert_eq!(
            exception("some odd text here"),
            ("Error".into(), "some odd text here".into())
        );
    }

    #[test]
    fn a_failed_cell_is_stdout_then_the_error_then_the_count() {
        let r = pb::RunInSessionResponse {
            verdict: pb::Verdict::RuntimeError as i32,
            result: Some(pb::PhaseResult {
                stdout: b"hi\n".to_vec(),
                stderr: b"warn\nTraceback (most recent call last):\nValueError: bad\n".to_vec(),
                ..Default::default()
            }),
            ..Default::default()
        };
        let l: Vec<serde_json::Value> = lines(&r, 3, (0, 0))
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(l[0]["type"], "stdout");
        assert_eq!(
            (l[1]["type"].as_str(), l[1]["text"].as_str()),
            (Some("stderr"), Some("warn\n"))
        );
        assert_eq!(l[2]["type"], "error");
        assert_eq!(l[2]["name"], "ValueError");
        assert!(l[2]["traceback"].as_str().unwrap().starts_with("Traceback"), "{}", l[2]);
        assert_eq!(l[3]["execution_count"], 3);
        assert_eq!(l.len(), 4);
        // What streamed while the cell ran is not sent again.
        let l: Vec<serde_json::Value> = lines(&r, 3, (3, 5))
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(l[0]["type"], "error", "{l:?}");
    }
}
