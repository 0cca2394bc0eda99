//! `sandpool bench-isolation`: the sandbox's cost, measured against bare process spawns
//! in the same run.
//!
//! Four workloads, each at concurrency 1 and at concurrency = slots:
//! - bare: fork/exec of a trivial C program, and `python3 -I -S -c pass`;
//! - sandboxed: the same two programs through an executor over gRPC on
//!   loopback (full isolation: namespaces, cgroup, seccomp, fresh tmpfs).
//!
//! Then one caller's runs `--gap-ms` apart (bare python, warm python, C): the latency of a
//! lone request to an otherwise idle executor.
//!
//! The executor runs in this process (its own tokio runtime, a real gRPC
//! server on 127.0.0.1:0) unless `--endpoint` names one that already has the
//! `bench_c` and `bench_python` languages.

use sandpool_executor::config::ExecutorArgs;
use sandpool_executor::server::Loopback;
use sandpool_proto::v1 as pb;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Debug, clap::Args)]
pub struct BenchArgs {
    /// Runs per workload and concurrency.
    #[arg(long, short = 'n', default_value_t = 300)]
    runs: usize,
    /// Unmeasured runs first.
    #[arg(long, default_value_t = 20)]
    warmup: usize,
    /// The gap between runs in the spaced cells, ms: a lone caller's pace, where the
    /// kernel's per-write costs that back-to-back runs share are paid by every run.
    #[arg(long, default_value_t = 50)]
    gap_ms: u64,
    /// Print results as JSON too.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    executor: ExecutorArgs,
}

const TRIVIAL_C: &str = "int main(void) { return 0; }\n";

/// Extra languages for the bench: the exact bare commands, inside the sandbox.
const BENCH_LANGUAGES: &str = r#"
[bench_c]
source = "unused"
run = ["./trivial"]
version = ["true"]

[bench_python]
source = "unused.py"
run = ["python3", "-I", "-S", "-c", "pass"]
version = ["python3", "--version"]

# The same interpreter flags, forked from a per-slot zygote (docs/warm-starts.md);
# the empty source file is `pass`.
[bench_python_warm]
source = "main.py"
run = ["python3", "-I", "-S", "main.py"]
version = ["python3", "--version"]
warm = { preload = [] }
"#;

/// One measured operation.
type BoxFut = std::pin::Pin<Box<dyn std::future::Future<Output = anyhow::Result<()>> + Send>>;
/// A workload: starts one operation per call.
type Job = Arc<dyn Fn() -> BoxFut + Send + Sync>;

#[derive(Debug, Clone, serde::Serialize)]
struct Stats {
    workload: String,
    concurrency: usize,
    runs: usize,
    p50_ms: f64,
    p99_ms: f64,
    runs_per_s: f64,
}

fn stats(workload: &str, concurrency: usize, mut lat: Vec<Duration>, total: Duration) -> Stats {
    lat.sort();
    let q = |p: f64| lat[((lat.len() as f64 - 1.0) * p).round() as usize].as_secs_f64() * 1000.0;
    Stats {
        workload: workload.into(),
        concurrency,
        runs: lat.len(),
        p50_ms: q(0.5),
        p99_ms: q(0.99),
        runs_per_s: lat.len() as f64 / total.as_secs_f64(),
    }
}

/// Runs `f` `n` times from `concurrency` workers; returns each latency and the total time.
async fn drive<F, Fut>(n: usize, concurrency: usize, f: F) -> anyhow::Result<(Vec<Duration>, Duration)>
where
    F: Fn() -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = anyhow::Result<()>> + Send,
{
    drive_spaced(n, concurrency, Duration::ZERO, f).await
}

/// As [`drive`], each worker waiting `gap` after each run (not counted in its latency).
async fn drive_spaced<F, Fut>(
    n: usize,
    concurrency: usize,
    gap: Duration,
    f: F,
) -> anyhow::Result<(Vec<Duration>, Duration)>
where
    F: Fn() -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = anyhow::Result<()>> + Send,
{
    let f = Arc::new(f);
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let start = Instant::now();
    let workers: Vec<_> = (0..concurrency)
        .map(|_| {
            let (f, next) = (f.clone(), next.clone());
            tokio::spawn(async move {
                let mut lat = vec![];
                while next.fetch_add(1, std::sync::atomic::Ordering::SeqCst) < n {
                    let t = Instant::now();
                    f().await?;
                    lat.push(t.elapsed());
                    if !gap.is_zero() {
                        tokio::time::sleep(gap).await;
                    }
                }
                anyhow::Ok(lat)
            })
        })
        .collect();
    let mut all = vec![];
    for w in workers {
        all.extend(w.await??);
    }
    Ok((all, start.elapsed()))
}

