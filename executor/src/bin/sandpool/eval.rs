//! `sandpool eval DATASET.jsonl`: judge every record of a dataset over
//! `EvaluateStream`s (see [`crate::streams`]), with a progress bar, a summary by verdict and language,
//! pass@k, and one JSON line of results per record.

use crate::streams::{Spread, evaluate_all};
use crate::target::verdict_name;
use anyhow::{Context, anyhow, bail};
use indicatif::{ProgressBar, ProgressState, ProgressStyle};
use sandpool_executor::config::ExecutorArgs;
use sandpool_executor::proto as pb;
use sandpool_executor::server::Loopback;
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tonic::transport::Channel;

#[derive(Debug, clap::Args)]
pub struct EvalArgs {
    /// JSONL (or .jsonl.gz) of HumanEval-, MBPP- or stdio-style records.
    dataset: PathBuf,
    /// Problems (HumanEval-style) for a samples file of `task_id` + `completion` records.
    #[arg(long)]
    problems: Option<PathBuf>,
    /// Executor(s): host:port, dns:///pool.ns.svc.cluster.local:50051 (every address), or a,b,... (default: embedded).
    #[arg(long, env = "SANDPOOL_ENDPOINT")]
    endpoint: Option<String>,
    /// Records judged at once.
    #[arg(long, short = 'c', default_value_t = 32)]
    concurrency: usize,
    /// EvaluateStreams open at once; on a `dns:///` or list endpoint they spread over the executors.
    #[arg(long, default_value_t = 4)]
    streams: usize,
    /// Language of records without a `language` field.
    #[arg(long, default_value = "python")]
    language: String,
    /// Wall-time limit per test, ms (0: executor default).
    #[arg(long, default_value_t = 0)]
    wall_time_ms: u64,
    /// Where to write one JSON line of results per record (default: DATASET with `.results.jsonl`).
    #[arg(long, short)]
    output: Option<PathBuf>,
    /// Resends of a record answered SANDBOX_ERROR (the executor failed, not the code).
    #[arg(long, default_value_t = 2)]
    retries: u32,
    /// pass@k values to report (for tasks with at least k samples).
    #[arg(long, value_delimiter = ',', default_values_t = [1u64, 10, 100])]
    k: Vec<u64>,
    /// No progress bar.
    #[arg(long)]
    quiet: bool,
    #[command(flatten)]
    executor: ExecutorArgs,
}

/// gRPC clients, and the embedded executor they talk to when there is no endpoint.
pub struct Connection {
    /// For unary calls (balanced over every executor).
    pub client: crate::target::Client,
    /// One per executor, for streams.
    pub each: Vec<crate::target::Client>,
    /// Stops the embedded executor when the connection is dropped.
    _embedded: Option<Loopback>,
}

/// Connects to `endpoint`, or serves an embedded executor on a loopback port and connects to it
/// (so both paths go through the same gRPC stream handling).
pub async fn connect(endpoint: Option<&str>, args: &ExecutorArgs) -> anyhow::Result<Connection> {
    let (channels, embedded) = match endpoint {
        Some(e) => (crate::target::channels(e).await?, None),
        None => {
            let local = Loopback::start(Arc::new(args.build_engine().await?)).await?;
            let ch = local.channel.clone();
            let channels = crate::target::Channels {
                balanced: ch.clone(),
                each: vec![ch],
            };
            (channels, Some(local))
        }
    };
    let client = |ch: Channel| crate::target::client(ch).max_encoding_message_size(usize::MAX);
    Ok(Connection {
        client: client(channels.balanced),
        each: channels.each.into_iter().map(client).collect(),
        _embedded: embedded,
    })
}

/// One dataset record turned into a request, with what the summary groups by.
#[derive(Debug)]
pub struct Item {
    pub task_id: String,
    pub request: pb::EvaluateRequest,
}

/// Reads a JSONL file, gunzipping `.gz`; errors name the file and line.
pub fn read_jsonl(path: &Path) -> anyhow::Result<Vec<Value>> {
    let file = std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let reader: Box<dyn Read> = if path.extension().is_some_and(|e| e == "gz") {
        Box::new(flate2::read::GzDecoder::new(file))
    } else {
        Box::new(file)
    };
    let mut out = vec![];
    for (n, line) in BufReader::new(reader).lines().enumerate() {
        let line = line.with_context(|| format!("reading {}", path.display()))?;
        if line.trim().is_empty() {
            continue;
        }
        out.push(serde_json::from_str(&line).with_context(|| format!("{}:{}: not JSON", path.display(), n + 1))?);
    }
    Ok(out)
}

fn text<'a>(r: &'a Value, key: &str) -> Option<&'a str> {
    r.get(key).and_then(Value::as_str)
}

