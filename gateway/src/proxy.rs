//! Forwarding one request: to the session's executor when it names one, otherwise to
//! the least busy executor, again to another only when the first refused it unrun.

use crate::backends::{Backend, Backends, Outstanding};
use crate::body::{self, BoxBody, BoxError, Prepared};
use crate::config::ProxyOptions;
use crate::metrics::Metrics;
use crate::session::{self, Binding, SessionId};
use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Request, Response, StatusCode};
use http_body::Body;
use http_body_util::BodyExt;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The forwarding half of the gateway, shared by all connections.
#[derive(Debug)]
pub struct Proxy {
    pub backends: Arc<Backends>,
    pub metrics: Arc<Metrics>,
    /// Sessions answering from another executor than their id names.
    pub moved: crate::moved::Moved,
    client: Client<HttpConnector, BoxBody>,
    opts: ProxyOptions,
}

/// Why an attempt got no response, for metrics and the decision to retry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// No connection (refused, unreachable, timed out): nothing was sent.
    Connect,
    /// The connection was reset or refused mid-way before any response.
    Reset,
    /// Anything else (a malformed response, the connection closed after the request).
    Other,
}

impl Failure {
    pub fn reason(self) -> &'static str {
        match self {
            Failure::Connect => "connect",
            Failure::Reset => "reset",
            Failure::Other => "other",
        }
    }

    fn of(e: &hyper_util::client::legacy::Error) -> Failure {
        if e.is_connect() {
            return Failure::Connect;
        }
        let mut src: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(e);
        while let Some(s) = src {
            if let Some(io) = s.downcast_ref::<std::io::Error>() {
                use std::io::ErrorKind::{ConnectionRefused, ConnectionReset};
                if matches!(io.kind(), ConnectionReset | ConnectionRefused) {
                    return Failure::Reset;
                }
            }
            src = s.source();
        }
        Failure::Other
    }
}

/// What to do after an attempt at a stateless request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// Answer the client with what came (a response, or an error).
    Answer,
    /// Send it to another backend.
    Retry,
}

/// Whether a stateless request is sent again: only when the backend refused it before
/// running anything (no connection, a reset before any response, 429 queue full, 503
/// draining or out of budget), the body was kept, and the retries are not used up. Any
/// other answer may come from a run that happened, and running code twice is not ours
/// to decide.
pub fn decide(outcome: Result<StatusCode, Failure>, body_kept: bool, retries_left: usize) -> Next {
    let refused = match outcome {
        Ok(s) => s == StatusCode::TOO_MANY_REQUESTS || s == StatusCode::SERVICE_UNAVAILABLE,
        Err(f) => matches!(f, Failure::Connect | Failure::Reset),
    };
    if refused && body_kept && retries_left > 0 {
        Next::Retry
    } else {
        Next::Answer
    }
}

/// Headers that describe one connection, not the request: never forwarded.
const HOP_BY_HOP: [HeaderName; 8] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
    header::PROXY_AUTHENTICATE,
    header::PROXY_AUTHORIZATION,
    header::TE,
    header::TRAILER,
    header::UPGRADE,
];

/// Removes hop-by-hop headers, and those the `Connection` header names. Transfer-Encoding
/// goes too: hyper frames each side's body itself.
pub fn strip_hop_by_hop(h: &mut HeaderMap) {
    let named: Vec<HeaderName> = h
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|n| HeaderName::from_bytes(n.trim().as_bytes()).ok())
        .collect();
    for n in named.iter().chain(HOP_BY_HOP.iter()) {
        h.remove(n);
    }
    h.remove(header::TRANSFER_ENCODING);
}

/// A JSON error answer in E2B's shape (`code`, `message`).
pub fn json_error(status: StatusCode, message: &str) -> Response<BoxBody> {
    let body = serde_json::json!({ "code": status.as_u16(), "message": message }).to_string();
    let mut r = Response::new(body::full(Bytes::from(body)));
    *r.status_mut() = status;
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    r
}

/// Counts a request when its response has ended (or was abandoned), with its duration;
/// holds its backend's outstanding count until then.
struct Done {
    metrics: Arc<Metrics>,
    kind: &'static str,
    status: Option<u16>,
    start: Instant,
    _outstanding: Option<Outstanding>,
}

