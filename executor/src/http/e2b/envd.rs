//! E2B's sandbox daemon (envd) on the executor's HTTP port: `/health`, file upload and
//! download (`/files`), the filesystem service and the process service, over one
//! sandbox's session (a Python session: see [`super::TEMPLATES`]).
//!
//! - Files are the session's `/work`, which the SDK sees as `/home/user` ([`super::work_path`]).
//! - Filesystem calls (`Stat`, `ListDir`, `MakeDir`, `Remove`, `Move`) run as a short
//!   command inside the sandbox, so they see exactly what the sandbox's programs see and
//!   nothing is touched from the host.
//! - Commands (`Process.Start`) are background processes of the sandbox's interpreter, each
//!   in a subshell, writing its output to files of the session's own directory; the host
//!   streams those files to the caller as they grow (`Start`, `Connect`) and ends the stream
//!   with the exit code. `SendInput`, `CloseStdin`, `SendSignal` and `List` are interpreter
//!   operations. No terminals (PTY) and no client-streamed stdin (`StreamInput`).

use super::connect::{self, Code, Error};
use super::{E2b, Refused, sandbox, sdk_path, work_path};
use axum::extract::{FromRequest, Multipart, Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use sandpool_proto::v1 as pb;
use std::collections::{BTreeMap, HashMap};

/// Single-quotes `s` for bash.
pub fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// `export K='V'` lines for `envs` (names checked by the caller).
pub fn exports(envs: &BTreeMap<String, String>) -> String {
    envs.iter()
        .filter(|(k, _)| super::control::is_env_name(k))
        .map(|(k, v)| format!("export {k}={}\n", quote(v)))
        .collect()
}

/// `GET /health`: 204 while the sandbox runs; 502 once it is gone (the SDK's `is_running`).
pub async fn health(State(e): State<E2b>, headers: HeaderMap) -> Response {
    match sandbox(e.sessions.as_ref(), &headers) {
        Ok(_) => StatusCode::NO_CONTENT.into_response(),
        Err(r) => r.response(),
    }
}

fn file_error(code: StatusCode, message: &str) -> Response {
    super::plain(code, message)
}

/// `GET /files?path=`: a file's bytes.
pub async fn download(
    State(e): State<E2b>,
    headers: HeaderMap,
    call: Option<axum::Extension<crate::call::Call>>,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let sbx = match sandbox(e.sessions.as_ref(), &headers) {
        Ok(s) => s,
        Err(r) => return r.response(),
    };
    let Some(sessions) = e.sessions.as_ref() else {
        return Refused::NoSessions.response();
    };
    let Some(path) = q.get("path") else {
        return file_error(StatusCode::BAD_REQUEST, "path: required");
    };
    let Some(rel) = work_path(path) else {
        return file_error(
            StatusCode::NOT_FOUND,
            &format!(
                "path: {path:?} is outside the sandbox's files ({} and below)",
                super::HOME
            ),
        );
    };
    let req = pb::GetSessionFilesRequest {
        session_id: sbx.id.clone(),
        paths: vec![rel],
    };
    // The file is charged to the byte budget before it is read (as `GetSessionFiles`), and
    // the charge goes with its bytes until the connection has written them: slow readers
    // of a large file cannot hold more than the budget between them.
    let charge = call.and_then(|c| c.0.charge);
    match sessions.get_files(req, &sbx.owner, charge.clone()).await {
        Ok(r) => match (r.files.into_iter().next(), r.errors.into_iter().next()) {
            (Some(f), _) => {
                let body = match charge {
                    Some(c) => bytes::Bytes::from_owner(Charged {
                        data: f.content,
                        _charge: c,
                    }),
                    None => f.content.into(),
                };
                ([(http::header::CONTENT_TYPE, "application/octet-stream")], body).into_response()
            }
            (None, Some(err)) if err.message.contains("--max-inflight-bytes") => {
                let mut r = file_error(
                    StatusCode::SERVICE_UNAVAILABLE,
                    &format!("path {path:?}: {}", err.message),
                );
                r.headers_mut()
                    .insert(http::header::RETRY_AFTER, http::HeaderValue::from_static("1"));
                r
            }
            (None, Some(err)) => file_error(StatusCode::NOT_FOUND, &format!("path {path:?}: {}", err.message)),
            (None, None) => file_error(StatusCode::NOT_FOUND, &format!("path {path:?}: not found")),
        },
        Err(crate::session::SessionError::NotFound) => Refused::NotFound(sbx.id).response(),
        Err(crate::session::SessionError::Exec(err))
            if matches!(err, crate::error::ExecError::InvalidArgument { .. }) =>
        {
            file_error(StatusCode::BAD_REQUEST, &err.to_string())
        }
        Err(err) => super::api_session_error(err),
    }
}

/// A reply's bytes with the byte-budget charge they hold until they are dropped.
struct Charged {
    data: Vec<u8>,
    _charge: crate::budget::Charge,
}

impl AsRef<[u8]> for Charged {
    fn as_ref(&self) -> &[u8] {
        &self.data
    }
}

/// `POST /files`: multipart (field `file`; each part to `path` when there is one part, else
/// to its file name: the SDK's `write_files`), or one file's bytes as
/// `application/octet-stream` to `path` (gzip-encoded or not). Directories are created on
/// the way.
pub async fn upload(
    State(e): State<E2b>,
    Query(q): Query<HashMap<String, String>>,
    req: axum::extract::Request,
) -> Response {
    let headers = req.headers().clone();
    // The request's share of the byte budget (read_body_in_time), for what it decompresses.
    let call = req.extensions().get::<crate::call::Call>().cloned();
    let sbx = match sandbox(e.sessions.as_ref(), &headers) {
        Ok(s) => s,
        Err(r) => return r.response(),
    };
    let Some(sessions) = e.sessions.as_ref() else {
        return Refused::NoSessions.response();
    };
    let is_multipart = headers
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("multipart/"));
    let mut parts = Vec::new();
    if is_multipart {
        let mut form = match Multipart::from_request(req, &()).await {
            Ok(f) => f,
            Err(err) => return file_error(StatusCode::BAD_REQUEST, &format!("multipart body: {err}")),
        };
        loop {
            match form.next_field().await {
                Ok(Some(f)) => {
                    let name = f.file_name().map(str::to_owned);
                    match f.bytes().await {
                        Ok(b) => parts.push((name, b)),
                        Err(err) => return file_error(StatusCode::BAD_REQUEST, &format!("multipart body: {err}")),
                    }
                }
                Ok(None) => break,
                Err(err) => return file_error(StatusCode::BAD_REQUEST, &format!("multipart body: {err}")),
            }
        }
    } else {
        if q.get("path").is_none_or(|p| p.is_empty()) {
            return file_error(StatusCode::BAD_REQUEST, "path: required for an octet-stream upload");
        }
        let body = match axum::body::to_bytes(req.into_body(), usize::MAX).await {
            Ok(b) => b,
            Err(err) => return file_error(StatusCode::BAD_REQUEST, &format!("reading the body: {err}")),
        };
        let gzip = headers
            .get(http::header::CONTENT_ENCODING)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.eq_ignore_ascii_case("gzip"));
        let body = if gzip {
            // Never more than /work holds, charged as it grows, and off the runtime's threads.
            let limit = e.engine.work_dir_bytes();
            let charge = call.and_then(|c| c.charge);
            match crate::task::blocking(move || gunzip(&body, limit, charge.as_ref())).await {
                Ok(Ok(b)) => bytes::Bytes::from(b),
                Ok(Err((code, m))) => return file_error(code, &m),
                Err(err) => return file_error(StatusCode::INTERNAL_SERVER_ERROR, &err.to_string()),
            }
        } else {
            body
        };
        parts.push((None, body));
    }
    let mut files = Vec::new();
    let mut written = Vec::new();
    for (i, (name, content)) in parts.into_iter().enumerate() {
        let path = match (q.get("path"), name) {
            (Some(p), _) if i == 0 => p.clone(),
            (_, Some(n)) if !n.is_empty() => n,
            _ => {
                return file_error(
                    StatusCode::BAD_REQUEST,
                    &format!("file[{i}]: no path (the query's path, or the part's file name)"),
                );
            }
        };
        let Some(rel) = work_path(&path) else {
            return file_error(
                StatusCode::BAD_REQUEST,
                &format!("path {path:?}: outside the sandbox's files ({} and below)", super::HOME),
            );
        };
        let name = rel.rsplit('/').next().unwrap_or(&rel).to_owned();
        written.push(serde_json::json!({"name": name, "type": "file", "path": sdk_path(&rel)}));
        files.push(pb::File {
            path: rel,
            content: content.to_vec(),
            executable: false,
        });
    }
    let req = pb::PutSessionFilesRequest {
        session_id: sbx.id.clone(),
        files,
    };
    match sessions.put_files(req, &sbx.owner).await {
        Ok(_) => axum::Json(written).into_response(),
        Err(crate::session::SessionError::NotFound) => Refused::NotFound(sbx.id).response(),
        Err(crate::session::SessionError::Exec(err))
            if matches!(err, crate::error::ExecError::InvalidArgument { .. }) =>
        {
            file_error(StatusCode::BAD_REQUEST, &err.to_string())
        }
        Err(crate::session::SessionError::Exhausted(m)) => file_error(StatusCode::INSUFFICIENT_STORAGE, &m),
        Err(err) => super::api_session_error(err),
    }
}

