//! `sandpool soak`: the load half of the load and fault suite. Sends N mixed
//! Evaluate requests (programs that pass, fail, and attack their limits) at
//! concurrency C to one executor, checks that every one is answered exactly once
//! with the verdict its program earns, and that the executor holds the same
//! threads, descriptors, mounts, child processes and cgroups at the end as after
//! a warm-up (read from /proc/<pid> and the cgroup tree: run it on the
//! executor's machine, as root).
//!
//! RESOURCE_EXHAUSTED (the queue is full) and UNAVAILABLE are back-pressure:
//! retried with backoff, counted, never a failure unless the attempts run out.

use crate::eval::progress_bar;
use anyhow::{Context, bail};
use sandpool_proto::v1 as pb;
use serde::Serialize;
use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::Semaphore;
use tonic::transport::Channel;

#[derive(Debug, clap::Args)]
pub struct SoakArgs {
    /// The executor under test: host:port.
    #[arg(long, env = "SANDPOOL_ENDPOINT")]
    endpoint: String,
    /// Its process id, for its RSS, threads, descriptors, mounts and children (/proc/PID).
    #[arg(long)]
    pid: u32,
    /// Its --work-root, which names its cgroup directory (sandpool-<hash of the path>).
    #[arg(long)]
    work_root: PathBuf,
    /// Requests to send after the warm-up.
    #[arg(short = 'n', long, default_value_t = 10_000)]
    requests: usize,
    /// Requests in flight at once.
    #[arg(short = 'c', long, default_value_t = 64)]
    concurrency: usize,
    /// Warm-up requests (same mix, same concurrency) before the first resource reading
    /// (default: 2 × concurrency).
    #[arg(long)]
    warmup: Option<usize>,
    /// Calls per request, first included, when the executor answers RESOURCE_EXHAUSTED or UNAVAILABLE.
    #[arg(long, default_value_t = 50)]
    max_attempts: u32,
    /// How long to wait at the end for idle threads (tokio's blocking pool) to exit.
    #[arg(long, default_value_t = 30)]
    settle_s: u64,
    /// Allowed RSS growth from warm-up to the end, percent.
    #[arg(long, default_value_t = 50)]
    rss_growth_pct: u64,
    /// Only these kinds of the mix (names as in the report), comma-separated.
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
    /// Leave these kinds out of the mix, comma-separated.
    #[arg(long, value_delimiter = ',')]
    skip: Vec<String>,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
    /// No progress bar.
    #[arg(long)]
    quiet: bool,
}

/// One kind of request in the mix: a program and the verdict it must get.
struct Kind {
    name: &'static str,
    language: &'static str,
    code: &'static str,
    stdin: &'static str,
    expected_stdout: &'static str,
    limits: pb::Limits,
    expect: pb::Verdict,
}

const MIB: u64 = 1 << 20;

fn limits(cpu_ms: u64, memory: u64, output: u64, processes: u32) -> pb::Limits {
    pb::Limits {
        wall_time_ms: 5_000,
        cpu_time_ms: cpu_ms,
        memory_bytes: memory,
        output_bytes: output,
        processes,
        file_size_bytes: 0,
    }
}