impl Drop for Done {
    fn drop(&mut self) {
        self.metrics
            .request_done(self.kind, self.status, self.start.elapsed().as_secs_f64());
    }
}

impl Proxy {
    pub fn new(backends: Arc<Backends>, metrics: Arc<Metrics>, opts: ProxyOptions) -> Self {
        let mut conn = HttpConnector::new();
        conn.set_connect_timeout(Some(opts.connect_timeout));
        // Small responses must not wait for a delayed ACK.
        conn.set_nodelay(true);
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(opts.pool_idle_timeout)
            .pool_timer(hyper_util::rt::TokioTimer::new())
            .build(conn);
        Proxy {
            backends,
            metrics,
            moved: crate::moved::Moved::default(),
            client,
            opts,
        }
    }

    /// Answers one client request.
    pub async fn handle<B>(&self, req: Request<B>) -> Response<BoxBody>
    where
        B: Body<Data = Bytes> + Send + Unpin + 'static,
        B::Error: Into<BoxError>,
    {
        let start = Instant::now();
        if let Some(listing) = crate::list::is_list(req.method(), req.uri().path()) {
            let resp = self.list_all(listing, req).await;
            self.metrics
                .request_done("list", Some(resp.status().as_u16()), start.elapsed().as_secs_f64());
            return resp;
        }
        let (kind, resp, outstanding) = match session::classify(req.uri().path(), req.headers()) {
            Err(e) => ("session", json_error(StatusCode::BAD_REQUEST, &e.to_string()), None),
            Ok(Binding::Session { id, control }) => {
                let (r, o) = self.session(req, &id, control).await;
                ("session", r, o)
            }
            Ok(Binding::Stateless) => {
                let (r, o) = self.stateless(req).await;
                ("stateless", r, o)
            }
        };
        let done = Done {
            metrics: self.metrics.clone(),
            kind,
            status: Some(resp.status().as_u16()),
            start,
            _outstanding: outstanding,
        };
        // The count and duration end with the body: responses stream, some for minutes.
        resp.map(|b| {
            b.map_frame(move |f| {
                let _ = &done;
                f
            })
            .boxed_unsync()
        })
    }

    /// A session-bound request: to the executor holding it (its id's, or the one it moved
    /// to), live or draining (a terminating pod answers its sessions' calls until its drain
    /// has stored them, then refuses unrun). When that one is gone (not a backend, or it
    /// cannot be connected to, or it refuses unrun), to another live one, the most recently
    /// discovered first (a rollout's new pods, which are not drained next, so the session
    /// moves once), then least outstanding, which resumes it from the shared store; the
    /// executor that answers is remembered.
    async fn session<B>(
        &self,
        req: Request<B>,
        id: &SessionId,
        control: bool,
    ) -> (Response<BoxBody>, Option<Outstanding>)
    where
        B: Body<Data = Bytes> + Send + Unpin + 'static,
        B::Error: Into<BoxError>,
    {
        let set = self.backends.snapshot();
        let named = self.moved.get(&id.id).unwrap_or_else(|| id.executor.clone());
        // Tried even when marked down: the mark spreads stateless calls away from a backend
        // that once failed to connect, but only the holder can serve its sessions (a draining
        // one until it has stored them; another executor asked meanwhile cannot find them).
        let first = set.holder(&named).cloned();
        if first.is_none() && set.list.is_empty() {
            // No executor at all: say so as E2B clients expect.
            let r = if control {
                json_error(StatusCode::NOT_FOUND, &format!("sandbox {} was not found", id.id))
            } else {
                json_error(StatusCode::BAD_GATEWAY, &format!("The sandbox {} was not found", id.id))
            };
            return (r, None);
        }
        let (parts, b) = req.into_parts();
        let (kept, mut streamed) = match body::prepare(b, self.opts.max_retry_body_bytes, self.opts.body_timeout).await
        {
            Ok(Prepared::Kept(b)) => (Some(b), None),
            Ok(Prepared::Streamed(s)) => (None, Some(s)),
            Err(e @ body::BodyError::Timeout(_)) => {
                return (json_error(StatusCode::REQUEST_TIMEOUT, &e.to_string()), None);
            }
            Err(e) => return (json_error(StatusCode::BAD_REQUEST, &e.to_string()), None),
        };
        let mut tried: Vec<Arc<Backend>> = Vec::new();
        let mut next = first;
        let mut last_error = format!("its executor {named} is gone");
        while let Some(backend) = next.take().or_else(|| self.backends.choose_for_moved(&set, &tried)) {
            tried.push(backend.clone());
            let body = match (&kept, streamed.take()) {
                (Some(b), _) => body::full(b.clone()),
                (None, Some(s)) => s,
                (None, None) => break,
            };
            let retries_left = (kept.is_some() && set.untried(&tried) > 0) as usize;
            let out = Outstanding::new(backend.clone(), self.metrics.clone());
            match self.send(&backend, &parts, body).await {
                Ok(resp) => {
                    // A draining executor refuses unrun (503) while it pauses the session
                    // into the store; a busy one (429) still holds it live, so it answers.
                    if resp.status() == StatusCode::SERVICE_UNAVAILABLE
                        && decide(Ok(resp.status()), kept.is_some(), retries_left) == Next::Retry
                    {
                        self.metrics.retries.inc();
                        tracing::debug!(backend = %backend.name, session = %id.id, status = %resp.status(), "session refused; trying another executor");
                        discard(resp);
                        continue;
                    }
                    let by = resp
                        .headers()
                        .get(crate::moved::EXECUTOR_HEADER)
                        .and_then(|v| v.to_str().ok())
                        .filter(|by| set.get(by).is_some());
                    if let Some(by) = by {
                        if by != named {
                            tracing::info!(session = %id.id, from = %named, to = %by, "session answered from another executor");
                        }
                        self.moved.answered(&id.id, &id.executor, by);
                    }
                    return (resp, Some(out));
                }
                Err((f, e)) => {
                    tracing::warn!(backend = %backend.name, session = %id.id, error = %e, "session request failed");
                    last_error = format!("its executor {} did not answer ({})", backend.name, f.reason());
                    if decide(Err(f), kept.is_some(), retries_left) == Next::Retry {
                        self.metrics.retries.inc();
                        continue;
                    }
                    break;
                }
            }
        }
        let msg = format!("sandbox {}: {last_error}", id.id);
        (json_error(StatusCode::BAD_GATEWAY, &msg), None)
    }

