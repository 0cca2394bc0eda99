//! HumanEval-X warm against cold, per language, in the same run: each problem's canonical
//! solution and a stub judged through the real gRPC `Evaluate` of an executor started in this
//! process, once with the language's warm path (shared artifacts such as C++'s precompiled
//! headers, docs/warm-starts.md) and once with `cold_start`, one request at a time, warm and
//! cold interleaved. Prints each problem's times, the mean per problem, the ratio (target:
//! warm at least 2x faster), and whether the verdicts are identical (canonical accepted,
//! stubs rejected, warm and cold alike). The first warm and the first cold request of each
//! language are not timed: they build the shared artifacts and run the judge's warm-up.
//!
//! Run as root: `cargo bench -p sandpool-executor --bench humaneval_x -- [--limit N]
//! [--languages cpp,java,go,javascript]`. Data: `$SANDPOOL_DATASETS/humaneval-x`, else
//! /work/shared/datasets/humaneval-x.

use sandpool_executor::proto as pb;
use sandpool_executor::server::Loopback;
use std::io::Read;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

mod common;
use common::Error;

/// (name on the command line, language in requests, dataset file, stub body).
const LANGS: &[(&str, &str, &str, &str)] = &[
    ("cpp", "cpp", "humaneval_cpp.jsonl.gz", "    throw 0;\n}\n"),
    (
        "java",
        "java",
        "humaneval_java.jsonl.gz",
        "        throw new UnsupportedOperationException();\n    }\n}\n",
    ),
    ("go", "go_test", "humaneval_go.jsonl.gz", "    panic(\"stub\")\n}\n"),
    (
        "javascript",
        "javascript",
        "humaneval_js.jsonl.gz",
        "  return undefined;\n}\n",
    ),
];

fn datasets() -> PathBuf {
    std::env::var("SANDPOOL_DATASETS")
        .map(PathBuf::from)
        .unwrap_or_else(|_| PathBuf::from("/work/shared/datasets"))
        .join("humaneval-x")
}

fn rows(file: &str, limit: usize) -> Result<Vec<serde_json::Value>, Error> {
    let path = datasets().join(file);
    let mut text = String::new();
    flate2::read::GzDecoder::new(std::fs::File::open(&path).map_err(|e| format!("{}: {e}", path.display()))?)
        .read_to_string(&mut text)?;
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .take(limit)
        .map(|l| Ok(serde_json::from_str(l)?))
        .collect()
}