/// The mix, sent round-robin. Each program's verdict follows from its own code and limits.
fn kinds() -> Vec<Kind> {
    let normal = limits(2_000, 128 * MIB, MIB, 32);
    vec![
        Kind {
            name: "python-ok",
            language: "python",
            code: "print(input()[::-1])\n",
            stdin: "loop\n",
            expected_stdout: "pool\n",
            limits: normal,
            expect: pb::Verdict::Ok,
        },
        Kind {
            name: "python-wrong-answer",
            language: "python",
            code: "print(input())\n",
            stdin: "loop\n",
            expected_stdout: "pool\n",
            limits: normal,
            expect: pb::Verdict::WrongAnswer,
        },
        Kind {
            name: "python-cpu-loop",
            language: "python",
            code: "while True:\n    pass\n",
            stdin: "",
            expected_stdout: "",
            limits: limits(300, 128 * MIB, MIB, 32),
            expect: pb::Verdict::TimeLimitExceeded,
        },
        Kind {
            name: "python-heap-mle",
            language: "python",
            // Touched pages (b"x" * n fills them): 256 MiB against a 64 MiB limit.
            code: "x = b'x' * (256 << 20)\nprint(len(x))\n",
            stdin: "",
            expected_stdout: "",
            limits: limits(2_000, 64 * MIB, MIB, 32),
            expect: pb::Verdict::MemoryLimitExceeded,
        },
        Kind {
            name: "python-tmpfs-mle",
            language: "python",
            // 1 MiB at a time into the run's tmpfs /tmp: the pages are the run's memory.
            code: "c = b'x' * (1 << 20)\nwith open('/tmp/fill', 'wb') as f:\n    for _ in range(200):\n        f.write(c)\n        f.flush()\nprint('done')\n",
            stdin: "",
            expected_stdout: "",
            limits: limits(2_000, 64 * MIB, MIB, 32),
            expect: pb::Verdict::MemoryLimitExceeded,
        },
        Kind {
            name: "c-compile-error",
            language: "c",
            code: "int main( { return 0; }\n",
            stdin: "",
            expected_stdout: "",
            limits: normal,
            expect: pb::Verdict::CompileError,
        },
        Kind {
            name: "python-output-flood",
            language: "python",
            code: "import sys\nwhile True:\n    sys.stdout.write('x' * 65536)\n",
            stdin: "",
            expected_stdout: "",
            limits: limits(2_000, 128 * MIB, MIB, 32),
            expect: pb::Verdict::OutputLimitExceeded,
        },
        Kind {
            name: "python-fork-bomb",
            language: "python",
            // Forks until the process limit refuses, then the uncaught error ends each process.
            code: "import os\nwhile True:\n    os.fork()\n",
            stdin: "",
            expected_stdout: "",
            limits: limits(2_000, 128 * MIB, MIB, 16),
            expect: pb::Verdict::RuntimeError,
        },
    ]
}

fn request(kind: &Kind, id: String) -> pb::EvaluateRequest {
    pb::EvaluateRequest {
        id,
        language: kind.language.into(),
        completion: kind.code.into(),
        tests: Some(pb::evaluate_request::Tests::Stdio(pb::StdioTests {
            cases: vec![pb::StdioCase {
                stdin: kind.stdin.as_bytes().to_vec(),
                expected_stdout: kind.expected_stdout.as_bytes().to_vec(),
            }],
            comparison: None,
        })),
        options: Some(pb::EvaluateOptions {
            run_limits: Some(kind.limits),
            raw_code: true,
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// What one batch of requests came back with.
#[derive(Debug, Default, Serialize)]
struct Tally {
    /// kind -> verdict (or gRPC code after the attempts ran out) -> count.
    by_kind: BTreeMap<String, BTreeMap<String, usize>>,
    answered: usize,
    /// Answers for an id already answered: must be 0.
    duplicates: usize,
    /// Verdicts other than the kind's expected one (the first few, with the executor's message).
    unexpected: usize,
    examples: Vec<String>,
    sandbox_errors: usize,
    /// Calls refused with RESOURCE_EXHAUSTED / UNAVAILABLE and retried.
    back_pressure_retries: usize,
    /// Requests with no verdict at all (a gRPC error after the attempts): must be 0.
    no_response: usize,
}

/// The executor's resources at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Resources {
    pub rss_kib: u64,
    pub threads: u64,
    pub fds: u64,
    /// Mounts in the executor's mount namespace and in each child process's (the slots' namespaces).
    pub mounts: u64,
    /// Child processes (the slots' spawners and anything a run left behind).
    pub children: u64,
    /// Directories in the executor's cgroup subtree, all controllers.
    pub cgroups: u64,
}

fn status_field(text: &str, key: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix(key)?.split_whitespace().next()?.parse().ok())
}

fn count_lines(path: &Path) -> u64 {
    std::fs::read_to_string(path)
        .map(|t| t.lines().count() as u64)
        .unwrap_or(0)
}

/// Pids whose parent is `pid`.
fn children(pid: u32) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return vec![];
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|p| {
            std::fs::read_to_string(format!("/proc/{p}/status"))
                .ok()
                .and_then(|s| status_field(&s, "PPid:"))
                == Some(pid as u64)
        })
        .collect()
}