    /// One of E2B's lists over the pool: every executor asked for one page after the
    /// client's cursor, the pages merged into the client's. An executor that cannot be
    /// reached is left out (its sandboxes cannot be used either); a refusal (a bad token, a
    /// bad query) is the client's answer.
    async fn list_all<B>(&self, listing: crate::list::Listing, req: Request<B>) -> Response<BoxBody> {
        let set = self.backends.snapshot();
        let (parts, _) = req.into_parts();
        let (limit, token, filters) = crate::list::split_query(parts.uri.query());
        let limit = match limit.as_deref().map(str::parse::<usize>) {
            None => 100,
            Some(Ok(n)) if (1..=1000).contains(&n) => n,
            Some(_) => return json_error(StatusCode::BAD_REQUEST, "limit: must be 1 to 1000"),
        };
        let query = crate::list::executor_query(&filters, limit, token.as_deref());
        let mut one = parts.clone();
        match format!("{}?{query}", parts.uri.path()).parse() {
            Ok(u) => one.uri = u,
            Err(_) => return json_error(StatusCode::BAD_REQUEST, "the query is not valid"),
        }
        let asks = set.list.iter().map(|b| {
            let one = &one;
            async move {
                let r = self.send(b, one, body::full(Bytes::new())).await;
                match r {
                    Ok(resp) => {
                        let status = resp.status();
                        let more = resp.headers().contains_key("x-next-token");
                        let bytes = tokio::time::timeout(self.opts.body_timeout, resp.into_body().collect()).await;
                        match bytes {
                            Ok(Ok(c)) => Some((status, more, c.to_bytes())),
                            _ => None,
                        }
                    }
                    Err(_) => None,
                }
            }
        });
        let (mut lists, mut more) = (Vec::new(), false);
        for (status, has_more, bytes) in futures::future::join_all(asks).await.into_iter().flatten() {
            if status != StatusCode::OK {
                let mut r = Response::new(body::full(bytes));
                *r.status_mut() = status;
                r.headers_mut()
                    .insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
                return r;
            }
            match serde_json::from_slice::<Vec<serde_json::Value>>(&bytes) {
                Ok(l) => {
                    more |= has_more;
                    lists.push(l);
                }
                Err(e) => tracing::warn!(error = %e, ?listing, "an executor's list was not a JSON list"),
            }
        }
        let (page, next) = crate::list::page(listing, lists, limit, more);
        let mut r = Response::new(body::full(Bytes::from(serde_json::Value::Array(page).to_string())));
        r.headers_mut()
            .insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
        if let Some(v) = next.and_then(|n| HeaderValue::from_str(&n).ok()) {
            r.headers_mut().insert("x-next-token", v);
        }
        r
    }

