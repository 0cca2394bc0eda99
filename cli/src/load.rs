//! `sandpool bench`: N Execute requests at concurrency C against an endpoint (or an
//! embedded executor); throughput, latency percentiles, verdicts, and the requests
//! that got no response (a gRPC error instead of a verdict: it must be 0).

use crate::eval::{connect, progress_bar};
use anyhow::{Context, bail};
use sandpool_executor::config::ExecutorArgs;
use sandpool_proto::v1 as pb;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::Semaphore;

#[derive(Debug, clap::Args)]
pub struct LoadArgs {
    /// Executor(s): host:port, dns:///pool.ns.svc.cluster.local:50051 (every address), or a,b,... (default: embedded).
    #[arg(long, env = "SANDPOOL_ENDPOINT")]
    endpoint: Option<String>,
    /// Requests to send.
    #[arg(short = 'n', long, default_value_t = 200)]
    requests: usize,
    /// Requests in flight at once.
    #[arg(short = 'c', long, default_value_t = 8)]
    concurrency: usize,
    /// Language of the program.
    #[arg(long, default_value = "python")]
    language: String,
    /// Program to run (default: a small Python computation).
    #[arg(long)]
    code: Option<PathBuf>,
    /// Per-request deadline, ms.
    #[arg(long, default_value_t = 60_000)]
    timeout_ms: u64,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
    /// No progress bar.
    #[arg(long)]
    quiet: bool,
    #[command(flatten)]
    executor: ExecutorArgs,
}

const DEFAULT_CODE: &str = "print(sum(i * i for i in range(10000)))\n";

/// What one request came back with.
enum Outcome {
    Verdict(i32),
    NoResponse(tonic::Code),
}

/// The value at quantile `q` of sorted `xs` (nearest rank).
pub fn percentile(xs: &[Duration], q: f64) -> Duration {
    if xs.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((q * xs.len() as f64).ceil() as usize).clamp(1, xs.len());
    xs[rank - 1]
}

pub async fn run(a: LoadArgs) -> anyhow::Result<i32> {
    if a.concurrency == 0 || a.requests == 0 {
        bail!("--concurrency and --requests: must be at least 1");
    }
    let code = match &a.code {
        Some(p) => std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?,
        None => DEFAULT_CODE.to_owned(),
    };
    let conn = connect(a.endpoint.as_deref(), &a.executor).await?;
    let bar = progress_bar(a.requests, a.quiet);
    let permits = Arc::new(Semaphore::new(a.concurrency));
    let started = Instant::now();
    let mut tasks = Vec::with_capacity(a.requests);
    for i in 0..a.requests {
        let permit = permits.clone().acquire_owned().await?;
        let mut client = conn.client.clone();
        let mut req = tonic::Request::new(pb::ExecuteRequest {
            language: a.language.clone(),
            code: code.clone(),
            request_id: format!("bench-{i}"),
            priority: crate::target::priority(),
            ..Default::default()
        });
        req.set_timeout(Duration::from_millis(a.timeout_ms));
        let bar = bar.clone();
        tasks.push(tokio::spawn(async move {
            let t = Instant::now();
            let outcome = match client.execute(req).await {
                Ok(r) => Outcome::Verdict(r.into_inner().verdict),
                Err(s) => Outcome::NoResponse(s.code()),
            };
            bar.inc(1);
            drop(permit);
            (t.elapsed(), outcome)
        }));
    }
    let mut latencies = Vec::with_capacity(a.requests);
    let mut verdicts: BTreeMap<String, usize> = BTreeMap::new();
    let mut errors: BTreeMap<String, usize> = BTreeMap::new();
    for t in tasks {
        let (latency, outcome) = t.await?;
        match outcome {
            Outcome::Verdict(v) => {
                latencies.push(latency);
                let name = pb::Verdict::try_from(v).map(|v| v.as_str_name()).unwrap_or("UNKNOWN");
                *verdicts.entry(name.to_owned()).or_default() += 1;
            }
            Outcome::NoResponse(c) => *errors.entry(format!("{c:?}")).or_default() += 1,
        }
    }
    let elapsed = started.elapsed();
    bar.finish_and_clear();
    latencies.sort();
    let no_response: usize = errors.values().sum();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let throughput = a.requests as f64 / elapsed.as_secs_f64();
    let (p50, p90, p99) = (
        percentile(&latencies, 0.5),
        percentile(&latencies, 0.9),
        percentile(&latencies, 0.99),
    );
    if a.json {
        let report = serde_json::json!({
            "requests": a.requests,
            "concurrency": a.concurrency,
            "seconds": elapsed.as_secs_f64(),
            "throughput_per_s": throughput,
            "latency_ms": {"p50": ms(p50), "p90": ms(p90), "p99": ms(p99)},
            "verdicts": verdicts,
            "no_response": no_response,
            "errors": errors,
        });
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!(
            "{} requests at concurrency {} in {:.2} s: {throughput:.1} req/s",
            a.requests,
            a.concurrency,
            elapsed.as_secs_f64()
        );
        println!(
            "latency: p50 {:.1} ms · p90 {:.1} ms · p99 {:.1} ms",
            ms(p50),
            ms(p90),
            ms(p99)
        );
        let v: Vec<String> = verdicts.iter().map(|(k, n)| format!("{k} {n}")).collect();
        println!("verdicts: {}", v.join(" · "));
        let e: Vec<String> = errors.iter().map(|(k, n)| format!("{k} {n}")).collect();
        println!(
            "no response: {no_response}{}",
            if e.is_empty() {
                String::new()
            } else {
                format!(" ({})", e.join(", "))
            }
        );
    }
    Ok(if no_response == 0 { 0 } else { 1 })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentile_is_the_nearest_rank() {
        let xs: Vec<Duration> = (1..=100).map(Duration::from_millis).collect();
        assert_eq!(percentile(&xs, 0.5), Duration::from_millis(50));
        assert_eq!(percentile(&xs, 0.99), Duration::from_millis(99));
        assert_eq!(percentile(&xs[..1], 0.9), Duration::from_millis(1));
        assert_eq!(percentile(&[], 0.5), Duration::ZERO);
    }
}