/// Directories at and below every directory named `name` under `dir` (depth-limited walk).
fn count_cgroup_dirs(dir: &Path, name: &str, depth: usize, inside: bool) -> u64 {
    let mut n = u64::from(inside);
    if depth == 0 {
        return n;
    }
    let Ok(entries) = std::fs::read_dir(dir) else {
        return n;
    };
    for e in entries.flatten() {
        if e.file_type().map(|t| t.is_dir()).unwrap_or(false) {
            let here = inside || e.file_name().to_str() == Some(name);
            if here || !inside {
                n += count_cgroup_dirs(&e.path(), name, depth - 1, here);
            }
        }
    }
    n
}

/// Reads the executor's resources from /proc/<pid> and the cgroup tree.
pub fn resources(pid: u32, work_root: &Path) -> anyhow::Result<Resources> {
    let status =
        std::fs::read_to_string(format!("/proc/{pid}/status")).with_context(|| format!("executor pid {pid}"))?;
    let kids = children(pid);
    let mounts = count_lines(Path::new(&format!("/proc/{pid}/mountinfo")))
        + kids
            .iter()
            .map(|k| count_lines(Path::new(&format!("/proc/{k}/mountinfo"))))
            .sum::<u64>();
    Ok(Resources {
        rss_kib: status_field(&status, "VmRSS:").unwrap_or(0),
        threads: status_field(&status, "Threads:").unwrap_or(0),
        fds: std::fs::read_dir(format!("/proc/{pid}/fd"))
            .map(|d| d.count() as u64)
            .unwrap_or(0),
        mounts,
        children: kids.len() as u64,
        cgroups: count_cgroup_dirs(
            Path::new("/sys/fs/cgroup"),
            &sandpool_sandbox::cgroup_name(work_root),
            8,
            false,
        ),
    })
}

fn backoff(attempt: u32, salt: usize) -> Duration {
    let base = 20u64.saturating_mul(1 << attempt.min(5)); // 40 ms .. 640 ms
    Duration::from_millis(base / 2 + (salt as u64 * 7919) % (base / 2 + 1))
}

