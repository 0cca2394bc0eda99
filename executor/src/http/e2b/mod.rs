//! E2B's API on the executor's HTTP port, so that the unmodified E2B SDKs (`e2b`,
//! `e2b-code-interpreter`, major version 2) work with `E2B_API_URL` and `E2B_SANDBOX_URL`
//! both set to this port (docs/compatibility.md).
//!
//! An E2B sandbox is a Sandpool session ([`crate::session`]): its limits, timeouts, caps and
//! isolation are the session's. Three APIs share the port; their paths do not collide:
//! - [`control`]: the control plane (`/sandboxes`, `/v2/sandboxes`), authenticated by the
//!   caller's token in `X-API-KEY`;
//! - [`interpreter`]: the code interpreter (`/execute`, `/contexts`);
//! - [`envd`]: the sandbox daemon (`/health`, `/files`, Connect RPC `/process.Process/*` and
//!   `/filesystem.Filesystem/*`, framed by [`connect`]).
//!
//! The data plane (the last two) names its sandbox in `E2b-Sandbox-Id` and proves it may use
//! it with the `X-Access-Token` create returned: knowing an id is not enough.

pub mod connect;
pub mod control;
pub mod envd;
pub mod interpreter;
pub mod snapshots;

use crate::engine::Engine;
use crate::error::ExecError;
use crate::session::{SessionError, SessionManager};
use crate::tenants::{Tenant, Tenants};
use axum::Json;
use axum::Router;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get, post};
use std::collections::HashMap;
use std::sync::Arc;

/// What E2B's handlers work with.
#[derive(Clone)]
pub struct E2b {
    pub engine: Arc<Engine>,
    /// None where the server has no sessions (then every E2B call says so).
    pub sessions: Option<Arc<SessionManager>>,
    /// Streams being fed at once (commands' output, cells' output): each polls files, so
    /// their number is capped, not just the connections', and the cap is divided by tenant
    /// and by sandbox ([`Streams`]).
    pub streams: Arc<Streams>,
}

/// The most output streams fed at once ([`E2b::streams`]).
pub const MAX_STREAMS: usize = 256;
/// The most output streams one sandbox feeds at once: one sandbox never holds them all.
pub const MAX_STREAMS_PER_SANDBOX: usize = MAX_STREAMS / 4;

/// The executor's output-stream permits, divided like run slots (docs/tenants.md, "Shared
/// caps"): a sandbox holds at most [`MAX_STREAMS_PER_SANDBOX`], a tenant at most its share
/// of [`MAX_STREAMS`] by weight among the tenants of the table (all of them without auth),
/// so one tenant's queued cells never refuse another tenant's stream.
#[derive(Debug)]
pub struct Streams {
    tenants: Option<Arc<Tenants>>,
    held: std::sync::Mutex<Held>,
}

#[derive(Debug, Default)]
struct Held {
    total: usize,
    by_tenant: HashMap<Arc<str>, usize>,
    by_sandbox: HashMap<String, usize>,
}

/// One stream's place; given back on drop.
#[derive(Debug)]
pub struct StreamPermit {
    owner: Arc<Streams>,
    tenant: Arc<str>,
    sandbox: String,
}

impl Drop for StreamPermit {
    fn drop(&mut self) {
        let mut h = self.owner.lock();
        h.total = h.total.saturating_sub(1);
        down(&mut h.by_tenant, &self.tenant);
        down(&mut h.by_sandbox, self.sandbox.as_str());
    }
}

/// Counts one less for `key`, forgetting it at zero (the maps never grow past what is held).
fn down<K: std::borrow::Borrow<str> + std::hash::Hash + Eq>(map: &mut HashMap<K, usize>, key: &str) {
    if let Some(n) = map.get_mut(key) {
        *n = n.saturating_sub(1);
        if *n == 0 {
            map.remove(key);
        }
    }
}

