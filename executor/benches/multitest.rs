//! Multi-test problems: generated stdin/stdout problems (a dozen kinds, C++ and
//! Python; 5 in 8 solutions correct, 2 wrong on some tests, 1 looping forever
//! on some tests) judged through the real gRPC `Evaluate` of an executor
//! started in this process, with early stop and with `run_all_cases`, against
//! the same programs compiled and run bare (fork/exec, the same inputs, the
//! same number of programs at once) in the same run. Reports problems/s and
//! tests/s per core and where the time goes (compiling, per-test cost).
//!
//! Run as root: `cargo bench -p sandpool-executor --bench multitest`.
//! Subsets and settings (after `--`): `--problems N` (per language, default
//! 48), `--tests N` (per problem, default 20), `--languages cpp,python`,
//! `--modes early,all`, `--time-limit-ms N` (CPU time a test may use, default
//! 1000), `--headers individual|bits` (C++ includes: one header each, or
//! `bits/stdc++.h`), `--isolation namespaces|restricted`, `--in-flight N`
//! (Evaluate requests at once, default 4 x slots), `--breakdown N` (correct problems
//! judged one at a time to split a problem's time into compile and per-test cost,
//! default 8; 0: none).

use futures::StreamExt;
use sandpool_executor::judge::compare::Comparison;
use sandpool_executor::proto as pb;
use sandpool_executor::server::Loopback;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

mod common;
#[path = "multitest/problems.rs"]
#[allow(dead_code)]
mod problems;
use common::Error;
use problems::{CppHeaders, Lang, Problem, Variant};

#[derive(Debug, Clone)]
struct Opts {
    problems: usize,
    tests: usize,
    langs: Vec<Lang>,
    /// false: early stop (the default of Evaluate), true: run_all_cases.
    modes: Vec<bool>,
    time_limit: Duration,
    headers: CppHeaders,
    isolation: String,
    in_flight: Option<usize>,
    /// Correct problems judged one at a time for the breakdown (0: none).
    breakdown: usize,
}

fn opts() -> Result<Opts, Error> {
    let mut o = Opts {
        problems: 48,
        tests: 20,
        langs: vec![Lang::Cpp, Lang::Python],
        modes: vec![false, true],
        time_limit: Duration::from_millis(1000),
        headers: CppHeaders::Individual,
        isolation: "namespaces".into(),
        in_flight: None,
        breakdown: 8,
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = || args.next().ok_or(format!("{a} needs a value"));
        match a.as_str() {
            "--problems" => o.problems = value()?.parse()?,
            "--tests" => o.tests = value()?.parse()?,
            "--time-limit-ms" => o.time_limit = Duration::from_millis(value()?.parse()?),
            "--in-flight" => o.in_flight = Some(value()?.parse()?),
            "--breakdown" => o.breakdown = value()?.parse()?,
            "--isolation" => o.isolation = value()?,
            "--headers" => {
                o.headers = match value()?.as_str() {
                    "individual" => CppHeaders::Individual,
                    "bits" => CppHeaders::BitsStdc,
                    h => return Err(format!("--headers: individual or bits, not {h}").into()),
                }
            }
            "--languages" => {
                o.langs = value()?
                    .split(',')
                    .map(|l| match l {
                        "cpp" => Ok(Lang::Cpp),
                        "python" => Ok(Lang::Python),
                        l => Err(format!("--languages: cpp or python, not {l}")),
                    })
                    .collect::<Result<_, _>>()?
            }
            "--modes" => {
                o.modes = value()?
                    .split(',')
                    .map(|m| match m {
                        "early" => Ok(false),
                        "all" => Ok(true),
                        m => Err(format!("--modes: early or all, not {m}")),
                    })
                    .collect::<Result<_, _>>()?
            }
            // cargo bench's own arguments.
            _ => {}
        }
    }
    if o.tests == 0 || o.problems == 0 {
        return Err("--problems and --tests must be at least 1".into());
    }
    Ok(o)
}

fn mode_name(run_all: bool) -> &'static str {
    if run_all { "run-all" } else { "early stop" }
}

/// What one batch (a language, a mode) measured, sandboxed or bare.
#[derive(Debug, Default)]
struct Batch {
    elapsed: Duration,
    /// Tests that ran (not skipped).
    tests_run: usize,
    /// Problems whose verdict or test results were not the expected ones, with why.
    wrong: Vec<String>,
    /// Sum of the compile phases' wall time.
    compile: Duration,
    compiles: usize,
    /// Sum of the wall time of the tests that did not reach the time limit (the program, as
    /// the sandbox measured it; bare: spawn to exit).
    runs: Duration,
    /// Tests that reached the time limit (each killed there, sandboxed or bare).
    tle_tests: usize,
    /// Tests that ran warm (forked from the slot's zygote).
    warm: usize,
    /// CPU time of the programs (compiler included): sandboxed, as the sandbox measured them;
    /// bare, all the benchmark's reaped children.
    cpu: Duration,
}