/// Decompresses a gzip body, at most `limit` bytes of it.
/// Decompresses a gzip body, at most `limit` bytes of it, each piece charged to the
/// request's share of the byte budget as it comes (the body was charged compressed): many
/// small bombs at once cannot fill the executor's memory. Blocking: call it off the runtime.
fn gunzip(body: &[u8], limit: u64, charge: Option<&crate::budget::Charge>) -> Result<Vec<u8>, (StatusCode, String)> {
    use std::io::Read;
    let mut out = Vec::new();
    let mut d = flate2::read::GzDecoder::new(body).take(limit + 1);
    let mut piece = vec![0u8; 64 << 10];
    loop {
        let n = d.read(&mut piece).map_err(|e| {
            (
                StatusCode::BAD_REQUEST,
                format!("Content-Encoding: gzip: the body does not decompress: {e}"),
            )
        })?;
        if n == 0 {
            break;
        }
        if let Some(c) = charge {
            c.take(n as u64)
                .map_err(|e| (StatusCode::SERVICE_UNAVAILABLE, e.to_string()))?;
        }
        out.extend_from_slice(&piece[..n]);
        if out.len() as u64 > limit {
            return Err((
                StatusCode::BAD_REQUEST,
                format!("the decompressed body is larger than the sandbox's files may be ({limit} bytes)"),
            ));
        }
    }
    Ok(out)
}

