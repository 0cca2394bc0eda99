//! E2B's control plane: create, connect, list, get_info, set_timeout and kill a sandbox,
//! each a Sandpool session of the caller (its token, or its tenant's).
//!
//! Pause (files only) and resume on connect go through the session store (docs/sessions.md).
//! What E2B has and a session cannot be (a full pause, snapshots, fork, internet access,
//! custom templates, volumes) is refused with a 400 naming the limitation.

use super::{E2b, TEMPLATES, api_error, api_session_error};
use crate::call::Call;
use crate::session::{Extras, SessionInfo};
use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use sandpool_proto::v1 as pb;
use serde::Deserialize;
use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, SystemTime};

/// E2B's default sandbox timeout, seconds, when create names none.
const DEFAULT_TIMEOUT_S: u64 = 300;

/// The most bytes of metadata (keys and values) a sandbox keeps.
const MAX_METADATA_BYTES: usize = 64 << 10;

/// Who E2B says created the sandbox (a field the SDK requires).
const CLIENT_ID: &str = "sandpool";

/// A create request (`NewSandbox`/`NewSandboxV2`); fields Sandpool does not serve are taken
/// only to be refused when they ask for something.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NewSandbox {
    #[serde(rename = "templateID")]
    template_id: String,
    timeout: Option<u64>,
    #[serde(default, deserialize_with = "metadata_map")]
    metadata: Option<BTreeMap<String, String>>,
    #[serde(default, deserialize_with = "env_map")]
    env_vars: Option<BTreeMap<String, String>>,
    auto_pause: Option<bool>,
    auto_pause_memory: Option<bool>,
    auto_resume: Option<serde_json::Value>,
    #[serde(rename = "allow_internet_access")]
    allow_internet_access: Option<bool>,
    network: Option<serde_json::Value>,
    mcp: Option<serde_json::Value>,
    volume_mounts: Option<Vec<serde_json::Value>>,
}

/// The most bytes of environment variables (names and values) create takes.
const MAX_ENV_BYTES: usize = 1 << 20;

/// The largest create body: its metadata and envs, their JSON, and the rest.
const MAX_CREATE_BYTES: usize = 2 * (MAX_METADATA_BYTES + MAX_ENV_BYTES) + (64 << 10);

fn metadata_map<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<BTreeMap<String, String>>, D::Error> {
    bounded_map(d, MAX_METADATA_BYTES)
}

fn env_map<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<BTreeMap<String, String>>, D::Error> {
    bounded_map(d, MAX_ENV_BYTES)
}

/// A JSON object of strings (or null), decoded entry by entry and refused as soon as its
/// keys and values pass `limit` bytes: a large one never costs its decoded size (a 40 MiB
/// body of small entries once took ten times that as a map, issue 46).
fn bounded_map<'de, D: serde::Deserializer<'de>>(
    d: D,
    limit: usize,
) -> Result<Option<BTreeMap<String, String>>, D::Error> {
    use serde::de::{Error, MapAccess, Visitor};
    struct Bounded(usize);
    impl<'de> Visitor<'de> for Bounded {
        type Value = Option<BTreeMap<String, String>>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            write!(f, "an object of strings, at most {} bytes of keys and values", self.0)
        }
        fn visit_unit<E: Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_none<E: Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_some<D: serde::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            d.deserialize_map(self)
        }
        fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<Self::Value, A::Error> {
            let (mut out, mut bytes) = (BTreeMap::new(), 0usize);
            while let Some((k, v)) = m.next_entry::<String, String>()? {
                bytes += k.len() + v.len();
                if bytes > self.0 {
                    return Err(A::Error::custom(format!(
                        "more than {} bytes of keys and values; at most {}",
                        self.0, self.0
                    )));
                }
                out.insert(k, v);
            }
            Ok(Some(out))
        }
    }
    d.deserialize_option(Bounded(limit))
}

/// `{"timeout": seconds}` (set_timeout, connect).
#[derive(Debug, Default, Deserialize)]
pub struct TimeoutBody {
    timeout: Option<u64>,
}

