//! E2B's snapshots (docs/sessions.md, "Snapshots and forks"): `create_snapshot()` is
//! `POST /sandboxes/{id}/snapshots` (201 `{"snapshotID", "names"}`), `Sandbox.create(id)`
//! is a create whose `templateID` is a snapshot's id (served in `control::create`), and
//! `delete_snapshot(id)` is `DELETE /templates/{id}`, `list_snapshots()` is `GET /snapshots`,
//! and `fork(count=...)` is `POST /sandboxes/{id}/fork` (a `ForkSession`).

use super::{E2b, api_error, api_session_error};
use crate::call::Call;
use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use sandpool_proto::v1 as pb;
use serde::Deserialize;
use std::collections::HashMap;

/// What the SDK sends with `create_snapshot(name=..., mode=...)`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct SnapshotBody {
    name: Option<String>,
    memory: Option<bool>,
}

fn caller(call: &Option<axum::Extension<Call>>) -> Call {
    call.as_ref().map(|c| c.0.clone()).unwrap_or_default()
}

/// `POST /sandboxes/{id}/snapshots`.
pub async fn create(
    State(e): State<E2b>,
    Path(id): Path<String>,
    call: Option<axum::Extension<Call>>,
    body: bytes::Bytes,
) -> Response {
    let Some(sessions) = e.sessions.as_ref() else {
        return api_session_error(crate::session::SessionError::NotFound);
    };
    let req: SnapshotBody = match super::optional_body(&body) {
        Ok(r) => r,
        Err(r) => return r,
    };
    if req.memory == Some(true) {
        return api_error(
            StatusCode::BAD_REQUEST,
            "memory: a snapshot with memory (mode=\"full\") is not supported by Sandpool yet; snapshot with mode=\"filesystem\" (files are kept, the interpreter starts cold)",
        );
    }
    if req.name.as_ref().is_some_and(|n| !n.is_empty()) {
        return api_error(
            StatusCode::BAD_REQUEST,
            "name: named snapshots are not supported by Sandpool; leave it out and use the snapshotID returned",
        );
    }
    if !sessions.has_store() {
        return api_error(
            StatusCode::BAD_REQUEST,
            "snapshots (create_snapshot) are not supported by Sandpool on this executor: it has no session store (--session-store-dir, or the pool's spec.sessions; docs/sessions.md)",
        );
    }
    let who = caller(&call).caller.into_bytes();
    match sessions
        .snapshot(pb::SnapshotSessionRequest { session_id: id }, &who)
        .await
    {
        Ok(r) => (
            StatusCode::CREATED,
            Json(serde_json::json!({"snapshotID": r.snapshot_id, "names": [r.snapshot_id]})),
        )
            .into_response(),
        Err(e) => api_session_error(e),
    }
}

/// `GET /snapshots` (`Sandbox.list_snapshots()`; `sbx.list_snapshots()` adds `sandboxID`):
/// the caller's snapshots by id, `limit` to a page (1 to 1000, default 100), the next page
/// after the id sent back in `x-next-token` (`nextToken`), which a snapshot deleted meanwhile
/// does not lose. `name` keeps the snapshot of that id (a snapshot's one name is its id; a
/// `:tag` is ignored, as Sandpool's snapshots have none).
pub async fn list(
    State(e): State<E2b>,
    Query(q): Query<HashMap<String, String>>,
    call: Option<axum::Extension<Call>>,
) -> Response {
    let limit = match super::page_limit(&q) {
        Ok(n) => n,
        Err(r) => return r,
    };
    let Some(sessions) = e.sessions.as_ref() else {
        return Json(serde_json::json!([])).into_response();
    };
    let source = q.get("sandboxID").map(String::as_str).filter(|s| !s.is_empty());
    let all = match sessions.list_snapshots(&caller(&call), source).await {
        Ok(all) => all,
        Err(e) => return api_session_error(e),
    };
    let name = q.get("name").map(|n| n.split(':').next().unwrap_or_default());
    let after = q.get("nextToken").map(String::as_str).unwrap_or_default();
    let mut page: Vec<&String> = all
        .iter()
        .map(|(id, _)| id)
        .filter(|id| name.is_none_or(|n| id.as_str() == n) && id.as_str() > after)
        .take(limit + 1)
        .collect();
    let next = (page.len() > limit).then(|| {
        page.truncate(limit);
        page.last().map(|id| id.to_string()).unwrap_or_default()
    });
    let body: Vec<serde_json::Value> = page
        .iter()
        .map(|id| serde_json::json!({"snapshotID": id, "names": [id]}))
        .collect();
    let mut resp = Json(body).into_response();
    if let Some(v) = next.and_then(|n| axum::http::HeaderValue::from_str(&n).ok()) {
        resp.headers_mut().insert("x-next-token", v);
    }
    resp
}