    /// A stateless request: the least busy backend, then others while they refuse it unrun.
    async fn stateless<B>(&self, req: Request<B>) -> (Response<BoxBody>, Option<Outstanding>)
    where
        B: Body<Data = Bytes> + Send + Unpin + 'static,
        B::Error: Into<BoxError>,
    {
        let set = self.backends.snapshot();
        if set.list.is_empty() {
            return (
                json_error(StatusCode::SERVICE_UNAVAILABLE, "no executors known yet"),
                None,
            );
        }
        let (parts, b) = req.into_parts();
        let (kept, mut streamed) = match body::prepare(b, self.opts.max_retry_body_bytes, self.opts.body_timeout).await
        {
            Ok(Prepared::Kept(b)) => (Some(b), None),
            Ok(Prepared::Streamed(s)) => (None, Some(s)),
            Err(e @ body::BodyError::Timeout(_)) => {
                return (json_error(StatusCode::REQUEST_TIMEOUT, &e.to_string()), None);
            }
            Err(e) => return (json_error(StatusCode::BAD_REQUEST, &e.to_string()), None),
        };
        let mut tried: Vec<Arc<Backend>> = Vec::new();
        let mut last_error = String::from("no backend could be tried");
        while let Some(backend) = self.backends.choose(&set, &tried) {
            tried.push(backend.clone());
            let retries_left = self
                .opts
                .retries
                .saturating_sub(tried.len() - 1)
                .min(set.list.len() - tried.len());
            // A kept body goes to every attempt; a streamed one only to the first.
            let body = match (&kept, streamed.take()) {
                (Some(b), _) => body::full(b.clone()),
                (None, Some(s)) => s,
                (None, None) => break,
            };
            let kept = kept.is_some();
            let out = Outstanding::new(backend.clone(), self.metrics.clone());
            match self.send(&backend, &parts, body).await {
                Ok(resp) => {
                    if decide(Ok(resp.status()), kept, retries_left) == Next::Retry {
                        self.metrics
                            .upstream_error(&format!("status_{}", resp.status().as_u16()));
                        self.metrics.retries.inc();
                        tracing::debug!(backend = %backend.name, status = %resp.status(), "refused; trying another");
                        discard(resp);
                        continue;
                    }
                    return (resp, Some(out));
                }
                Err((f, e)) => {
                    last_error = format!("{}: {e}", backend.name);
                    if decide(Err(f), kept, retries_left) == Next::Retry {
                        self.metrics.retries.inc();
                        continue;
                    }
                    break;
                }
            }
        }
        let msg = format!("no executor answered: {last_error}");
        (json_error(StatusCode::BAD_GATEWAY, &msg), None)
    }

    /// One attempt: `parts` with `body` to `backend`. Marks the backend down when it cannot
    /// be connected to, up when it answers.
    async fn send(
        &self,
        backend: &Backend,
        parts: &http::request::Parts,
        body: BoxBody,
    ) -> Result<Response<BoxBody>, (Failure, hyper_util::client::legacy::Error)> {
        let mut req = Request::new(body);
        *req.method_mut() = parts.method.clone();
        let pq = parts.uri.path_and_query().map_or("/", |p| p.as_str());
        // Built from a parsed request's own path and a backend address: valid unless the
        // address is not a host:port, which the backend source has checked.
        match format!("http://{}{pq}", backend.addr).parse() {
            Ok(u) => *req.uri_mut() = u,
            Err(e) => {
                tracing::error!(backend = %backend.name, addr = %backend.addr, error = %e, "backend address is not a URI authority")
            }
        }
        *req.headers_mut() = parts.headers.clone();
        strip_hop_by_hop(req.headers_mut());
        // Answered to the client already (hyper sends 100 Continue when the body is read);
        // the body goes upstream without waiting for one.
        req.headers_mut().remove(header::EXPECT);
        match self.client.request(req).await {
            Ok(resp) => {
                backend.mark_up();
                let (mut rp, b) = resp.into_parts();
                strip_hop_by_hop(&mut rp.headers);
                Ok(Response::from_parts(
                    rp,
                    b.map_err(|e| -> BoxError { Box::new(e) }).boxed_unsync(),
                ))
            }
            Err(e) => {
                let f = Failure::of(&e);
                self.metrics.upstream_error(f.reason());
                if f == Failure::Connect {
                    backend.mark_down(self.opts.down_for);
                }
                tracing::debug!(backend = %backend.name, error = %e, reason = f.reason(), "upstream attempt failed");
                Err((f, e))
            }
        }
    }
}