fn task_id(r: &Value) -> String {
    match r.get("task_id") {
        Some(Value::String(s)) => s.clone(),
        Some(v @ Value::Number(_)) => v.to_string(),
        _ => String::new(),
    }
}

/// Strings of a JSON array field; errors name the field.
fn strings(r: &Value, key: &str, at: &str) -> anyhow::Result<Vec<String>> {
    let Some(v) = r.get(key) else { return Ok(vec![]) };
    let arr = v.as_array().ok_or_else(|| anyhow!("{at}: {key}: not an array"))?;
    arr.iter()
        .enumerate()
        .map(|(i, s)| {
            s.as_str()
                .map(str::to_owned)
                .ok_or_else(|| anyhow!("{at}: {key}[{i}]: not a string"))
        })
        .collect()
}

/// Turns one record into a request (same rules as the Python client's `record_request`):
/// HumanEval (`prompt`, `test`, `entry_point`, here or in `problems`; `completion`, else
/// `canonical_solution`), MBPP (`test_list`), stdio (`inputs`/`outputs` or `tests[{input, output}]`).
pub fn item(record: &Value, line: usize, problems: &HashMap<String, Value>, language: &str) -> anyhow::Result<Item> {
    let task = task_id(record);
    let at = format!("record {line} ({task})");
    let language = text(record, "language").unwrap_or(language).to_owned();
    let mut req = pb::EvaluateRequest {
        id: line.to_string(),
        language,
        ..Default::default()
    };
    let problem = if record.get("entry_point").is_some() && record.get("test").is_some() {
        Some(record)
    } else {
        problems.get(&task)
    };
    if let Some(p) = problem {
        let completion = text(record, "completion")
            .or_else(|| text(record, "canonical_solution"))
            .ok_or_else(|| anyhow!("{at}: completion: missing (nor canonical_solution)"))?;
        let field = |k: &str| text(p, k).ok_or_else(|| anyhow!("{at}: {k}: missing or not a string"));
        // HumanEval completions continue the prompt and are not Markdown: run them as they are.
        req.completion = format!("{}{completion}", field("prompt")?);
        req.tests = Some(pb::evaluate_request::Tests::Assert(pb::AssertTests {
            test_code: field("test")?.to_owned(),
            entry_point: field("entry_point")?.to_owned(),
            stop_tokens: vec![],
        }));
        req.options = Some(pb::EvaluateOptions {
            raw_code: true,
            ..Default::default()
        });
        return Ok(Item {
            task_id: task,
            request: req,
        });
    }
    req.completion = text(record, "completion")
        .or_else(|| text(record, "code"))
        .ok_or_else(|| anyhow!("{at}: completion: missing (nor code)"))?
        .to_owned();
    if record.get("test_list").is_some() {
        let mut lines = strings(record, "test_imports", &at)?;
        lines.extend(text(record, "test_setup_code").map(str::to_owned));
        lines.extend(strings(record, "test_list", &at)?);
        req.tests = Some(pb::evaluate_request::Tests::Assert(pb::AssertTests {
            test_code: lines.join("\n"),
            ..Default::default()
        }));
    } else {
        let pairs: Vec<(String, String)> = if record.get("inputs").is_some() {
            let (i, o) = (strings(record, "inputs", &at)?, strings(record, "outputs", &at)?);
            if i.len() != o.len() {
                bail!("{at}: outputs: {} outputs for {} inputs", o.len(), i.len());
            }
            i.into_iter().zip(o).collect()
        } else if let Some(tests) = record.get("tests").and_then(Value::as_array) {
            tests
                .iter()
                .enumerate()
                .map(|(n, t)| match (text(t, "input"), text(t, "output")) {
                    (Some(i), Some(o)) => Ok((i.to_owned(), o.to_owned())),
                    _ => Err(anyhow!("{at}: tests[{n}]: needs string input and output")),
                })
                .collect::<anyhow::Result<_>>()?
        } else {
            bail!("{at}: tests: none found (prompt/test/entry_point, test_list, inputs/outputs or tests)");
        };
        req.tests = Some(pb::evaluate_request::Tests::Stdio(pb::StdioTests {
            cases: pairs
                .into_iter()
                .map(|(i, o)| pb::StdioCase {
                    stdin: i.into_bytes(),
                    expected_stdout: o.into_bytes(),
                })
                .collect(),
            comparison: None,
        }));
    }
    Ok(Item {
        task_id: task,
        request: req,
    })
}