impl Streams {
    pub fn new(tenants: Option<Arc<Tenants>>) -> Arc<Self> {
        Arc::new(Streams {
            tenants,
            held: std::sync::Mutex::new(Held::default()),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Held> {
        // Counts only, consistent between statements: a poisoned lock is usable.
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `tenant`'s share of [`MAX_STREAMS`]: by its weight among the table's tenants (at
    /// least one stream); all of them where there is one tenant (no auth, a single token).
    pub fn share(&self, tenant: &Tenant) -> usize {
        let total: u64 = match &self.tenants {
            Some(t) if !t.is_open() => t.table().tenants().map(|t| u64::from(t.weight)).sum(),
            _ => 0,
        };
        let w = u64::from(tenant.weight.max(1));
        if total <= w {
            return MAX_STREAMS;
        }
        usize::try_from(MAX_STREAMS as u64 * w / total).map_or(MAX_STREAMS, |s| s.clamp(1, MAX_STREAMS))
    }

    /// A stream's place for `sandbox`'s `tenant`, or which cap refuses it.
    pub fn permit(self: &Arc<Self>, tenant: &Tenant, sandbox: &str) -> Result<StreamPermit, connect::Error> {
        let share = self.share(tenant);
        let mut h = self.lock();
        let refused = |m: String| Err(connect::Error::new(connect::Code::ResourceExhausted, m));
        if h.by_sandbox.get(sandbox).copied().unwrap_or(0) >= MAX_STREAMS_PER_SANDBOX {
            return refused(format!(
                "sandbox {sandbox} already streams {MAX_STREAMS_PER_SANDBOX} commands' or cells' output (the per-sandbox cap); retry when one ends"
            ));
        }
        if h.by_tenant.get(&*tenant.name).copied().unwrap_or(0) >= share {
            return refused(format!(
                "tenant {:?} already streams {share} commands' or cells' output (its share, by weight, of this executor's {MAX_STREAMS} streams); retry when one ends",
                tenant.name
            ));
        }
        if h.total >= MAX_STREAMS {
            return refused(format!(
                "this executor already streams {MAX_STREAMS} commands' or cells' output (the executor's cap); retry when one ends"
            ));
        }
        h.total += 1;
        *h.by_tenant.entry(tenant.name.clone()).or_default() += 1;
        *h.by_sandbox.entry(sandbox.to_owned()).or_default() += 1;
        Ok(StreamPermit {
            owner: self.clone(),
            tenant: tenant.name.clone(),
            sandbox: sandbox.to_owned(),
        })
    }
}

impl E2b {
    pub fn new(engine: Arc<Engine>, sessions: Option<Arc<SessionManager>>, tenants: Option<Arc<Tenants>>) -> Self {
        E2b {
            engine,
            sessions,
            streams: Streams::new(tenants),
        }
    }

    /// A stream's place for `sbx`, or which cap refuses it.
    pub fn stream_permit(&self, sbx: &Sandbox) -> Result<StreamPermit, connect::Error> {
        self.streams.permit(&sbx.tenant, &sbx.id)
    }
}

/// The control plane's routes (behind the executor's token check).
pub fn control_routes<S: Clone + Send + Sync + 'static>(state: E2b) -> Router<S> {
    Router::new()
        .route("/sandboxes", post(control::create).get(control::list))
        .route("/v2/sandboxes", post(control::create).get(control::list))
        .route("/sandboxes/{id}", get(control::get).delete(control::kill))
        .route("/sandboxes/{id}/timeout", post(control::set_timeout))
        .route("/sandboxes/{id}/connect", post(control::connect))
        .route("/v2/sandboxes/{id}/connect", post(control::connect))
        .route("/sandboxes/{id}/pause", post(control::pause))
        .route("/sandboxes/{id}/resume", post(control::resume))
        .route("/sandboxes/{id}/snapshots", post(snapshots::create))
        .route("/sandboxes/{id}/fork", post(snapshots::fork))
        .route("/templates/{id}", axum::routing::delete(snapshots::delete))
        .route("/sandboxes/{id}/{what}", any(control::unsupported))
        .route("/v2/sandboxes/{id}/{what}", any(control::unsupported))
        .route("/snapshots", get(snapshots::list).fallback(control::unsupported))
        .route("/snapshots/{id}", any(control::unsupported))
        .with_state(state)
}

/// The data plane's routes (daemon and code interpreter), authenticated per sandbox by its
/// access token rather than by the executor's token.
pub fn data_routes<S: Clone + Send + Sync + 'static>(state: E2b) -> Router<S> {
    Router::new()
        .route("/files", get(envd::download).post(envd::upload))
        .route("/filesystem.Filesystem/{method}", post(envd::filesystem))
        .route("/process.Process/{method}", post(envd::process))
        .route("/execute", post(interpreter::execute))
        .with_state(state)
}

/// `/health`: like the data plane's other routes, behind [`sandbox_first`], but it reads
/// no body (E2B's takes none), so it is never charged.
pub fn health_route<S: Clone + Send + Sync + 'static>(state: E2b) -> Router<S> {
    Router::new().route("/health", get(envd::health)).with_state(state)
}

/// The most bytes of a `/contexts` body: `{"language": ...}`, uncharged, since the SDK
/// sends no access token there.
pub const CONTEXT_BODY_BYTES: usize = 4 << 10;

/// The code interpreter's contexts, which the SDK calls without an access token.
pub fn context_routes<S: Clone + Send + Sync + 'static>(state: E2b) -> Router<S> {
    Router::new()
        .route(
            "/contexts",
            get(interpreter::list_contexts).post(interpreter::create_context),
        )
        .route("/contexts/{id}", any(interpreter::context_refused))
        .route("/contexts/{id}/restart", any(interpreter::context_refused))
        .with_state(state)
}

/// The sandbox daemon version reported at create: the SDK gates features on it. 0.5.7 is
/// the surface served here: commands with a stdin flag (0.3.0), the default user (0.4.0),
/// octet-stream uploads (0.5.7); `CloseStdin` (0.5.2) is refused like all stdin, which the
/// SDK only sends when its caller asks. Not 0.6.x: no file metadata, no watch options.
pub const ENVD_VERSION: &str = "0.5.7";

/// The templates served, and the session language each is.
/// Both are Python sessions: E2B's commands run as background processes of the sandbox's
/// interpreter, which a bash session (a fresh shell each call) cannot keep.
pub const TEMPLATES: [(&str, &str); 2] = [("code-interpreter-v1", "python"), ("base", "python")];

/// Where the SDK's paths point (the E2B user's home); the session's `/work`.
pub const HOME: &str = "/home/user";

/// Maps a path the SDK sends (absolute under [`HOME`] or `/work`, `~`, or relative to the
/// home) to one relative to the session's `/work`; None for a path outside it.
pub fn work_path(p: &str) -> Option<String> {
    let rest = if p == "~" || p == HOME || p == crate::sandbox::WORK_DIR {
        ""
    } else if let Some(r) = p.strip_prefix("~/") {
        r
    } else if let Some(r) = p.strip_prefix(HOME).and_then(|r| r.strip_prefix('/')) {
        r
    } else if let Some(r) = p
        .strip_prefix(crate::sandbox::WORK_DIR)
        .and_then(|r| r.strip_prefix('/'))
    {
        r
    } else if p.starts_with('/') {
        return None;
    } else {
        p
    };
    let rest = rest.trim_end_matches('/');
    Some(if rest.is_empty() { ".".into() } else { rest.into() })
}

/// The sandbox-side path (`/home/user/...`) of a `/work`-relative one, as the SDK shows it.
pub fn sdk_path(rel: &str) -> String {
    let rel = rel.trim_start_matches("./");
    if rel == "." || rel.is_empty() {
        HOME.into()
    } else {
        format!("{HOME}/{rel}")
    }
}

/// A list's page size from its query's `limit`: 100 when left out, 1 to 1000, else 400
/// naming it (the sandbox list and the snapshot list, as E2B bounds them).
#[allow(clippy::result_large_err)] // an early answer, built once per request
pub fn page_limit(q: &std::collections::HashMap<String, String>) -> Result<usize, Response> {
    match q.get("limit").map(|l| l.parse::<usize>()) {
        None => Ok(100),
        Some(Ok(n)) if (1..=1000).contains(&n) => Ok(n),
        Some(_) => Err(api_error(StatusCode::BAD_REQUEST, "limit: must be 1 to 1000")),
    }
}

/// A control-plane body the SDK may leave out (pause, snapshot, fork): its default when
/// empty, else parsed, a 400 naming what is wrong.
#[allow(clippy::result_large_err)] // an early answer, built once per request
pub fn optional_body<T: serde::de::DeserializeOwned + Default>(body: &[u8]) -> Result<T, Response> {
    match body.is_empty() {
        true => Ok(T::default()),
        false => json_body(body).map_err(|m| api_error(StatusCode::BAD_REQUEST, m)),
    }
}

/// Parses a JSON body; an error names the field at fault (`request body: metadata.k: ...`).
pub fn json_body<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, String> {
    let de = &mut serde_json::Deserializer::from_slice(body);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        if path == "." {
            format!("request body: {}", e.inner())
        } else {
            format!("request body: {path}: {}", e.inner())
        }
    })
}

