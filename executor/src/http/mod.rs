//! The SandboxFusion/ScaleBox-compatible HTTP API, on its own port, so that
//! clients of those services (verl's SandboxFusion reward, ScaleBox eval
//! scripts) work by changing only the URL.
//!
//! - `GET /v1/ping`: liveness, answers `"pong"` (503 while the watchdog finds work stuck).
//! - `POST /run_code`: SandboxFusion's run ([`run_code`]).
//! - `POST /common_evaluate_batch`: ScaleBox's unified evaluation ([`scalebox`]).
//! - `GET /api/v2/runtimes`, `POST /api/v2/execute`: Piston v2 ([`piston`]).
//! - E2B's control plane, sandbox daemon and code interpreter ([`e2b`]), over sessions.
//!
//! Every protocol is a thin adapter over the same engine, with the same limits, auth,
//! metrics (`sandpool_http_requests_total` by protocol) and capture.

pub mod e2b;
pub mod piston;
pub mod run_code;
pub mod scalebox;
pub mod shapes;

use crate::admission::AdmissionError;
use crate::budget::{ByteBudget, Charge};
use crate::call::{Call, Caller};
use crate::error::ExecError;
use crate::judge::Judge;
use crate::tenants::{Priority, Tenant, Tenants};
use axum::body::Body;
use axum::extract::rejection::JsonRejection;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::StatusCode;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Json, Router};
use std::sync::Arc;
use std::time::Duration;

/// An engine error as an HTTP error with a JSON `detail`.
fn error_response(e: ExecError) -> Response {
    let code = error_response_code(&e);
    (code, Json(serde_json::json!({ "detail": e.to_string() }))).into_response()
}

/// The HTTP status of an engine error.
fn error_response_code(e: &ExecError) -> StatusCode {
    match e {
        ExecError::InvalidArgument { .. } => StatusCode::BAD_REQUEST,
        ExecError::Unavailable(..) => StatusCode::BAD_REQUEST,
        ExecError::Priority(_) => StatusCode::FORBIDDEN,
        ExecError::Admission(AdmissionError::QueueFull { .. }) => StatusCode::TOO_MANY_REQUESTS,
        ExecError::Admission(AdmissionError::Draining) | ExecError::Budget(_) => StatusCode::SERVICE_UNAVAILABLE,
        ExecError::Admission(AdmissionError::Deadline) | ExecError::DeadlineExceeded => StatusCode::GATEWAY_TIMEOUT,
        ExecError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
    }
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

/// An engine error as Piston answers errors: `{"message": ...}`; the executor's own
/// failure (SANDBOX_ERROR) is a 500, which Piston's clients report as a server error.
fn piston_error(e: ExecError) -> Response {
    let code = error_response_code(&e);
    (code, Json(serde_json::json!({ "message": e.to_string() }))).into_response()
}

/// A body that is not the JSON Piston takes, as its error.
fn piston_body_error(r: JsonRejection) -> Response {
    let code = match r {
        JsonRejection::JsonDataError(_) | JsonRejection::JsonSyntaxError(_) => StatusCode::BAD_REQUEST,
        _ => r.status(),
    };
    (code, Json(serde_json::json!({ "message": r.body_text() }))).into_response()
}

/// The protocol a path belongs to, for the request counter; None for `/v1/ping` and
/// unknown paths (their label set stays bounded).
fn protocol_of(path: &str) -> Option<&'static str> {
    match path {
        "/run_code" => Some("sandboxfusion"),
        "/common_evaluate_batch" => Some("scalebox"),
        p if p.starts_with("/api/v2/") => Some("piston"),
        p if e2b::is_e2b_path(p) => Some("e2b"),
        _ => None,
    }
}

/// Outermost: counts each API request by protocol and status, and turns Piston's raw
/// `Authorization: <key>` into a bearer token before the token is checked.
async fn by_protocol(State(judge): State<Judge>, mut req: axum::extract::Request, next: Next) -> Response {
    let protocol = protocol_of(req.uri().path());
    match protocol {
        Some("piston") => piston::raw_key_as_bearer(req.headers_mut()),
        Some("e2b") => e2b::api_key_as_bearer(req.headers_mut()),
        _ => {}
    }
    let resp = next.run(req).await;
    if let Some(p) = protocol {
        judge.engine().metrics().http_request(p, resp.status().as_u16());
    }
    resp
}

