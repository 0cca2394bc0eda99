//! The SandboxFusion/ScaleBox-compatible HTTP API, on its own port, so that
//! clients of those services (verl's SandboxFusion reward, ScaleBox eval
//! scripts) work by changing only the URL.
//!
//! - `GET /v1/ping`: liveness, answers `"pong"`.
//! - `POST /run_code`: SandboxFusion's run ([`run_code`]).
//! - `POST /common_evaluate_batch`: ScaleBox's unified evaluation ([`scalebox`]).

pub mod run_code;
pub mod scalebox;
pub mod shapes;

use crate::admission::AdmissionError;
use crate::engine::ExecError;
use crate::judge::Judge;
use axum::extract::rejection::JsonRejection;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};

/// An engine error as an HTTP error with a JSON `detail`.
fn error_response(e: ExecError) -> Response {
    let code = match &e {
        ExecError::InvalidArgument { .. } => StatusCode::BAD_REQUEST,
        ExecError::Unavailable(..) => StatusCode::BAD_REQUEST,
        ExecError::Admission(AdmissionError::QueueFull { .. }) => StatusCode::TOO_MANY_REQUESTS,
        ExecError::Admission(AdmissionError::Draining) => StatusCode::SERVICE_UNAVAILABLE,
        ExecError::Admission(AdmissionError::Deadline) | ExecError::DeadlineExceeded => StatusCode::GATEWAY_TIMEOUT,
    };
    (code, Json(serde_json::json!({ "detail": e.to_string() }))).into_response()
}

/// A body that is not the JSON we take, as the same `detail` error: 400 for bad JSON
/// or a missing or mistyped field (serde names it), axum's status otherwise (413, 415).
fn body_error(r: JsonRejection) -> Response {
    let code = match r {
        JsonRejection::JsonDataError(_) | JsonRejection::JsonSyntaxError(_) => StatusCode::BAD_REQUEST,
        _ => r.status(),
    };
    (code, Json(serde_json::json!({ "detail": r.body_text() }))).into_response()
}

/// The HTTP routes, judging on `judge`.
pub fn router(judge: Judge, max_body_bytes: usize) -> Router {
    Router::new()
        .route("/v1/ping", get(|| async { Json("pong") }))
        .route(
            "/run_code",
            post(
                |State(j): State<Judge>, req: Result<Json<run_code::RunCodeRequest>, JsonRejection>| async move {
                    let Json(req) = match req {
                        Ok(r) => r,
                        Err(e) => return body_error(e),
                    };
                    match run_code::run_code(j.engine(), req).await {
                        Ok(r) => Json(r).into_response(),
                        Err(e) => error_response(e),
                    }
                },
            ),
        )
        .route(
            "/common_evaluate_batch",
            post(
                |State(j): State<Judge>, body: Result<Json<scalebox::EvaluateBody>, JsonRejection>| async move {
                    let Json(body) = match body {
                        Ok(b) => b,
                        Err(e) => return body_error(e),
                    };
                    match scalebox::evaluate(&j, body).await {
                        Ok(r) => Json(r).into_response(),
                        Err(e) => error_response(e),
                    }
                },
            ),
        )
        .layer(DefaultBodyLimit::max(max_body_bytes))
        .with_state(judge)
}

/// Serves the HTTP API on `listener` until `shutdown` resolves.
pub async fn serve_on(
    judge: Judge,
    listener: tokio::net::TcpListener,
    max_body_bytes: usize,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    if let Ok(addr) = listener.local_addr() {
        tracing::info!(%addr, "serving SandboxFusion-compatible HTTP");
    }
    use axum::serve::ListenerExt;
    // As on the gRPC port: small responses must not wait for the client's delayed ACK.
    let listener = listener.tap_io(|tcp| {
        let _ = tcp.set_nodelay(true);
    });
    axum::serve(listener, router(judge, max_body_bytes))
        .with_graceful_shutdown(shutdown)
        .await
}
