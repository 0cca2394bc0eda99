//! `sandpool-executor`: the gRPC server.

use clap::Parser;
use sandpool_executor::config::ServerArgs;
use sandpool_executor::server::{self, ServeOptions};
use std::sync::Arc;

fn init_tracing(json: bool) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into());
    let b = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(sandpool_executor::config::colour(&std::io::stderr()));
    if json { b.json().init() } else { b.init() }
}

/// A panic's message and place go where Kubernetes shows why the container stopped (the
/// pool's condition quotes it), then the default report runs.
fn report_panics() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let payload = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_default();
        let at = info.location().map(|l| format!(" at {l}")).unwrap_or_default();
        termination_message(&format!("panic{at}: {payload}"));
        default(info);
    }));
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let args = ServerArgs::parse();
    init_tracing(args.log_json);
    report_panics();
    match run(args).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            let why = describe(&e);
            tracing::error!("{why}");
            termination_message(&why);
            std::process::ExitCode::FAILURE
        }
    }
}

/// The error and its causes, each said once (most of our errors already quote their source).
fn describe(e: &anyhow::Error) -> String {
    let mut out = e.to_string();
    for cause in e.chain().skip(1) {
        let c = cause.to_string();
        if !out.contains(&c) {
            out.push_str(": ");
            out.push_str(&c);
        }
    }
    out
}

/// Where Kubernetes reads a container's termination message (`kubectl describe pod`).
const TERMINATION_LOG: &str = "/dev/termination-log";

/// Leaves why the executor stopped where Kubernetes shows it; a no-op outside a pod.
fn termination_message(msg: &str) {
    let path = std::path::Path::new(TERMINATION_LOG);
    // The kubelet provides the file; never create one in /dev.
    if path.is_file() {
        let _ = std::fs::write(path, msg);
    }
}

async fn run(args: ServerArgs) -> anyhow::Result<()> {
    let tenants = args.tenants()?;
    if args.executor.max_inflight_bytes < args.max_request_bytes as u64 {
        anyhow::bail!(
            "--max-inflight-bytes ({}) is below --max-request-bytes ({}): the largest request allowed could never be taken",
            args.executor.max_inflight_bytes,
            args.max_request_bytes
        );
    }
    // Checked now so a bad store configuration fails the start; opened at the first pause.
    let store = args.executor.session_store.config(&args.executor.work_root)?;
    let store_ttl = std::time::Duration::from_secs(args.executor.session_store.session_store_ttl_secs);
    tracing::debug!(?store, "session store configured");
    let engine = Arc::new(args.executor.build_engine().await?);
    // Outside the runtime: what ends a wedged executor cannot run on it.
    engine.watchdog().guard_process(
        std::time::Duration::from_secs(args.watchdog_stall_secs),
        args.drain_timeout() + std::time::Duration::from_secs(15),
        termination_message,
    )?;
    let opts = ServeOptions {
        listen: args.listen,
        metrics_listen: args.metrics_listen,
        max_request_bytes: args.max_request_bytes,
        drain_timeout: args.drain_timeout(),
        http: args.http_options(),
        tenants,
        grpc_max_connections: args.grpc_max_connections.max(1),
        grpc_silent_timeout: std::time::Duration::from_millis(args.grpc_silent_timeout_ms.max(1)),
        grpc_body_timeout: std::time::Duration::from_millis(args.grpc_body_timeout_ms.max(1)),
        grpc_max_streams: args.grpc_max_streams.max(1),
        advertise: Some(args.advertise()),
        sessions: args.executor.session_policy(),
        session_store: Some((store, store_ttl)),
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