/// How the HTTP server treats its clients.
#[derive(Debug, Clone)]
pub struct HttpOptions {
    /// Largest request body, bytes (413 past it).
    pub max_body_bytes: usize,
    /// A request's headers must arrive within this (also an idle keep-alive connection's
    /// next request); otherwise the connection is closed.
    pub header_timeout: Duration,
    /// A request's whole body must arrive within this; otherwise 408 and the connection closes.
    pub body_timeout: Duration,
    /// Connections served at once; more wait in the kernel's accept queue.
    pub max_connections: usize,
    /// The tenants whose bearer tokens the API routes require (not `/v1/ping`); None or an
    /// open table: no auth, every caller is `anonymous`.
    pub tenants: Option<Arc<Tenants>>,
    /// The executor's byte budget, which request bodies are charged to (None: uncharged).
    pub budget: Option<ByteBudget>,
    /// The executor's sessions, which E2B's API serves as sandboxes (None: E2B calls get
    /// 501).
    pub sessions: Option<Arc<crate::session::SessionManager>>,
}

impl HttpOptions {
    /// Defaults with `max_body_bytes`, no auth.
    pub fn new(max_body_bytes: usize) -> Self {
        HttpOptions {
            max_body_bytes,
            header_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(60),
            max_connections: 1024,
            tenants: None,
            budget: None,
            sessions: None,
        }
    }
}

/// An error the server's own layers answer (auth, body limits and timeouts), for every
/// protocol at once: SandboxFusion's clients read `detail`; E2B's SDK requires `code` and
/// `message` (without them it fails with a KeyError rather than its own exception).
fn detail(code: StatusCode, msg: &str) -> Response {
    (
        code,
        Json(serde_json::json!({ "detail": msg, "code": code.as_u16(), "message": msg })),
    )
        .into_response()
}

/// Reads the whole body within the timeout before any handler sees it: a client that
/// sends its body slowly or never holds a connection for at most that long. Used by
/// every HTTP server of ours (the API here, `sandpool mcp`), with `from_fn_with_state`.
///
/// With a byte budget, the body is charged as it arrives and the charge is held until the
/// response is made; handlers find the request's [`Call`] (caller, charge) in its
/// extensions.
pub async fn read_body_in_time(
    State(opts): State<Arc<HttpOptions>>,
    req: axum::extract::Request,
    next: Next,
) -> Response {
    let (mut parts, body) = req.into_parts();
    let charge = opts.budget.as_ref().map(|b| b.charge());
    let read = read_charged(body, opts.max_body_bytes, charge.as_ref());
    let mut resp = match tokio::time::timeout(opts.body_timeout, read).await {
        Ok(Ok(bytes)) => {
            let caller = parts.headers.get(http::header::AUTHORIZATION).map(|v| v.as_bytes());
            // Put there by `require_token`; anonymous where the server has no auth.
            let tenant = parts
                .extensions
                .get::<Arc<Tenant>>()
                .cloned()
                .unwrap_or_else(Tenant::anonymous);
            let priority = match priority_header(&parts.headers) {
                Ok(p) => p,
                Err(r) => return r,
            };
            parts.extensions.insert(Call {
                deadline: None,
                caller: Caller::of(&tenant, caller),
                charge: charge.clone(),
                tenant,
                priority,
            });
            let resp = next
                .run(axum::extract::Request::from_parts(parts, Body::from(bytes)))
                .await;
            drop(charge);
            return resp;
        }
        Ok(Err(BodyError::TooLarge)) => {
            let msg = format!("body larger than {} bytes (--max-request-bytes)", opts.max_body_bytes);
            detail(StatusCode::PAYLOAD_TOO_LARGE, &msg)
        }
        Ok(Err(BodyError::Budget(e))) => {
            let mut r = detail(StatusCode::SERVICE_UNAVAILABLE, &e.to_string());
            r.headers_mut()
                .insert(http::header::RETRY_AFTER, http::HeaderValue::from_static("1"));
            r
        }
        Ok(Err(BodyError::Read(e))) => detail(StatusCode::BAD_REQUEST, &format!("reading the body: {e}")),
        Err(_) => detail(
            StatusCode::REQUEST_TIMEOUT,
            &format!(
                "the body did not arrive within {} ms (--http-body-timeout-ms)",
                opts.body_timeout.as_millis()
            ),
        ),
    };
    // What is left of the body is never read: this connection is done.
    resp.headers_mut()
        .insert(http::header::CONNECTION, http::HeaderValue::from_static("close"));
    resp
}