fn rfc3339(t: SystemTime) -> String {
    let d = t.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs() as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Civil date from days since the epoch (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        d.subsec_millis()
    )
}

/// The body create, connect and fork answer (`Sandbox`).
pub(super) fn created(info: &SessionInfo) -> serde_json::Value {
    serde_json::json!({
        "templateID": info.template,
        "sandboxID": info.id,
        "clientID": CLIENT_ID,
        "envdVersion": super::ENVD_VERSION,
        "envdAccessToken": info.access_token,
        "domain": null,
    })
}

/// A sandbox as list and get_info show it (`ListedSandbox`, `SandboxDetail`).
fn detail(info: &SessionInfo) -> serde_json::Value {
    serde_json::json!({
        "templateID": info.template,
        "sandboxID": info.id,
        "clientID": CLIENT_ID,
        "startedAt": rfc3339(info.started_at),
        "endAt": rfc3339(info.end_at),
        "envdVersion": super::ENVD_VERSION,
        "envdAccessToken": info.access_token,
        "cpuCount": 1,
        "memoryMB": info.totals.memory >> 20,
        "diskSizeMB": info.totals.disk >> 20,
        "state": if info.paused { "paused" } else { "running" },
        "metadata": info.metadata,
        "domain": null,
    })
}

fn refused(what: &str) -> Response {
    api_error(
        StatusCode::BAD_REQUEST,
        format!(
            "{what} is not supported by Sandpool: an E2B sandbox here is a session on one executor (docs/compatibility.md)"
        ),
    )
}

#[allow(clippy::result_large_err)] // an early answer, built once per request
fn parse<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, Response> {
    super::json_body(body).map_err(|e| api_error(StatusCode::BAD_REQUEST, e))
}

/// The seconds a request asks for, as a duration; zero is an error naming the field.
#[allow(clippy::result_large_err)] // an early answer, built once per request
fn timeout(field: &str, s: Option<u64>) -> Result<Duration, Response> {
    match s.unwrap_or(DEFAULT_TIMEOUT_S) {
        0 => Err(api_error(
            StatusCode::BAD_REQUEST,
            format!("{field}: must be at least 1 second"),
        )),
        s => Ok(Duration::from_secs(s)),
    }
}

