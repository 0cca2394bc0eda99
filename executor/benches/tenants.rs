//! Tenants and fair share under load (docs/tenants.md), on an executor built in this
//! process: requests go through `Engine::execute` with their tenant and priority, as the
//! gRPC and HTTP adapters hand them over (the transports are covered by
//! `tests/tests/tenants.rs`), and run for real in sandboxes. Each figure is a ratio to a
//! baseline measured in the same run:
//!
//! 1. **Interactive under a flood**: tenant B sends interactive requests at a steady rate,
//!    first on an idle executor (the baseline), then while tenant A floods `--flood` batch
//!    requests at once. Target: B's p99 under the flood ≤ 1.2 x its idle p99 + one run's
//!    time (the run it may wait behind; the p99 of A's runs).
//! 2. **Weights**: batch tenants X (weight 1) and Y (weight 3) flood together; their
//!    completions while both are backlogged. Target: Y/X within 10 % of 3.
//! 3. **Starvation bound**: interactive requests keep every slot busy while tenant C sends
//!    batch requests one at a time. Target: no more than the documented bound, 16 slot grants
//!    (interactive 16 : batch 1), go to others between a C request's arrival and its own
//!    grant. Counted in grants, not time: the bound holds whatever a run costs; the wait in
//!    time is reported beside it.
//!
//! Run as root: `cargo bench -p sandpool-executor --bench tenants`. Settings (after
//! `--`): `--flood N` (A's batch requests, default 10000), `--slots N` (default 2),
//! `--rate-ms N` (B's interval, default 50), `--weights-flood N` (each of X and Y, default
//! 1500), `--starved N` (C's requests, default 20).

use sandpool_executor::Engine;
use sandpool_executor::call::Call;
use sandpool_executor::proto as pb;
use sandpool_executor::tenants::{Priority, Tenant};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

mod common;
use common::Error;

struct Opts {
    flood: usize,
    slots: usize,
    rate: Duration,
    weights_flood: usize,
    starved: usize,
}

fn opts() -> Result<Opts, Error> {
    let mut o = Opts {
        flood: 10_000,
        slots: 2,
        rate: Duration::from_millis(50),
        weights_flood: 1500,
        starved: 20,
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = || args.next().ok_or(format!("{a} needs a value"));
        match a.as_str() {
            "--flood" => o.flood = value()?.parse()?,
            "--slots" => o.slots = value()?.parse()?,
            "--rate-ms" => o.rate = Duration::from_millis(value()?.parse()?),
            "--weights-flood" => o.weights_flood = value()?.parse()?,
            "--starved" => o.starved = value()?.parse()?,
            "--bench" => {}
            other => return Err(format!("unknown argument {other}").into()),
        }
    }
    Ok(o)
}

fn tenant(name: &str, weight: u32) -> Arc<Tenant> {
    Arc::new(Tenant {
        name: name.into(),
        weight,
        max_concurrency: None,
        max_queue: Some(1 << 20),
        max_sessions: None,
        max_priority: Priority::Interactive,
        authenticated: true,
        identity: 1,
    })
}

/// A short, real run: about what a small reward check costs.
fn request() -> pb::ExecuteRequest {
    pb::ExecuteRequest {
        language: "python".into(),
        code: "print(sum(range(100000)))\n".into(),
        ..Default::default()
    }
}

/// Runs one request as `tenant` at `priority`; its latency.
async fn run(engine: &Engine, tenant: &Arc<Tenant>, priority: Priority) -> Result<Duration, Error> {
    let call = Call {
        tenant: tenant.clone(),
        priority: Some(priority),
        ..Default::default()
    };
    let t = Instant::now();
    let r = engine.execute(request(), call).await?;
    if r.verdict != pb::Verdict::Ok as i32 {
        return Err(format!("run ended {:?}: {}", pb::Verdict::try_from(r.verdict), r.message).into());
    }
    Ok(t.elapsed())
}

