//! `sandpool-gateway`: the HTTP front door of a pool.

use clap::Parser;
use sandpool_gateway::Args;

fn init_tracing(json: bool) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into());
    let b = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    if json { b.json().init() } else { b.init() }
}

async fn run(args: Args) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .map_err(|e| anyhow::anyhow!("binding --listen {}: {e}", args.listen))?;
    let metrics_listener = tokio::net::TcpListener::bind(args.metrics_listen)
        .await
        .map_err(|e| anyhow::anyhow!("binding --metrics-listen {}: {e}", args.metrics_listen))?;
    sandpool_gateway::run(
        args,
        listener,
        metrics_listener,
        sandpool_gateway::serve::termination_signal(),
    )
    .await?;
    Ok(())
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let args = Args::parse();
    init_tracing(args.log_json);
    match run(args).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            // The message alone (a backtrace says nothing an operator can act on).
            tracing::error!("{e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
