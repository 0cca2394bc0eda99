//! A slot's spawner dies or stops (issue 24, items 0 and 8): the executor
//! notices, replaces it, answers every request (SANDBOX_ERROR at worst for the
//! one in flight), keeps serving, and still exits on SIGTERM.
//!
//! Spawners are children of the executor named `sandpool-spawne` (the thread
//! name that clones them, cut to 15 bytes) in its own pid namespace (their
//! inits share the name); they exist where runs get cgroups, which is every
//! namespaces-mode executor these tests start.

use sandpool_proto::v1 as pb;
use sandpool_tests::{Executor, Isolation, Options, binary, describe, request, verdict};
use std::time::{Duration, Instant};

/// (pid, state) of the executor's spawner children.
fn spawners(executor: u32) -> Vec<(i32, char)> {
    let mut out = vec![];
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{executor}/task")) else {
        return out;
    };
    for t in tasks.flatten() {
        let Ok(children) = std::fs::read_to_string(t.path().join("children")) else {
            continue;
        };
        for pid in children.split_whitespace().filter_map(|p| p.parse::<i32>().ok()) {
            let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
            // Inits share the name until they exec, but live in a pid namespace of their own.
            let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
            let nested = status
                .lines()
                .find_map(|l| l.strip_prefix("NSpid:"))
                .is_some_and(|ids| ids.split_whitespace().count() > 1);
            if comm.trim() != "sandpool-spawne" || nested {
                continue;
            }
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            // The state follows the parenthesised command name.
            let state = stat
                .rsplit_once(") ")
                .and_then(|(_, r)| r.chars().next())
                .unwrap_or('?');
            out.push((pid, state));
        }
    }
    out.sort_unstable();
    out
}

fn live_spawners(executor: u32) -> Vec<i32> {
    spawners(executor)
        .into_iter()
        .filter(|(_, s)| *s != 'Z')
        .map(|(p, _)| p)
        .collect()
}