/// Sends requests `range` of the mix, `concurrency` at a time; every request's final outcome.
async fn batch(
    client: &pb::executor_client::ExecutorClient<Channel>,
    kinds: &Arc<Vec<Kind>>,
    range: std::ops::Range<usize>,
    a: &SoakArgs,
    bar: &indicatif::ProgressBar,
) -> anyhow::Result<Tally> {
    let permits = Arc::new(Semaphore::new(a.concurrency));
    let tally = Arc::new(Mutex::new(Tally::default()));
    let seen = Arc::new(Mutex::new(HashSet::new()));
    let mut tasks = Vec::with_capacity(range.len());
    for i in range {
        let permit = permits.clone().acquire_owned().await?;
        let (client, kinds, tally, seen, bar) =
            (client.clone(), kinds.clone(), tally.clone(), seen.clone(), bar.clone());
        let max_attempts = a.max_attempts.max(1);
        tasks.push(tokio::spawn(async move {
            let kind = &kinds[i % kinds.len()];
            let id = format!("soak-{i}");
            let mut attempt = 0;
            let outcome = loop {
                attempt += 1;
                let mut req = tonic::Request::new(request(kind, id.clone()));
                req.set_timeout(Duration::from_secs(120));
                match client.clone().evaluate(req).await {
                    Ok(r) => break Ok(r.into_inner()),
                    Err(s)
                        if matches!(s.code(), tonic::Code::ResourceExhausted | tonic::Code::Unavailable)
                            && attempt < max_attempts =>
                    {
                        tally.lock().map(|mut t| t.back_pressure_retries += 1).ok();
                        tokio::time::sleep(backoff(attempt, i)).await;
                    }
                    Err(s) => break Err(s),
                }
            };
            let mut t = tally.lock().expect("tally lock");
            let verdict = match &outcome {
                Ok(r) => {
                    if !seen.lock().expect("seen lock").insert(r.id.clone()) || r.id != id {
                        t.duplicates += 1;
                    }
                    t.answered += 1;
                    crate::target::verdict_name(r.verdict).to_owned()
                }
                Err(s) => {
                    t.no_response += 1;
                    format!("no response: {:?}", s.code())
                }
            };
            *t.by_kind
                .entry(kind.name.to_owned())
                .or_default()
                .entry(verdict.clone())
                .or_default() += 1;
            if let Ok(r) = &outcome {
                if r.verdict == pb::Verdict::SandboxError as i32 {
                    t.sandbox_errors += 1;
                }
                if r.verdict != kind.expect as i32 {
                    t.unexpected += 1;
                    if t.examples.len() < 10 {
                        let detail = r.tests.first().map(|c| c.message.as_str()).unwrap_or("");
                        t.examples.push(format!(
                            "{id} {}: {verdict}, expected {} ({}{detail})",
                            kind.name,
                            kind.expect.as_str_name(),
                            r.message
                        ));
                    }
                }
            } else if t.examples.len() < 10 {
                t.examples.push(format!("{id} {}: {verdict}", kind.name));
            }
            drop(t);
            bar.inc(1);
            drop(permit);
        }));
    }
    for t in tasks {
        t.await?;
    }
    let t = std::mem::take(&mut *tally.lock().expect("tally lock"));
    Ok(t)
}

#[derive(Debug, Serialize)]
struct Report {
    requests: usize,
    warmup: usize,
    concurrency: usize,
    seconds: f64,
    throughput_per_s: f64,
    tally: Tally,
    after_warmup: Resources,
    at_end: Resources,
    /// What differs (empty when the executor holds what it held after the warm-up).
    leaks: Vec<String>,
    passed: bool,
}

pub async fn run(a: SoakArgs) -> anyhow::Result<i32> {
    if a.concurrency == 0 || a.requests == 0 {
        bail!("--concurrency and --requests: must be at least 1");
    }
    let channels = crate::target::channels(&a.endpoint).await?;
    let client = pb::executor_client::ExecutorClient::new(channels.balanced).max_decoding_message_size(usize::MAX);
    let all = kinds();
    let names: Vec<&str> = all.iter().map(|k| k.name).collect();
    if let Some(bad) = a.only.iter().chain(&a.skip).find(|n| !names.contains(&n.as_str())) {
        bail!("--only/--skip: no kind {bad:?} (kinds: {})", names.join(", "));
    }
    let kinds: Vec<Kind> = all
        .into_iter()
        .filter(|k| (a.only.is_empty() || a.only.iter().any(|n| n == k.name)) && !a.skip.iter().any(|n| n == k.name))
        .collect();
    if kinds.is_empty() {
        bail!("--only/--skip: no kind left");
    }
    let kinds = Arc::new(kinds);
    let warmup = a.warmup.unwrap_or(2 * a.concurrency);
    let quiet = progress_bar(0, true);
    let w = batch(&client, &kinds, 0..warmup, &a, &quiet).await?;
    if w.no_response > 0 {
        bail!("warm-up: {} requests got no response: {:?}", w.no_response, w.examples);
    }
    let after_warmup = settle(&a, None).await?;
    let bar = progress_bar(a.requests, a.quiet);
    let started = Instant::now();
    let tally = batch(&client, &kinds, warmup..warmup + a.requests, &a, &bar).await?;
    let elapsed = started.elapsed();
    bar.finish_and_clear();
    let at_end = settle(&a, Some(after_warmup)).await?;
    let mut leaks = vec![];
    let mut differs = |what: &str, before: u64, after: u64| {
        if before != after {
            leaks.push(format!("{what}: {before} after the warm-up, {after} at the end"));
        }
    };
    // Fewer threads is fine: tokio's blocking pool lets idle ones go.
    differs(
        "threads",
        after_warmup.threads,
        at_end.threads.max(after_warmup.threads),
    );
    differs("open descriptors", after_warmup.fds, at_end.fds);
    differs("mounts", after_warmup.mounts, at_end.mounts);
    differs("child processes", after_warmup.children, at_end.children);
    differs("cgroup directories", after_warmup.cgroups, at_end.cgroups);
    if at_end.rss_kib > after_warmup.rss_kib * (100 + a.rss_growth_pct) / 100 {
        leaks.push(format!(
            "RSS: {} KiB after the warm-up, {} KiB at the end (over {}% more)",
            after_warmup.rss_kib, at_end.rss_kib, a.rss_growth_pct
        ));
    }
    let passed = tally.answered == a.requests
        && tally.duplicates == 0
        && tally.unexpected == 0
        && tally.sandbox_errors == 0
        && tally.no_response == 0
        && leaks.is_empty();
    let report = Report {
        requests: a.requests,
        warmup,
        concurrency: a.concurrency,
        seconds: elapsed.as_secs_f64(),
        throughput_per_s: a.requests as f64 / elapsed.as_secs_f64(),
        tally,
        after_warmup,
        at_end,
        leaks,
        passed,
    };
    if a.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_report(&report);
    }
    Ok(if passed { 0 } else { 1 })
}