fn request(id: &str, lang: &str, code: String, test: &str, cold_start: bool) -> pb::EvaluateRequest {
    let limits = Some(pb::Limits {
        wall_time_ms: 30_000,
        cpu_time_ms: 30_000,
        ..Default::default()
    });
    pb::EvaluateRequest {
        id: id.into(),
        language: lang.into(),
        completion: code,
        tests: Some(pb::evaluate_request::Tests::Assert(pb::AssertTests {
            test_code: test.into(),
            ..Default::default()
        })),
        options: Some(pb::EvaluateOptions {
            raw_code: true,
            cold_start,
            run_limits: limits,
            compile_limits: limits,
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Whether any phase of `r` started warm.
fn warm(r: &pb::EvaluateResponse) -> bool {
    r.compile.as_ref().is_some_and(|c| c.warm) || r.tests.iter().any(|t| t.run.as_ref().is_some_and(|p| p.warm))
}

/// The start of what the first failing phase printed, to say why verdicts differ.
fn why(r: &pb::EvaluateResponse) -> String {
    let phase = r
        .tests
        .iter()
        .filter(|t| !t.passed)
        .find_map(|t| t.run.as_ref())
        .or(r.compile.as_ref().filter(|_| r.tests.iter().all(|t| t.run.is_none())));
    let text = phase
        .map(|p| String::from_utf8_lossy(&p.stderr).into_owned())
        .unwrap_or_default();
    format!("{} {}", r.message, text.chars().take(300).collect::<String>())
}

struct Args {
    limit: usize,
    langs: Vec<String>,
}

fn args() -> Result<Args, Error> {
    let mut a = Args {
        limit: usize::MAX,
        langs: LANGS.iter().map(|l| l.0.to_owned()).collect(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(x) = it.next() {
        match x.as_str() {
            "--limit" => a.limit = it.next().ok_or("--limit N")?.parse()?,
            "--languages" => {
                a.langs = it
                    .next()
                    .ok_or("--languages a,b")?
                    .split(',')
                    .map(str::to_owned)
                    .collect()
            }
            "--bench" => {}
            other => return Err(format!("unknown argument {other}").into()),
        }
    }
    if let Some(bad) = a.langs.iter().find(|l| !LANGS.iter().any(|x| x.0 == l.as_str())) {
        return Err(format!("unknown language {bad}").into());
    }
    Ok(a)
}

fn main() -> Result<(), Error> {
    if std::env::args().any(|a| a == "--list") {
        return Ok(());
    }
    let a = args()?;
    let chosen: Vec<_> = LANGS.iter().filter(|l| a.langs.iter().any(|x| x == l.0)).collect();
    let enabled = chosen.iter().map(|l| l.1).collect::<Vec<_>>().join(",");
    let sargs = common::executor("humaneval-x", &enabled, ["--slots".to_string(), "2".into()]);
    let rt = tokio::runtime::Runtime::new()?;
    rt.block_on(async move {
        let engine = Arc::new(sargs.executor.build_engine().await?);
        let server = Loopback::start(engine, sargs.executor.session_policy()).await?;
        let mut client = pb::executor_client::ExecutorClient::new(server.channel.clone());
        let mut summary = Vec::new();
        for (name, lang, file, stub) in chosen {
            let problems = rows(file, a.limit)?;
            let program = |p: &serde_json::Value, body: &str| {
                sandpool_executor::judge::humaneval_x::program(p, lang, body).map_err(|k| format!("field {k}"))
            };
            let s = |p: &serde_json::Value, k: &str| p[k].as_str().unwrap_or_default().to_owned();
            // The first warm request builds the shared artifacts: not timed.
            let first = &problems[0];
            let t = Instant::now();
            let r = client
                .evaluate(request("warm-up", lang, program(first, &s(first, "canonical_solution"))?, &s(first, "test"), false))
                .await?
                .into_inner();
            println!(
                "{name}: first warm request (builds the shared artifacts) {:.2} s, warm {}",
                t.elapsed().as_secs_f64(),
                warm(&r)
            );
            // And the first cold one, which runs the judge's warm-up where the language has one
            // (go_test: testify's build cache, copied into every cold test's work dir).
            let t = Instant::now();
            client
                .evaluate(request("cold-up", lang, program(first, &s(first, "canonical_solution"))?, &s(first, "test"), true))
                .await?;
            println!("{name}: first cold request {:.2} s", t.elapsed().as_secs_f64());
            println!("{name:<11} {:<16} {:>9} {:>9} {:>6}", "problem", "warm ms", "cold ms", "ratio");
            let (mut tw, mut tc, mut same, mut expected, mut warm_phases) = (Duration::ZERO, Duration::ZERO, 0, 0, 0);
            let mut differ = Vec::new();
            for p in &problems {
                let id = s(p, "task_id");
                let mut row = [Duration::ZERO; 2];
                for (kind, body) in [("canonical", s(p, "canonical_solution")), ("stub", stub.to_string())] {
                    let code = program(p, &body)?;
                    let mut verdicts = Vec::new();
                    for (i, cold) in [false, true].into_iter().enumerate() {
                        let t = Instant::now();
                        let r = client
                            .evaluate(request(&id, lang, code.clone(), &s(p, "test"), cold))
                            .await?
                            .into_inner();
                        let d = t.elapsed();
                        if kind == "canonical" {
                            row[i] = d;
                        }
                        if !cold && warm(&r) {
                            warm_phases += 1;
                        }
                        if cold && warm(&r) {
                            return Err(format!("{id} {kind}: a cold_start request ran warm").into());
                        }
                        verdicts.push((r.accepted, r.verdict, why(&r)));
                    }
                    if (verdicts[0].0, verdicts[0].1) == (verdicts[1].0, verdicts[1].1) {
                        same += 1;
                    } else {
                        differ.push(format!(
                            "{id} {kind}: warm {:?} cold {:?}",
                            (verdicts[0].0, verdicts[0].1, &verdicts[0].2),
                            (verdicts[1].0, verdicts[1].1, &verdicts[1].2)
                        ));
                    }
                    if verdicts.iter().all(|v| v.0 == (kind == "canonical")) {
                        expected += 1;
                    }
                }
                tw += row[0];
                tc += row[1];
                println!(
                    "{name:<11} {id:<16} {:>9.1} {:>9.1} {:>6.2}",
                    row[0].as_secs_f64() * 1e3,
                    row[1].as_secs_f64() * 1e3,
                    row[1].as_secs_f64() / row[0].as_secs_f64()
                );
            }
            let n = problems.len();
            let line = format!(
                "{name:<11} {n:>4} problems  warm {:>7.1} ms  cold {:>7.1} ms per problem  cold/warm {:>5.2}x  \
                 identical verdicts {same}/{}  as expected (canonical pass, stub fail) {expected}/{}  warm requests {warm_phases}/{}",
                tw.as_secs_f64() * 1e3 / n as f64,
                tc.as_secs_f64() * 1e3 / n as f64,
                tc.as_secs_f64() / tw.as_secs_f64(),
                2 * n,
                2 * n,
                2 * n
            );
            for d in &differ {
                println!("  verdicts differ: {d}");
            }
            summary.push(line);
        }
        println!("\nHumanEval-X, canonical solutions timed (one request at a time, warm and cold interleaved):");
        for l in summary {
            println!("{l}");
        }
        Ok::<_, Error>(())
    })
}
