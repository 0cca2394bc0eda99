//! The executor's memory: its own, idle, and what each warm slot adds (the slot's Python
//! zygotes), against a bare `python3` that imported the same modules, measured in the same
//! run. Figures are PSS (`/proc/PID/smaps_rollup`: a page shared by k processes counts 1/k
//! to each), which is what the pod's memory cgroup is charged in sum, and RSS beside it.
//!
//! Run as root: `cargo bench -p sandpool-executor --bench memory -- --slots 16`.
//!
//! Steps: start an in-process executor (python only) with `--slots`; run one warm program per
//! slot at once, each sleeping, so that every slot's plain zygote serves one; read the
//! executor and every zygote; then the same with a program that names numpy, which starts
//! each slot's second zygote (numpy preloaded). The baseline is a bare interpreter started
//! with each zygote's own flags that imported each zygote's own modules.

use futures::StreamExt;
use sandpool_executor::proto as pb;
use sandpool_executor::server::Loopback;
use std::collections::BTreeMap;
use std::io::{BufRead, Write};
use std::sync::Arc;
use std::time::{Duration, Instant};

mod common;
use common::Error;

/// Where the zygote's program starts (its `-c` argument): how a zygote is told from the
/// executor's other children.
const ZYGOTE_MARK: &str = "-c";

/// Memory of one process, in KiB, from `/proc/PID/smaps_rollup`.
#[derive(Clone, Copy, Default, Debug)]
struct Mem {
    rss: u64,
    pss: u64,
}

impl std::ops::Add for Mem {
    type Output = Mem;
    fn add(self, o: Mem) -> Mem {
        Mem {
            rss: self.rss + o.rss,
            pss: self.pss + o.pss,
        }
    }
}

fn mem(pid: u32) -> Result<Mem, Error> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup"))?;
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .unwrap_or(0)
    };
    Ok(Mem {
        rss: field("Rss:"),
        pss: field("Pss:"),
    })
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