/// Reads a refusal's (small) body to its end in the background, so its keep-alive
/// connection goes back to the pool instead of being closed.
fn discard(resp: Response<BoxBody>) {
    tokio::spawn(async move {
        let _ = tokio::time::timeout(Duration::from_secs(5), resp.into_body().collect()).await;
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_upstream_error_reason_is_exported_from_the_start() {
        let known = crate::metrics::UPSTREAM_ERRORS;
        for f in [Failure::Connect, Failure::Reset, Failure::Other] {
            assert!(known.contains(&f.reason()), "{}", f.reason());
        }
        // The retried refusals are counted as `status_<code>`.
        for code in [429u16, 503] {
            let status = StatusCode::from_u16(code).expect("status");
            assert_eq!(decide(Ok(status), true, 1), Next::Retry);
            assert!(known.contains(&format!("status_{code}").as_str()), "{code}");
        }
        let text = Metrics::new().text();
        for reason in known {
            let series = format!("sandpool_gateway_upstream_errors_total{{reason=\"{reason}\"}} 0");
            assert!(text.contains(&series), "{text}");
        }
        for kind in crate::metrics::KINDS {
            let series = format!("sandpool_gateway_requests_total{{kind=\"{kind}\",outcome=\"5xx\"}} 0");
            assert!(text.contains(&series), "{text}");
        }
    }

    #[test]
    fn retries_only_what_was_refused_unrun() {
        let s = |c: u16| Ok(StatusCode::from_u16(c).expect("status"));
        assert_eq!(decide(s(429), true, 1), Next::Retry);
        assert_eq!(decide(s(503), true, 1), Next::Retry);
        assert_eq!(decide(Err(Failure::Connect), true, 1), Next::Retry);
        assert_eq!(decide(Err(Failure::Reset), true, 1), Next::Retry);
        // Answers a run may have produced are the client's.
        for c in [200, 400, 404, 500, 502, 504] {
            assert_eq!(decide(s(c), true, 2), Next::Answer, "{c}");
        }
        assert_eq!(decide(Err(Failure::Other), true, 2), Next::Answer);
        // A body not kept cannot be sent again; no retries left is no retry.
        assert_eq!(decide(s(429), false, 2), Next::Answer);
        assert_eq!(decide(Err(Failure::Connect), false, 2), Next::Answer);
        assert_eq!(decide(s(503), true, 0), Next::Answer);
    }

    #[test]
    fn hop_by_hop_headers_go_the_rest_stay() {
        let mut h = HeaderMap::new();
        for (k, v) in [
            ("connection", "keep-alive, x-private"),
            ("keep-alive", "timeout=5"),
            ("x-private", "1"),
            ("transfer-encoding", "chunked"),
            ("upgrade", "websocket"),
            ("authorization", "Bearer t"),
            ("x-api-key", "k"),
            ("x-access-token", "a"),
            ("content-length", "3"),
        ] {
            h.insert(HeaderName::from_static(k), HeaderValue::from_str(v).expect("value"));
        }
        strip_hop_by_hop(&mut h);
        let mut left: Vec<&str> = h.keys().map(|k| k.as_str()).collect();
        left.sort_unstable();
        assert_eq!(left, ["authorization", "content-length", "x-access-token", "x-api-key"]);
    }

    #[test]
    fn errors_are_e2b_shaped() {
        let r = json_error(StatusCode::NOT_FOUND, "sandbox x was not found");
        assert_eq!(r.status(), 404);
        assert_eq!(
            r.headers().get(header::CONTENT_TYPE).map(|v| v.as_bytes()),
            Some(&b"application/json"[..])
        );
    }
}