async fn start(slots: usize) -> Executor {
    let ex = Executor::start(Options {
        slots,
        languages: vec!["python", "c"],
        isolation: Isolation::Namespaces,
        ..Default::default()
    })
    .await;
    let t = Instant::now();
    while live_spawners(ex.pid()).len() < slots {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "spawners: {:?}",
            spawners(ex.pid())
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    ex
}

/// Sends `n` short runs at concurrency `conc`; every one must be answered in
/// time, OK or (for a run caught by the fault) SANDBOX_ERROR. Returns the OK count.
async fn load(ex: &Executor, n: usize, conc: usize) -> usize {
    let sem = std::sync::Arc::new(tokio::sync::Semaphore::new(conc));
    let mut calls = vec![];
    for i in 0..n {
        let (mut c, sem) = (ex.client(), sem.clone());
        calls.push(tokio::spawn(async move {
            let _p = sem.acquire_owned().await.expect("semaphore");
            let req = request("python", &format!("import time; time.sleep(0.05); print({i})"), "");
            tokio::time::timeout(Duration::from_secs(60), c.execute(req)).await
        }));
    }
    let mut ok = 0;
    for c in calls {
        let r = c.await.expect("join").expect("answered within 60 s, not wedged");
        let r = r.expect("a gRPC answer").into_inner();
        match verdict(r.verdict) {
            "OK" => ok += 1,
            "SANDBOX_ERROR" => {}
            v => panic!("{v}: {}", describe(&r)),
        }
    }
    ok
}

async fn health(ex: &Executor, service: &str) -> i32 {
    let mut h = tonic_health::pb::health_client::HealthClient::new(ex.channel.clone());
    let r = tokio::time::timeout(
        Duration::from_secs(10),
        h.check(tonic_health::pb::HealthCheckRequest {
            service: service.into(),
        }),
    )
    .await
    .expect("health answers, not wedged")
    .expect("health check");
    r.into_inner().status
}

async fn all_ok(ex: &Executor, n: usize) {
    for i in 0..n {
        let r = tokio::time::timeout(
            Duration::from_secs(60),
            ex.client().execute(request(
                "c",
                &format!("#include <stdio.h>\nint main(){{printf(\"{i}\");}}"),
                "",
            )),
        )
        .await
        .expect("answered")
        .expect("Execute")
        .into_inner();
        assert_eq!(verdict(r.verdict), "OK", "{}", describe(&r));
        assert_eq!(
            r.run.as_ref().map(|x| x.stdout.clone()),
            Some(i.to_string().into_bytes())
        );
    }
}

fn assert_exits_on_sigterm(mut ex: Executor) {
    let t = Instant::now();
    let status = ex.terminate(Duration::from_secs(30)).expect("exits on SIGTERM");
    assert!(status.success(), "{status}");
    assert!(t.elapsed() < Duration::from_secs(30));
}

#[tokio::test]
async fn killed_spawners_are_reaped_replaced_and_the_executor_keeps_serving() {
    let ex = start(2).await;
    let before = live_spawners(ex.pid());
    assert_eq!(before.len(), 2, "{:?}", spawners(ex.pid()));
    all_ok(&ex, 2).await;

    // One spawner killed while idle: the next runs on its slot get a new one, all OK.
    sandpool_tests::signal(before[0] as u32, libc::SIGKILL);
    tokio::time::sleep(Duration::from_millis(100)).await;
    all_ok(&ex, 6).await;

    // Both killed again and again under load: every request is answered.
    let killer = {
        let pid = ex.pid();
        tokio::spawn(async move {
            let mut killed = 0;
            for _ in 0..6 {
                tokio::time::sleep(Duration::from_millis(300)).await;
                for p in live_spawners(pid) {
                    sandpool_tests::signal(p as u32, libc::SIGKILL);
                    killed += 1;
                }
            }
            killed
        })
    };
    let ok = load(&ex, 80, 6).await;
    let killed = killer.await.expect("killer");
    assert!(killed >= 4, "the test killed spawners under load ({killed})");
    assert!(ok >= 40, "most runs still succeed while spawners die ({ok}/80)");

    // Afterwards everything works, the dead are reaped and each slot has a live spawner.
    all_ok(&ex, 6).await;
    let t = Instant::now();
    loop {
        let now = spawners(ex.pid());
        let zombies = now.iter().filter(|(_, s)| *s == 'Z').count();
        if zombies == 0 && now.len() == 2 {
            assert!(
                now.iter().all(|(p, _)| !before.contains(p)),
                "replaced: {now:?} vs {before:?}"
            );
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(10), "dead spawners reaped: {now:?}");
        all_ok(&ex, 2).await;
    }
    assert_eq!(health(&ex, "").await, 1, "SERVING");
    assert_exits_on_sigterm(ex);
}

#[tokio::test]
async fn a_spawner_killed_during_a_run_leaves_that_run_alone() {
    let ex = start(1).await;
    let sp = live_spawners(ex.pid());
    let run = ex.execute_in_background(request("python", "import time; time.sleep(1.5); print('done')", ""));
    tokio::time::sleep(Duration::from_millis(700)).await;
    for p in &sp {
        sandpool_tests::signal(*p as u32, libc::SIGKILL);
    }
    let r = run.await.expect("join").expect("Execute");
    assert_eq!(verdict(r.verdict), "OK", "{}", describe(&r));
    all_ok(&ex, 3).await;
    assert_exits_on_sigterm(ex);
}

#[tokio::test]
async fn a_stopped_spawner_times_out_is_replaced_and_sigterm_still_works() {
    let ex = start(1).await;
    all_ok(&ex, 1).await;
    let sp = live_spawners(ex.pid());
    assert_eq!(sp.len(), 1);
    sandpool_tests::signal(sp[0] as u32, libc::SIGSTOP);
    // The request that meets the stopped spawner: SANDBOX_ERROR after the answer time-out,
    // not a hang to its deadline and beyond; health answers meanwhile.
    let t = Instant::now();
    let mut req = request("python", "print(1)", "");
    req.limits = Some(pb::Limits {
        wall_time_ms: 60_000,
        ..Default::default()
    });
    let stuck = ex.execute_in_background(req);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(health(&ex, "liveness").await, 1, "health answers while a spawn waits");
    let r = tokio::time::timeout(Duration::from_secs(30), stuck)
        .await
        .expect("answered within 30 s")
        .expect("join")
        .expect("Execute");
    assert_eq!(verdict(r.verdict), "SANDBOX_ERROR", "{}", describe(&r));
    assert!(r.message.contains("spawner"), "says what failed: {}", r.message);
    assert!(t.elapsed() < Duration::from_secs(25), "{:?}", t.elapsed());
    all_ok(&ex, 3).await;
    let now = live_spawners(ex.pid());
    assert_eq!(now.len(), 1, "{:?}", spawners(ex.pid()));
    assert_ne!(now, sp, "replaced");
    assert_exits_on_sigterm(ex);
}

/// The executor's children in a pid namespace of their own: runs' inits (spawned through
/// a spawner, they are children of the spawner's thread).
fn inits(executor: u32) -> Vec<i32> {
    let mut out = vec![];
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{executor}/task")) else {
        return out;
    };
    for t in tasks.flatten() {
        let children = std::fs::read_to_string(t.path().join("children")).unwrap_or_default();
        for pid in children.split_whitespace().filter_map(|p| p.parse::<i32>().ok()) {
            let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
            let nested = status
                .lines()
                .find_map(|l| l.strip_prefix("NSpid:"))
                .is_some_and(|ids| ids.split_whitespace().count() > 1);
            if nested {
                out.push(pid);
            }
        }
    }
    out
}