fn argv(pid: u32) -> Vec<String> {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| {
            b.split(|c| *c == 0)
                .filter(|s| !s.is_empty())
                .map(|s| String::from_utf8_lossy(s).into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// Every descendant of `pid`, through each thread's `children` list.
fn descendants(pid: u32) -> Vec<u32> {
    let mut out = vec![];
    let mut todo = vec![pid];
    while let Some(p) = todo.pop() {
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{p}/task")) else {
            continue;
        };
        for t in tasks.flatten() {
            let kids = std::fs::read_to_string(t.path().join("children")).unwrap_or_default();
            for k in kids.split_whitespace().filter_map(|k| k.parse::<u32>().ok()) {
                out.push(k);
                todo.push(k);
            }
        }
    }
    out
}

/// The executor's zygotes: descendants running an interpreter with the zygote's program.
/// (The slots' spawners share the executor's memory and command line; they are the executor.)
fn zygotes(me: u32) -> BTreeMap<u32, Vec<String>> {
    let own = argv(me);
    descendants(me)
        .into_iter()
        .map(|p| (p, argv(p)))
        .filter(|(_, a)| *a != own && a.iter().any(|x| x == ZYGOTE_MARK))
        .collect()
}

/// A bare interpreter with `zygote_argv`'s flags that imported its modules; its memory.
fn bare_like(zygote_argv: &[String]) -> Result<Mem, Error> {
    let c = zygote_argv
        .iter()
        .position(|a| a == ZYGOTE_MARK)
        .ok_or("no -c in the zygote's argv")?;
    let (flags, mut modules) = (&zygote_argv[1..c], &zygote_argv[c + 2..]);
    // A restricted executor's zygotes say so before their modules (zygote.py).
    if modules.first().is_some_and(|m| m == "--restricted") {
        modules = &modules[1..];
    }
    let prog = "import sys\nfor m in sys.argv[1:]:\n    __import__(m)\nprint('ready', flush=True)\nsys.stdin.read()\n";
    let mut child = std::process::Command::new(common::PYTHON)
        .args(flags)
        .arg("-c")
        .arg(prog)
        .args(modules)
        .env_clear()
        .env("OPENBLAS_NUM_THREADS", "1")
        .env("OMP_NUM_THREADS", "1")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()?;
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().ok_or("no stdout")?).read_line(&mut line)?;
    let m = mem(child.id());
    if let Some(mut i) = child.stdin.take() {
        let _ = i.write_all(b"");
    }
    child.wait()?;
    if line.trim() != "ready" {
        return Err(format!("the bare interpreter did not import {modules:?}").into());
    }
    m
}

/// Runs `code` once per slot, all at once; each must run warm.
async fn one_per_slot(
    client: &pb::executor_client::ExecutorClient<tonic::transport::Channel>,
    slots: usize,
    code: &str,
) -> Result<(), Error> {
    let out: Vec<_> = futures::stream::iter(0..slots)
        .map(|i| {
            let mut c = client.clone();
            // Distinct programs: the result cache must not answer any of them.
            let req = pb::ExecuteRequest {
                language: "python".into(),
                code: format!("{code}# {i}\n"),
                ..Default::default()
            };
            async move { c.execute(req).await.map(|r| r.into_inner()) }
        })
        .buffer_unordered(slots)
        .collect()
        .await;
    for r in out {
        let r = r?;
        let warm = r.run.as_ref().is_some_and(|p| p.warm);
        if r.verdict != pb::Verdict::Ok as i32 || !warm {
            return Err(format!("a run was not OK and warm: {r:?}").into());
        }
    }
    Ok(())
}

struct Zygotes {
    count: usize,
    total: Mem,
    argv: Vec<String>,
}

fn zygote_sums(me: u32, numpy: bool) -> Result<Zygotes, Error> {
    let mut z = Zygotes {
        count: 0,
        total: Mem::default(),
        argv: vec![],
    };
    for (pid, a) in zygotes(me) {
        if a.iter().any(|m| m == "numpy") != numpy {
            continue;
        }
        z.count += 1;
        z.total = z.total + mem(pid)?;
        z.argv = a;
    }
    Ok(z)
}

fn main() -> Result<(), Error> {
    if std::env::args().any(|a| a == "--list") {
        return Ok(());
    }
    let argv: Vec<String> = std::env::args().collect();
    let slots: usize = argv
        .iter()
        .position(|a| a == "--slots")
        .and_then(|i| argv.get(i + 1))
        .map(|s| s.parse())
        .transpose()?
        .unwrap_or(16);
    let me = std::process::id();
    let args = common::python_executor("memory", ["--slots".to_string(), slots.to_string()]);
    let rt = tokio::runtime::Runtime::new()?;
    rt.block_on(async move {
        let engine = Arc::new(args.executor.build_engine().await?);
        let server = Loopback::start(engine, args.executor.session_policy()).await?;
        let client = pb::executor_client::ExecutorClient::new(server.channel.clone());
        // The plain zygotes start in the background at start-up: wait for all of them.
        let t = Instant::now();
        while zygotes(me).len() < slots && t.elapsed() < Duration::from_secs(120) {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        one_per_slot(&client, slots, "import time\ntime.sleep(0.3)\n").await?;
        tokio::time::sleep(Duration::from_millis(500)).await;
        let idle = mem(me)?;
        let plain = zygote_sums(me, false)?;
        one_per_slot(&client, slots, "import numpy, time\ntime.sleep(0.3)\n").await?;
        tokio::time::sleep(Duration::from_millis(500)).await;
        let after = mem(me)?;
        let plain_after = zygote_sums(me, false)?;
        let heavy = zygote_sums(me, true)?;
        if plain.count != slots || heavy.count != slots {
            return Err(format!("{} plain and {} numpy zygotes for {slots} slots", plain.count, heavy.count).into());
        }
        let bare_plain = bare_like(&plain.argv)?;
        let bare_heavy = bare_like(&heavy.argv)?;

        let per = |z: &Zygotes| Mem {
            rss: z.total.rss / z.count as u64,
            pss: z.total.pss / z.count as u64,
        };
        let row = |name: &str, m: Mem, base: Option<Mem>| {
            let ratio = base.map(|b| format!("{:>5.2}x", m.rss as f64 / b.rss.max(1) as f64)).unwrap_or_default();
            println!("{name:<44} {:>8.1} {:>8.1}  {ratio}", mib(m.pss), mib(m.rss));
        };
        println!("Executor memory, {slots} slots, python warm starts (MiB; ratio: RSS against the bare interpreter's, whose PSS is shared with the zygotes running beside it)");
        println!("{:<44} {:>8} {:>8}", "", "PSS", "RSS");
        row("bare python3, plain zygote's imports (baseline)", bare_plain, None);
        row("bare python3, numpy zygote's imports (baseline)", bare_heavy, None);
        row("executor process, plain zygotes up", idle, None);
        row("executor process, every zygote up", after, None);
        row("plain zygote, per slot", per(&plain_after), Some(bare_plain));
        row("numpy zygote, per slot", per(&heavy), Some(bare_heavy));
        let total = after + plain_after.total + heavy.total;
        row("executor + every zygote (the pod's share)", total, None);
        let per_slot = per(&plain_after) + per(&heavy);
        row("one warm slot (both zygotes)", per_slot, None);
        let gib = 1024 * 1024;
        println!(
            "target: a {slots}-slot executor with Python warm slots within 1 GiB: {} ({:.0} MiB PSS)",
            if total.pss <= gib { "met" } else { "NOT met" },
            mib(total.pss)
        );
        server.stop().await;
        Ok::<(), Error>(())
    })
}