/// The script that does a filesystem call inside the sandbox: `op` and `/work`-relative
/// paths in argv, one JSON line out (`{"entry"}`, `{"entries"}`, `{}` or `{"error"}`).
const FS_SCRIPT: &str = r#"
import json, os, shutil, stat, sys, datetime
op, args = sys.argv[1], sys.argv[2:]
def entry(rel):
    p = os.path.join('/work', rel)
    st = os.lstat(p)
    target = None
    if stat.S_ISLNK(st.st_mode):
        target = os.readlink(p)
        try:
            st = os.stat(p)
        except OSError:
            pass
    kind = 'FILE_TYPE_DIRECTORY' if stat.S_ISDIR(st.st_mode) else 'FILE_TYPE_FILE'
    t = datetime.datetime.fromtimestamp(st.st_mtime, datetime.timezone.utc)
    e = {'name': os.path.basename(os.path.normpath(rel)) if rel != '.' else 'user', 'type': kind,
         'path': os.path.normpath(rel), 'size': str(st.st_size), 'mode': stat.S_IMODE(st.st_mode),
         'permissions': stat.filemode(st.st_mode), 'owner': 'user', 'group': 'user',
         'modifiedTime': t.strftime('%Y-%m-%dT%H:%M:%S.%fZ')}
    if target is not None:
        e['symlinkTarget'] = target
    return e
def walk(rel, depth):
    out = []
    for name in sorted(os.listdir(os.path.join('/work', rel))):
        if rel == '.' and name == '.sandpool':
            continue
        r = os.path.normpath(os.path.join(rel, name))
        e = entry(r)
        out.append(e)
        if depth > 1 and e['type'] == 'FILE_TYPE_DIRECTORY' and 'symlinkTarget' not in e:
            out.extend(walk(r, depth - 1))
    return out
try:
    for a in args:
        if a.split('/')[0] == '.sandpool':
            raise PermissionError('the session keeps its own files there')
    if op == 'stat':
        r = {'entry': entry(args[0])}
    elif op == 'list':
        if not os.path.isdir(os.path.join('/work', args[0])):
            raise NotADirectoryError('not a directory')
        r = {'entries': walk(args[0], max(1, int(args[1])))}
    elif op == 'mkdir':
        os.makedirs(os.path.join('/work', args[0]))
        r = {'entry': entry(args[0])}
    elif op == 'remove':
        p = os.path.join('/work', args[0])
        if os.path.isdir(p) and not os.path.islink(p):
            shutil.rmtree(p)
        else:
            os.remove(p)
        r = {}
    elif op == 'move':
        dst = os.path.join('/work', args[1])
        os.makedirs(os.path.dirname(dst) or '/work', exist_ok=True)
        os.rename(os.path.join('/work', args[0]), dst)
        r = {'entry': entry(args[1])}
except FileNotFoundError as e:
    r = {'error': 'not_found', 'message': str(e.strerror or e)}
except FileExistsError as e:
    r = {'error': 'already_exists', 'message': str(e.strerror or e)}
except PermissionError as e:
    r = {'error': 'permission_denied', 'message': str(e.strerror or e)}
except (NotADirectoryError, IsADirectoryError, OSError, ValueError) as e:
    r = {'error': 'invalid_argument', 'message': str(getattr(e, 'strerror', None) or e)}
print(json.dumps(r))
"#;