/// `POST /sandboxes`, `POST /v2/sandboxes`.
pub async fn create(
    State(e): State<E2b>,
    uri: axum::http::Uri,
    call: Option<axum::Extension<Call>>,
    body: bytes::Bytes,
) -> Response {
    let Some(sessions) = e.sessions.clone() else {
        return api_error(
            StatusCode::NOT_IMPLEMENTED,
            "this executor serves no sessions, so no E2B sandboxes",
        );
    };
    // A create is small: a larger body is refused before it is decoded, since decoding
    // costs several times a body's size (a 40 MiB one once raised the peak by 472 MiB).
    if body.len() > MAX_CREATE_BYTES {
        return api_error(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!(
                "request body: {} bytes; a create takes at most {MAX_CREATE_BYTES} (metadata at most {MAX_METADATA_BYTES}, envVars at most {MAX_ENV_BYTES})",
                body.len()
            ),
        );
    }
    let req: NewSandbox = match parse(&body) {
        Ok(r) => r,
        Err(r) => return r,
    };
    // A snapshot's id starts a sandbox from it (`Sandbox.create(snapshot_id)`), its language the snapshot's.
    let snapshot = req
        .template_id
        .starts_with(crate::session::SNAPSHOT_PREFIX)
        .then(|| req.template_id.clone());
    let found = match &snapshot {
        Some(_) => Some(&("", "")),
        None => TEMPLATES.iter().find(|(t, _)| *t == req.template_id),
    };
    let Some(&(template, language)) = found else {
        let known: Vec<&str> = TEMPLATES.iter().map(|(t, _)| *t).collect();
        return api_error(
            StatusCode::BAD_REQUEST,
            format!(
                "templateID: {:?} is not a template of Sandpool; it serves {known:?} (custom templates are not supported)",
                req.template_id
            ),
        );
    };
    // SDKs before 2.51 send `allow_internet_access: true` on every create, to `POST
    // /sandboxes`; the newer ones only when the caller asks, to `POST /v2/sandboxes`.
    if req.allow_internet_access == Some(true) && uri.path().starts_with("/v2/") {
        return refused("allow_internet_access (internet access: sandboxes have no network)");
    }
    let (pause_on_timeout, auto_resume) = match lifecycle(&req, sessions.has_store()) {
        Ok(l) => l,
        Err(r) => return r,
    };
    if req.volume_mounts.as_ref().is_some_and(|v| !v.is_empty()) {
        return refused("volumeMounts (volumes)");
    }
    if req.mcp.as_ref().is_some_and(|v| !v.is_null()) {
        return refused("mcp (an MCP gateway in the sandbox)");
    }
    if req
        .network
        .as_ref()
        .is_some_and(|v| !v.is_null() && v != &serde_json::json!({}))
    {
        return refused("network (network rules: sandboxes have no network)");
    }
    // Metadata is kept for the sandbox's life: bounded as it is decoded (`bounded_map`),
    // so sandboxes cannot hold the executor's memory.
    let after = match timeout("timeout", req.timeout) {
        Ok(t) => t,
        Err(r) => return r,
    };
    let engine = &e.engine;
    let policy = sessions.policy();
    let max = engine.policy().max;
    // The sandbox's end is E2B's timeout (movable); the session's own lifetime and idle
    // timeout are the executor's ceilings, so that they never end it first unexpectedly.
    let call_limits = crate::limits::Limits {
        wall: max.wall,
        cpu: max.cpu,
        ..engine.policy().run_defaults
    };
    let create = pb::CreateSessionRequest {
        language: language.into(),
        // An agent's sandbox makes many small calls (every file operation is one) and may
        // compute for long: the executor's ceilings, not a session's defaults.
        session_limits: Some(pb::SessionLimits {
            lifetime_ms: policy.max_lifetime.as_millis() as u64,
            idle_timeout_ms: policy.max_idle.min(policy.max_lifetime).as_millis() as u64,
            max_calls: policy.max_calls,
            cpu_time_ms: policy.max_cpu.as_millis() as u64,
            ..Default::default()
        }),
        call_limits: Some(crate::limits::to_proto(call_limits)),
        from_snapshot: snapshot.clone().unwrap_or_default(),
        ..Default::default()
    };
    let extras = Extras {
        access_token: true,
        metadata: req.metadata.unwrap_or_default(),
        template: snapshot.unwrap_or_else(|| template.into()),
        home: true,
        end_after: Some(after),
        auto_resume,
        earlier_tokens: Vec::new(),
        pause_on_timeout,
    };
    let call = call.map(|c| c.0).unwrap_or_default();
    let owner = call.caller.as_bytes().to_vec();
    let info = match sessions.create_with(create, call, extras).await {
        Ok((_, info)) => info,
        Err(e) => return api_session_error(e),
    };
    let envs = req.env_vars.unwrap_or_default();
    if !envs.is_empty()
        && let Err(r) = set_envs(&sessions, &info, &owner, &info.language, &envs).await
    {
        let _ = sessions
            .close(
                pb::CloseSessionRequest {
                    session_id: info.id.clone(),
                },
                &owner,
            )
            .await;
        return r;
    }
    (StatusCode::CREATED, Json(created(&info))).into_response()
}

/// The mode a sandbox is paused in at its timeout instead of killed (`autoPause`,
/// `autoPauseMemory`): the one place create chooses it. `autoPauseMemory: true` is a full
/// pause (the interpreter's names kept; a bash sandbox's files only); left out (E2B's
/// default is a full pause), files are kept and the interpreter restarts, as `pause()` does.
fn timeout_pause_mode(memory: Option<bool>) -> pb::PauseMode {
    match memory {
        Some(true) => pb::PauseMode::Full,
        Some(false) | None => pb::PauseMode::Filesystem,
    }
}