/// Resources once idle threads have gone: waits (up to --settle-s) until the thread count is
/// back to `baseline`'s, or (with no baseline) until it stops changing.
async fn settle(a: &SoakArgs, baseline: Option<Resources>) -> anyhow::Result<Resources> {
    let deadline = Instant::now() + Duration::from_secs(a.settle_s);
    let mut last = resources(a.pid, &a.work_root)?;
    loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let now = resources(a.pid, &a.work_root)?;
        let steady = match baseline {
            Some(b) => now.threads <= b.threads && now.fds == b.fds && now.children == b.children,
            None => {
                now == Resources {
                    rss_kib: now.rss_kib,
                    ..last
                }
            }
        };
        if steady || Instant::now() > deadline {
            return Ok(now);
        }
        last = now;
    }
}

fn print_report(r: &Report) {
    println!(
        "{} requests (+{} warm-up) at concurrency {} in {:.1} s: {:.1} req/s",
        r.requests, r.warmup, r.concurrency, r.seconds, r.throughput_per_s
    );
    for (kind, verdicts) in &r.tally.by_kind {
        let v: Vec<String> = verdicts.iter().map(|(k, n)| format!("{k} {n}")).collect();
        println!("  {kind:<22} {}", v.join(" · "));
    }
    let t = &r.tally;
    println!(
        "answered {} · duplicates {} · unexpected verdicts {} · SANDBOX_ERROR {} · no response {} · back-pressure retries {}",
        t.answered, t.duplicates, t.unexpected, t.sandbox_errors, t.no_response, t.back_pressure_retries
    );
    for e in &t.examples {
        println!("  ! {e}");
    }
    let (b, e) = (&r.after_warmup, &r.at_end);
    println!("executor      after warm-up   at end");
    println!("  RSS KiB     {:>12}   {:>6}", b.rss_kib, e.rss_kib);
    println!("  threads     {:>12}   {:>6}", b.threads, e.threads);
    println!("  fds         {:>12}   {:>6}", b.fds, e.fds);
    println!("  mounts      {:>12}   {:>6}", b.mounts, e.mounts);
    println!("  children    {:>12}   {:>6}", b.children, e.children);
    println!("  cgroups     {:>12}   {:>6}", b.cgroups, e.cgroups);
    for l in &r.leaks {
        println!("  ! {l}");
    }
    println!("{}", if r.passed { "PASSED" } else { "FAILED" });
}