/// Runs `op` on `paths` inside the sandbox; the script's JSON answer.
async fn fs_call(e: &E2b, headers: &HeaderMap, op: &str, args: &[String]) -> Result<serde_json::Value, Response> {
    let sbx = sandbox(e.sessions.as_ref(), headers).map_err(Refused::response)?;
    let sessions = e.sessions.as_ref().ok_or_else(|| Refused::NoSessions.response())?;
    let mut cmd = format!("exec python3 -I -c {} {op}", quote(FS_SCRIPT));
    for a in args {
        cmd.push(' ');
        cmd.push_str(&quote(a));
    }
    let req = pb::RunInSessionRequest {
        session_id: sbx.id.clone(),
        input: Some(pb::run_in_session_request::Input::Command(cmd)),
        ..Default::default()
    };
    let r = match sessions.run(req, &sbx.owner).await {
        Ok(r) => r,
        Err(crate::session::SessionError::NotFound) => return Err(Refused::NotFound(sbx.id).response()),
        Err(crate::session::SessionError::Exhausted(m)) => return Err(Error::new(Code::ResourceExhausted, m).unary()),
        Err(err) => return Err(Error::new(Code::Internal, err.to_string()).unary()),
    };
    let out = r.result.map(|r| r.stdout).unwrap_or_default();
    let v: serde_json::Value = serde_json::from_slice(&out).map_err(|_| {
        Error::new(
            Code::Internal,
            format!(
                "the filesystem call did not answer ({})",
                if r.message.is_empty() { "no output" } else { &r.message }
            ),
        )
        .unary()
    })?;
    if let Some(code) = v.get("error").and_then(|c| c.as_str()) {
        let code = match code {
            "not_found" => Code::NotFound,
            "already_exists" => Code::AlreadyExists,
            "permission_denied" => Code::PermissionDenied,
            _ => Code::InvalidArgument,
        };
        let msg = v.get("message").and_then(|m| m.as_str()).unwrap_or_default();
        return Err(Error::new(
            code,
            format!("{}: {msg}", args.first().map(|a| sdk_path(a)).unwrap_or_default()),
        )
        .unary());
    }
    Ok(v)
}

/// Rewrites an entry's `/work`-relative path as the SDK's.
fn sdk_entry(mut v: serde_json::Value) -> serde_json::Value {
    if let Some(p) = v.get("path").and_then(|p| p.as_str()).map(sdk_path) {
        v["path"] = serde_json::Value::String(p);
    }
    v
}

#[allow(clippy::result_large_err)] // an early answer, built once per request
fn path_arg(body: &serde_json::Value, field: &str) -> Result<String, Response> {
    let p = body
        .get(field)
        .and_then(|p| p.as_str())
        .ok_or_else(|| Error::new(Code::InvalidArgument, format!("{field}: required")).unary())?;
    work_path(p).ok_or_else(|| {
        Error::new(
            Code::InvalidArgument,
            format!(
                "{field}: {p:?} is outside the sandbox's files ({} and below)",
                super::HOME
            ),
        )
        .unary()
    })
}