/// Create's lifecycle (`autoPause`, `autoPauseMemory`, `autoResume`) as E2B's API takes it:
/// the pause mode at the timeout (None: killed, as before) and whether the next call resumes
/// it. Combinations E2B refuses are refused here with the field named.
#[allow(clippy::result_large_err)] // an early answer, built once per request
fn lifecycle(req: &NewSandbox, has_store: bool) -> Result<(Option<pb::PauseMode>, bool), Response> {
    let bad = |m: &str| api_error(StatusCode::BAD_REQUEST, m.to_owned());
    let resume = match &req.auto_resume {
        None | Some(serde_json::Value::Null) => false,
        Some(serde_json::Value::Bool(b)) => *b,
        Some(v) => match v.get("enabled") {
            Some(serde_json::Value::Bool(b)) => *b,
            None | Some(serde_json::Value::Null) => false,
            Some(_) => return Err(bad("autoResume.enabled: must be true or false")),
        },
    };
    if req.auto_pause != Some(true) {
        if resume {
            return Err(bad(
                "autoResume: can only be enabled when autoPause is true (on_timeout \"pause\")",
            ));
        }
        return Ok((None, false));
    }
    if resume && req.auto_pause_memory == Some(false) {
        return Err(bad(
            "autoResume: cannot be enabled with autoPauseMemory false (on_timeout mode \"filesystem\"): a filesystem-only pause is resumed explicitly, with connect",
        ));
    }
    let mode = timeout_pause_mode(req.auto_pause_memory);
    if !has_store {
        return Err(no_store("autoPause"));
    }
    Ok((Some(mode), resume))
}

/// Sets the sandbox's environment variables (create's `envVars`): Python sessions keep
/// them in the interpreter's `os.environ` (commands inherit it), bash sessions as exported
/// variables (which carry across calls).
async fn set_envs(
    sessions: &crate::session::SessionManager,
    info: &SessionInfo,
    owner: &[u8],
    language: &str,
    envs: &BTreeMap<String, String>,
) -> Result<(), Response> {
    if let Some(k) = envs.keys().find(|k| !is_env_name(k)) {
        return Err(api_error(
            StatusCode::BAD_REQUEST,
            format!("envVars: {k:?} is not a variable name"),
        ));
    }
    let input = if language == "python" {
        let dict = serde_json::to_string(envs).unwrap_or_default();
        pb::run_in_session_request::Input::Code(format!("__import__('os').environ.update({dict})\n"))
    } else {
        pb::run_in_session_request::Input::Command(super::envd::exports(envs))
    };
    let req = pb::RunInSessionRequest {
        session_id: info.id.clone(),
        input: Some(input),
        ..Default::default()
    };
    match sessions.run(req, owner).await {
        Ok(r) if r.verdict == pb::Verdict::Ok as i32 => Ok(()),
        Ok(r) => Err(api_error(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("setting envVars failed: {}", r.message),
        )),
        Err(e) => Err(api_session_error(e)),
    }
}

/// An environment variable's name as shells take it.
pub fn is_env_name(k: &str) -> bool {
    let mut c = k.chars();
    c.next().is_some_and(|f| f == '_' || f.is_ascii_alphabetic()) && c.all(|x| x == '_' || x.is_ascii_alphanumeric())
}

/// A server without sessions has no sandboxes: every id is unknown.
fn no_such_sandbox() -> Response {
    api_session_error(crate::session::SessionError::NotFound)
}

fn caller(call: Option<axum::Extension<Call>>) -> Vec<u8> {
    call.map(|c| c.0.caller.into_bytes()).unwrap_or_default()
}