/// What the SDK sends with `fork(timeout=..., count=...)`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ForkBody {
    timeout: Option<u64>,
    count: Option<u32>,
}

/// The most copies one E2B fork asks for: E2B's own bound (its SDK checks 1 to 20).
const MAX_E2B_FORK: u32 = 20;

/// `POST /sandboxes/{id}/fork`: `count` copies (default 1) of a running sandbox, each with
/// its files and (Python) its interpreter's names, on this executor, each a sandbox of its own
/// with its own access token; 201 with one `{"sandbox": ...}` per copy. All start or none
/// (the caps are checked for every copy first), so no entry is an error.
pub async fn fork(
    State(e): State<E2b>,
    Path(id): Path<String>,
    call: Option<axum::Extension<Call>>,
    body: bytes::Bytes,
) -> Response {
    let Some(sessions) = e.sessions.as_ref() else {
        return api_session_error(crate::session::SessionError::NotFound);
    };
    let req: ForkBody = match super::optional_body(&body) {
        Ok(r) => r,
        Err(r) => return r,
    };
    let count = req.count.unwrap_or(1);
    if count == 0 || count > MAX_E2B_FORK {
        return api_error(
            StatusCode::BAD_REQUEST,
            format!("count: {count} copies: ask for 1 to {MAX_E2B_FORK}"),
        );
    }
    if req.timeout == Some(0) {
        return api_error(StatusCode::BAD_REQUEST, "timeout: must be at least 1 second");
    }
    let call = caller(&call);
    let who = call.caller.clone().into_bytes();
    let forked = match sessions
        .fork(
            pb::ForkSessionRequest {
                session_id: id,
                n: count,
            },
            call,
        )
        .await
    {
        Ok(r) => r,
        Err(e) => return api_session_error(e),
    };
    let mut out = Vec::with_capacity(forked.sessions.len());
    for copy in forked.sessions {
        let info = match req.timeout {
            Some(s) => sessions.set_end(&copy.session_id, &who, std::time::Duration::from_secs(s)),
            None => sessions.info(&copy.session_id, &who),
        };
        match info {
            Ok(info) => out.push(serde_json::json!({"sandbox": super::control::created(&info)})),
            // Gone between its start and now (killed, expired): said for that copy alone.
            Err(e) => out.push(serde_json::json!({"error": {"code": 404, "message": e.to_string()}})),
        }
    }
    (StatusCode::CREATED, Json(out)).into_response()
}

/// `DELETE /templates/{id}`: a snapshot's id deletes it; no other template is the caller's.
pub async fn delete(State(e): State<E2b>, Path(id): Path<String>, call: Option<axum::Extension<Call>>) -> Response {
    let Some(sessions) = e.sessions.as_ref().filter(|s| s.has_store()) else {
        return api_error(StatusCode::NOT_FOUND, format!("snapshot {id:?} not found"));
    };
    if !id.starts_with(crate::session::SNAPSHOT_PREFIX) {
        return api_error(
            StatusCode::BAD_REQUEST,
            format!("templateID: {id:?} is not a snapshot; Sandpool's own templates cannot be deleted"),
        );
    }
    match sessions
        .delete_snapshot(pb::DeleteSnapshotRequest { snapshot_id: id }, caller(&call))
        .await
    {
        Ok(_) => StatusCode::NO_CONTENT.into_response(),
        Err(e) => api_session_error(e),
    }
}