/// `POST /filesystem.Filesystem/{method}`.
pub async fn filesystem(
    State(e): State<E2b>,
    Path(method): Path<String>,
    headers: HeaderMap,
    body: bytes::Bytes,
) -> Response {
    // A server-streaming method (WatchDir) must be refused as a stream, or the SDK shows
    // only "HTTP 400".
    if method == "WatchDir" {
        let err = Error::new(
            Code::Unimplemented,
            "filesystem.Filesystem/WatchDir is not supported by Sandpool (watching directories is not)",
        );
        return connect::stream(&[], Some(&err));
    }
    let req: serde_json::Value = if body.is_empty() {
        serde_json::json!({})
    } else {
        match serde_json::from_slice(&body) {
            Ok(v) => v,
            Err(err) => return Error::new(Code::InvalidArgument, format!("request body: {err}")).unary(),
        }
    };
    let run = async {
        match method.as_str() {
            "Stat" => {
                let v = fs_call(&e, &headers, "stat", &[path_arg(&req, "path")?]).await?;
                Ok(serde_json::json!({"entry": sdk_entry(v["entry"].clone())}))
            }
            "MakeDir" => {
                let v = fs_call(&e, &headers, "mkdir", &[path_arg(&req, "path")?]).await?;
                Ok(serde_json::json!({"entry": sdk_entry(v["entry"].clone())}))
            }
            "Remove" => {
                fs_call(&e, &headers, "remove", &[path_arg(&req, "path")?]).await?;
                Ok(serde_json::json!({}))
            }
            "Move" => {
                let (src, dst) = (path_arg(&req, "source")?, path_arg(&req, "destination")?);
                let v = fs_call(&e, &headers, "move", &[src, dst]).await?;
                Ok(serde_json::json!({"entry": sdk_entry(v["entry"].clone())}))
            }
            "ListDir" => {
                let depth = req.get("depth").and_then(|d| d.as_u64()).unwrap_or(1).clamp(1, 32);
                let v = fs_call(&e, &headers, "list", &[path_arg(&req, "path")?, depth.to_string()]).await?;
                let entries: Vec<_> = v["entries"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default()
                    .into_iter()
                    .map(sdk_entry)
                    .collect();
                Ok(serde_json::json!({"entries": entries}))
            }
            other => Err(Error::new(
                Code::Unimplemented,
                format!("filesystem.Filesystem/{other} is not supported by Sandpool (watching directories is not)"),
            )
            .unary()),
        }
    };
    match run.await {
        Ok(v) => connect::unary_ok(v),
        Err(r) => r,
    }
}

/// The shell command a `ProcessConfig` asks for, in a subshell: the SDK's `/bin/bash -l -c
/// CMD` is CMD; any other program runs with its arguments quoted. `cwd` and `envs` come first.
fn command_of(process: &serde_json::Value) -> Result<String, Error> {
    let cmd = process.get("cmd").and_then(|c| c.as_str()).unwrap_or_default();
    if cmd.is_empty() {
        return Err(Error::new(Code::InvalidArgument, "process.cmd: required"));
    }
    let args: Vec<&str> = process
        .get("args")
        .and_then(|a| a.as_array())
        .map(|a| a.iter().filter_map(|x| x.as_str()).collect())
        .unwrap_or_default();
    let body = match (cmd, args.as_slice()) {
        ("/bin/bash" | "bash" | "/bin/sh" | "sh", ["-l", "-c", c] | ["-c", c]) => (*c).to_owned(),
        _ => std::iter::once(cmd)
            .chain(args)
            .map(quote)
            .collect::<Vec<_>>()
            .join(" "),
    };
    let mut script = String::new();
    if let Some(envs) = process.get("envs").and_then(|e| e.as_object()) {
        let envs: BTreeMap<String, String> = envs
            .iter()
            .filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_owned())))
            .collect();
        if let Some(k) = envs.keys().find(|k| !super::control::is_env_name(k)) {
            return Err(Error::new(
                Code::InvalidArgument,
                format!("process.envs: {k:?} is not a variable name"),
            ));
        }
        script.push_str(&exports(&envs));
    }
    if let Some(cwd) = process.get("cwd").and_then(|c| c.as_str()).filter(|c| !c.is_empty()) {
        let rel = work_path(cwd).ok_or_else(|| {
            Error::new(
                Code::InvalidArgument,
                format!(
                    "process.cwd: {cwd:?} is outside the sandbox's files ({} and below)",
                    super::HOME
                ),
            )
        })?;
        // The home itself (the seat's /work again), so that `pwd` there says what E2B's does.
        script.push_str(&format!("cd -- {} || exit 1\n", quote(&sdk_path(&rel))));
    }
    script.push_str(&body);
    // A subshell: E2B runs each command as its own process, so its envs, cwd and whatever
    // it exports or changes itself do not carry into the next (a bash session's would).
    Ok(format!("(\n{script}\n)"))
}