/// The spawner's answer is awaited in the runtime's reactor: a spawner killed while a
/// request waits for it (stopped first, so the request is surely waiting) fails that request
/// as soon as it dies, through its pidfd, not after the answer time-out (10 s).
#[tokio::test]
async fn a_spawner_killed_while_its_answer_is_awaited_fails_that_run_at_once() {
    let ex = start(1).await;
    all_ok(&ex, 1).await;
    let sp = live_spawners(ex.pid());
    assert_eq!(sp.len(), 1);
    sandpool_tests::signal(sp[0] as u32, libc::SIGSTOP);
    let mut req = request("python", "print(1)", "");
    req.limits = Some(pb::Limits {
        wall_time_ms: 60_000,
        ..Default::default()
    });
    let waiting = ex.execute_in_background(req);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(health(&ex, "liveness").await, 1, "health answers while a spawn waits");
    let t = Instant::now();
    sandpool_tests::signal(sp[0] as u32, libc::SIGKILL);
    let r = tokio::time::timeout(Duration::from_secs(30), waiting)
        .await
        .expect("answered within 30 s")
        .expect("join")
        .expect("Execute");
    assert_eq!(verdict(r.verdict), "SANDBOX_ERROR", "{}", describe(&r));
    assert!(r.message.contains("spawner exited"), "says what failed: {}", r.message);
    // Well under the 10 s answer time-out: the death itself woke the request.
    assert!(t.elapsed() < Duration::from_secs(8), "{:?}", t.elapsed());
    all_ok(&ex, 3).await;
    assert_exits_on_sigterm(ex);
}

/// A request whose caller goes away (its deadline) while the spawner has not answered:
/// once the spawner goes on, the init it clones for nobody is killed and reaped (its
/// plan and stack are freed only after), the spawner is kept, and the slot works.
#[tokio::test]
async fn a_spawn_abandoned_before_its_answer_leaves_no_init_and_keeps_the_spawner() {
    let ex = start(1).await;
    all_ok(&ex, 1).await;
    let sp = live_spawners(ex.pid());
    assert_eq!(sp.len(), 1);
    sandpool_tests::signal(sp[0] as u32, libc::SIGSTOP);
    let mut req = tonic::Request::new(request("python", "import time; time.sleep(30)", ""));
    req.set_timeout(Duration::from_millis(800));
    let gone = tokio::time::timeout(Duration::from_secs(30), ex.client().execute(req))
        .await
        .expect("answered within 30 s");
    let status = gone.expect_err("the deadline passes while the spawner is stopped");
    assert_eq!(status.code(), tonic::Code::DeadlineExceeded, "{status:?}");
    sandpool_tests::signal(sp[0] as u32, libc::SIGCONT);
    all_ok(&ex, 3).await;
    assert_eq!(live_spawners(ex.pid()), sp, "the spawner answered late, and was kept");
    let t = Instant::now();
    while !inits(ex.pid()).is_empty() {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "inits left: {:?}",
            inits(ex.pid())
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_exits_on_sigterm(ex);
}

/// The executor's watchdog (`sandpool_executor::watchdog`) on a process whose
/// runtime is wedged for real: `examples/wedge.rs` blocks its only runtime
/// thread, or ignores SIGTERM; the watchdog thread must end it.
#[test]
fn the_watchdog_ends_a_wedged_runtime_and_an_unheeded_sigterm() {
    let exe = binary("sandpool-executor").with_file_name("examples").join("wedge");
    assert!(exe.exists(), "{} (built by cargo test)", exe.display());
    for (mode, says) in [("stall", "wedged"), ("term", "asked to stop")] {
        let mut child = std::process::Command::new(&exe)
            .arg(mode)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("wedge");
        let mut out = std::io::BufReader::new(child.stdout.take().expect("stdout"));
        let mut line = String::new();
        std::io::BufRead::read_line(&mut out, &mut line).expect("ready");
        assert_eq!(line.trim(), "ready");
        let t = Instant::now();
        if mode == "term" {
            sandpool_tests::signal(child.id(), libc::SIGTERM);
        }
        let status = loop {
            if let Some(s) = child.try_wait().expect("try_wait") {
                break s;
            }
            if t.elapsed() > Duration::from_secs(20) {
                let _ = child.kill();
                panic!("{mode}: the watchdog did not end the process");
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        let mut err = String::new();
        std::io::Read::read_to_string(&mut child.stderr.take().expect("stderr"), &mut err).expect("stderr");
        assert_eq!(status.code(), Some(70), "{mode}: {err}");
        assert!(err.contains("last words") && err.contains(says), "{mode}: {err}");
    }
}