/// An E2B control-plane error: `{"code", "message"}`, which the SDK turns into its own
/// exceptions (401 authentication, 404 not found, 400 invalid argument, 429 rate limit).
pub fn api_error(code: StatusCode, message: impl Into<String>) -> Response {
    let message = message.into();
    (
        code,
        Json(serde_json::json!({ "code": code.as_u16(), "message": message })),
    )
        .into_response()
}

/// A session error on the control plane.
pub fn api_session_error(e: SessionError) -> Response {
    match e {
        SessionError::NotFound => api_error(StatusCode::NOT_FOUND, "sandbox not found (unknown, killed or expired)"),
        SessionError::Exhausted(m) => api_error(StatusCode::TOO_MANY_REQUESTS, m),
        SessionError::Reset(_) | SessionError::Paused => api_error(StatusCode::CONFLICT, e.to_string()),
        SessionError::Retry(m) => api_error(StatusCode::SERVICE_UNAVAILABLE, m),
        SessionError::Exec(e) => api_exec_error(e),
    }
}

/// An engine error on the control plane. A draining or full executor is a 503 (the SDK
/// retries it, a pool's gateway tries another executor); the executor's own failure a 500.
pub fn api_exec_error(e: ExecError) -> Response {
    let code = super::error_response_code(&e);
    api_error(code, e.to_string())
}