/// `POST /process.Process/{method}`: commands run as background processes of the sandbox's
/// interpreter ([`crate::session::SessionManager::op`]); `Start` and `Connect` stream their
/// output from the files the process writes, as it runs.
pub async fn process(
    State(e): State<E2b>,
    Path(method): Path<String>,
    headers: HeaderMap,
    body: bytes::Bytes,
) -> Response {
    let sbx = match sandbox(e.sessions.as_ref(), &headers) {
        Ok(s) => s,
        Err(r) => return r.response(),
    };
    let Some(sessions) = e.sessions.clone() else {
        return Refused::NoSessions.response();
    };
    let streaming = matches!(method.as_str(), "Start" | "Connect" | "StreamInput");
    // Input is decoded, hex-encoded and sent on: several copies of it are held at once, so
    // a call's input is bounded before its body is even parsed (issue 46: a 40 MiB one
    // raised the executor's peak by 387 MiB).
    if method == "SendInput" && body.len() > STDIN_B64_BYTES + 4096 {
        return stdin_too_large(body.len()).unary();
    }
    let req = if streaming {
        connect::first_message(&body)
    } else if body.is_empty() {
        Ok(serde_json::json!({}))
    } else {
        super::json_body::<serde_json::Value>(&body).map_err(|m| Error::new(Code::InvalidArgument, m))
    };
    let req = match req {
        Ok(r) => r,
        Err(err) if streaming => return connect::stream(&[], Some(&err)),
        Err(err) => return err.unary(),
    };
    let deadline = headers
        .get("connect-timeout-ms")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
        .filter(|ms| *ms > 0)
        .map(|ms| tokio::time::Instant::now() + std::time::Duration::from_millis(ms));
    let op = |v: serde_json::Value| {
        let (sessions, sbx) = (sessions.clone(), (sbx.id.clone(), sbx.owner.clone()));
        async move { run_op(&sessions, &sbx.0, &sbx.1, v).await }
    };
    let pid = || req.pointer("/process/pid").and_then(|p| p.as_u64()).unwrap_or(0);
    match method.as_str() {
        "Start" => {
            if req.get("pty").is_some_and(|p| !p.is_null()) {
                let err = Error::new(Code::Unimplemented, "pty: terminals are not supported by Sandpool");
                return connect::stream(&[], Some(&err));
            }
            let config = req.get("process").cloned().unwrap_or(serde_json::Value::Null);
            let source = match command_of(&config) {
                Ok(c) => c,
                Err(err) => return connect::stream(&[], Some(&err)),
            };
            let spawn = serde_json::json!({
                "kind": "spawn",
                "source": source,
                "stdin": req.get("stdin").and_then(|s| s.as_bool()).unwrap_or(false),
                "config": config,
            });
            match op(spawn).await {
                Ok(v) => {
                    let pid = v.get("pid").and_then(|p| p.as_u64()).unwrap_or(0);
                    tail(e, sbx, pid, deadline)
                }
                Err(r) => r.into_stream(),
            }
        }
        "Connect" => match op(serde_json::json!({"kind": "procs"})).await {
            Ok(v) => {
                let live = v["processes"]
                    .as_array()
                    .is_some_and(|l| l.iter().any(|p| p["pid"].as_u64() == Some(pid())));
                if !live {
                    let err = Error::new(Code::NotFound, format!("process {}: not running", pid()));
                    return connect::stream(&[], Some(&err));
                }
                tail(e, sbx, pid(), deadline)
            }
            Err(r) => r.into_stream(),
        },
        "List" => match op(serde_json::json!({"kind": "procs"})).await {
            Ok(v) => connect::unary_ok(serde_json::json!({"processes": v["processes"]})),
            Err(r) => r.into_unary(),
        },
        "SendSignal" => {
            let signal = match req.get("signal").and_then(|s| s.as_str()) {
                Some("SIGNAL_SIGKILL") | None => 9,
                Some("SIGNAL_SIGTERM") => 15,
                Some(other) => {
                    return Error::new(
                        Code::InvalidArgument,
                        format!("signal: {other:?} is not SIGNAL_SIGKILL or SIGNAL_SIGTERM"),
                    )
                    .unary();
                }
            };
            match op(serde_json::json!({"kind": "signal", "pid": pid(), "signal": signal})).await {
                Ok(_) => connect::unary_ok(serde_json::json!({})),
                Err(r) => r.into_unary(),
            }
        }
        "SendInput" => {
            let data = req.pointer("/input/stdin").and_then(|d| d.as_str()).unwrap_or_default();
            if data.len() > STDIN_B64_BYTES {
                return stdin_too_large(data.len()).unary();
            }
            let Ok(data) = base64::engine::general_purpose::STANDARD.decode(data) else {
                return Error::new(Code::InvalidArgument, "input.stdin: not base64").unary();
            };
            if req.pointer("/input/pty").is_some() {
                return Error::new(
                    Code::Unimplemented,
                    "input.pty: terminals are not supported by Sandpool",
                )
                .unary();
            }
            let hex: String = data.iter().map(|b| format!("{b:02x}")).collect();
            match op(serde_json::json!({"kind": "input", "pid": pid(), "data": hex})).await {
                Ok(_) => connect::unary_ok(serde_json::json!({})),
                Err(r) => r.into_unary(),
            }
        }
        "CloseStdin" => match op(serde_json::json!({"kind": "close_stdin", "pid": pid()})).await {
            Ok(_) => connect::unary_ok(serde_json::json!({})),
            Err(r) => r.into_unary(),
        },
        other => {
            let err = Error::new(
                Code::Unimplemented,
                format!(
                    "process.Process/{other} is not supported by Sandpool (no terminals, no streamed stdin; SendInput takes stdin)"
                ),
            );
            if streaming {
                connect::stream(&[], Some(&err))
            } else {
                err.unary()
            }
        }
    }
}

/// The most input one `SendInput` takes, bytes (decoded); more goes in further calls.
pub const MAX_STDIN_BYTES: usize = 1 << 20;
/// [`MAX_STDIN_BYTES`] as base64.
const STDIN_B64_BYTES: usize = MAX_STDIN_BYTES.div_ceil(3) * 4;