fn bare(argv: Vec<String>) -> Job {
    Arc::new(move || {
        let argv = argv.clone();
        Box::pin(async move {
            tokio::task::spawn_blocking(move || {
                let st = Command::new(&argv[0])
                    .args(&argv[1..])
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .status()?;
                anyhow::ensure!(st.success(), "{argv:?} failed: {st}");
                Ok(())
            })
            .await?
        })
    })
}

fn compile_trivial(dir: &Path) -> anyhow::Result<PathBuf> {
    let src = dir.join("trivial.c");
    let bin = dir.join("trivial");
    std::fs::write(&src, TRIVIAL_C)?;
    let st = Command::new("gcc").args(["-O2", "-o"]).arg(&bin).arg(&src).status()?;
    anyhow::ensure!(st.success(), "gcc failed");
    Ok(bin)
}

pub async fn run(mut a: BenchArgs) -> anyhow::Result<i32> {
    let tmp = tempfile::tempdir()?;
    let trivial = compile_trivial(tmp.path())?;
    let trivial_bytes = std::fs::read(&trivial)?;
    let python = which("python3").ok_or_else(|| anyhow::anyhow!("python3 not on PATH"))?;

    // An in-process executor with the bench languages, served over loopback gRPC.
    let table = tmp.path().join("languages.toml");
    std::fs::write(&table, BENCH_LANGUAGES)?;
    a.executor.languages = Some(table);
    let engine = Arc::new(a.executor.build_engine().await?);
    let slots = engine.admission().slots();
    let server = Loopback::start(engine, a.executor.session_policy()).await?;
    let channel = server.channel.clone();
    let client = pb::executor_client::ExecutorClient::new(channel);

    let grpc = |language: &'static str, files: Vec<pb::File>| -> Job {
        let client = client.clone();
        Arc::new(move || {
            let mut client = client.clone();
            let req = pb::ExecuteRequest {
                language: language.into(),
                files: files.clone(),
                ..Default::default()
            };
            Box::pin(async move {
                let r = client.execute(req).await?.into_inner();
                anyhow::ensure!(
                    r.verdict == pb::Verdict::Ok as i32,
                    "{language}: verdict {} {}",
                    r.verdict,
                    r.message
                );
                Ok(())
            })
        })
    };
    let c_file = vec![pb::File {
        path: "trivial".into(),
        content: trivial_bytes,
        executable: true,
    }];
    let bare_c = vec![trivial.display().to_string()];
    let bare_py = vec![
        python.display().to_string(),
        "-I".into(),
        "-S".into(),
        "-c".into(),
        "pass".into(),
    ];

    eprintln!(
        "sandpool bench: {} runs per cell, {slots} slots, {} CPUs",
        a.runs,
        std::thread::available_parallelism()?.get()
    );
    let mut results: Vec<Stats> = vec![];
    for &conc in &[1usize, slots] {
        let cells: Vec<(&str, Job)> = vec![
            ("bare C", bare(bare_c.clone())),
            ("sandboxed C (gRPC)", grpc("bench_c", c_file.clone())),
            ("bare python3 -I -S -c pass", bare(bare_py.clone())),
            ("sandboxed python3 (gRPC)", grpc("bench_python", vec![])),
            ("sandboxed python3 warm (gRPC)", grpc("bench_python_warm", vec![])),
        ];
        for (name, f) in cells {
            let g = f.clone();
            drive(a.warmup, conc, move || g()).await?;
            let (lat, total) = drive(a.runs, conc, move || f()).await?;
            let s = stats(name, conc, lat, total);
            eprintln!(
                "  {:<28} c={:<2} p50 {:>7.3} ms  p99 {:>7.3} ms  {:>8.1} runs/s",
                s.workload, s.concurrency, s.p50_ms, s.p99_ms, s.runs_per_s
            );
            results.push(s);
        }
    }
    // One caller, runs `gap` apart: what a lone request to an idle executor pays.
    let gap = Duration::from_millis(a.gap_ms);
    let spaced: Vec<(&str, Job)> = vec![
        ("bare python3 -I -S, spaced", bare(bare_py.clone())),
        ("sandboxed python3 warm, spaced", grpc("bench_python_warm", vec![])),
        ("sandboxed C (gRPC), spaced", grpc("bench_c", c_file.clone())),
    ];
    let spaced_runs = a.runs.min(100);
    for (name, f) in spaced {
        let g = f.clone();
        drive(a.warmup, 1, move || g()).await?;
        let (lat, total) = drive_spaced(spaced_runs, 1, gap, move || f()).await?;
        let s = stats(name, 1, lat, total);
        eprintln!(
            "  {:<28} c=1  p50 {:>7.3} ms  p99 {:>7.3} ms  ({} ms apart)",
            s.workload, s.p50_ms, s.p99_ms, a.gap_ms
        );
        results.push(s);
    }
    server.stop().await;

    let get = |w: &str, c: usize| {
        results
            .iter()
            .find(|s| s.workload.starts_with(w) && s.concurrency == c)
            .cloned()
    };
    let (Some(bc1), Some(sc1), Some(bp1), Some(sp1), Some(bcn), Some(scn)) = (
        get("bare C", 1),
        get("sandboxed C", 1),
        get("bare python", 1),
        get("sandboxed python", 1),
        get("bare C", slots),
        get("sandboxed C", slots),
    ) else {
        anyhow::bail!("missing results");
    };
    let overhead = sc1.p50_ms - bc1.p50_ms;
    let py_ratio = sp1.p50_ms / bp1.p50_ms;
    let tput = scn.runs_per_s / bcn.runs_per_s;
    let mark = |ok: bool| if ok { "met" } else { "MISSED" };
    println!("| workload | concurrency | p50 ms | p99 ms | runs/s |");
    println!("|---|---|---|---|---|");
    for s in &results {
        println!(
            "| {} | {} | {:.3} | {:.3} | {:.1} |",
            s.workload, s.concurrency, s.p50_ms, s.p99_ms, s.runs_per_s
        );
    }
    println!();
    println!(
        "isolation overhead, trivial C, p50: {overhead:.3} ms (target <= 1 ms: {})",
        mark(overhead <= 1.0)
    );
    println!(
        "python round trip / bare python start, p50: {py_ratio:.2}x (target <= 1.2x: {})",
        mark(py_ratio <= 1.2)
    );
    println!(
        "throughput at concurrency {slots}, sandboxed / bare C: {:.0}% (target >= 50%: {})",
        tput * 100.0,
        mark(tput >= 0.5)
    );
    // Warm starts (docs/warm-starts.md): issue 25's targets for pass-sized runs.
    if let (Some(bpn), Some(wp1), Some(wpn)) = (
        get("bare python", slots),
        get("sandboxed python3 warm", 1),
        get("sandboxed python3 warm", slots),
    ) {
        let warm_tput = wpn.runs_per_s / bpn.runs_per_s;
        println!(
            "warm python throughput at concurrency {slots} / bare python3 -I -S: {warm_tput:.2}x (target >= 2x: {})",
            mark(warm_tput >= 2.0)
        );
        let warm_ratio = wp1.p50_ms / bp1.p50_ms;
        println!(
            "warm python p50 {:.3} ms / bare python start p50 {:.3} ms: {warm_ratio:.2}x (target <= 0.5x: {})",
            wp1.p50_ms,
            bp1.p50_ms,
            mark(warm_ratio <= 0.5)
        );
    }
    if let (Some(bs), Some(ws)) = (
        get("bare python3 -I -S, spaced", 1),
        get("sandboxed python3 warm, spaced", 1),
    ) {
        let ratio = ws.p50_ms / bs.p50_ms;
        println!(
            "warm python p50 with runs {} ms apart {:.3} ms / bare {:.3} ms: {ratio:.2}x (target <= 0.5x: {})",
            a.gap_ms,
            ws.p50_ms,
            bs.p50_ms,
            mark(ratio <= 0.5)
        );
    }
    if a.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "results": results, "overhead_ms": overhead, "python_ratio": py_ratio, "throughput_ratio": tput, "slots": slots,
            }))?
        );
    }
    Ok(0)
}

fn which(name: &str) -> Option<PathBuf> {
    // The sandbox resolves python3 in its own PATH; use the same system binary here.
    ["/usr/local/bin", "/usr/bin", "/bin"]
        .iter()
        .map(|d| Path::new(d).join(name))
        .find(|p| p.is_file())
}