/// Why a body was not read whole.
enum BodyError {
    TooLarge,
    Budget(crate::budget::Exhausted),
    Read(axum::Error),
}

/// Reads `body` whole, at most `limit` bytes, charged to `charge`: all at once when its
/// length is declared (so a request has room for all of itself or none, refused before
/// any of it is read), each chunk as it arrives otherwise.
async fn read_charged(mut body: Body, limit: usize, charge: Option<&Charge>) -> Result<bytes::Bytes, BodyError> {
    use http_body_util::BodyExt;
    let declared = http_body::Body::size_hint(&body).exact();
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(BodyError::TooLarge);
    }
    let mut ahead = declared.unwrap_or(0);
    if let Some(c) = charge {
        c.take(ahead).map_err(BodyError::Budget)?;
    }
    // Sized once when declared: growing by doubling would copy the body and briefly hold
    // up to twice what was charged.
    let mut buf = bytes::BytesMut::with_capacity(usize::try_from(ahead).unwrap_or(0));
    while let Some(frame) = body.frame().await {
        let Ok(data) = frame.map_err(BodyError::Read)?.into_data() else {
            continue; // trailers
        };
        if buf.len() + data.len() > limit {
            return Err(BodyError::TooLarge);
        }
        // Within what was declared, already charged; past it (no length given), charged now.
        let n = data.len() as u64;
        let uncharged = n.saturating_sub(ahead);
        ahead = ahead.saturating_sub(n);
        if let Some(c) = charge {
            c.take(uncharged).map_err(BodyError::Budget)?;
        }
        buf.extend_from_slice(&data);
    }
    Ok(buf.freeze())
}

/// The header SandboxFusion-style callers set a request's priority with (docs/tenants.md).
pub const PRIORITY_HEADER: &str = "x-sandpool-priority";

/// The request's `X-Sandpool-Priority`, if any; an unknown value is a 400 naming the header.
#[allow(clippy::result_large_err)]
fn priority_header(headers: &http::HeaderMap) -> Result<Option<Priority>, Response> {
    let Some(v) = headers.get(PRIORITY_HEADER) else {
        return Ok(None);
    };
    match v.to_str().ok().and_then(Priority::parse) {
        Some(p) => Ok(Some(p)),
        None => Err(detail(
            StatusCode::BAD_REQUEST,
            &format!(
                "{PRIORITY_HEADER}: {:?} is not a priority (interactive, normal or batch)",
                String::from_utf8_lossy(v.as_bytes())
            ),
        )),
    }
}

/// Refuses API calls without a tenant's bearer token, before their body is read; finds
/// the caller's tenant for the handlers.
async fn require_token(State(opts): State<Arc<HttpOptions>>, mut req: axum::extract::Request, next: Next) -> Response {
    if let Some(t) = &opts.tenants {
        let h = req.headers().get(http::header::AUTHORIZATION).map(|v| v.as_bytes());
        match t.authenticate(h) {
            Ok(tenant) => {
                req.extensions_mut().insert(tenant);
            }
            Err(e) => {
                let mut r = detail(StatusCode::UNAUTHORIZED, &e.to_string());
                r.headers_mut()
                    .insert(http::header::WWW_AUTHENTICATE, http::HeaderValue::from_static("Bearer"));
                return r;
            }
        }
    }
    next.run(req).await
}