/// `POST /sandboxes/{id}/connect`, `POST /v2/sandboxes/{id}/connect`: the sandbox (200),
/// resumed first when it is paused (201, with a fresh access token: the store never keeps
/// the old one), its end moved to `timeout` from now when given.
pub async fn connect(
    State(e): State<E2b>,
    Path(id): Path<String>,
    call: Option<axum::Extension<Call>>,
    body: bytes::Bytes,
) -> Response {
    let Some(sessions) = e.sessions.as_ref() else {
        return no_such_sandbox();
    };
    let after = match timeout_body(&body, false) {
        Ok(d) => d,
        Err(r) => return r,
    };
    match live_or_resumed(sessions, &id, call.map(|c| c.0).unwrap_or_default(), after).await {
        Ok((code, i)) => (code, Json(created(&i))).into_response(),
        Err(e) => api_session_error(e),
    }
}

/// `POST /sandboxes/{id}/resume` (E2B's older resume): as connect, but a sandbox already
/// running is a 409, as E2B answers.
pub async fn resume(
    State(e): State<E2b>,
    Path(id): Path<String>,
    call: Option<axum::Extension<Call>>,
    body: bytes::Bytes,
) -> Response {
    let Some(sessions) = e.sessions.as_ref() else {
        return no_such_sandbox();
    };
    if !sessions.has_store() {
        return no_store("resume");
    }
    let auth = caller(call.clone());
    if sessions.info(&id, &auth).is_ok() {
        return api_error(StatusCode::CONFLICT, format!("sandbox {id} is already running"));
    }
    connect(State(e.clone()), Path(id), call, body).await
}

/// `auth`'s sandbox `id`: live as it is (200), or resumed from the session store (201) with
/// its end `after` from now (E2B's default timeout when none is given).
async fn live_or_resumed(
    sessions: &crate::session::SessionManager,
    id: &str,
    call: Call,
    after: Option<Duration>,
) -> Result<(StatusCode, SessionInfo), crate::session::SessionError> {
    use crate::session::SessionError;
    let auth = call.caller.as_bytes().to_vec();
    let code = match sessions.info(id, &auth) {
        Ok(i) if after.is_none() => return Ok((StatusCode::OK, i)),
        Ok(_) => StatusCode::OK,
        // A session paused by another executor of the pool is only in the store.
        Err(SessionError::Paused | SessionError::NotFound) if sessions.has_store() => {
            let req = pb::ResumeSessionRequest {
                session_id: id.to_owned(),
            };
            sessions.resume(req, call).await?;
            StatusCode::CREATED
        }
        Err(e) => return Err(e),
    };
    let after = after.unwrap_or(Duration::from_secs(DEFAULT_TIMEOUT_S));
    Ok((code, sessions.set_end(id, &auth, after)?))
}

/// What pause and resume answer on an executor without a session store.
fn no_store(what: &str) -> Response {
    api_error(
        StatusCode::BAD_REQUEST,
        format!(
            "{what} is not supported by Sandpool on this executor: it has no session store (--session-store-dir, or the pool's spec.sessions; docs/sessions.md)"
        ),
    )
}

/// A pause request (`SandboxPauseRequest`).
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PauseBody {
    memory: Option<bool>,
}

/// `POST /sandboxes/{id}/pause`: a filesystem pause (gRPC PauseSession), or with `memory: true`
/// a full one: `/home/user` is kept (and the interpreter's variables in full mode), the
/// interpreter and the sandbox's processes end; connect resumes it. 204, 404 for an
/// unknown sandbox, 409 for one already paused (the SDK's `pause()` then returns False).
pub async fn pause(
    State(e): State<E2b>,
    Path(id): Path<String>,
    call: Option<axum::Extension<Call>>,
    body: bytes::Bytes,
) -> Response {
    let Some(sessions) = e.sessions.as_ref() else {
        return no_such_sandbox();
    };
    let req: PauseBody = match super::optional_body(&body) {
        Ok(r) => r,
        Err(r) => return r,
    };
    // `memory: true` (the SDK's mode="full") also keeps the interpreter's variables; left out,
    // E2B's default is a full pause, Sandpool's a filesystem one (docs/compatibility.md).
    let mode = match req.memory {
        Some(true) => pb::PauseMode::Full,
        _ => pb::PauseMode::Filesystem,
    };
    if !sessions.has_store() {
        return no_store("pause");
    }
    let req = pb::PauseSessionRequest {
        session_id: id,
        mode: mode as i32,
    };
    match sessions.pause(req, &caller(call)).await {
        Ok(_) => StatusCode::NO_CONTENT.into_response(),
        Err(e) => api_session_error(e),
    }
}