/// What data-plane calls are made as: the session's id and its owner, once the access
/// token matched.
pub struct Sandbox {
    pub id: String,
    pub owner: Vec<u8>,
    /// Its creator's tenant: what its streams count against.
    pub tenant: Arc<Tenant>,
}

/// Why a data-plane call found no sandbox to run in.
pub enum Refused {
    /// No `E2b-Sandbox-Id`.
    NoId,
    /// Unknown, killed or expired, or a wrong access token (all alike).
    NotFound(String),
    /// The executor serves no sessions (no session manager on this HTTP server).
    NoSessions,
    /// Another executor is resuming it from the shared store at this moment (its claim won):
    /// unrun, so a retry (the gateway's) finds it live there.
    Retry(String),
}

impl Refused {
    /// As the SDK's data plane expects: a gone sandbox is a 502 whose message says it
    /// "was not found", which the SDK reports as not running (never retried).
    pub fn response(self) -> Response {
        match self {
            Refused::NoId => plain(
                StatusCode::BAD_REQUEST,
                "E2b-Sandbox-Id: required (the sandbox this call is for)",
            ),
            Refused::NotFound(id) => plain(
                StatusCode::BAD_GATEWAY,
                &format!(
                    "The sandbox {id} was not found: it was killed, timed out, or the access token (X-Access-Token) is wrong"
                ),
            ),
            Refused::NoSessions => plain(
                StatusCode::NOT_IMPLEMENTED,
                "this executor serves no sessions, so no E2B sandboxes",
            ),
            Refused::Retry(m) => plain(StatusCode::SERVICE_UNAVAILABLE, &m),
        }
    }
}