fn tle(v: &str) -> bool {
    matches!(v, "TIME_LIMIT_EXCEEDED" | "WALL_TIME_LIMIT_EXCEEDED")
}

/// Whether a verdict is the one `p` must get.
fn expected(p: &Problem, verdict: &str) -> bool {
    match p.variant {
        Variant::Tle => tle(verdict),
        v => v.verdict() == verdict,
    }
}

fn request(p: &Problem, run_all: bool, time_limit: Duration) -> pb::EvaluateRequest {
    let ms = time_limit.as_millis() as u64;
    pb::EvaluateRequest {
        id: p.id.clone(),
        language: p.lang.name().into(),
        completion: p.code.clone(),
        tests: Some(pb::evaluate_request::Tests::Stdio(pb::StdioTests {
            cases: p
                .tests
                .iter()
                .map(|(i, o)| pb::StdioCase {
                    stdin: i.clone(),
                    expected_stdout: o.clone(),
                })
                .collect(),
            comparison: None,
        })),
        options: Some(pb::EvaluateOptions {
            raw_code: true,
            run_all_cases: run_all,
            omit_test_io: true,
            // Bare runs are killed at the limit on the clock: so are these (whichever of
            // CPU and wall comes first), so a looping test costs both sides the same.
            run_limits: Some(pb::Limits {
                cpu_time_ms: ms,
                wall_time_ms: ms,
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn verdict_name(v: i32) -> &'static str {
    pb::Verdict::try_from(v).map_or("?", |v| v.as_str_name())
}

/// Checks one response against what `p` must get; the problem's complaint, if any.
fn check(p: &Problem, run_all: bool, r: &pb::EvaluateResponse) -> Option<String> {
    let v = verdict_name(r.verdict);
    if !expected(p, v) {
        return Some(format!("{}: {v} ({})", p.id, r.message));
    }
    if r.tests.len() != p.tests.len() {
        return Some(format!(
            "{}: {} results for {} tests",
            p.id,
            r.tests.len(),
            p.tests.len()
        ));
    }
    for (i, t) in r.tests.iter().enumerate() {
        let tv = verdict_name(t.verdict);
        let ok = match (p.failing(i), p.first_failure()) {
            (false, Some(f)) if !run_all && i > f => tv == "OK" || tv == "SKIPPED",
            (false, _) => tv == "OK",
            (true, Some(f)) if !run_all && i > f => expected(p, tv) || tv == "SKIPPED",
            (true, _) => expected(p, tv),
        };
        if !ok {
            return Some(format!("{}: test {i} {tv}", p.id));
        }
    }
    None
}

/// The executor's count of compile phases (a compile, or a warm-up, each).
fn compiles(engine: &sandpool_executor::Engine) -> usize {
    engine
        .metrics_text()
        .lines()
        .find_map(|l| l.strip_prefix("sandpool_phase_duration_seconds_count{phase=\"compile\"} "))
        .and_then(|n| n.trim().parse::<f64>().ok())
        .map_or(0, |n| n as usize)
}

async fn sandboxed(
    client: &pb::executor_client::ExecutorClient<tonic::transport::Channel>,
    problems: &[Problem],
    run_all: bool,
    o: &Opts,
    in_flight: usize,
) -> Batch {
    let t = Instant::now();
    let out: Vec<_> = futures::stream::iter(problems.iter().map(|p| (p, request(p, run_all, o.time_limit))))
        .map(|(p, r)| {
            let mut c = client.clone();
            async move { (p, c.evaluate(r).await.map(|r| r.into_inner())) }
        })
        .buffer_unordered(in_flight)
        .collect()
        .await;
    let mut b = Batch {
        elapsed: t.elapsed(),
        ..Default::default()
    };
    for (p, r) in out {
        let r = match r {
            Ok(r) => r,
            Err(e) => {
                b.wrong.push(format!("{}: {e}", p.id));
                continue;
            }
        };
        if let Some(why) = check(p, run_all, &r) {
            b.wrong.push(why);
        }
        if let Some(c) = &r.compile {
            b.compile += Duration::from_micros(c.wall_time_us);
            b.cpu += Duration::from_micros(c.cpu_time_us);
            b.compiles += 1;
        }
        for t in r.tests.iter().filter(|t| t.verdict != pb::Verdict::Skipped as i32) {
            b.tests_run += 1;
            if let Some(run) = &t.run {
                if tle(verdict_name(t.verdict)) {
                    b.tle_tests += 1;
                } else {
                    b.runs += Duration::from_micros(run.wall_time_us);
                }
                b.cpu += Duration::from_micros(run.cpu_time_us);
                b.warm += usize::from(run.warm);
            }
        }
    }
    b
}

/// Where bare runs keep their files.
fn bare_dir() -> PathBuf {
    std::env::temp_dir().join(format!("sandpool-bench-multitest-bare-{}", std::process::id()))
}

/// A bare process in a session of its own, `argv[0]` resolved as the sandbox's PATH would.
fn bare_command(argv: &[String], dir: &Path, env: &[(String, String)]) -> tokio::process::Command {
    let program = match argv[0].as_str() {
        "python3" => common::PYTHON.to_owned(),
        p => p.to_owned(),
    };
    let mut cmd = std::process::Command::new(program);
    cmd.args(&argv[1..])
        .current_dir(dir)
        .env_clear()
        .envs(env.iter().cloned());
    common::own_session(&mut cmd);
    let mut cmd = tokio::process::Command::from(cmd);
    cmd.kill_on_drop(true);
    cmd
}

/// One problem bare: compile (if C++), then its tests one after another, each killed at
/// the time limit, stopping at the first failure unless `run_all`.
async fn bare_problem(
    p: &Problem,
    lang: &sandpool_executor::languages::Language,
    dir: PathBuf,
    run_all: bool,
    o: &Opts,
) -> Result<Batch, Error> {
    let mut b = Batch::default();
    tokio::fs::create_dir_all(&dir).await?;
    tokio::fs::write(dir.join(&lang.source), &p.code).await?;
    let env = lang.run_env();
    if let Some(argv) = &lang.compile {
        let t = Instant::now();
        let status = bare_command(argv, &dir, &env).status().await?;
        b.compile += t.elapsed();
        b.compiles += 1;
        if !status.success() {
            return Err(format!("{}: bare compile failed", p.id).into());
        }
    }
    let mut first_failure: Option<String> = None;
    for (i, (input, expected_out)) in p.tests.iter().enumerate() {
        let stdin_path = dir.join(format!("in{i}"));
        let stdout_path = dir.join(format!("out{i}"));
        tokio::fs::write(&stdin_path, input).await?;
        let mut cmd = bare_command(&lang.run, &dir, &env);
        cmd.stdin(std::fs::File::open(&stdin_path)?)
            .stdout(std::fs::File::create(&stdout_path)?)
            .stderr(std::process::Stdio::null());
        let t = Instant::now();
        let mut child = cmd.spawn()?;
        let waited = match tokio::time::timeout(o.time_limit, child.wait()).await {
            Ok(status) => Some(status?),
            Err(_) => None,
        };
        let verdict = match waited {
            Some(status) if status.success() => {
                let out = tokio::fs::read(&stdout_path).await?;
                if Comparison::IgnoreTrailingWhitespace.matches(&out, expected_out) {
                    "OK"
                } else {
                    "WRONG_ANSWER"
                }
            }
            Some(_) => "RUNTIME_ERROR",
            None => {
                child.kill().await?;
                "TIME_LIMIT_EXCEEDED"
            }
        };
        if tle(verdict) {
            b.tle_tests += 1;
        } else {
            b.runs += t.elapsed();
        }
        b.tests_run += 1;
        let ok = if p.failing(i) {
            expected(p, verdict)
        } else {
            verdict == "OK"
        };
        if !ok {
            b.wrong.push(format!("{} (bare): test {i} {verdict}", p.id));
        }
        if verdict != "OK" && first_failure.is_none() {
            first_failure = Some(verdict.to_owned());
            if !run_all {
                break;
            }
        }
    }
    let v = first_failure.as_deref().unwrap_or("OK");
    if !expected(p, v) {
        b.wrong.push(format!("{} (bare): {v}", p.id));
    }
    let _ = tokio::fs::remove_dir_all(&dir).await;
    Ok(b)
}

async fn bare(
    problems: &[Problem],
    lang: &sandpool_executor::languages::Language,
    run_all: bool,
    o: &Opts,
    parallel: usize,
) -> Result<Batch, Error> {
    let root = bare_dir();
    let cpu_before = children_cpu();
    let t = Instant::now();
    let out: Vec<Result<Batch, Error>> = futures::stream::iter(problems.iter().enumerate())
        .map(|(i, p)| bare_problem(p, lang, root.join(format!("p{i}")), run_all, o))
        .buffer_unordered(parallel)
        .collect()
        .await;
    let mut b = Batch {
        elapsed: t.elapsed(),
        cpu: children_cpu().saturating_sub(cpu_before),
        ..Default::default()
    };
    for r in out {
        let r = r?;
        b.tests_run += r.tests_run;
        b.wrong.extend(r.wrong);
        b.compile += r.compile;
        b.compiles += r.compiles;
        b.runs += r.runs;
        b.tle_tests += r.tle_tests;
    }
    let _ = std::fs::remove_dir_all(&root);
    Ok(b)
}

/// CPU time of this process's reaped children (bare runs are the only ones during a bare batch).
fn children_cpu() -> Duration {
    use nix::sys::resource::{UsageWho, getrusage};
    getrusage(UsageWho::RUSAGE_CHILDREN).map_or(Duration::ZERO, |u| {
        let tv = |t: nix::sys::time::TimeVal| Duration::new(t.tv_sec() as u64, t.tv_usec() as u32 * 1000);
        tv(u.user_time()) + tv(u.system_time())
    })
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

const HEADER: [&str; 9] = [
    "time s", "prob/s", "tests/s", "tests", "TLE", "compile", "test", "prog CPU", "vs bare",
];
const UNITS: [&str; 9] = ["", "/core", "/core", "run", "tests", "ms", "ms", "s", "time"];

fn header(name: &str) {
    println!("{name:<22} {}", HEADER.map(|h| format!("{h:>8}")).join(" "));
    println!("{:<22} {}", "", UNITS.map(|h| format!("{h:>8}")).join(" "));
}

fn row(name: &str, n: usize, b: &Batch, cores: usize, base: &Batch) {
    let secs = b.elapsed.as_secs_f64();
    let per_core = |x: usize| x as f64 / secs / cores as f64;
    let timed = b.tests_run - b.tle_tests;
    println!(
        "{name:<22} {secs:>8.2} {:>8.2} {:>8.1} {:>8} {:>8} {:>8.1} {:>8.2} {:>8.2} {:>7.2}x",
        per_core(n),
        per_core(b.tests_run),
        b.tests_run,
        b.tle_tests,
        if b.compiles > 0 {
            ms(b.compile) / b.compiles as f64
        } else {
            0.0
        },
        if timed > 0 { ms(b.runs) / timed as f64 } else { 0.0 },
        b.cpu.as_secs_f64(),
        secs / base.elapsed.as_secs_f64(),
    );
}

/// One problem at a time, one test at a time, sandboxed and bare: where a problem's time goes.
async fn breakdown(
    client: &pb::executor_client::ExecutorClient<tonic::transport::Channel>,
    problems: &[Problem],
    lang: &sandpool_executor::languages::Language,
    o: &Opts,
) -> Result<(), Error> {
    let mut sand = (Duration::ZERO, Duration::ZERO, Duration::ZERO, 0usize);
    let mut bare_sum = (Duration::ZERO, Duration::ZERO, 0usize);
    for (i, p) in problems.iter().enumerate() {
        let mut req = request(p, true, o.time_limit);
        if let Some(opts) = req.options.as_mut() {
            opts.parallelism = 1;
        }
        let t = Instant::now();
        let r = client.clone().evaluate(req).await?.into_inner();
        let total = t.elapsed();
        if !r.accepted {
            return Err(format!("{}: {} ({})", p.id, verdict_name(r.verdict), r.message).into());
        }
        let compile = Duration::from_micros(r.compile.as_ref().map_or(0, |c| c.wall_time_us));
        sand.0 += compile;
        sand.1 += total.saturating_sub(compile);
        sand.2 += r
            .tests
            .iter()
            .filter_map(|t| t.run.as_ref())
            .map(|r| Duration::from_micros(r.wall_time_us))
            .sum::<Duration>();
        sand.3 += r.tests.len();
        let b = bare_problem(p, lang, bare_dir().join(format!("serial{i}")), true, o).await?;
        if !b.wrong.is_empty() {
            return Err(b.wrong.join("; ").into());
        }
        bare_sum.0 += b.compile;
        bare_sum.1 += b.runs;
        bare_sum.2 += b.tests_run;
    }
    let _ = std::fs::remove_dir_all(bare_dir());
    let n = problems.len() as f64;
    let (st, bt) = (sand.3 as f64, bare_sum.2 as f64);
    println!(
        "  one at a time ({} correct problems, {} tests): compile {:.1} ms bare, {:.1} ms sandboxed; \
         a test {:.2} ms bare (spawn to exit), {:.2} ms through Evaluate ({:.2} ms of it the program \
         inside the sandbox), {:+.2} ms a test over bare",
        problems.len(),
        sand.3,
        ms(bare_sum.0) / n,
        ms(sand.0) / n,
        ms(bare_sum.1) / bt,
        ms(sand.1) / st,
        ms(sand.2) / st,
        ms(sand.1) / st - ms(bare_sum.1) / bt,
    );
    Ok(())
}

fn main() -> Result<(), Error> {
    if std::env::args().any(|a| a == "--list") {
        return Ok(());
    }
    let o = opts()?;
    let cores = std::thread::available_parallelism().map(|c| c.get()).unwrap_or(1);
    let languages: Vec<&str> = o.langs.iter().map(|l| l.name()).collect();
    let args = common::executor(
        "multitest",
        &languages.join(","),
        ["--isolation".to_string(), o.isolation.clone()],
    );
    let rt = tokio::runtime::Runtime::new()?;
    rt.block_on(async move {
        let engine = Arc::new(args.executor.build_engine().await?);
        let slots = engine.admission().slots();
        let in_flight = o.in_flight.unwrap_or(4 * slots);
        let server = Loopback::start(engine.clone(), args.executor.session_policy()).await?;
        let client = pb::executor_client::ExecutorClient::new(server.channel.clone())
            .max_decoding_message_size(64 << 20)
            .max_encoding_message_size(64 << 20);
        println!(
            "Multi-test problems: {} per language, {} tests each, {:?} C++ headers, CPU limit {} ms; \
             {cores} CPUs, {slots} slots, isolation {}, {in_flight} Evaluate requests in flight, bare runs {cores} problems at once",
            o.problems,
            o.tests,
            o.headers,
            o.time_limit.as_millis(),
            o.isolation
        );
        let mut failed = Vec::new();
        for &lang in &o.langs {
            let problems = problems::problems(o.problems, o.tests, lang, o.headers);
            let table = engine
                .languages()
                .get(lang.name())
                .ok_or(format!("{} is not in the language table", lang.name()))?
                .clone();
            // Warm-up: page cache, compilers, zygotes, the connection (a few problems, both ways).
            let warm: Vec<Problem> = problems.iter().take(2 * cores).cloned().collect();
            let _ = sandboxed(&client, &warm, true, &o, in_flight).await;
            let _ = bare(&warm, &table, true, &o, cores).await?;
            println!();
            header(lang.name());
            for &run_all in &o.modes {
                let base = bare(&problems, &table, run_all, &o, cores).await?;
                let before = compiles(&engine);
                let b = sandboxed(&client, &problems, run_all, &o, in_flight).await;
                let compiled = compiles(&engine) - before;
                row(&format!("bare, {}", mode_name(run_all)), problems.len(), &base, cores, &base);
                row(&format!("Evaluate, {}", mode_name(run_all)), problems.len(), &b, cores, &base);
                if lang == Lang::Python {
                    println!("  warm tests: {}/{}", b.warm, b.tests_run);
                    // Restricted mode has no zygotes (docs/warm-starts.md).
                    if b.warm != b.tests_run && o.isolation == "namespaces" {
                        failed.push(format!("python {}: {} of {} tests cold", mode_name(run_all), b.tests_run - b.warm, b.tests_run));
                    }
                }
                if lang == Lang::Cpp && compiled != problems.len() {
                    failed.push(format!("cpp {}: {compiled} compiles for {} problems", mode_name(run_all), problems.len()));
                }
                let rate = problems.len() as f64 / b.elapsed.as_secs_f64() / cores as f64;
                if o.tests == 20 {
                    println!(
                        "  target: at least 1 problem/s per core at 20 tests: {} ({rate:.2})",
                        if rate >= 1.0 { "met" } else { "NOT met" }
                    );
                }
                failed.extend(base.wrong.into_iter().chain(b.wrong));
            }
            if o.breakdown > 0 {
                let correct: Vec<Problem> = problems
                    .iter()
                    .filter(|p| p.variant == Variant::Correct)
                    .take(o.breakdown)
                    .cloned()
                    .collect();
                breakdown(&client, &correct, &table, &o).await?;
            }
        }
        println!();
        println!(
            "compile: mean wall time of a compile; test: mean wall time of a test's program that did not \
             reach the limit, as the sandbox measured it (bare: spawn to exit); prog CPU: the programs' and \
             compilers' CPU time in all (bare: every child's)"
        );
        server.stop().await;
        if failed.is_empty() {
            println!("every verdict as expected");
            Ok(())
        } else {
            for f in failed.iter().take(20) {
                println!("UNEXPECTED: {f}");
            }
            Err(format!("{} unexpected results", failed.len()).into())
        }
    })
}
