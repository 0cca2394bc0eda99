//! `sandpool eval DATASET.jsonl`: judge every record of a dataset over
//! `EvaluateStream`s (see [`crate::streams`]), with a progress bar, a summary by verdict and language,
//! pass@k, and one JSON line of results per record.

mod records;
#[cfg(test)]
mod shared_rows;

use crate::streams::{Spread, evaluate_all};
use crate::target::verdict_name;
use anyhow::{Context, anyhow, bail};
use indicatif::{ProgressBar, ProgressState, ProgressStyle};
pub use records::Format;
use sandpool_executor::config::{ExecutorArgs, OnOff};
use sandpool_executor::server::Loopback;
use sandpool_proto::v1 as pb;
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tonic::transport::Channel;

#[derive(Debug, clap::Args)]
pub struct EvalArgs {
    /// JSONL (or .jsonl.gz) of HumanEval, HumanEval-X, MBPP, MBXP, MultiPL-E, LiveCodeBench or
    /// stdio records (docs/benchmarks.md).
    dataset: PathBuf,
    /// The records' shape; `auto` recognises each record's by its fields.
    #[arg(long, value_enum, default_value = "auto")]
    format: Format,
    /// The language prelude for assert tests (default: the executor's); `off` for reference-harness parity.
    #[arg(long, value_enum)]
    prelude: Option<sandpool_executor::config::OnOff>,
    /// Judge only the first N records.
    #[arg(long)]
    limit: Option<usize>,
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
    /// The executors, for streams (one each; a `dns:` endpoint is resolved again as streams reopen).
    pub each: crate::target::Executors,
    /// Stops the embedded executor when the connection is dropped.
    _embedded: Option<Loopback>,
}

/// A client that sends requests of any size.
fn unbounded(ch: Channel) -> crate::target::Client {
    crate::target::client(ch).max_encoding_message_size(usize::MAX)
}

/// Connects to `endpoint`, or serves an embedded executor on a loopback port and connects to it
/// (so both paths go through the same gRPC stream handling).
pub async fn connect(endpoint: Option<&str>, args: &ExecutorArgs) -> anyhow::Result<Connection> {
    Ok(match endpoint {
        Some(e) => {
            let channels = crate::target::channels(e).await?;
            Connection {
                client: unbounded(channels.balanced.clone()),
                each: crate::target::Executors::new(e, &channels, unbounded),
                _embedded: None,
            }
        }
        None => {
            let local = Loopback::start(Arc::new(args.build_engine().await?), args.session_policy()).await?;
            let ch = local.channel.clone();
            Connection {
                client: unbounded(ch.clone()),
                each: crate::target::Executors::fixed(vec![unbounded(ch)]),
                _embedded: Some(local),
            }
        }
    })
}