/// pass@k, the unbiased estimator: 1 - C(n-c, k) / C(n, k).
pub fn pass_at_k(n: u64, c: u64, k: u64) -> f64 {
    if n - c < k {
        return 1.0;
    }
    1.0 - (n - c + 1..=n).map(|i| 1.0 - k as f64 / i as f64).product::<f64>()
}

fn result_json(item: &Item, r: &pb::EvaluateResponse) -> Value {
    let tests: Vec<Value> = r
        .tests
        .iter()
        .map(|t| {
            let run = t.run.clone().unwrap_or_default();
            json!({
                "index": t.index,
                "passed": t.passed,
                "verdict": verdict_name(t.verdict),
                "message": t.message,
                "exit_code": run.exit_code,
                "wall_time_us": run.wall_time_us,
                "stderr": String::from_utf8_lossy(&run.stderr[..run.stderr.len().min(2048)]),
            })
        })
        .collect();
    let exec = r.executor.clone().unwrap_or_default();
    json!({
        "task_id": item.task_id,
        "line": item.request.id.parse::<usize>().unwrap_or(0),
        "language": item.request.language,
        "accepted": r.accepted,
        "verdict": if r.error.is_some() { "ERROR" } else { verdict_name(r.verdict) },
        "message": r.message,
        "error": r.error.as_ref().map(|e| json!({"code": e.code, "message": e.message})),
        "tests": tests,
        "executor": exec.name,
    })
}

/// Counts by language and verdict, and per-task samples for pass@k.
#[derive(Default)]
struct Summary {
    by_language: BTreeMap<String, BTreeMap<String, usize>>,
    per_task: BTreeMap<String, (u64, u64)>,
    errors: usize,
}

impl Summary {
    fn add(&mut self, item: &Item, r: &pb::EvaluateResponse) {
        let verdict = if r.error.is_some() {
            self.errors += 1;
            "ERROR"
        } else {
            verdict_name(r.verdict)
        };
        *self
            .by_language
            .entry(item.request.language.clone())
            .or_default()
            .entry(verdict.to_owned())
            .or_default() += 1;
        let t = self.per_task.entry(item.task_id.clone()).or_default();
        t.0 += 1;
        t.1 += u64::from(r.accepted);
    }

    fn print(&self, elapsed: Duration, ks: &[u64]) {
        let verdicts: std::collections::BTreeSet<&String> = self.by_language.values().flat_map(|m| m.keys()).collect();
        let total: usize = self.by_language.values().flat_map(|m| m.values()).sum();
        print!("{:<12} {:>7} {:>8}", "language", "total", "passed");
        for v in &verdicts {
            print!(" {:>w$}", v, w = v.len().max(6));
        }
        println!();
        for (lang, m) in &self.by_language {
            let n: usize = m.values().sum();
            let ok = m.get("OK").copied().unwrap_or(0);
            print!("{lang:<12} {n:>7} {:>7.1}%", 100.0 * ok as f64 / n.max(1) as f64);
            for v in &verdicts {
                print!(" {:>w$}", m.get(*v).copied().unwrap_or(0), w = v.len().max(6));
            }
            println!();
        }
        let secs = elapsed.as_secs_f64();
        println!(
            "{total} records in {secs:.1} s ({:.1}/s)",
            total as f64 / secs.max(1e-9)
        );
        let max_n = self.per_task.values().map(|t| t.0).max().unwrap_or(0);
        for &k in ks {
            if k == 0 || k > max_n {
                continue;
            }
            let scores: Vec<f64> = self
                .per_task
                .values()
                .filter(|(n, _)| *n >= k)
                .map(|&(n, c)| pass_at_k(n, c, k))
                .collect();
            println!(
                "pass@{k}: {:.4} over {} tasks",
                scores.iter().sum::<f64>() / scores.len().max(1) as f64,
                scores.len()
            );
        }
    }
}

/// A bar with count, rate and ETA on stderr (drawn only on a terminal); hidden with `quiet`.
pub fn progress_bar(len: usize, quiet: bool) -> ProgressBar {
    if quiet {
        return ProgressBar::hidden();
    }
    let style = ProgressStyle::with_template("{bar:40} {pos}/{len} · {rate} · ETA {eta} {msg}")
        .expect("progress template")
        .with_key("rate", |s: &ProgressState, w: &mut dyn std::fmt::Write| {
            let _ = write!(w, "{:.1}/s", s.per_sec());
        });
    ProgressBar::new(len as u64).with_style(style)
}

fn default_output(dataset: &Path) -> PathBuf {
    let name = dataset.file_name().and_then(|n| n.to_str()).unwrap_or("dataset");
    let stem = name.trim_end_matches(".gz").trim_end_matches(".jsonl");
    dataset.with_file_name(format!("{stem}.results.jsonl"))
}