/// The HTTP routes, judging on `judge`.
pub fn router(judge: Judge, opts: Arc<HttpOptions>) -> Router {
    let e2b_state = e2b::E2b::new(judge.engine().clone(), opts.sessions.clone(), opts.tenants.clone());
    // E2B's data plane: each call proves itself with its sandbox's access token, not the
    // executor's token (the SDK sends none there). Layers run outside in: the sandbox and
    // its token are checked before any of the body is read or charged, so a caller without
    // them holds nothing of the byte budget. `/health` reads no body at all.
    let data = e2b::data_routes(e2b_state.clone())
        .layer(middleware::from_fn_with_state(opts.clone(), read_body_in_time))
        .merge(e2b::health_route(e2b_state.clone()))
        .layer(middleware::from_fn_with_state(e2b_state.clone(), e2b::sandbox_first));
    // `/contexts` takes no access token (the SDK sends none there): its body is read
    // within the deadline but never charged, and at most a few KiB of it.
    let small = Arc::new(HttpOptions {
        max_body_bytes: e2b::CONTEXT_BODY_BYTES,
        budget: None,
        ..(*opts).clone()
    });
    let contexts =
        e2b::context_routes(e2b_state.clone()).layer(middleware::from_fn_with_state(small, read_body_in_time));
    let api = Router::new()
        .route(
            "/run_code",
            post(
                |State(j): State<Judge>,
                 call: Option<Extension<Call>>,
                 req: Result<Json<run_code::RunCodeRequest>, JsonRejection>| async move {
                    let Json(req) = match req {
                        Ok(r) => r,
                        Err(e) => return body_error(e),
                    };
                    match run_code::run_code(j.engine(), req, call.map(|c| c.0).unwrap_or_default()).await {
                        Ok(r) => Json(r).into_response(),
                        Err(e) => error_response(e),
                    }
                },
            ),
        )
        .route(
            "/common_evaluate_batch",
            post(
                |State(j): State<Judge>,
                 call: Option<Extension<Call>>,
                 body: Result<Json<scalebox::EvaluateBody>, JsonRejection>| async move {
                    let Json(body) = match body {
                        Ok(b) => b,
                        Err(e) => return body_error(e),
                    };
                    match scalebox::evaluate(&j, body, call.map(|c| c.0).unwrap_or_default()).await {
                        Ok(r) => Json(r).into_response(),
                        Err(e) => error_response(e),
                    }
                },
            ),
        )
        .route("/api/v2/runtimes", get(piston_runtimes))
        .route("/api/v2/runtimes/", get(piston_runtimes))
        .route("/api/v2/execute", post(piston_execute))
        .route("/api/v2/execute/", post(piston_execute))
        .merge(e2b::control_routes(e2b_state.clone()))
        // Layers run outside in: the token is checked before the body is read.
        .layer(middleware::from_fn_with_state(opts.clone(), read_body_in_time))
        .layer(middleware::from_fn_with_state(opts.clone(), require_token));
    // Every answer names the executor that gave it: a gateway follows a session that a
    // drain moved to another executor than its id names (docs/gateway.md).
    let served_by = http::HeaderValue::from_str(judge.engine().name()).ok();
    Router::new()
        .route("/v1/ping", get(ping))
        .merge(api)
        .merge(data)
        .merge(contexts)
        .layer(middleware::map_response(move |mut r: Response| {
            let v = served_by.clone();
            async move {
                if let Some(v) = v {
                    r.headers_mut().insert(crate::session::EXECUTOR_HEADER, v);
                }
                r
            }
        }))
        .layer(DefaultBodyLimit::max(opts.max_body_bytes))
        .layer(middleware::from_fn_with_state(judge.clone(), by_protocol))
        .with_state(judge)
}

/// `GET /v1/ping`: `"pong"`, or 503 naming why while the watchdog finds a run, a run slot or
/// blocking-pool work stuck (gRPC liveness says NOT_SERVING then too).
async fn ping(State(j): State<Judge>) -> Response {
    match j.engine().watchdog().is_stuck() {
        false => Json("pong").into_response(),
        true => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(serde_json::json!({
                "status": "not serving",
                "why": j.engine().watchdog().unhealthy().unwrap_or_else(|| "stuck work just ended".into()),
            })),
        )
            .into_response(),
    }
}