fn quantile(v: &mut [Duration], q: f64) -> Duration {
    v.sort();
    v.get(((v.len() as f64 - 1.0) * q).round() as usize)
        .copied()
        .unwrap_or_default()
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// `n` interactive requests of `b`, one every `rate` (each on its own task, so a slow one
/// does not delay the next); their latencies.
async fn steady(engine: &Arc<Engine>, b: &Arc<Tenant>, n: usize, rate: Duration) -> Result<Vec<Duration>, Error> {
    let mut tick = tokio::time::interval(rate);
    let mut tasks = Vec::with_capacity(n);
    for _ in 0..n {
        tick.tick().await;
        let (e, b) = (engine.clone(), b.clone());
        tasks.push(tokio::spawn(async move {
            run(&e, &b, Priority::Interactive).await.map_err(|e| e.to_string())
        }));
    }
    let mut out = Vec::with_capacity(n);
    for t in tasks {
        out.push(t.await??);
    }
    Ok(out)
}

/// `n` batch requests of `tenant` submitted at once; each finish bumps `done`, and each
/// latency is returned.
fn flood(
    engine: &Arc<Engine>,
    tenant: &Arc<Tenant>,
    n: usize,
    done: Arc<AtomicUsize>,
) -> tokio::task::JoinHandle<Result<Vec<Duration>, String>> {
    let (engine, tenant) = (engine.clone(), tenant.clone());
    tokio::spawn(async move {
        let tasks: Vec<_> = (0..n)
            .map(|_| {
                let (e, t, d) = (engine.clone(), tenant.clone(), done.clone());
                tokio::spawn(async move {
                    let r = run(&e, &t, Priority::Batch).await.map_err(|e| e.to_string());
                    d.fetch_add(1, Ordering::SeqCst);
                    r
                })
            })
            .collect();
        let mut out = Vec::with_capacity(n);
        for t in tasks {
            out.push(t.await.map_err(|e| e.to_string())??);
        }
        Ok(out)
    })
}

fn main() -> Result<(), Error> {
    if std::env::args().any(|a| a == "--list") {
        return Ok(());
    }
    let o = opts()?;
    let args = common::python_executor(
        "tenants",
        [
            "--slots".to_string(),
            o.slots.to_string(),
            "--queue".into(),
            "1000000".into(),
        ],
    );
    let rt = tokio::runtime::Runtime::new()?;
    rt.block_on(async move {
        let engine = Arc::new(args.executor.build_engine().await?);
        let slots = engine.admission().slots();
        let (a, b, c) = (tenant("a", 1), tenant("b", 1), tenant("c", 1));
        let (x, y) = (tenant("x", 1), tenant("y", 3));
        println!("tenants: {slots} slots, python `print(sum(range(100000)))` per request");
        // Warm-up: the zygote, page cache.
        for _ in 0..20 {
            run(&engine, &b, Priority::Interactive).await?;
        }

        // 1. Interactive under a flood, against the same on an idle executor.
        let n_b = ((o.flood as f64 * 0.012) as usize).clamp(100, 400);
        let mut idle = steady(&engine, &b, n_b, o.rate).await?;
        let idle_p99 = quantile(&mut idle, 0.99);
        let done = Arc::new(AtomicUsize::new(0));
        let t = Instant::now();
        let flooding = flood(&engine, &a, o.flood, done.clone());
        while engine.admission().queued() < o.flood / 2 && t.elapsed() < Duration::from_secs(60) {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let mut busy = steady(&engine, &b, n_b, o.rate).await?;
        let backlog_left = o.flood.saturating_sub(done.load(Ordering::SeqCst));
        flooding.await??;
        let flood_s = t.elapsed().as_secs_f64();
        let busy_p99 = quantile(&mut busy, 0.99);
        // A's runs are B's program: one run's time is B's idle p99 (A's latencies include
        // their queueing).
        let one_run = idle_p99;
        let bound = idle_p99.mul_f64(1.2) + one_run;
        println!(
            "interactive under a flood: B p99 {:.1} ms idle, {:.1} ms while A's {} batch requests \
             queue ({} still waiting when B finished; A done in {:.0} s, {:.0} runs/s)",
            ms(idle_p99),
            ms(busy_p99),
            o.flood,
            backlog_left,
            flood_s,
            o.flood as f64 / flood_s,
        );
        println!(
            "  target: <= 1.2 x idle p99 + one run ({:.1} ms): {:.2} of it  {}",
            ms(bound),
            busy_p99.as_secs_f64() / bound.as_secs_f64(),
            if busy_p99 <= bound { "MET" } else { "MISSED" }
        );

        // 2. Weights 1:3 between two batch tenants.
        let (dx, dy) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let fx = flood(&engine, &x, o.weights_flood, dx.clone());
        let fy = flood(&engine, &y, o.weights_flood, dy.clone());
        while engine.admission().queued() < o.weights_flood {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        // Measured from when both are backlogged until the first of them runs dry.
        let (x0, y0) = (dx.load(Ordering::SeqCst), dy.load(Ordering::SeqCst));
        let both = AtomicBool::new(true);
        let (mut x1, mut y1) = (x0, y0);
        while both.load(Ordering::SeqCst) {
            tokio::time::sleep(Duration::from_millis(20)).await;
            let (xn, yn) = (dx.load(Ordering::SeqCst), dy.load(Ordering::SeqCst));
            // Stop a little before either empties its queue: past that, the other runs alone.
            if o.weights_flood - xn <= 2 * slots || o.weights_flood - yn <= 2 * slots {
                both.store(false, Ordering::SeqCst);
            } else {
                (x1, y1) = (xn, yn);
            }
        }
        fx.await??;
        fy.await??;
        let (gx, gy) = ((x1 - x0) as f64, (y1 - y0) as f64);
        let ratio = gy / gx.max(1.0);
        println!(
            "weights 1:3 (batch tenants X and Y, {} requests each): {} and {} runs while both \
             waited, Y/X {:.2}",
            o.weights_flood, gx, gy, ratio
        );
        println!(
            "  target: within 10 % of 3: {:+.1} %  {}",
            (ratio / 3.0 - 1.0) * 100.0,
            if (ratio / 3.0 - 1.0).abs() <= 0.10 {
                "MET"
            } else {
                "MISSED"
            }
        );

        // 3. Starvation bound: a constant interactive load fills every slot; C's batch
        // requests still get through, within the bound.
        let stop = Arc::new(AtomicBool::new(false));
        let mut load = Vec::new();
        let interactive_lat = Arc::new(std::sync::Mutex::new(Vec::new()));
        for _ in 0..2 * slots {
            let (e, b, stop, lat) = (engine.clone(), b.clone(), stop.clone(), interactive_lat.clone());
            load.push(tokio::spawn(async move {
                while !stop.load(Ordering::SeqCst) {
                    let t = Instant::now();
                    let call = Call {
                        tenant: b.clone(),
                        priority: Some(Priority::Interactive),
                        ..Default::default()
                    };
                    if e.execute(request(), call).await.is_ok() {
                        lat.lock().map(|mut l| l.push(t.elapsed())).ok();
                    }
                }
            }));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        // Each of C's requests: the slot grants that went to others between its arrival and
        // its own (the documented bound counts these), then its run.
        let mut waits = Vec::with_capacity(o.starved);
        let mut ahead = Vec::with_capacity(o.starved);
        let admission = engine.admission().clone();
        let ticket = sandpool_executor::admission::Ticket {
            tenant: c.clone(),
            priority: Priority::Batch,
        };
        for _ in 0..o.starved {
            let t = Instant::now();
            let g0 = admission.grants();
            let slot = admission
                .acquire_as(&ticket, None, sandpool_executor::admission::Admit::New)
                .await?;
            ahead.push(admission.grants() - g0 - 1);
            drop(slot);
            waits.push(t.elapsed());
            run(&engine, &c, Priority::Batch).await?;
        }
        stop.store(true, Ordering::SeqCst);
        for l in load {
            l.await?;
        }
        let longest = waits.iter().max().copied().unwrap_or_default();
        let most_ahead = ahead.iter().max().copied().unwrap_or_default();
        println!(
            "starvation: {} batch requests under a constant interactive load ({} requesters on {} slots): \
             at most {} grants went ahead of one (mean {:.1}); longest wait {:.1} ms, median {:.1} ms",
            o.starved,
            2 * slots,
            slots,
            most_ahead,
            ahead.iter().sum::<u64>() as f64 / ahead.len().max(1) as f64,
            ms(longest),
            ms(quantile(&mut waits, 0.5))
        );
        println!(
            "  target: <= 16 grants ahead (interactive 16 : batch 1): {}  {}",
            most_ahead,
            if most_ahead <= 16 { "MET" } else { "MISSED" }
        );
        Ok::<_, Error>(())
    })?;
    Ok(())
}