/// The `{"timeout": seconds}` of connect (optional, the body too) and set_timeout.
#[allow(clippy::result_large_err)] // an early answer, built once per request
fn timeout_body(body: &[u8], required: bool) -> Result<Option<Duration>, Response> {
    if body.is_empty() && !required {
        return Ok(None);
    }
    match parse::<TimeoutBody>(body)?.timeout {
        Some(s) => timeout("timeout", Some(s)).map(Some),
        None => Ok(None),
    }
}

/// `GET /sandboxes/{id}`.
pub async fn get(State(e): State<E2b>, Path(id): Path<String>, call: Option<axum::Extension<Call>>) -> Response {
    let Some(sessions) = e.sessions.as_ref() else {
        return no_such_sandbox();
    };
    let call = call.map(|c| c.0).unwrap_or_default();
    match sessions.info(&id, call.caller.as_bytes()) {
        Ok(i) => Json(detail(&i)).into_response(),
        // Paused, here or by another executor sharing the store.
        Err(crate::session::SessionError::Paused | crate::session::SessionError::NotFound) if sessions.has_store() => {
            match sessions.paused_info(&id, &call).await {
                Ok(i) => Json(detail(&i)).into_response(),
                Err(e) => api_session_error(e),
            }
        }
        Err(e) => api_session_error(e),
    }
}

/// `POST /sandboxes/{id}/timeout`: the end moves to `timeout` seconds from now (never past
/// the executor's session lifetime).
pub async fn set_timeout(
    State(e): State<E2b>,
    Path(id): Path<String>,
    call: Option<axum::Extension<Call>>,
    body: bytes::Bytes,
) -> Response {
    let Some(sessions) = e.sessions.as_ref() else {
        return no_such_sandbox();
    };
    let d = match timeout_body(&body, true) {
        Ok(Some(d)) => d,
        Ok(None) => return api_error(StatusCode::BAD_REQUEST, "timeout: required (seconds from now)"),
        Err(r) => return r,
    };
    match sessions.set_end(&id, &caller(call), d) {
        Ok(_) => StatusCode::NO_CONTENT.into_response(),
        Err(e) => api_session_error(e),
    }
}

/// `DELETE /sandboxes/{id}`.
pub async fn kill(State(e): State<E2b>, Path(id): Path<String>, call: Option<axum::Extension<Call>>) -> Response {
    let Some(sessions) = e.sessions.as_ref() else {
        return no_such_sandbox();
    };
    let req = pb::CloseSessionRequest { session_id: id };
    // A paused sandbox is killed too (its archive deleted), as E2B does; that path needs the
    // caller's tenant, which only an authenticated call carries.
    let closed = match call {
        Some(c) => sessions.close_as(req, c.0).await,
        None => sessions.close(req, &[]).await,
    };
    match closed {
        Ok(_) => StatusCode::NO_CONTENT.into_response(),
        Err(e) => api_session_error(e),
    }
}