async fn piston_runtimes(State(j): State<Judge>) -> Response {
    Json(piston::runtimes(j.engine())).into_response()
}

async fn piston_execute(State(j): State<Judge>, call: Option<Extension<Call>>, body: bytes::Bytes) -> Response {
    // Any content type: npm's piston-client posts its JSON as text/plain.
    let Json(body) = match Json::<piston::ExecuteBody>::from_bytes(&body) {
        Ok(b) => b,
        Err(e) => return piston_body_error(e),
    };
    match piston::execute(j.engine(), body, call.map(|c| c.0).unwrap_or_default()).await {
        Ok(r) => Json(r).into_response(),
        Err(e) => piston_error(e),
    }
}

/// `//execute` as `/execute`: E2B's SDKs join a base URL that ends in `/` with a path that
/// begins with one.
fn collapse_leading_slashes(mut req: axum::extract::Request) -> axum::extract::Request {
    let path = req.uri().path();
    if path.starts_with("//") {
        let pq = req.uri().path_and_query().map_or("/", |p| p.as_str());
        let fixed = format!("/{}", pq.trim_start_matches('/'));
        if let Ok(u) = fixed.parse() {
            *req.uri_mut() = u;
        }
    }
    req
}

/// Serves the HTTP API on `listener` until `shutdown` resolves, then lets the
/// requests in progress finish.
pub async fn serve_on(
    judge: Judge,
    listener: tokio::net::TcpListener,
    opts: HttpOptions,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    if let Ok(addr) = listener.local_addr() {
        tracing::info!(%addr, "serving SandboxFusion-compatible HTTP");
    }
    let mut opts = opts;
    opts.budget.get_or_insert_with(|| judge.engine().budget().clone());
    let opts = Arc::new(opts);
    // A base URL given with a trailing slash makes clients ask for `//execute`: the same path.
    let app = Router::new().fallback_service(
        tower::ServiceBuilder::new()
            .map_request(collapse_leading_slashes)
            .service(router(judge, opts.clone())),
    );
    let graceful = accept_loop(listener, app, opts.max_connections, opts.header_timeout, shutdown).await;
    graceful.shutdown().await;
    Ok(())
}

/// Serves `app` (HTTP/1.1) on `listener` until `shutdown` resolves; returns the
/// handle that waits for the connections still open. Also used by `sandpool mcp`.
///
/// Its own accept loop rather than `axum::serve`, for what that lacks: a cap on
/// connections (so slow clients cannot take every descriptor the gRPC port
/// needs too; past it they wait in the kernel's queue and hold nothing of
/// ours) and a deadline for each request's headers.
pub async fn accept_loop(
    listener: tokio::net::TcpListener,
    app: Router,
    max_connections: usize,
    header_timeout: Duration,
    shutdown: impl std::future::Future<Output = ()>,
) -> hyper_util::server::graceful::GracefulShutdown {
    let permits = Arc::new(tokio::sync::Semaphore::new(max_connections.max(1)));
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    // HTTP/1.1 only: SandboxFusion's and ScaleBox's clients speak nothing else.
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(header_timeout);
    tokio::pin!(shutdown);
    loop {
        let permit = tokio::select! {
            p = permits.clone().acquire_owned() => match p { Ok(p) => p, Err(_) => break },
            _ = &mut shutdown => break,
        };
        let tcp = tokio::select! {
            r = listener.accept() => match r {
                Ok((tcp, _)) => tcp,
                Err(e) => {
                    // Out of descriptors, or the like: pause rather than spin.
                    tracing::warn!(error = %e, "HTTP accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            _ = &mut shutdown => break,
        };
        // As on the gRPC port: small responses must not wait for the client's delayed ACK.
        let _ = tcp.set_nodelay(true);
        let svc = hyper_util::service::TowerToHyperService::new(app.clone());
        let conn = graceful.watch(builder.serve_connection(hyper_util::rt::TokioIo::new(tcp), svc));
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, "HTTP connection ended");
            }
            drop(permit);
        });
    }
    drop(listener);
    graceful
}