fn stdin_too_large(n: usize) -> Error {
    Error::new(
        Code::InvalidArgument,
        format!(
            "input.stdin: {n} bytes (base64); a call takes at most {MAX_STDIN_BYTES} bytes of input, send more in further calls"
        ),
    )
}

/// Why a process operation failed: the sandbox is gone (the SDK's not-running answer), or
/// an error to answer as Connect's.
enum OpError {
    Gone(String),
    Rpc(Error),
}

impl OpError {
    fn into_unary(self) -> Response {
        match self {
            OpError::Gone(id) => Refused::NotFound(id).response(),
            OpError::Rpc(e) => e.unary(),
        }
    }

    fn into_stream(self) -> Response {
        match self {
            OpError::Gone(id) => Refused::NotFound(id).response(),
            OpError::Rpc(e) => connect::stream(&[], Some(&e)),
        }
    }
}

async fn run_op(
    sessions: &crate::session::SessionManager,
    id: &str,
    owner: &[u8],
    op: serde_json::Value,
) -> Result<serde_json::Value, OpError> {
    match sessions.op(id, owner, op).await {
        Ok(v) => match v.get("error").and_then(|c| c.as_str()) {
            None => Ok(v),
            Some(code) => {
                let code = match code {
                    "not_found" => Code::NotFound,
                    "resource_exhausted" => Code::ResourceExhausted,
                    "invalid_argument" => Code::InvalidArgument,
                    "failed_precondition" => Code::FailedPrecondition,
                    _ => Code::Internal,
                };
                let msg = v.get("message").and_then(|m| m.as_str()).unwrap_or_default();
                Err(OpError::Rpc(Error::new(code, msg)))
            }
        },
        Err(crate::session::SessionError::NotFound) => Err(OpError::Gone(id.to_owned())),
        Err(crate::session::SessionError::Exhausted(m)) => Err(OpError::Rpc(Error::new(Code::ResourceExhausted, m))),
        Err(crate::session::SessionError::Retry(m)) => Err(OpError::Rpc(Error::new(Code::Unavailable, m))),
        Err(e @ (crate::session::SessionError::Reset(_) | crate::session::SessionError::Paused)) => {
            Err(OpError::Rpc(Error::new(Code::FailedPrecondition, e.to_string())))
        }
        Err(crate::session::SessionError::Exec(e)) => {
            let code = if matches!(e, crate::error::ExecError::InvalidArgument { .. }) {
                Code::InvalidArgument
            } else {
                Code::Internal
            };
            Err(OpError::Rpc(Error::new(code, e.to_string())))
        }
    }
}

/// How often a quiet process is checked on, at most; and how often a keepalive is sent.
const TAIL_PAUSE: std::time::Duration = std::time::Duration::from_millis(100);
/// The most of one output file read at a time: its envelope (base64, about 4/3 of it)
/// must fit a stream's [`connect::Window`] with room to spare.
const READ_PIECE: u64 = 64 << 10;
/// An envelope of [`READ_PIECE`] bytes, at most.
const PIECE_ENVELOPE: usize = (READ_PIECE as usize).div_ceil(3) * 4 + 256;
const KEEPALIVE: std::time::Duration = std::time::Duration::from_secs(20);