/// A plain-text error with a JSON `message` too (the SDK shows either).
pub fn plain(code: StatusCode, message: &str) -> Response {
    (
        code,
        Json(serde_json::json!({ "code": code.as_u16(), "message": message })),
    )
        .into_response()
}

/// The sandbox a data-plane request is for, authenticated by its access token.
pub fn sandbox(sessions: Option<&Arc<SessionManager>>, headers: &HeaderMap) -> Result<Sandbox, Refused> {
    let sessions = sessions.ok_or(Refused::NoSessions)?;
    let id = headers
        .get("e2b-sandbox-id")
        .and_then(|v| v.to_str().ok())
        .filter(|v| !v.is_empty())
        .ok_or(Refused::NoId)?
        .to_owned();
    let token = headers.get("x-access-token").map(|v| v.as_bytes()).unwrap_or_default();
    match sessions.by_access(&id, token) {
        Ok((owner, tenant)) => Ok(Sandbox { id, owner, tenant }),
        Err(_) => Err(Refused::NotFound(id)),
    }
}

/// A data-plane middleware: refuses a call whose `E2b-Sandbox-Id` and `X-Access-Token` do
/// not name a live sandbox before any of its body is read (so before it is charged to the
/// byte budget), and closes the connection, whose unread body is never wanted. Handlers
/// find the [`Sandbox`] in the request's extensions.
pub async fn sandbox_first(
    axum::extract::State(e): axum::extract::State<E2b>,
    mut req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let found = match sandbox(e.sessions.as_ref(), req.headers()) {
        // A sandbox paused at its timeout with autoResume is resumed by its next call.
        Err(Refused::NotFound(id)) => match e.sessions.as_ref() {
            Some(sessions) => {
                let token = req
                    .headers()
                    .get("x-access-token")
                    .map(|v| v.as_bytes())
                    .unwrap_or_default();
                match sessions.resume_by_access(&id, token).await {
                    Ok((owner, tenant)) => Ok(Sandbox { id, owner, tenant }),
                    Err(SessionError::Retry(m)) => Err(Refused::Retry(m)),
                    Err(_) => Err(Refused::NotFound(id)),
                }
            }
            None => Err(Refused::NotFound(id)),
        },
        other => other,
    };
    match found {
        Ok(s) => {
            req.extensions_mut().insert(Arc::new(s));
            next.run(req).await
        }
        Err(r) => {
            let mut resp = r.response();
            resp.headers_mut()
                .insert(http::header::CONNECTION, http::HeaderValue::from_static("close"));
            resp
        }
    }
}

/// Turns E2B's `X-API-KEY` into the bearer token the executor checks (when no
/// `Authorization` is sent), so that E2B callers authenticate like every other caller.
pub fn api_key_as_bearer(headers: &mut HeaderMap) {
    if headers.contains_key(http::header::AUTHORIZATION) {
        return;
    }
    let Some(key) = headers.get("x-api-key").and_then(|v| v.to_str().ok()) else {
        return;
    };
    if let Ok(v) = http::HeaderValue::from_str(&format!("Bearer {}", key.trim())) {
        headers.insert(http::header::AUTHORIZATION, v);
    }
}

