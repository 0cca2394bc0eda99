//! MCP over streamable HTTP: rmcp's service at `/mcp`, behind an optional
//! bearer token, Host and Origin checks.

use super::server::{Handler, State};
use axum::extract::Request;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use sandpool_executor::auth::Token;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// A request's headers must arrive within this (also an idle connection's next request).
const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// At shutdown, how long open connections get to finish once the MCP sessions are cancelled.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(10);

/// How the HTTP endpoint is served.
pub struct Options {
    pub addr: SocketAddr,
    pub allowed_hosts: Vec<String>,
    pub allowed_origins: Vec<String>,
    pub token: Option<Token>,
    pub max_request_bytes: usize,
    pub max_connections: usize,
    /// A request's whole body must arrive within this.
    pub body_timeout: Duration,
}

/// The token HTTP callers must present: the file's content (trimmed) or `env_value`.
pub fn load_token(file: Option<&Path>, env_value: Option<String>) -> anyhow::Result<Option<Token>> {
    let raw = match (file, env_value.filter(|v| !v.is_empty())) {
        (Some(_), Some(_)) => anyhow::bail!("both --http-token-file and SANDPOOL_MCP_TOKEN are set; set one"),
        (Some(p), None) => {
            std::fs::read_to_string(p).map_err(|e| anyhow::anyhow!("--http-token-file {}: {e}", p.display()))?
        }
        (None, Some(v)) => v,
        (None, None) => return Ok(None),
    };
    let t = raw.trim();
    anyhow::ensure!(!t.is_empty(), "the MCP HTTP token is empty");
    Ok(Some(Token::new(t)))
}

/// 401 unless the request carries `authorization: Bearer <token>` (compared in constant time).
async fn require_token(token: Arc<Token>, req: Request, next: Next) -> Response {
    let header = req.headers().get(http::header::AUTHORIZATION).map(|v| v.as_bytes());
    if token.accepts(header) {
        next.run(req).await
    } else {
        (
            http::StatusCode::UNAUTHORIZED,
            [(http::header::WWW_AUTHENTICATE, "Bearer")],
            "missing or wrong bearer token (header `authorization: Bearer <token>`)\n",
        )
            .into_response()
    }
}

/// SIGINT or SIGTERM.
pub async fn shutdown_signal() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term => {}
    }
}

/// Serves until SIGINT or SIGTERM.
pub async fn serve(state: Arc<State>, o: Options) -> anyhow::Result<()> {
    let stop = CancellationToken::new();
    let mut hosts: Vec<String> = StreamableHttpServerConfig::default().allowed_hosts;
    hosts.extend(o.allowed_hosts);
    // An empty Origin list still validates: any request a browser makes carries an Origin,
    // and a page must not drive a code runner on this host unless named here.
    let config = StreamableHttpServerConfig::default()
        .with_allowed_hosts(hosts)
        .with_allowed_origins(o.allowed_origins)
        .enforce_origin_validation()
        .with_max_request_body_bytes(o.max_request_bytes)
        .with_cancellation_token(stop.child_token());
    let service = StreamableHttpService::new(
        move || Ok(Handler(state.clone())),
        LocalSessionManager::default().into(),
        config,
    );
    // The body is read whole, in time, before the MCP service sees it (and after the token check).
    let mut body = sandpool_executor::http::HttpOptions::new(o.max_request_bytes);
    body.body_timeout = o.body_timeout;
    let mut router = axum::Router::new()
        .nest_service("/mcp", service)
        .layer(axum::middleware::from_fn_with_state(
            Arc::new(body),
            sandpool_executor::http::read_body_in_time,
        ));
    match o.token {
        Some(t) => {
            let t = Arc::new(t);
            router = router.layer(axum::middleware::from_fn(move |req: Request, next: Next| {
                require_token(t.clone(), req, next)
            }));
        }
        None if !o.addr.ip().is_loopback() => {
            tracing::warn!(
                "serving MCP on {} with no token: anyone who reaches it runs code (set --http-token-file)",
                o.addr
            );
        }
        None => {}
    }
    let listener = tokio::net::TcpListener::bind(o.addr)
        .await
        .map_err(|e| anyhow::anyhow!("--http-listen {}: {e}", o.addr))?;
    let bound = listener.local_addr()?;
    // Tests and scripts read the port from here when --http-listen asks for port 0.
    eprintln!("sandpool mcp: serving MCP over streamable HTTP at http://{bound}/mcp");
    accept_loop(listener, router, o.max_connections, stop).await;
    Ok(())
}

/// Serves `app` until SIGINT or SIGTERM, through the executor's HTTP accept
/// loop (connection cap, header deadline), then ends the MCP sessions.
async fn accept_loop(
    listener: tokio::net::TcpListener,
    app: axum::Router,
    max_connections: usize,
    stop: CancellationToken,
) {
    let graceful =
        sandpool_executor::http::accept_loop(listener, app, max_connections, HEADER_TIMEOUT, shutdown_signal()).await;
    // Ends the MCP sessions and their event streams, so open connections can close.
    stop.cancel();
    if tokio::time::timeout(CLOSE_TIMEOUT, graceful.shutdown()).await.is_err() {
        tracing::warn!("MCP HTTP connections still open after {CLOSE_TIMEOUT:?}; closing them");
    }
}