/// One dataset record turned into a request, with what the summary groups by.
#[derive(Debug)]
pub struct Item {
    pub task_id: String,
    /// The dataset line it came from.
    pub line: usize,
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

fn task_id(r: &Value) -> String {
    match r
        .get("task_id")
        .or_else(|| r.get("question_id"))
        .or_else(|| r.get("name"))
    {
        Some(Value::String(s)) => s.clone(),
        Some(v @ Value::Number(_)) => v.to_string(),
        _ => String::new(),
    }
}

/// How records become requests.
#[derive(Debug, Clone)]
pub struct Recipe {
    pub format: Format,
    /// Language of records without a `language` field.
    pub language: String,
    /// `options.prelude` of every request (unspecified: the executor's default).
    pub prelude: pb::evaluate_options::Prelude,
}

/// Turns record `line` into one request per completion (same rules as the Python client's
/// `record_requests`): the record joined with its problem from `problems` (the record's fields
/// win), in `recipe.format` or the shape its fields show (see [`records::detect`]).
pub fn items_of(
    record: &Value,
    line: usize,
    problems: &HashMap<String, Value>,
    recipe: &Recipe,
) -> anyhow::Result<Vec<Item>> {
    let task = task_id(record);
    let at = format!("record {line} ({task})");
    let joined;
    let r = match (problems.get(&task), record.as_object()) {
        (Some(Value::Object(p)), Some(rec)) => {
            let mut p = p.clone();
            p.extend(rec.iter().map(|(k, v)| (k.clone(), v.clone())));
            joined = Value::Object(p);
            &joined
        }
        _ => record,
    };
    let format = match recipe.format {
        Format::Auto => records::detect(r).ok_or_else(|| {
            anyhow!("{at}: tests: shape not recognised (prompt/test, declaration, tests/stop_tokens, public_test_cases, test_list, inputs/outputs or tests); see --format")
        })?,
        f => f,
    };
    let completions = records::completions(r, &at)?;
    let several = completions.len() > 1;
    completions
        .iter()
        .enumerate()
        .map(|(k, c)| {
            let mut request = records::request(r, format, c, &recipe.language, &at)?;
            request.id = if several {
                format!("{line}.{k}")
            } else {
                line.to_string()
            };
            if recipe.prelude != pb::evaluate_options::Prelude::Unspecified {
                request.options.get_or_insert_with(Default::default).prelude = recipe.prelude as i32;
            }
            Ok(Item {
                task_id: task.clone(),
                line,
                request,
            })
        })
        .collect()
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
        "line": item.line,
        "id": item.request.id,
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
    let recipe = Recipe {
        format: a.format,
        language: a.language.clone(),
        prelude: match a.prelude {
            None => pb::evaluate_options::Prelude::Unspecified,
            Some(OnOff::On) => pb::evaluate_options::Prelude::On,
            Some(OnOff::Off) => pb::evaluate_options::Prelude::Off,
        },
    };
    let mut items: Vec<Item> = Vec::new();
    for (n, r) in read_jsonl(&a.dataset)?
        .iter()
        .enumerate()
        .take(a.limit.unwrap_or(usize::MAX))
    {
        for mut it in items_of(r, n + 1, &problems, &recipe)? {
            if a.wall_time_ms > 0 {
                let o = it.request.options.get_or_insert_with(Default::default);
                o.run_limits = Some(pb::Limits {
                    wall_time_ms: a.wall_time_ms,
                    ..Default::default()
                });
            }
            items.push(it);
        }
    }
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
    let unanswered = evaluate_all(conn.each, &requests, spread, |i, resp, attempts| {
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
        let recipe = Recipe {
            format: Format::Auto,
            language: "python".into(),
            prelude: pb::evaluate_options::Prelude::Off,
        };
        let one = |r: &Value, line: usize| items_of(r, line, &none, &recipe).map(|mut v| v.remove(0));
        let he = serde_json::json!({"task_id": "T", "prompt": "def f():\n", "canonical_solution": "  return 1\n",
            "test": "def check(c): pass", "entry_point": "f"});
        let r = one(&he, 3).expect("humaneval").request;
        assert_eq!((r.id.as_str(), r.completion.as_str()), ("3", "def f():\n  return 1\n"));
        let o = r.options.expect("options");
        assert!(o.raw_code);
        assert_eq!(o.prelude, pb::evaluate_options::Prelude::Off as i32);
        let stdio = serde_json::json!({"code": "x", "language": "cpp", "inputs": ["1"], "outputs": ["2", "3"]});
        let e = one(&stdio, 1).expect_err("mismatched outputs");
        assert!(e.to_string().contains("outputs: 2 outputs for 1 inputs"), "{e}");
        let mbpp = serde_json::json!({"task_id": 4, "code": "x = 1", "test_list": ["assert x == 1"], "test_setup_code": "import os"});
        let r = one(&mbpp, 1).expect("mbpp");
        assert_eq!(r.task_id, "4");
        match r.request.tests {
            Some(pb::evaluate_request::Tests::Assert(t)) => assert_eq!(t.test_code, "import os\nassert x == 1"),
            t => panic!("expected assert tests, got {t:?}"),
        }
        // Several samples in one record: one request each, ids line.k.
        let samples = serde_json::json!({"task_id": "S", "completions": ["a", "b"], "inputs": ["1"], "outputs": ["1"]});
        let ids: Vec<String> = items_of(&samples, 7, &none, &recipe)
            .expect("samples")
            .into_iter()
            .map(|i| i.request.id)
            .collect();
        assert_eq!(ids, ["7.0", "7.1"]);
        // A samples file joined to its problems: the sample's completion wins over the canonical one.
        let problems: HashMap<String, Value> = [("T".to_string(), he.clone())].into();
        let sample = serde_json::json!({"task_id": "T", "completion": "  return 2\n"});
        let r = items_of(&sample, 1, &problems, &recipe)
            .expect("joined")
            .remove(0)
            .request;
        assert_eq!(r.completion, "def f():\n  return 2\n");
    }
}
