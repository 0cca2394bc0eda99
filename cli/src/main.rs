//! `sandpool`: the user CLI. `exec` runs one file, through an endpoint or an
//! embedded executor; `eval` judges a whole dataset; `bench` loads an endpoint;
//! `bench-isolation` measures the sandbox against bare spawns; `mcp` serves
//! MCP tools that run code.

mod bench_isolation;
mod eval;
mod exec;
mod load;
mod mcp;
mod soak;
mod streams;
mod target;

use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(name = "sandpool", version, about = "Run and judge untrusted code with Sandpool")]
struct Cli {
    /// File holding the bearer token the executors want (default: $SANDPOOL_TOKEN).
    #[arg(long, global = true, env = "SANDPOOL_TOKEN_FILE")]
    token_file: Option<std::path::PathBuf>,
    /// Priority of every request: interactive, normal or batch (default: the tenant's, see docs/tenants.md).
    #[arg(long, global = true, env = "SANDPOOL_PRIORITY")]
    priority: Option<String>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run one source file and print its verdict, output and usage.
    Exec(Box<exec::ExecArgs>),
    /// Measure the sandbox's cost: sandboxed runs over gRPC against bare process spawns.
    BenchIsolation(Box<bench_isolation::BenchArgs>),
    /// Judge every record of a JSONL dataset: progress, summary by verdict and language, pass@k.
    Eval(Box<eval::EvalArgs>),
    /// Send N Execute requests at concurrency C: throughput, latency percentiles, verdicts.
    Bench(Box<load::LoadArgs>),
    /// Load and fault suite: N mixed requests against one executor, every verdict checked, its resources compared.
    Soak(Box<soak::SoakArgs>),
    /// Serve MCP tools that run code (stdio, or streamable HTTP with --http-listen).
    Mcp(Box<mcp::McpArgs>),
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into());
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(sandpool_executor::config::colour(&std::io::stderr()))
        .init();
    target::set_token(cli.token_file.as_deref(), std::env::var("SANDPOOL_TOKEN").ok())?;
    target::set_priority(cli.priority.as_deref())?;
    let rt = tokio::runtime::Runtime::new()?;
    let code = rt.block_on(async {
        match cli.command {
            Command::Exec(a) => exec::run(*a).await,
            Command::BenchIsolation(a) => bench_isolation::run(*a).await,
            Command::Eval(a) => eval::run(*a).await,
            Command::Bench(a) => load::run(*a).await,
            Command::Soak(a) => soak::run(*a).await,
            Command::Mcp(a) => mcp::run(*a).await,
        }
    })?;
    std::process::exit(code)
}