/// Whether `path` is one of E2B's (control or data plane), for the request counter.
pub fn is_e2b_path(path: &str) -> bool {
    path == "/sandboxes"
        || path.starts_with("/sandboxes/")
        || path == "/v2/sandboxes"
        || path.starts_with("/v2/sandboxes/")
        || path == "/snapshots"
        || path.starts_with("/snapshots/")
        || path.starts_with("/templates/")
        || is_data_path(path)
}

/// Whether `path` is on E2B's data plane (daemon or code interpreter).
pub fn is_data_path(path: &str) -> bool {
    matches!(path, "/health" | "/files" | "/execute" | "/contexts")
        || path.starts_with("/contexts/")
        || path.starts_with("/process.Process/")
        || path.starts_with("/filesystem.Filesystem/")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sdk_paths_map_into_work_and_nothing_else_does() {
        assert_eq!(work_path("/home/user/a.py").as_deref(), Some("a.py"));
        assert_eq!(work_path("/home/user").as_deref(), Some("."));
        assert_eq!(work_path("/home/user/").as_deref(), Some("."));
        assert_eq!(work_path("~/d/x").as_deref(), Some("d/x"));
        assert_eq!(work_path("/work/d/x").as_deref(), Some("d/x"));
        assert_eq!(work_path("rel/x").as_deref(), Some("rel/x"));
        assert_eq!(work_path("/etc/passwd"), None);
        assert_eq!(
            work_path("/home/username/x"),
            None,
            "a prefix of the home is not the home"
        );
        assert_eq!(sdk_path("a/b"), "/home/user/a/b");
        assert_eq!(sdk_path("."), "/home/user");
    }

    #[test]
    fn stream_permits_are_capped_per_sandbox_per_tenant_share_and_in_all() {
        let tenant = |name: &str, weight: u32| Tenant {
            name: name.into(),
            weight,
            max_concurrency: None,
            max_queue: None,
            max_sessions: None,
            max_priority: crate::tenants::Priority::Interactive,
            authenticated: true,
            identity: 1,
        };
        // Without a table (one tenant): the whole cap, 64 per sandbox.
        let s = Streams::new(None);
        let t = tenant("t", 1);
        assert_eq!(s.share(&t), MAX_STREAMS);
        let mut held: Vec<_> = (0..MAX_STREAMS_PER_SANDBOX)
            .map(|_| s.permit(&t, "s1").unwrap())
            .collect();
        assert!(s.permit(&t, "s1").unwrap_err().message.contains("per-sandbox cap"));
        for i in 0..(MAX_STREAMS - MAX_STREAMS_PER_SANDBOX) {
            held.push(s.permit(&t, &format!("s{}", 2 + i % 3)).unwrap());
        }
        // One tenant's share is the whole cap: its refusal names it.
        assert!(s.permit(&t, "s9").unwrap_err().message.contains("its share"));
        assert!(
            s.permit(&tenant("u", 1), "s9")
                .unwrap_err()
                .message
                .contains("executor's cap")
        );
        held.pop();
        let p = s.permit(&t, "s9").unwrap();
        drop((held, p));
        assert_eq!(s.lock().total, 0);
        assert!(s.lock().by_sandbox.is_empty() && s.lock().by_tenant.is_empty());
    }

    #[test]
    fn the_api_key_becomes_a_bearer_token_unless_one_is_sent() {
        let mut h = HeaderMap::new();
        h.insert("x-api-key", "k1".parse().unwrap());
        api_key_as_bearer(&mut h);
        assert_eq!(h.get("authorization").unwrap(), "Bearer k1");
        let mut h = HeaderMap::new();
        h.insert("x-api-key", "k1".parse().unwrap());
        h.insert("authorization", "Bearer other".parse().unwrap());
        api_key_as_bearer(&mut h);
        assert_eq!(h.get("authorization").unwrap(), "Bearer other");
    }
}