/// Streams process `pid`'s events: start, its output as it grows (each stream capped at the
/// executor's output ceiling), and its end; killed at `deadline` (the command's timeout).
fn tail(e: E2b, sbx: super::Sandbox, pid: u64, deadline: Option<tokio::time::Instant>) -> Response {
    let permit = match e.stream_permit(&sbx) {
        Ok(p) => p,
        Err(err) => return connect::stream(&[], Some(&err)),
    };
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<bytes::Bytes, std::io::Error>>(16);
    let cap = e.engine.policy().max.output;
    // What the client has not read yet stays in the process's files: the stream reads on
    // only while its window has room (issue 46: unread streams once held ~29 MiB each).
    let window = connect::Window::default();
    tokio::spawn(async move {
        let _permit = permit;
        let Some(sessions) = e.sessions.clone() else { return };
        let send = |v: serde_json::Value, flags: u8| {
            let tx = tx.clone();
            async move { tx.send(Ok(connect::envelope_bytes(flags, &v).into())).await.is_ok() }
        };
        if !send(serde_json::json!({"event": {"start": {"pid": pid}}}), 0).await {
            return;
        }
        let (mut sent_out, mut sent_err) = (0usize, 0usize);
        let mut pause = std::time::Duration::from_millis(2);
        let mut quiet_since = tokio::time::Instant::now();
        let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
        loop {
            let read = |name: &str, offset: u64, max: u64| {
                let (sessions, id, owner, p) = (
                    sessions.clone(),
                    sbx.id.clone(),
                    sbx.owner.clone(),
                    format!("procs/{pid}/{name}"),
                );
                async move { sessions.state_file(&id, &owner, &p, offset, max).await }
            };
            // The end first: output written before it is then all there to read.
            let exit = match read("exit", 0, 32).await {
                Ok(x) => x,
                Err(_) => {
                    let err = Error::new(
                        Code::NotFound,
                        format!("the sandbox {} was not found: it was killed or timed out", sbx.id),
                    );
                    send(serde_json::json!({"error": err.json()}), connect::END_STREAM).await;
                    return;
                }
            };
            let (mut sent_any, mut behind) = (false, false);
            // Only what is new, a piece at a time; each stream stops at the output ceiling.
            for (name, sent) in [("stdout", &mut sent_out), ("stderr", &mut sent_err)] {
                let left = cap.saturating_sub(*sent as u64).min(READ_PIECE);
                if left > 0 && window.room() < PIECE_ENVELOPE {
                    behind = true; // the client has not read what it was sent
                    continue;
                }
                if left > 0
                    && let Ok(Some(b)) = read(name, *sent as u64, left).await
                    && !b.is_empty()
                {
                    let chunk = b64(&b);
                    let msg = serde_json::json!({"event": {"data": {name: chunk}}});
                    let Some(env) = window.hold(connect::envelope_bytes(0, &msg)) else {
                        behind = true; // cannot happen: the room was checked above
                        continue;
                    };
                    *sent += b.len();
                    sent_any = true;
                    if tx.send(Ok(env)).await.is_err() {
                        return;
                    }
                }
            }
            // The end once all output up to it went out.
            if let Some(code) = exit
                && !sent_any
                && !behind
            {
                let code: i64 = String::from_utf8_lossy(&code).trim().parse().unwrap_or(-1);
                let end = if code >= 0 {
                    serde_json::json!({"exitCode": code, "exited": true, "status": format!("exit status {code}")})
                } else {
                    let status = format!(
                        "signal: {}",
                        if code == -9 {
                            "killed".to_owned()
                        } else {
                            (-code).to_string()
                        }
                    );
                    serde_json::json!({"exitCode": -1, "exited": false, "status": status, "error": status})
                };
                if send(serde_json::json!({"event": {"end": end}}), 0).await {
                    send(serde_json::json!({}), connect::END_STREAM).await;
                }
                return;
            }
            let now = tokio::time::Instant::now();
            if deadline.is_some_and(|d| now >= d) {
                let _ = run_op(
                    &sessions,
                    &sbx.id,
                    &sbx.owner,
                    serde_json::json!({"kind": "signal", "pid": pid, "signal": 9}),
                )
                .await;
                let err = Error::new(
                    Code::DeadlineExceeded,
                    "the command ran past its timeout and was killed",
                );
                send(serde_json::json!({"error": err.json()}), connect::END_STREAM).await;
                return;
            }
            if sent_any {
                pause = std::time::Duration::from_millis(2);
                quiet_since = now;
            } else {
                pause = (pause * 2).min(TAIL_PAUSE);
                if now.duration_since(quiet_since) >= KEEPALIVE {
                    quiet_since = now;
                    // Never waits: a client that reads nothing gets no more keepalives.
                    let ka = connect::envelope_bytes(0, &serde_json::json!({"event": {"keepalive": {}}}));
                    if let Err(tokio::sync::mpsc::error::TrySendError::Closed(_)) = tx.try_send(Ok(ka.into())) {
                        return;
                    }
                }
            }
            tokio::time::sleep(pause).await;
        }
    });
    let body = axum::body::Body::from_stream(tokio_stream::wrappers::ReceiverStream::new(rx));
    ([(http::header::CONTENT_TYPE, "application/connect+json")], body).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sdks_bash_call_is_its_command_with_env_and_cwd_first() {
        let p = serde_json::json!({"cmd": "/bin/bash", "args": ["-l", "-c", "echo $A"], "envs": {"A": "x'y"}, "cwd": "/home/user/d"});
        assert_eq!(
            command_of(&p).unwrap(),
            "(\nexport A='x'\\''y'\ncd -- '/home/user/d' || exit 1\necho $A\n)"
        );
        let p = serde_json::json!({"cmd": "ls", "args": ["-l", "a b"]});
        assert_eq!(command_of(&p).unwrap(), "(\n'ls' '-l' 'a b'\n)");
        let p = serde_json::json!({"cmd": "ls", "cwd": "/etc"});
        assert_eq!(command_of(&p).unwrap_err().code, Code::InvalidArgument);
        let p = serde_json::json!({"cmd": "ls", "envs": {"A-B": "1"}});
        assert!(command_of(&p).unwrap_err().message.starts_with("process.envs"));
        assert!(command_of(&serde_json::json!({})).is_err());
    }
}