/// `GET /sandboxes`, `GET /v2/sandboxes`: the caller's sandboxes (running, and paused ones
/// from the session store; `state` picks either), filtered by
/// `metadata` (`k=v&k2=v2`, URL-encoded) and paged by `limit` and `nextToken` (the next
/// page's token comes back in `x-next-token`).
pub async fn list(
    State(e): State<E2b>,
    Query(pairs): Query<Vec<(String, String)>>,
    call: Option<axum::Extension<Call>>,
) -> Response {
    let call = call.map(|c| c.0).unwrap_or_default();
    let auth = call.caller.as_bytes().to_vec();
    // `state` may come several times (`state=running&state=paused`), or comma-separated.
    let states: Vec<&str> = pairs
        .iter()
        .filter(|(k, _)| k == "state")
        .flat_map(|(_, v)| v.split(','))
        .collect();
    let q: HashMap<String, String> = pairs.iter().cloned().collect();
    let mut filter = BTreeMap::new();
    if let Some(m) = q.get("metadata").filter(|m| !m.is_empty()) {
        for (k, v) in form_urlencoded::parse(m.as_bytes()) {
            filter.insert(k.into_owned(), v.into_owned());
        }
    }
    let running = states.is_empty() || states.contains(&"running");
    let paused = states.is_empty() || states.contains(&"paused");
    let limit = match super::page_limit(&q) {
        Ok(n) => n,
        Err(r) => return r,
    };
    let mut infos = match (&e.sessions, running) {
        (Some(s), true) => s.list(&auth, &filter),
        _ => Vec::new(),
    };
    if let (Some(s), true) = (&e.sessions, paused) {
        match s.list_paused(&call, &filter).await {
            // A sandbox being resumed may show in both: it is running.
            Ok(p) => {
                let live: std::collections::HashSet<String> = infos.iter().map(|i| i.id.clone()).collect();
                infos.extend(p.into_iter().filter(|p| !live.contains(&p.id)));
            }
            Err(e) => return api_session_error(e),
        }
    }
    let mut all: Vec<_> = infos
        .into_iter()
        .map(|i| ((rfc3339(i.started_at), i.id.clone()), i))
        .collect();
    // Ordered by what the list shows (`startedAt` to the millisecond, then the id), so a
    // cursor names a place in it even after its sandbox ended.
    all.sort_by(|a, b| a.0.cmp(&b.0));
    // The token is a cursor, `<startedAt>_<sandboxID>` of the page before's last sandbox
    // (a bare id, as earlier pages gave, still works while that sandbox lives). A gateway
    // sends every executor the same cursor and merges their pages.
    let start = match q.get("nextToken").filter(|t| !t.is_empty()) {
        Some(t) => match t.split_once('_') {
            Some((at, id)) => all.partition_point(|(k, _)| (k.0.as_str(), k.1.as_str()) <= (at, id)),
            None => all.iter().position(|(k, _)| &k.1 == t).map_or(all.len(), |p| p + 1),
        },
        None => 0,
    };
    let page: Vec<_> = all.iter().skip(start).take(limit).collect();
    let mut resp = Json(page.iter().map(|(_, i)| detail(i)).collect::<Vec<_>>()).into_response();
    if start + page.len() < all.len()
        && let Some(((at, id), _)) = page.last()
        && let Ok(v) = HeaderValue::from_str(&format!("{at}_{id}"))
    {
        resp.headers_mut().insert("x-next-token", v);
    }
    resp
}

/// What E2B offers and a Sandpool session cannot be: snapshots, fork,
/// refreshes, logs, metrics and network rules.
pub async fn unsupported(req: axum::extract::Request) -> Response {
    let path = req.uri().path().to_owned();
    let what = path.rsplit('/').next().unwrap_or_default();
    let what = match what {
        "snapshots" => "snapshots",
        "fork" => "fork",
        "refreshes" => "refreshes (keep-alive beyond set_timeout)",
        "logs" => "sandbox logs",
        "metrics" => "sandbox metrics",
        "network" => "network rules (sandboxes have no network)",
        _ => "this call",
    };
    refused(what)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_are_rfc3339_utc() {
        assert_eq!(rfc3339(SystemTime::UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
        let t = SystemTime::UNIX_EPOCH + Duration::from_millis(1_796_270_400_123);
        assert_eq!(rfc3339(t), "2026-12-03T04:00:00.123Z");
        let leap = SystemTime::UNIX_EPOCH + Duration::from_secs(951_782_400);
        assert_eq!(rfc3339(leap), "2000-02-29T00:00:00.000Z");
    }

    #[test]
    fn env_names_are_shell_names() {
        assert!(is_env_name("FOO_1") && is_env_name("_x"));
        assert!(!is_env_name("1A") && !is_env_name("A-B") && !is_env_name("") && !is_env_name("A=B"));
    }
}