pub async fn run(a: EvalArgs) -> anyhow::Result<i32> {
    if a.concurrency == 0 {
        bail!("--concurrency: must be at least 1");
    }
    let problems: HashMap<String, Value> = match &a.problems {
        Some(p) => read_jsonl(p)?.into_iter().map(|r| (task_id(&r), r)).collect(),
        None => HashMap::new(),
    };
    let items: Vec<Item> = read_jsonl(&a.dataset)?
        .iter()
        .enumerate()
        .map(|(n, r)| {
            let mut it = item(r, n + 1, &problems, &a.language)?;
            if a.wall_time_ms > 0 {
                let o = it.request.options.get_or_insert_with(Default::default);
                o.run_limits = Some(pb::Limits {
                    wall_time_ms: a.wall_time_ms,
                    ..Default::default()
                });
            }
            Ok(it)
        })
        .collect::<anyhow::Result<_>>()?;
    if items.is_empty() {
        bail!("{}: no records", a.dataset.display());
    }
    let output = a.output.clone().unwrap_or_else(|| default_output(&a.dataset));
    let mut out = std::io::BufWriter::new(
        std::fs::File::create(&output).with_context(|| format!("creating {}", output.display()))?,
    );
    let conn = connect(a.endpoint.as_deref(), &a.executor).await?;

    let bar = progress_bar(items.len(), a.quiet);
    let started = Instant::now();
    let mut summary = Summary::default();
    let mut passed = 0usize;
    let requests: Vec<pb::EvaluateRequest> = items.iter().map(|i| i.request.clone()).collect();
    let spread = Spread {
        streams: a.streams,
        concurrency: a.concurrency,
        retries: a.retries,
        reopen_attempts: 5,
    };
    let unanswered = evaluate_all(&conn.each, &requests, spread, |i, resp, attempts| {
        summary.add(&items[i], &resp);
        passed += usize::from(resp.accepted);
        let mut line = result_json(&items[i], &resp);
        line["attempts"] = attempts.into();
        writeln!(out, "{line}")?;
        bar.inc(1);
        bar.set_message(format!("· passed {passed}"));
        Ok(())
    })
    .await?;
    bar.finish_and_clear();
    out.flush()?;
    summary.print(started.elapsed(), &a.k);
    println!("results: {}", output.display());
    if let Some(u) = unanswered {
        bail!(
            "{} records got no response: every stream gave up (last: {})",
            u.count,
            u.why
        );
    }
    Ok(if summary.errors > 0 { 2 } else { 0 })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Fraction of k-subsets of n samples (c correct) with a correct one, by counting.
    fn counted(n: u64, c: u64, k: u64) -> f64 {
        let subsets: Vec<u64> = (0u64..1 << n).filter(|m| m.count_ones() as u64 == k).collect();
        let correct = (1u64 << c) - 1;
        subsets.iter().filter(|m| *m & correct != 0).count() as f64 / subsets.len() as f64
    }

    #[test]
    fn pass_at_k_matches_counting_subsets() {
        for (n, c, k) in [(5, 0, 1), (5, 2, 3), (6, 3, 2), (7, 7, 4), (8, 1, 8), (10, 4, 5)] {
            assert!(
                (pass_at_k(n, c, k) - counted(n, c, k)).abs() < 1e-12,
                "n={n} c={c} k={k}"
            );
        }
    }

    #[test]
    fn records_of_each_shape_become_requests() {
        let none = HashMap::new();
        let he = serde_json::json!({"task_id": "T", "prompt": "def f():\n", "canonical_solution": "  return 1\n",
            "test": "def check(c): pass", "entry_point": "f"});
        let r = item(&he, 3, &none, "python").expect("humaneval").request;
        assert_eq!((r.id.as_str(), r.completion.as_str()), ("3", "def f():\n  return 1\n"));
        assert!(r.options.expect("options").raw_code);
        let stdio = serde_json::json!({"code": "x", "language": "cpp", "inputs": ["1"], "outputs": ["2", "3"]});
        let e = item(&stdio, 1, &none, "python").expect_err("mismatched outputs");
        assert!(e.to_string().contains("outputs: 2 outputs for 1 inputs"), "{e}");
        let mbpp = serde_json::json!({"task_id": 4, "code": "x = 1", "test_list": ["assert x == 1"], "test_setup_code": "import os"});
        let r = item(&mbpp, 1, &none, "python").expect("mbpp");
        assert_eq!(r.task_id, "4");
        match r.request.tests {
            Some(pb::evaluate_request::Tests::Assert(t)) => assert_eq!(t.test_code, "import os\nassert x == 1"),
            t => panic!("expected assert tests, got {t:?}"),
        }
    }
}
