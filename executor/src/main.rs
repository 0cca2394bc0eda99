//! `sandpool-executor`: the gRPC server.

use clap::Parser;
use sandpool_executor::config::ServerArgs;
use sandpool_executor::server::{self, ServeOptions};
use std::sync::Arc;

fn init_tracing(json: bool) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into());
    let b = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    if json { b.json().init() } else { b.init() }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = ServerArgs::parse();
    init_tracing(args.log_json);
    let engine = Arc::new(args.executor.build_engine().await?);
    let opts = ServeOptions {
        listen: args.listen,
        metrics_listen: args.metrics_listen,
        max_request_bytes: args.max_request_bytes,
        drain_timeout: args.drain_timeout(),
    };
    let listener = tokio::net::TcpListener::bind(opts.listen)
        .await
        .map_err(|e| server::ServeError::Bind(opts.listen, e))?;
    let http = match args.http_listen {
        Some(addr) => Some(
            tokio::net::TcpListener::bind(addr)
                .await
                .map_err(|e| server::ServeError::Bind(addr, e))?,
        ),
        None => None,
    };
    server::serve_with_http(engine, listener, http, opts, server::termination_signal()).await?;
    Ok(())
}
