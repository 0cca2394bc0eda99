//! `sandpool mcp`: an MCP server (stdio, or streamable HTTP with `--http-listen`)
//! whose tools run code on an embedded executor or a remote `--endpoint`.

mod backend;
mod http;
mod server;
mod session_tools;
mod tools;

use backend::Backend;
use rmcp::ServiceExt;
use sandpool_executor::config::ExecutorArgs;
use server::{Handler, State};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

#[derive(Debug, clap::Args)]
pub struct McpArgs {
    /// Serve MCP over streamable HTTP at http://ADDR/mcp instead of stdio.
    #[arg(long, env = "SANDPOOL_MCP_HTTP_LISTEN")]
    pub http_listen: Option<SocketAddr>,
    /// HTTP: Host header values accepted besides loopback ones, e.g. a Service's name
    /// (comma-separated); guards against DNS rebinding.
    #[arg(long, env = "SANDPOOL_MCP_ALLOWED_HOSTS", value_delimiter = ',')]
    pub http_allowed_hosts: Vec<String>,
    /// HTTP: browser Origins accepted, with scheme (comma-separated); requests
    /// carrying any other Origin are refused (default: none, so browsers are refused).
    #[arg(long, env = "SANDPOOL_MCP_ALLOWED_ORIGINS", value_delimiter = ',')]
    pub http_allowed_origins: Vec<String>,
    /// HTTP: a file holding the bearer token callers must send (`authorization: Bearer <token>`);
    /// or set SANDPOOL_MCP_TOKEN.
    #[arg(long, env = "SANDPOOL_MCP_TOKEN_FILE")]
    pub http_token_file: Option<PathBuf>,
    /// HTTP: largest request body, bytes (413 past it).
    #[arg(long, env = "SANDPOOL_MCP_MAX_REQUEST_BYTES", default_value_t = 16 << 20)]
    pub http_max_request_bytes: usize,
    /// HTTP: a request's whole body must arrive within this, ms, on every route and for
    /// every caller; otherwise 408 and the connection closes. As long as the header
    /// deadline (10 s) by default, so a client trickling its body holds a connection no
    /// longer than one trickling its headers.
    #[arg(long, env = "SANDPOOL_MCP_BODY_TIMEOUT_MS", default_value_t = 10_000)]
    pub http_body_timeout_ms: u64,
    /// HTTP: connections served at once; more wait to be accepted.
    #[arg(long, env = "SANDPOOL_MCP_MAX_CONNECTIONS", default_value_t = 256)]
    pub http_max_connections: usize,
    /// Executor(s): host:port, dns:///pool.ns.svc.cluster.local:50051 (every address), or a,b,... (default: embedded).
    #[arg(long, env = "SANDPOOL_ENDPOINT")]
    pub endpoint: Option<String>,
    /// Send a session's calls through --endpoint too, not to the executor address its create
    /// response names: for an --endpoint that reaches exactly one executor, e.g. a port-forward
    /// from outside the cluster, where pod addresses are out of reach.
    #[arg(long, env = "SANDPOOL_MCP_NO_SESSION_ROUTING")]
    pub no_session_routing: bool,
    #[command(flatten)]
    pub executor: ExecutorArgs,
}

/// The languages the executor offers now, for the tools' schemas; empty (any
/// name accepted, the executor judges) when it cannot say.
async fn languages(backend: &Backend) -> Vec<String> {
    match backend.capabilities().await {
        Ok(caps) => caps
            .languages
            .into_iter()
            .filter(|l| l.available)
            .map(|l| l.name)
            .collect(),
        Err(e) => {
            tracing::warn!(
                "GetCapabilities failed ({}); tool schemas list no languages",
                e.message()
            );
            Vec::new()
        }
    }
}

pub async fn run(a: McpArgs) -> anyhow::Result<i32> {
    // Read the token first: a missing file should fail before an executor starts.
    let token = match a.http_listen {
        Some(_) => http::load_token(a.http_token_file.as_deref(), std::env::var("SANDPOOL_MCP_TOKEN").ok())?,
        None => None,
    };
    let backend = Backend::new(a.endpoint.as_deref(), !a.no_session_routing, &a.executor).await?;
    let tools = tools::list(&languages(&backend).await);
    let state = Arc::new(State { backend, tools });
    match a.http_listen {
        Some(addr) => {
            let opts = http::Options {
                addr,
                allowed_hosts: a.http_allowed_hosts,
                allowed_origins: a.http_allowed_origins,
                token,
                max_request_bytes: a.http_max_request_bytes,
                max_connections: a.http_max_connections,
                body_timeout: std::time::Duration::from_millis(a.http_body_timeout_ms.max(1)),
            };
            http::serve(state.clone(), opts).await?;
        }
        None => {
            // stdout carries the protocol: logs go to stderr (see main).
            let running = Handler(state.clone())
                .serve(rmcp::transport::stdio())
                .await
                .map_err(|e| anyhow::anyhow!("MCP handshake on stdio: {e}"))?;
            // Until the client closes stdin, or stops this process (SIGTERM, often after
            // closing stdin and waiting a little).
            tokio::select! {
                r = running.waiting() => { r?; }
                () = http::shutdown_signal() => {}
            }
        }
    }
    // The client is gone (stdio closed) or the server was stopped: end the sessions it left.
    state.backend.close_all().await;
    Ok(0)
}
