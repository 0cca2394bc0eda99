//! Stateful sessions against the real executor over loopback: state across
//! calls, none across sessions, limits per call and per session, processes gone
//! after close and timeouts (seen from the host), ids other callers cannot use,
//! and draining with sessions open.

use futures::StreamExt;
use sandpool_proto::v1 as pb;
use sandpool_tests::{Executor, Isolation, Options};
use std::time::{Duration, Instant};
use tonic::Code;

type Client = pb::executor_client::ExecutorClient<tonic::transport::Channel>;

/// Sessions are a namespaces-mode feature (see the refusal test below).
async fn executor(slots: usize, extra: &[&str]) -> Executor {
    Executor::start(Options {
        slots,
        languages: vec!["python", "bash"],
        extra_args: extra.iter().map(|s| s.to_string()).collect(),
        isolation: Isolation::Namespaces,
        ..Default::default()
    })
    .await
}

/// A restricted executor cannot give a session its fixed /work: it says so,
/// as a precondition of the executor, not a mistake of the request.
#[tokio::test]
async fn a_restricted_executor_refuses_sessions_clearly() {
    let exe = Executor::start(Options {
        slots: 2,
        languages: vec!["python", "bash"],
        isolation: Isolation::Restricted,
        ..Default::default()
    })
    .await;
    let mut c = exe.client();
    let e = c
        .create_session(pb::CreateSessionRequest {
            language: "python".into(),
            ..Default::default()
        })
        .await
        .expect_err("a restricted executor made a session");
    assert_eq!(e.code(), tonic::Code::FailedPrecondition, "{e:?}");
    assert!(e.message().contains("namespaces"), "{}", e.message());
    // Nor does it claim a capacity it would refuse (the operator's status, autoscalers).
    assert_eq!(exe.metric("sandpool_session_capacity"), 0.0);
}

async fn create(c: &mut Client, language: &str, limits: Option<pb::SessionLimits>) -> pb::CreateSessionResponse {
    c.create_session(pb::CreateSessionRequest {
        language: language.into(),
        session_limits: limits,
        ..Default::default()
    })
    .await
    .unwrap_or_else(|s| panic!("CreateSession({language}): {s:?}"))
    .into_inner()
}

fn code(id: &str, src: &str) -> pb::RunInSessionRequest {
    pb::RunInSessionRequest {
        session_id: id.into(),
        input: Some(pb::run_in_session_request::Input::Code(src.into())),
        ..Default::default()
    }
}

fn command(id: &str, cmd: &str) -> pb::RunInSessionRequest {
    pb::RunInSessionRequest {
        session_id: id.into(),
        input: Some(pb::run_in_session_request::Input::Command(cmd.into())),
        ..Default::default()
    }
}

async fn run(c: &mut Client, req: pb::RunInSessionRequest) -> pb::RunInSessionResponse {
    c.run_in_session(req)
        .await
        .unwrap_or_else(|s| panic!("RunInSession: {s:?}"))
        .into_inner()
}

fn out(r: &pb::RunInSessionResponse) -> String {
    String::from_utf8_lossy(&r.result.as_ref().map(|p| p.stdout.clone()).unwrap_or_default()).into_owned()
}

fn err(r: &pb::RunInSessionResponse) -> String {
    String::from_utf8_lossy(&r.result.as_ref().map(|p| p.stderr.clone()).unwrap_or_default()).into_owned()
}

fn verdict(r: &pb::RunInSessionResponse) -> pb::Verdict {
    pb::Verdict::try_from(r.verdict).unwrap_or_default()
}

/// Pids on this host running as `uid` (from /proc/<pid>/status).
fn procs_of(uid: u32) -> Vec<i32> {
    std::fs::read_dir("/proc")
        .map(|d| {
            d.flatten()
                .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
                .filter(|pid| {
                    std::fs::read_to_string(format!("/proc/{pid}/status"))
                        .ok()
                        .and_then(|s| {
                            s.lines()
                                .find_map(|l| l.strip_prefix("Uid:"))
                                .and_then(|v| v.split_whitespace().next()?.parse::<u32>().ok())
                        })
                        == Some(uid)
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Pids running as any of the executor's uids: its slots' and its session seats' (64, the default).
fn slot_procs(ex: &Executor, slots: u32) -> Vec<i32> {
    (0..slots + 64).flat_map(|i| procs_of(ex.uid_base + i)).collect()
}

#[tokio::test]
async fn python_state_persists_across_calls_and_not_across_sessions() {
    let ex = executor(2, &["--max-sessions", "2"]).await;
    let mut c = ex.client();
    let s = create(&mut c, "python", None).await;
    assert_eq!(s.language, "python");
    assert_eq!(s.executor_address, ex.addr, "the session names the executor holding it");
    let limits = s.session_limits.expect("resolved session limits");
    assert!(
        limits.lifetime_ms > 0 && limits.max_calls > 0 && limits.disk_bytes > 0,
        "{limits:?}"
    );
    assert!(s.call_limits.as_ref().is_some_and(|l| l.wall_time_ms > 0));
    let (random, name) = s.session_id.split_at(32);
    assert!(
        random.chars().all(|c| c.is_ascii_hexdigit()),
        "128 bits, hex: {}",
        s.session_id
    );
    assert!(
        name.strip_prefix('-').is_some_and(|n| !n.is_empty()),
        "then the executor's name, which a gateway routes by: {}",
        s.session_id
    );

    let r = run(
        &mut c,
        code(
            &s.session_id,
            "x = 41\nimport os\nos.makedirs('src', exist_ok=True)\n_ = open('src/a.txt','w').write('hi')",
        ),
    )
    .await;
    assert_eq!(verdict(&r), pb::Verdict::Ok, "{r:?}");
    assert_eq!(r.display, "", "an assignment displays nothing");
    let r = run(&mut c, code(&s.session_id, "print('x is', x)\nx + 1")).await;
    assert_eq!(verdict(&r), pb::Verdict::Ok, "{r:?}");
    assert_eq!(out(&r), "x is 41\n");
    assert_eq!(r.display, "42", "the last expression is displayed");
    let r = run(&mut c, code(&s.session_id, "def f(n):\n    return n * 2\n")).await;
    assert_eq!(verdict(&r), pb::Verdict::Ok);
    let r = run(&mut c, code(&s.session_id, "import os; os.chdir('src'); f(x)")).await;
    assert_eq!(r.display, "82");
    assert_eq!(r.cwd, "/work/src", "{r:?}");
    // A command runs in the interpreter's working directory, with its stdin.
    let mut req = command(&s.session_id, "cat a.txt; echo; pwd; cat");
    req.stdin = b"from stdin".to_vec();
    let r = run(&mut c, req).await;
    assert_eq!(verdict(&r), pb::Verdict::Ok, "{r:?}");
    assert_eq!(out(&r), "hi\n/work/src\nfrom stdin");
    // A cell reads its own stdin.
    let mut req = code(&s.session_id, "import sys; sys.stdin.read().upper()");
    req.stdin = b"shout".to_vec();
    assert_eq!(run(&mut c, req).await.display, "'SHOUT'");
    // An exception is the cell's, the state survives it.
    let r = run(&mut c, code(&s.session_id, "1/0")).await;
    assert_eq!(verdict(&r), pb::Verdict::RuntimeError);
    assert!(err(&r).contains("ZeroDivisionError"), "{}", err(&r));
    assert!(!err(&r).contains("driver"), "the driver's frames stay out: {}", err(&r));
    assert_eq!(run(&mut c, code(&s.session_id, "x")).await.display, "41");
    let r = run(&mut c, code(&s.session_id, "def broken(:\n")).await;
    assert_eq!(verdict(&r), pb::Verdict::RuntimeError);
    assert!(err(&r).contains("SyntaxError"), "{}", err(&r));
    assert!(r.calls_left > 0 && r.calls_left < limits.max_calls);
    // A huge value displays cut, with a note; odd characters come back as valid text.
    let r = run(&mut c, code(&s.session_id, "'a' * 1_000_000")).await;
    assert_eq!(verdict(&r), pb::Verdict::Ok, "{r:?}");
    assert!(
        r.display.len() < 300_000 && r.display.starts_with("'aaa"),
        "{}",
        r.display.len()
    );
    assert!(r.message.contains("cut"), "{}", r.message);
    let r = run(
        &mut c,
        code(
            &s.session_id,
            "class W:\n    def __repr__(self): return 'x\\udc80y\\u00e9'\nW()",
        ),
    )
    .await;
    assert_eq!(verdict(&r), pb::Verdict::Ok, "{r:?}");
    assert_eq!(r.display, "x\\udc80y\u{e9}");

    // Files come back, and go in.
    let got = c
        .get_session_files(pb::GetSessionFilesRequest {
            session_id: s.session_id.clone(),
            paths: vec!["src/a.txt".into(), "nope.txt".into()],
        })
        .await
        .expect("GetSessionFiles")
        .into_inner();
    assert_eq!(got.files.len(), 1);
    assert_eq!(got.files[0].content, b"hi");
    assert_eq!(got.errors.len(), 1);
    assert_eq!(got.errors[0].path, "nope.txt");
    let put = c
        .put_session_files(pb::PutSessionFilesRequest {
            session_id: s.session_id.clone(),
            files: vec![pb::File {
                path: "data/in.txt".into(),
                content: b"42".to_vec(),
                executable: false,
            }],
        })
        .await
        .expect("PutSessionFiles")
        .into_inner();
    assert!(put.disk_used_bytes > 0);
    let r = run(&mut c, code(&s.session_id, "int(open('/work/data/in.txt').read()) * 2")).await;
    assert_eq!(r.display, "84", "{r:?}");

    // A second session sees none of it.
    let other = create(&mut c, "python", None).await;
    assert_ne!(other.session_id, s.session_id);
    let r = run(
        &mut c,
        code(
            &other.session_id,
            "import os\n'x' in globals(), os.path.exists('/work/src/a.txt'), os.path.exists('/work/data')",
        ),
    )
    .await;
    assert_eq!(r.display, "(False, False, False)", "{r:?}");
    // Nor can it reach the other session's processes or files through /proc.
    let r = run(
        &mut c,
        code(
            &other.session_id,
            "import os\nsorted(p for p in os.listdir('/proc') if p.isdigit())",
        ),
    )
    .await;
    assert!(!r.display.is_empty());
    let pids: Vec<&str> = r.display.trim_matches(['[', ']']).split(", ").collect();
    assert!(pids.len() <= 3, "a session sees only its own processes: {}", r.display);

    // Per-call CPU in a Python session: RLIMIT_CPU ends the interpreter, the next call gets a fresh one.
    let mut req = code(&s.session_id, "while True: pass");
    req.limits = Some(pb::Limits {
        cpu_time_ms: 1000,
        wall_time_ms: 20_000,
        ..Default::default()
    });
    let t = Instant::now();
    let r = run(&mut c, req).await;
    assert_eq!(verdict(&r), pb::Verdict::TimeLimitExceeded, "{r:?}");
    assert!(r.state_reset, "{r:?}");
    assert!(t.elapsed() < Duration::from_secs(15), "{:?}", t.elapsed());
    assert_eq!(
        run(&mut c, code(&s.session_id, "'x' in globals()")).await.display,
        "False"
    );

    for id in [&s.session_id, &other.session_id] {
        c.close_session(pb::CloseSessionRequest { session_id: id.clone() })
            .await
            .expect("CloseSession");
    }
}

#[tokio::test]
async fn bash_sessions_keep_cwd_files_and_exports_but_not_processes() {
    let ex = executor(2, &[]).await;
    let mut c = ex.client();
    let s = create(&mut c, "bash", None).await;
    let id = &s.session_id;
    let r = run(
        &mut c,
        code(
            id,
            "mkdir -p proj && cd proj && echo one > f && export GREETING=hello && NOT_EXPORTED=1",
        ),
    )
    .await;
    assert_eq!(verdict(&r), pb::Verdict::Ok, "{r:?}");
    assert_eq!(r.cwd, "/work/proj");
    let r = run(
        &mut c,
        command(id, "pwd; cat f; echo \"$GREETING/${NOT_EXPORTED:-unset}\""),
    )
    .await;
    assert_eq!(out(&r), "/work/proj\none\nhello/unset\n", "{r:?}");
    let r = run(&mut c, code(id, "exit 3")).await;
    assert_eq!(verdict(&r), pb::Verdict::RuntimeError);
    assert_eq!(r.result.as_ref().map(|p| p.exit_code), Some(3));
    // Calls of one session run one at a time, in the order they arrive.
    let (mut c1, mut c2) = (ex.client(), ex.client());
    let (a, b) = tokio::join!(c1.run_in_session(code(id, "sleep 0.5; echo a >> order")), async {
        tokio::time::sleep(Duration::from_millis(100)).await;
        c2.run_in_session(code(id, "echo b >> order; cat order")).await
    });
    assert_eq!(verdict(&a.expect("a").into_inner()), pb::Verdict::Ok);
    assert_eq!(out(&b.expect("b").into_inner()), "a\nb\n");
    // A background process does not outlive its call.
    let r = run(&mut c, code(id, "(sleep 300 &) ; echo started")).await;
    assert_eq!(out(&r), "started\n");
    assert!(
        slot_procs(&ex, 2).is_empty(),
        "a call's processes outlived it: {:?}",
        slot_procs(&ex, 2)
    );
    let closed = c
        .close_session(pb::CloseSessionRequest { session_id: id.clone() })
        .await
        .expect("close")
        .into_inner();
    assert_eq!(closed.calls, 6);
}

#[tokio::test]
async fn processes_are_gone_after_close_and_timeouts_and_ids_are_not_found_after() {
    let ex = executor(2, &["--session-idle-timeout-ms", "1500"]).await;
    let mut c = ex.client();
    // Close: the interpreter and what it started are killed.
    let s = create(&mut c, "python", None).await;
    let r = run(
        &mut c,
        code(
            &s.session_id,
            "import subprocess\np = subprocess.Popen(['sleep', '300'])\np.pid > 0",
        ),
    )
    .await;
    assert_eq!(r.display, "True", "{r:?}");
    assert!(
        !slot_procs(&ex, 2).is_empty(),
        "the interpreter and its child run between calls"
    );
    c.close_session(pb::CloseSessionRequest {
        session_id: s.session_id.clone(),
    })
    .await
    .expect("close");
    assert_eq!(
        slot_procs(&ex, 2),
        Vec::<i32>::new(),
        "processes left after CloseSession"
    );
    let gone = c.run_in_session(code(&s.session_id, "1")).await.expect_err("closed");
    assert_eq!(gone.code(), Code::NotFound, "{gone:?}");
    let gone = c
        .close_session(pb::CloseSessionRequest {
            session_id: s.session_id.clone(),
        })
        .await
        .expect_err("closed twice");
    assert_eq!(gone.code(), Code::NotFound);
    let unknown = c
        .run_in_session(code("00112233445566778899aabbccddeeff", "1"))
        .await
        .expect_err("unknown");
    assert_eq!(unknown.code(), Code::NotFound);

    // Idle timeout: the reaper ends it, and its processes.
    let s = create(&mut c, "python", None).await;
    assert_eq!(s.session_limits.as_ref().map(|l| l.idle_timeout_ms), Some(1500));
    let r = run(
        &mut c,
        code(
            &s.session_id,
            "import subprocess\nsubprocess.Popen(['sleep', '300']).pid > 0",
        ),
    )
    .await;
    assert_eq!(r.display, "True");
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(15) {
        if c.get_session_files(pb::GetSessionFilesRequest {
            session_id: s.session_id.clone(),
            paths: vec![],
        })
        .await
        .is_err_and(|e| e.code() == Code::NotFound)
        {
            break;
        }
        // Each poll is use: poll less often than the idle timeout.
        tokio::time::sleep(Duration::from_millis(2500)).await;
    }
    assert!(
        t.elapsed() < Duration::from_secs(15),
        "the idle session was never ended"
    );
    assert_eq!(
        slot_procs(&ex, 2),
        Vec::<i32>::new(),
        "processes left after the idle timeout"
    );

    // Absolute lifetime: ends even a session in the middle of a call.
    let s = create(
        &mut c,
        "bash",
        Some(pb::SessionLimits {
            lifetime_ms: 2000,
            ..Default::default()
        }),
    )
    .await;
    let mut req = command(&s.session_id, "sleep 30");
    req.limits = Some(pb::Limits {
        wall_time_ms: 20_000,
        ..Default::default()
    });
    let t = Instant::now();
    let r = c.run_in_session(req).await;
    assert!(
        t.elapsed() < Duration::from_secs(8),
        "the call outlived the session: {:?}",
        t.elapsed()
    );
    match r {
        Err(e) => assert_eq!(e.code(), Code::NotFound, "{e:?}"),
        // The call's wall is capped at the life left: it may end first, at its limit.
        Ok(r) => assert_eq!(verdict(&r.into_inner()), pb::Verdict::WallTimeLimitExceeded),
    }
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let gone = c
        .run_in_session(code(&s.session_id, "true"))
        .await
        .expect_err("expired");
    assert_eq!(gone.code(), Code::NotFound);
    assert_eq!(
        slot_procs(&ex, 2),
        Vec::<i32>::new(),
        "processes left after the lifetime"
    );
}

#[tokio::test]
async fn limits_per_call_and_per_session_are_enforced() {
    // /work smaller than the file-size limit: a full disk is ENOSPC, not SIGXFSZ. Room in
    // the sessions' memory ceiling (by default 2 × the idle bytes here) for a cell's 32 MiB.
    let ex = executor(
        2,
        &[
            "--work-dir-bytes",
            "16777216",
            "--max-sessions",
            "2",
            "--session-memory-bytes",
            "1073741824",
        ],
    )
    .await;
    let mut c = ex.client();
    let s = create(
        &mut c,
        "python",
        Some(pb::SessionLimits {
            max_calls: 4,
            memory_bytes: 256 << 20,
            ..Default::default()
        }),
    )
    .await;
    let id = &s.session_id;
    let r = run(
        &mut c,
        code(
            id,
            "keep = 'still here'\nimport subprocess\nchild = subprocess.Popen(['sleep', '300'])",
        ),
    )
    .await;
    assert_eq!(verdict(&r), pb::Verdict::Ok, "{r:?}");
    // Per-call wall time: the interpreter is killed and restarted; files stay.
    let mut req = code(
        id,
        "open('/work/mark','w').write('m')\nimport time\nwhile True: time.sleep(0.05)",
    );
    req.limits = Some(pb::Limits {
        wall_time_ms: 500,
        ..Default::default()
    });
    let t = Instant::now();
    let r = run(&mut c, req).await;
    assert_eq!(verdict(&r), pb::Verdict::WallTimeLimitExceeded, "{r:?}");
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    assert!(r.state_reset);
    assert!(r.message.contains("restart"), "{}", r.message);
    // The killed interpreter took its processes along; the next one starts with the next call.
    assert_eq!(
        slot_procs(&ex, 2),
        Vec::<i32>::new(),
        "processes left after a call's timeout"
    );
    // Memory: the session's total, at any moment.
    let r = run(&mut c, code(id, "import os\nb = bytearray(400 << 20)\nlen(b)")).await;
    assert!(
        matches!(
            verdict(&r),
            pb::Verdict::MemoryLimitExceeded | pb::Verdict::RuntimeError
        ),
        "{r:?}"
    );
    let r = run(
        &mut c,
        code(id, "import os\n(os.path.exists('/work/mark'), 'keep' in globals())"),
    )
    .await;
    assert_eq!(r.display, "(True, False)", "files stay, variables are gone: {r:?}");
    assert_eq!(r.calls_left, 0);
    let e = c.run_in_session(code(id, "1")).await.expect_err("past max_calls");
    assert_eq!(e.code(), Code::ResourceExhausted, "{e:?}");
    assert!(e.message().contains("max_calls"), "{}", e.message());

    // Output per call: capped, and the call says so.
    let b = create(&mut c, "bash", None).await;
    let mut req = code(&b.session_id, "head -c 100000 /dev/zero | tr '\\0' x");
    req.limits = Some(pb::Limits {
        output_bytes: 2000,
        ..Default::default()
    });
    let r = run(&mut c, req).await;
    assert_eq!(verdict(&r), pb::Verdict::OutputLimitExceeded, "{r:?}");
    assert!(out(&r).len() <= 2000);
    // CPU per call in a bash session.
    let mut req = code(&b.session_id, "while :; do :; done");
    req.limits = Some(pb::Limits {
        cpu_time_ms: 300,
        wall_time_ms: 5000,
        ..Default::default()
    });
    assert_eq!(verdict(&run(&mut c, req).await), pb::Verdict::TimeLimitExceeded);
    // Disk: /work is the executor's work dir size.
    let disk = b.session_limits.as_ref().map(|l| l.disk_bytes).unwrap_or(0);
    let r = run(
        &mut c,
        code(
            &b.session_id,
            &format!("head -c {} /dev/zero > /work/big", disk + (1 << 20)),
        ),
    )
    .await;
    assert_eq!(verdict(&r), pb::Verdict::RuntimeError, "{r:?}");
    assert!(err(&r).contains("No space left"), "{}", err(&r));
    // A full /work still takes the call that frees it (the executor keeps a reserve back).
    let r = run(&mut c, command(&b.session_id, "rm /work/big && echo freed")).await;
    assert_eq!(out(&r), "freed\n", "{r:?}");
    c.close_session(pb::CloseSessionRequest {
        session_id: s.session_id.clone(),
    })
    .await
    .expect("close");
    let p = create(&mut c, "python", None).await;
    let r = run(
        &mut c,
        code(&p.session_id, "open('/work/big', 'wb').write(b'x' * (32 << 20))"),
    )
    .await;
    assert_eq!(verdict(&r), pb::Verdict::RuntimeError, "{r:?}");
    assert!(r.message.contains("full"), "{r:?}");
    assert!(!r.state_reset, "{r:?}");
    let r = run(
        &mut c,
        code(&p.session_id, "import os; os.remove('/work/big'); 'freed'"),
    )
    .await;
    assert_eq!(r.display, "'freed'", "{r:?}");
    let r = run(&mut c, code(&p.session_id, "1/0")).await;
    assert!(
        err(&r).contains("ZeroDivisionError"),
        "output is back once there is room: {r:?}"
    );

    // Requests above the ceilings name their field.
    let e = c
        .create_session(pb::CreateSessionRequest {
            language: "python".into(),
            session_limits: Some(pb::SessionLimits {
                lifetime_ms: u64::MAX,
                ..Default::default()
            }),
            ..Default::default()
        })
        .await
        .expect_err("lifetime above the ceiling");
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(e.message().contains("session_limits.lifetime_ms"), "{}", e.message());
    let e = c
        .create_session(pb::CreateSessionRequest {
            language: "c".into(),
            ..Default::default()
        })
        .await
        .expect_err("not a session language");
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(e.message().starts_with("language"), "{}", e.message());
    let e = c
        .create_session(pb::CreateSessionRequest {
            language: "bash".into(),
            files: vec![pb::File {
                path: ".sandpool/cwd".into(),
                content: b"/".to_vec(),
                executable: false,
            }],
            ..Default::default()
        })
        .await
        .expect_err("the session's own directory");
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(e.message().starts_with("files[0].path"), "{}", e.message());
    let e = c
        .run_in_session(pb::RunInSessionRequest {
            session_id: b.session_id.clone(),
            ..Default::default()
        })
        .await
        .expect_err("no input");
    assert_eq!(e.code(), Code::InvalidArgument);
    let e = c
        .get_session_files(pb::GetSessionFilesRequest {
            session_id: b.session_id.clone(),
            paths: vec!["ok.txt".into(), "../../etc/passwd".into()],
        })
        .await
        .expect_err("a path out of /work");
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(e.message().starts_with("paths[1]"), "{}", e.message());
    let e = c
        .put_session_files(pb::PutSessionFilesRequest {
            session_id: b.session_id.clone(),
            files: vec![pb::File {
                path: "/etc/x".into(),
                content: vec![],
                executable: false,
            }],
        })
        .await
        .expect_err("an absolute path");
    assert!(e.message().starts_with("files[0].path"), "{}", e.message());
    // A program's directory in the way of a file names the file.
    run(&mut c, command(&b.session_id, "mkdir -p /work/taken")).await;
    let e = c
        .put_session_files(pb::PutSessionFilesRequest {
            session_id: b.session_id.clone(),
            files: vec![pb::File {
                path: "taken".into(),
                content: b"x".to_vec(),
                executable: false,
            }],
        })
        .await
        .expect_err("a directory in the way");
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(e.message().starts_with("files[0].path"), "{}", e.message());
}

#[tokio::test]
async fn idle_sessions_hold_no_run_slot_and_are_capped_by_max_sessions() {
    // One slot, three sessions: each call takes the slot only while it runs.
    let ex = executor(1, &["--max-sessions", "3"]).await;
    let mut c = ex.client();
    let mut ids = Vec::new();
    for _ in 0..3 {
        ids.push(create(&mut c, "python", None).await.session_id);
    }
    let e = c
        .create_session(pb::CreateSessionRequest {
            language: "bash".into(),
            ..Default::default()
        })
        .await
        .expect_err("over --max-sessions");
    assert_eq!(e.code(), Code::ResourceExhausted, "{e:?}");
    assert!(e.message().contains("--max-sessions"), "{}", e.message());
    assert_eq!(
        ex.metric(r#"sandpool_resource_exhausted_total{reason="sessions"}"#),
        1.0,
        "the refusal at the cap is counted"
    );
    assert_eq!(ex.metric("sandpool_sessions"), 3.0);
    assert_eq!(ex.metric("sandpool_session_capacity"), 3.0);
    // Three live interpreters, and the one slot free: stateless work runs at once.
    for id in &ids {
        assert_eq!(out(&run(&mut c, code(id, "x = 41\nprint(x + 1)")).await), "42\n");
    }
    assert_eq!(ex.metric("sandpool_busy_slots"), 0.0, "idle sessions hold no slot");
    let r = ex
        .run(pb::ExecuteRequest {
            language: "python".into(),
            code: "print(7)".into(),
            ..Default::default()
        })
        .await;
    assert_eq!(r.verdict, pb::Verdict::Ok as i32, "{r:?}");
    // Calls of all three at once share the one slot, one at a time, each keeping its state.
    let calls = ids.iter().map(|id| {
        let mut c = ex.client();
        let id = id.clone();
        async move { run(&mut c, code(&id, "import time; time.sleep(0.3); x")).await }
    });
    let t = Instant::now();
    for r in futures::future::join_all(calls).await {
        assert_eq!(r.display, "41", "{r:?}");
    }
    assert!(
        t.elapsed() >= Duration::from_millis(900),
        "the calls shared one slot: {:?}",
        t.elapsed()
    );
    c.close_session(pb::CloseSessionRequest {
        session_id: ids[0].clone(),
    })
    .await
    .expect("close");
    assert_eq!(ex.metric("sandpool_sessions"), 2.0);
    create(&mut c, "bash", None).await;
}

#[tokio::test]
async fn sessions_are_capped_by_the_memory_they_hold() {
    // A budget of three idle sessions; the first grows to hold more than two of them.
    let mib = |n: u64| (n << 20).to_string();
    let ex = executor(
        2,
        &["--session-idle-bytes", &mib(32), "--session-memory-bytes", &mib(96)],
    )
    .await;
    let mut c = ex.client();
    let big = create(&mut c, "python", None).await.session_id;
    let r = run(&mut c, code(&big, "b = bytearray(80 << 20); len(b)")).await;
    assert_eq!(r.display, str_of(80 << 20), "{r:?}");
    // The reaper measures the sessions' cgroups every two seconds.
    let until = Instant::now() + Duration::from_secs(10);
    while ex.metric("sandpool_session_memory_bytes") < (80u64 << 20) as f64 {
        assert!(Instant::now() < until, "the session's memory was never measured");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(ex.metric("sandpool_session_memory_budget_bytes"), (96u64 << 20) as f64);
    let e = c
        .create_session(pb::CreateSessionRequest {
            language: "python".into(),
            ..Default::default()
        })
        .await
        .expect_err("past the memory budget");
    assert_eq!(e.code(), Code::ResourceExhausted, "{e:?}");
    assert!(e.message().contains("--session-memory-bytes"), "{}", e.message());
    // Freed, it counts as idle again at once: a session is read again when a call ends.
    run(&mut c, code(&big, "del b; import gc; gc.collect()")).await;
    let other = create(&mut c, "python", None).await.session_id;
    c.close_session(pb::CloseSessionRequest { session_id: other })
        .await
        .expect("close");
    // A reading taken during a call does not outlive it: the call holds 80 MiB while the
    // reaper reads it and frees them before it ends.
    let mut c2 = c.clone();
    let id = big.clone();
    let call = tokio::spawn(async move {
        run(
            &mut c2,
            code(&id, "import time\nb = bytearray(80 << 20)\ntime.sleep(4)\ndel b"),
        )
        .await
    });
    let until = Instant::now() + Duration::from_secs(10);
    while ex.metric("sandpool_session_memory_bytes") < (80u64 << 20) as f64 {
        assert!(!call.is_finished(), "the call's memory was never measured while it ran");
        assert!(Instant::now() < until, "the call's memory was never measured");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let r = call.await.expect("call");
    assert_eq!(verdict(&r), pb::Verdict::Ok, "{r:?}");
    create(&mut c, "python", None).await;
}

fn str_of(n: u64) -> String {
    n.to_string()
}

fn authorized<T>(t: &str, mut r: tonic::Request<T>) -> tonic::Request<T> {
    r.metadata_mut().insert("authorization", t.parse().expect("header"));
    r
}

#[tokio::test]
async fn a_session_answers_only_its_creators_credentials() {
    // Without auth on, the executor lets every call in: the session itself tells callers apart.
    let ex = executor(2, &[]).await;
    let mut c = ex.client();
    let create_req = || pb::CreateSessionRequest {
        language: "bash".into(),
        ..Default::default()
    };
    let s = c
        .create_session(authorized("Bearer alice", tonic::Request::new(create_req())))
        .await
        .expect("create")
        .into_inner();
    let ok = c
        .run_in_session(authorized(
            "bearer  alice ",
            tonic::Request::new(code(&s.session_id, "echo hi")),
        ))
        .await
        .expect("the creator's credentials, the scheme in any case")
        .into_inner();
    assert_eq!(out(&ok), "hi\n");
    for (who, req) in [
        ("no credentials", tonic::Request::new(code(&s.session_id, "echo hi"))),
        (
            "another token",
            authorized("Bearer mallory", tonic::Request::new(code(&s.session_id, "echo hi"))),
        ),
        (
            "a prefix",
            authorized("Bearer alic", tonic::Request::new(code(&s.session_id, "echo hi"))),
        ),
    ] {
        let e = c.run_in_session(req).await.expect_err(who);
        assert_eq!(e.code(), Code::NotFound, "{who}: {e:?}");
    }
    let e = c
        .close_session(pb::CloseSessionRequest {
            session_id: s.session_id.clone(),
        })
        .await
        .expect_err("another caller cannot close it");
    assert_eq!(e.code(), Code::NotFound);
    c.close_session(authorized(
        "Bearer alice",
        tonic::Request::new(pb::CloseSessionRequest {
            session_id: s.session_id.clone(),
        }),
    ))
    .await
    .expect("the creator closes it");

    // With auth on, a caller without the token never reaches the session.
    let ex = Executor::start(Options {
        slots: 2,
        languages: vec!["bash"],
        env: vec![("SANDPOOL_AUTH_TOKEN".into(), "tok-a".into())],
        ..Default::default()
    })
    .await;
    let mut c = ex.client();
    let s = c
        .create_session(authorized("Bearer tok-a", tonic::Request::new(create_req())))
        .await
        .expect("create")
        .into_inner();
    let e = c
        .run_in_session(code(&s.session_id, "echo hi"))
        .await
        .expect_err("no token");
    assert_eq!(e.code(), Code::Unauthenticated);
    let r = c
        .run_in_session(authorized(
            "Bearer tok-a",
            tonic::Request::new(code(&s.session_id, "echo hi")),
        ))
        .await
        .expect("token")
        .into_inner();
    assert_eq!(out(&r), "hi\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drain_finishes_session_calls_refuses_new_sessions_and_ends_open_ones() {
    let mut ex = executor(3, &["--drain-timeout-ms", "20000", "--max-sessions", "2"]).await;
    let mut c = ex.client();
    let s = create(&mut c, "python", None).await;
    let r = run(
        &mut c,
        code(
            &s.session_id,
            "import subprocess\nsubprocess.Popen(['sleep', '300']).pid > 0",
        ),
    )
    .await;
    assert_eq!(r.display, "True");
    let mut c2 = ex.client();
    let id = s.session_id.clone();
    let in_flight = tokio::spawn(async move {
        c2.run_in_session(code(&id, "import time\ntime.sleep(2)\n'finished'"))
            .await
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    let t = Instant::now();
    ex.signal(libc::SIGTERM);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let e = c
        .create_session(pb::CreateSessionRequest {
            language: "bash".into(),
            ..Default::default()
        })
        .await
        .expect_err("a new session while draining");
    // Refused by admission, or by the connection going away (GOAWAY) first.
    assert!(matches!(e.code(), Code::Unavailable | Code::Cancelled), "{e:?}");
    let r = in_flight
        .await
        .expect("task")
        .expect("the call in flight finishes")
        .into_inner();
    assert_eq!(r.display, "'finished'", "{r:?}");
    let status = tokio::task::block_in_place(|| ex.wait_exit(Duration::from_secs(15)));
    assert!(status.is_some(), "an open session held the draining executor");
    assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
    assert_eq!(
        slot_procs(&ex, 3),
        Vec::<i32>::new(),
        "session processes outlived the executor"
    );
}

/// The isolation suite's cross-run checks, between sessions alive at once: what one
/// session holds open (files, sockets, SysV memory) the other cannot see or reach,
/// and a later session in the same slot finds nothing of either.
#[tokio::test]
async fn concurrent_sessions_cannot_see_each_other() {
    let ex = executor(2, &["--max-sessions", "2"]).await;
    let mut c = ex.client();
    let a = create(&mut c, "python", None).await;
    let b = create(&mut c, "python", None).await;
    let plant = r#"
import socket, ctypes
open("/work/secret-a", "w").write("A-SECRET")
open("/tmp/secret-a", "w").write("A-SECRET")
open("/dev/shm/secret-a", "w").write("A-SECRET")
u = socket.socket(socket.AF_UNIX); u.bind("\0sandpool-session-a"); u.listen(1)
try: t = socket.socket(); t.bind(("127.0.0.1", 45690)); t.listen(1)
except PermissionError: pass  # --network-isolation seccomp: no IP sockets at all
ctypes.CDLL(None).shmget(0x5a5b, 4096, 0o1666) >= 0
"#;
    let r = run(&mut c, code(&a.session_id, plant)).await;
    assert_eq!(r.display, "True", "{r:?}");
    let probe = r#"
import os, socket, ctypes
found = []
for d in ["/work", "/tmp", "/dev/shm"]:
    found += [d + "/" + f for f in os.listdir(d) if "secret" in f]
try:
    s = socket.socket(socket.AF_UNIX); s.connect("\0sandpool-session-a"); found.append("abstract socket")
except OSError: pass
try:
    socket.create_connection(("127.0.0.1", 45690), timeout=1); found.append("tcp listener")
except OSError: pass
if ctypes.CDLL(None).shmget(0x5a5b, 0, 0) >= 0: found.append("sysv shm")
found
"#;
    let r = run(&mut c, code(&b.session_id, probe)).await;
    assert_eq!(r.display, "[]", "{r:?}");
    // A still holds all of it: the probe ran while A's sockets were open.
    let r = run(
        &mut c,
        code(
            &a.session_id,
            "u.fileno() > 0 and ('t' not in globals() or t.fileno() > 0)",
        ),
    )
    .await;
    assert_eq!(r.display, "True", "{r:?}");
    // A session id is no way into another session's files either.
    let got = c
        .get_session_files(pb::GetSessionFilesRequest {
            session_id: b.session_id.clone(),
            paths: vec!["secret-a".into()],
        })
        .await
        .expect("get")
        .into_inner();
    assert!(got.files.is_empty(), "{got:?}");

    for id in [&a.session_id, &b.session_id] {
        c.close_session(pb::CloseSessionRequest { session_id: id.clone() })
            .await
            .expect("close");
    }
    let later = create(&mut c, "python", None).await;
    let r = run(
        &mut c,
        code(
            &later.session_id,
            "import os\n(sorted(os.listdir('/work')), sorted(os.listdir('/tmp')), sorted(os.listdir('/dev/shm')))",
        ),
    )
    .await;
    assert_eq!(r.display, "(['.sandpool'], ['.sandpool'], [])", "{r:?}");
}

/// Attack round 2, item 6: `GetSessionFiles` takes no slot and its cap was per call, so 20
/// parallel reads of one session's big file took the executor from 17 MiB to 1.3 GiB.
/// File reads are charged to the one byte budget before they are made: what fits is
/// returned, the rest is named as not returned, and the executor's peak stays bounded.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn parallel_session_file_reads_share_the_byte_budget() {
    const MIB: u64 = 1 << 20;
    let ex = executor(
        2,
        &[
            "--max-inflight-bytes",
            &(96 * MIB).to_string(),
            "--fetch-file-bytes",
            &(48 * MIB).to_string(),
            "--fetch-total-bytes",
            &(48 * MIB).to_string(),
            "--max-request-bytes",
            &(32 * MIB).to_string(),
        ],
    )
    .await;
    let mut c = ex.client();
    let s = create(&mut c, "python", None).await;
    let r = run(
        &mut c,
        code(&s.session_id, "_ = open('big', 'wb').write(b'z' * (40 << 20))"),
    )
    .await;
    assert_eq!(verdict(&r), pb::Verdict::Ok, "{r:?}");
    let before = ex.status_kib("VmHWM");
    let reads = (0..16).map(|_| {
        let mut c = ex.client();
        let id = s.session_id.clone();
        async move {
            c.get_session_files(pb::GetSessionFilesRequest {
                session_id: id,
                paths: vec!["big".into()],
            })
            .await
            .expect("GetSessionFiles")
            .into_inner()
        }
    });
    let got = futures::future::join_all(reads).await;
    let grown_mib = ex.status_kib("VmHWM").saturating_sub(before) / 1024;
    let returned = got.iter().filter(|g| g.files.len() == 1).count();
    let refused: Vec<_> = got.iter().flat_map(|g| &g.errors).collect();
    assert!(returned >= 1, "none returned: {refused:?}");
    assert!(!refused.is_empty(), "all 16 reads of 40 MiB fit in a 96 MiB budget?");
    assert_eq!(returned + refused.len(), 16);
    for e in &refused {
        assert!(e.message.contains("--max-inflight-bytes"), "{e:?}");
    }
    for g in got.iter().filter(|g| !g.files.is_empty()) {
        assert_eq!(g.files[0].content.len() as u64, 40 * MIB);
    }
    assert!(grown_mib < 384, "the executor's peak RSS grew by {grown_mib} MiB");
}

/// The executor's cgroup directories named `slot-N` (slots and session seats), found under
/// /sys/fs/cgroup by the executor's cgroup name.
fn slot_cgroups(ex: &Executor) -> Vec<std::path::PathBuf> {
    let name = sandpool_sandbox::cgroup_name(ex.work_root.path());
    let mut found = Vec::new();
    let mut todo = vec![(std::path::PathBuf::from("/sys/fs/cgroup"), 0)];
    while let Some((dir, depth)) = todo.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        for e in entries.flatten().filter(|e| e.file_type().is_ok_and(|t| t.is_dir())) {
            if e.file_name().to_str() == Some(name.as_str()) {
                // Seats live below `sessions`, the parent that holds their memory ceiling.
                for dir in [e.path(), e.path().join("sessions")] {
                    let slots = std::fs::read_dir(dir).into_iter().flatten().flatten();
                    found.extend(
                        slots
                            .filter(|s| s.file_name().to_string_lossy().starts_with("slot-"))
                            .map(|s| s.path()),
                    );
                }
            } else if depth < 6 {
                todo.push((e.path(), depth + 1));
            }
        }
    }
    found
}

fn mounts_of(pid: u32) -> usize {
    std::fs::read_to_string(format!("/proc/{pid}/mountinfo")).map_or(0, |t| t.lines().count())
}

/// Many idle sessions on one slot, each with its own state, expiring together, leave
/// nothing behind: no process of their uids, no process in their cgroups, no mount.
#[tokio::test]
async fn ninety_idle_sessions_share_one_slot_and_expire_together_without_a_trace() {
    // Each test executor has 100 uids: its slot's and 99 seats'.
    const N: usize = 90;
    // Long enough that none expires while the others are made on a slow machine.
    // The sessions' memory ceiling holds 90 idle interpreters (about 38 MiB each in their
    // cgroups here, more than the default idle bytes' 32 MiB).
    let ex = executor(
        1,
        &[
            "--max-sessions",
            "90",
            "--session-idle-timeout-ms",
            "20000",
            "--session-memory-bytes",
            &(90u64 * (48 << 20)).to_string(),
        ],
    )
    .await;
    let procs = || {
        (0..1 + N as u32)
            .flat_map(|i| procs_of(ex.uid_base + i))
            .collect::<Vec<_>>()
    };
    let mounts = mounts_of(ex.pid());
    let c = ex.client();
    let opened: Vec<String> = futures::stream::iter(0..N)
        .map(|i| {
            let mut c = c.clone();
            async move {
                let s = create(&mut c, "python", None).await;
                let r = run(&mut c, code(&s.session_id, &format!("mine = {i}\nmine"))).await;
                assert_eq!(r.display, i.to_string(), "{r:?}");
                s.session_id
            }
        })
        .buffer_unordered(16)
        .collect()
        .await;
    assert_eq!(ex.metric("sandpool_sessions"), N as f64);
    assert_eq!(ex.metric("sandpool_busy_slots"), 0.0, "idle sessions hold no slot");
    // Each kept its own state; this last use starts every idle timeout within a second or two.
    let mut c2 = ex.client();
    let states: Vec<String> = futures::stream::iter(opened.iter())
        .map(|id| {
            let mut c = ex.client();
            async move { run(&mut c, code(id, "mine")).await.display }
        })
        .buffer_unordered(16)
        .collect()
        .await;
    let mut states: Vec<usize> = states.iter().filter_map(|d| d.parse().ok()).collect();
    states.sort_unstable();
    assert_eq!(states, (0..N).collect::<Vec<_>>());
    assert!(procs().len() >= N, "one interpreter per session");
    // All past their idle timeout together.
    let until = Instant::now() + Duration::from_secs(60);
    while ex.metric("sandpool_sessions") > 0.0 || !procs().is_empty() {
        assert!(
            Instant::now() < until,
            "{} sessions, {:?} left",
            ex.metric("sandpool_sessions"),
            procs()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // The seats' cgroups (slot 0's holds its spawner, by design).
    let seat = |p: &std::path::PathBuf| {
        p.file_name()
            .and_then(|n| n.to_str()?.strip_prefix("slot-")?.parse::<usize>().ok())
            .is_some_and(|i| i >= 1)
    };
    let cgroups: Vec<_> = slot_cgroups(&ex).into_iter().filter(seat).collect();
    assert!(cgroups.len() >= 16, "the seats' cgroups were found: {cgroups:?}");
    for cg in &cgroups {
        let procs = std::fs::read_to_string(cg.join("cgroup.procs")).unwrap_or_default();
        assert!(procs.trim().is_empty(), "{} still holds {procs}", cg.display());
    }
    assert_eq!(mounts_of(ex.pid()), mounts, "a session's mount outlived it");
    let e = c2.run_in_session(code(&opened[0], "mine")).await.expect_err("expired");
    assert_eq!(e.code(), Code::NotFound);
}

/// A killed executor takes its sessions with it: their inits die with it (the seat cloner's
/// thread), and with each init its pid namespace, the interpreter in it.
#[tokio::test]
async fn a_killed_executor_leaves_no_session_running() {
    let mut ex = executor(2, &[]).await;
    let mut c = ex.client();
    let s = create(&mut c, "python", None).await;
    assert_eq!(run(&mut c, code(&s.session_id, "21 * 2")).await.display, "42");
    let b = create(&mut c, "bash", None).await;
    // A bash call in progress too.
    let mut c2 = ex.client();
    let id = b.session_id.clone();
    let sleeping = tokio::spawn(async move { c2.run_in_session(command(&id, "sleep 60")).await });
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!slot_procs(&ex, 2).is_empty(), "the sessions run");
    ex.signal(libc::SIGKILL);
    ex.wait_exit(Duration::from_secs(10)).expect("the executor exits");
    let until = Instant::now() + Duration::from_secs(10);
    while !slot_procs(&ex, 2).is_empty() {
        assert!(Instant::now() < until, "left running: {:?}", slot_procs(&ex, 2));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let _ = sleeping.await;
}

/// An interpreter that cannot start (a session's CPU time used up before it is ready) gives back the
/// run slot its start queued for at once: it does not hold it until the start's time-out
/// while stateless work waits.
#[tokio::test]
async fn an_interpreter_that_dies_at_start_gives_its_slot_back() {
    let ex = executor(1, &[]).await;
    let mut c = ex.client();
    let s = create(
        &mut c,
        "python",
        Some(pb::SessionLimits {
            cpu_time_ms: 10,
            ..Default::default()
        }),
    )
    .await;
    // Its start queues for the slot 50 ms after create, and dies in it.
    tokio::time::sleep(Duration::from_millis(400)).await;
    let t = Instant::now();
    let r = ex
        .run(pb::ExecuteRequest {
            language: "python".into(),
            code: "print(7)".into(),
            ..Default::default()
        })
        .await;
    assert_eq!(r.verdict, pb::Verdict::Ok as i32, "{r:?}");
    assert!(
        t.elapsed() < Duration::from_secs(10),
        "stateless work waited {:?}",
        t.elapsed()
    );
    let _ = c
        .close_session(pb::CloseSessionRequest {
            session_id: s.session_id,
        })
        .await;
}

/// How long the interpreter answering a cell has run, seconds (from /proc: its start time).
const INTERPRETER_AGE: &str = "import os\n\
st = int(open('/proc/self/stat').read().rsplit(')', 1)[1].split()[19])\n\
up = float(open('/proc/uptime').read().split()[0])\n\
round(up - st / os.sysconf('SC_CLK_TCK'), 2)";

/// `--session-spares`: interpreters started ahead of demand serve new sessions with the
/// default limits (their first call finds one that has run for a while), never a session that
/// asked for other limits, are started again once taken, and end with the executor.
#[tokio::test]
async fn spare_interpreters_serve_new_sessions_and_end_with_the_executor() {
    // Room in the sessions' memory ceiling for 4 sessions and 2 spares at about 38 MiB each.
    let mut ex = executor(
        2,
        &[
            "--max-sessions",
            "4",
            "--session-spares",
            "2",
            "--session-memory-bytes",
            "268435456",
        ],
    )
    .await;
    let seat_uids: Vec<u32> = (2..2 + 4 + 2).map(|i| ex.uid_base + i).collect();
    let running = || seat_uids.iter().filter(|u| !procs_of(**u).is_empty()).count();
    let until = Instant::now() + Duration::from_secs(30);
    while running() < 2 {
        assert!(
            Instant::now() < until,
            "no spares started: {} seats run something",
            running()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(running(), 2, "two spares, no more");
    tokio::time::sleep(Duration::from_millis(1500)).await;

    let mut c = ex.client();
    let s = create(&mut c, "python", None).await;
    let age: f64 = run(&mut c, code(&s.session_id, INTERPRETER_AGE))
        .await
        .display
        .parse()
        .expect("an age");
    assert!(
        age >= 1.0,
        "the first call met an interpreter started {age} s before it: not a spare"
    );
    let r = run(
        &mut c,
        code(&s.session_id, "import os\n(os.getuid(), 'x' in globals())"),
    )
    .await;
    let uid: u32 = r
        .display
        .trim_start_matches('(')
        .split(',')
        .next()
        .and_then(|u| u.parse().ok())
        .expect("a uid");
    assert!(seat_uids.contains(&uid), "{r:?}");
    assert!(r.display.ends_with("False)"), "a spare holds no state: {r:?}");

    // Other limits than the defaults: an interpreter of its own, started for it (a spare's
    // memory limit would be wrong, its wall-time backstop too short for a longer lifetime).
    let own_memory = pb::SessionLimits {
        memory_bytes: 200 << 20,
        ..Default::default()
    };
    let own_lifetime = pb::SessionLimits {
        lifetime_ms: 3 * 3600 * 1000,
        ..Default::default()
    };
    for limits in [own_memory, own_lifetime] {
        let own = create(&mut c, "python", Some(limits)).await;
        let age: f64 = run(&mut c, code(&own.session_id, INTERPRETER_AGE))
            .await
            .display
            .parse()
            .expect("an age");
        assert!(
            age < 1.0,
            "a session with its own limits ({limits:?}) got a spare ({age} s old)"
        );
    }

    // The spare taken is replaced: three sessions and two spares run.
    let until = Instant::now() + Duration::from_secs(30);
    while running() < 5 {
        assert!(
            Instant::now() < until,
            "the spare was not replaced: {} seats run something",
            running()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let ended = ex.terminate(Duration::from_secs(30)).expect("the executor exits");
    assert!(ended.success(), "{ended:?}");
    let until = Instant::now() + Duration::from_secs(10);
    while running() > 0 {
        assert!(
            Instant::now() < until,
            "left running after shutdown: {} seats",
            running()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// What a session's code can see of its sandbox, as a comparable string.
const SANDBOX_VIEW: &str = r#"
import os, sys, signal, resource
def _r(p):
    try:
        return open(p).read()
    except Exception as e:
        return type(e).__name__
_st = dict(l.split(':', 1) for l in _r('/proc/self/status').splitlines() if ':' in l)
_mi = [l.split() for l in _r('/proc/self/mountinfo').splitlines()]
_view = {
    'ids': (os.getuid() == os.geteuid() == os.getgid() == os.getegid() > 0, os.getgroups()),
    'caps': [_st.get(k, '').strip() for k in ('CapInh', 'CapPrm', 'CapEff', 'CapBnd', 'CapAmb', 'NoNewPrivs', 'Seccomp')],
    'cgroup': _r('/proc/self/cgroup'),
    'mounts': sorted((l[4], l[l.index('-') + 1], l[5]) for l in _mi),
    'hostname': os.uname().nodename,
    'fds': sorted(os.listdir('/proc/self/fd')),
    'rlimits': [resource.getrlimit(x) for x in (resource.RLIMIT_NOFILE, resource.RLIMIT_NPROC, resource.RLIMIT_FSIZE, resource.RLIMIT_STACK, resource.RLIMIT_CORE, resource.RLIMIT_AS)],
    'oom': _r('/proc/self/oom_score_adj'),
    'umask': os.umask(0o22),
    'cwd': os.getcwd(),
    'argv': sys.argv,
    'path': sys.path[:2],
    'env': sorted(os.environ),
    'session_leader': os.getsid(0) == os.getpid(),
    'pid': os.getpid(),
    'procs': len([p for p in os.listdir('/proc') if p.isdigit()]),
    'blocked': sorted(int(s) for s in signal.pthread_sigmask(signal.SIG_BLOCK, [])),
    'handlers': [str(signal.getsignal(s)) for s in (signal.SIGINT, signal.SIGPIPE, signal.SIGCHLD, signal.SIGXCPU, signal.SIGTERM, signal.SIGXFSZ)],
    'main': sorted(k for k in globals() if k.startswith('__')),
    'net': sorted(os.listdir('/sys/class/net')) if os.path.isdir('/sys/class/net') else None,
    'recursion': sys.getrecursionlimit(),
    'flags': str(sys.flags),
}
print('\n'.join('%s=%r' % kv for kv in sorted(_view.items())))
"#;

#[tokio::test]
async fn a_session_interpreter_forked_from_the_zygote_sees_what_a_cold_one_sees() {
    // One executor at a time: both give their first session the same seat and uid.
    let mut views = Vec::new();
    for warm in ["true", "false"] {
        let ex = executor(1, &["--warm-starts", warm]).await;
        let mut c = ex.client();
        let s = create(&mut c, "python", None).await;
        let r = run(&mut c, code(&s.session_id, SANDBOX_VIEW)).await;
        assert_eq!(verdict(&r), pb::Verdict::Ok, "{r:?}");
        // The zygote preloads `statistics` (Python's warm.preload); the driver never imports it.
        let forked = run(&mut c, code(&s.session_id, "import sys\n'statistics' in sys.modules")).await;
        assert_eq!(
            forked.display,
            if warm == "true" { "True" } else { "False" },
            "{forked:?}"
        );
        // Another session in the same executor, forked while the first one lives.
        let other = create(&mut c, "python", None).await;
        let r2 = run(&mut c, code(&other.session_id, "x = 6 * 7\nx")).await;
        assert_eq!(r2.display, "42", "{r2:?}");
        views.push(out(&r));
    }
    let (warm, cold) = (&views[0], &views[1]);
    assert!(warm.contains("cgroup='"), "{warm}");
    let differ: Vec<_> = warm.lines().zip(cold.lines()).filter(|(w, c)| w != c).collect();
    assert!(
        differ.is_empty(),
        "a forked session interpreter differs from a cold one (warm, cold): {differ:#?}"
    );
    assert_eq!(warm.lines().count(), cold.lines().count());
}

#[tokio::test]
async fn orphans_of_a_forked_session_interpreter_are_reaped_as_they_end() {
    // The seat's init reaps what a cell's processes orphan (it wakes on SIGCHLD, not on a
    // timer: hundreds of idle sessions must not wake the machine). Zombies are invisible
    // inside the sandbox (hidepid), so they are looked for on the host.
    let ex = executor(1, &[]).await;
    let mut c = ex.client();
    let s = create(&mut c, "python", None).await;
    let src = "import os, time\n\
        pid = os.fork()\n\
        if pid == 0:\n\
        \x20   if os.fork() == 0:\n\
        \x20       time.sleep(0.2)\n\
        \x20       os._exit(0)\n\
        \x20   os._exit(0)\n\
        os.waitpid(pid, 0)\n\
        os.getuid()";
    for _ in 0..3 {
        let r = run(&mut c, code(&s.session_id, src)).await;
        assert_eq!(verdict(&r), pb::Verdict::Ok, "{r:?}");
        let uid: u32 = r.display.parse().expect("the session's uid");
        tokio::time::sleep(Duration::from_millis(800)).await;
        let zombies: Vec<i32> = procs_of(uid)
            .into_iter()
            .filter(|p| {
                let stat = std::fs::read_to_string(format!("/proc/{p}/stat")).unwrap_or_default();
                stat.rsplit_once(") ").is_some_and(|(_, rest)| rest.starts_with('Z'))
            })
            .collect();
        assert!(zombies.is_empty(), "orphans left unreaped: {zombies:?}");
    }
}

/// Descriptors the executor holds now.
fn fds_of(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count())
}

#[tokio::test]
async fn sessions_cost_the_executor_few_descriptors_and_leave_none_behind() {
    // Every run's init is cloned with a copy of the executor's descriptor table and closes
    // it one by one: descriptors sessions keep (a seat's cgroup files were nine each, kept
    // for good) made every later run slower.
    let ex = executor(2, &["--max-sessions", "40"]).await;
    let mut c = ex.client();
    let r = ex
        .run(pb::ExecuteRequest {
            language: "python".into(),
            code: "print(1)".into(),
            ..Default::default()
        })
        .await;
    assert_eq!(r.verdict, pb::Verdict::Ok as i32, "{r:?}");
    let before = fds_of(ex.pid());
    let mut ids = Vec::new();
    for _ in 0..30 {
        let s = create(&mut c, "python", None).await;
        assert_eq!(run(&mut c, code(&s.session_id, "1 + 1")).await.display, "2");
        ids.push(s.session_id);
    }
    let live = fds_of(ex.pid());
    assert!(
        live <= before + 30 * 8,
        "30 live sessions hold {} descriptors in the executor (from {before})",
        live - before
    );
    for id in &ids {
        c.close_session(pb::CloseSessionRequest { session_id: id.clone() })
            .await
            .expect("close");
    }
    let t = Instant::now();
    while fds_of(ex.pid()) > before + 10 && t.elapsed() < Duration::from_secs(10) {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let after = fds_of(ex.pid());
    assert!(
        after <= before + 10,
        "closed sessions left {} descriptors (from {before})",
        after - before
    );
}

/// Attack round 3, finding 2: a session's programs can write its own `.sandpool/`. FIFOs
/// planted at the names of the next calls' requests (`in/N.json`, `N.stdin`, `N.go`) and
/// at a bash session's `cell.sh` once made the executor's next write wait for a reader
/// for ever, on a blocking-pool thread, holding the run slot: with one slot, nobody else
/// ran again. The executor's own files are now written under a new name and renamed into
/// place (what was planted is replaced, never opened), and the driver opens only regular
/// files: the next calls complete, and another caller's run goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifos_planted_in_the_sessions_own_directory_block_nothing() {
    let ex = executor(1, &[]).await;
    let mut c = ex.client();
    let s = create(&mut c, "python", None).await;
    let plant = r#"
import os
d = "/work/.sandpool/in"
n = max(int(f.split(".")[0]) for f in os.listdir(d) if f.endswith(".go"))
for k in range(n + 1, n + 5):
    # The marker of the very next call too would only make the driver skip to it.
    for ext in ("json", "stdin", "go") if k > n + 1 else ("json", "stdin"):
        os.mkfifo("%s/%d.%s" % (d, k, ext))
import socket
so = socket.socket(socket.AF_UNIX); so.bind("%s/%d.json" % (d, n + 5))
for ext in ("json", "stdin", "go"):
    os.symlink("/etc/passwd", "%s/%d.%s" % (d, n + 6, ext))
n
"#;
    let r = run(&mut c, code(&s.session_id, plant)).await;
    assert_eq!(verdict(&r), pb::Verdict::Ok, "{r:?}");
    let bounded = Duration::from_secs(60);
    for (i, (src, stdin, want)) in [
        ("1 + 1", "", "2"),
        ("input()", "typed\n", "'typed'"),
        ("import sys; sys.stdin.read()", "", "''"),
        ("6 * 7", "", "42"),
        ("'still here'", "", "'still here'"),
        ("3", "", "3"),
    ]
    .into_iter()
    .enumerate()
    {
        let mut req = code(&s.session_id, src);
        req.stdin = stdin.as_bytes().to_vec();
        let r = tokio::time::timeout(bounded, c.run_in_session(req))
            .await
            .unwrap_or_else(|_| panic!("call {i} ({src}) blocked on a planted FIFO"))
            .unwrap_or_else(|e| panic!("call {i}: {e:?}"))
            .into_inner();
        assert_eq!(r.display, want, "call {i}: {r:?}");
    }
    // A bash session's cell file, planted likewise.
    let b = create(&mut c, "bash", None).await;
    let r = run(
        &mut c,
        command(
            &b.session_id,
            "rm -f /work/.sandpool/cell.sh && mkfifo /work/.sandpool/cell.sh && echo planted",
        ),
    )
    .await;
    assert_eq!(out(&r), "planted\n", "{r:?}");
    let r = tokio::time::timeout(bounded, c.run_in_session(command(&b.session_id, "echo after")))
        .await
        .expect("the bash call blocked on a planted FIFO")
        .expect("bash call")
        .into_inner();
    assert_eq!(out(&r), "after\n", "{r:?}");
    // The one slot is free for another caller.
    let r = tokio::time::timeout(bounded, ex.run(sandpool_tests::request("python", "print('other')", "")))
        .await
        .expect("another caller's run waited behind a stuck slot");
    assert_eq!(sandpool_tests::stdout(&r), "other\n");
    assert_eq!(ex.metric("sandpool_watchdog_stuck_blocking"), 0.0);
}

/// Finding 3 of issue 46: sessions lived under no ceiling after admission. With a small
/// ceiling (`--session-memory-bytes`), a session that grows past the room the others leave
/// gets the error itself (its own memory limit: MEMORY_LIMIT_EXCEEDED), while an idle
/// session beside it, holding memory of its own, keeps its state.
#[tokio::test]
async fn a_session_growing_past_the_ceiling_gets_the_error_not_an_idle_one() {
    let mib = |n: u64| (n << 20).to_string();
    let ex = executor(
        2,
        &["--session-idle-bytes", &mib(32), "--session-memory-bytes", &mib(160)],
    )
    .await;
    let mut c = ex.client();
    let idle = create(&mut c, "python", None).await.session_id;
    let r = run(&mut c, code(&idle, "x = 42\nkeep = bytearray(40 << 20)\nlen(keep)")).await;
    assert_eq!(r.display, str_of(40 << 20), "{r:?}");
    let grower = create(&mut c, "python", None).await.session_id;
    let r = run(&mut c, code(&grower, "y = 1")).await;
    assert_eq!(verdict(&r), pb::Verdict::Ok, "{r:?}");
    // More than the ceiling leaves it beside the idle session (its own limit is 512 MiB).
    let r = run(&mut c, code(&grower, "b = bytearray(150 << 20)\nlen(b)")).await;
    assert_eq!(verdict(&r), pb::Verdict::MemoryLimitExceeded, "{r:?}");
    assert!(r.state_reset, "{r:?}");
    let r = run(&mut c, code(&idle, "print(x, len(keep))")).await;
    assert_eq!(verdict(&r), pb::Verdict::Ok, "the idle session lost its state: {r:?}");
    assert_eq!(out(&r), format!("42 {}\n", 40 << 20), "{r:?}");
    assert!(!r.state_reset, "{r:?}");
    // Freed by the idle session, the room is the grower's again.
    run(&mut c, code(&idle, "del keep")).await;
    let r = run(&mut c, code(&grower, "b = bytearray(100 << 20)\nlen(b)")).await;
    assert_eq!(r.display, str_of(100 << 20), "{r:?}");
}

/// Finding 3 of issue 46: sessions filling their `/work` (tmpfs, which no kill frees) held a
/// pod at its memory limit, and stateless runs inside their own limits were killed. Here the
/// executor lives in a memory cgroup sized like a pod's; sessions fill `/work` as far as they
/// can, and a stateless run inside its limits still succeeds. cgroup v1 (this machine's); the
/// v2 guest test checks the ceiling's files there.
#[tokio::test]
async fn sessions_filling_work_cannot_push_stateless_runs_out() {
    let own = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    let Some(own) = own.lines().find_map(|l| {
        l.split_once(":memory:")
            .map(|(_, p)| p.trim_start_matches('/').to_owned())
    }) else {
        eprintln!("skipped: no cgroup v1 memory hierarchy");
        return;
    };
    let pod = std::path::Path::new("/sys/fs/cgroup/memory")
        .join(own)
        .join(format!("sandpool-test-pod-{}", std::process::id()));
    std::fs::create_dir_all(&pod).expect("pod cgroup");
    let _pod = RemovedOnDrop(pod.clone());
    std::fs::write(pod.join("memory.limit_in_bytes"), (512u64 << 20).to_string()).expect("pod limit");
    let mib = |n: u64| (n << 20).to_string();
    let ex = Executor::start(Options {
        slots: 1,
        languages: vec!["python", "bash"],
        extra_args: [
            "--session-idle-bytes",
            &mib(16),
            "--session-memory-bytes",
            &mib(128),
            "--work-dir-bytes",
            &mib(300),
        ]
        .iter()
        .map(|s| s.to_string())
        .collect(),
        isolation: Isolation::Namespaces,
        mount_setup: Some(format!("echo $$ > {}/cgroup.procs", pod.display())),
        ..Default::default()
    })
    .await;
    let mut c = ex.client();
    let mut fillers = Vec::new();
    for _ in 0..3 {
        let id = create(&mut c, "bash", None).await.session_id;
        // Each as far as its /work (300 MiB) and the sessions' ceiling let it: 200 MiB (in
        // files under the per-call file size limit), 600 MiB in all.
        let r = run(
            &mut c,
            command(
                &id,
                "for i in 1 2 3 4; do head -c 50M /dev/zero > /work/fill$i; done; du -sh /work",
            ),
        )
        .await;
        eprintln!("filled: {:?} {} {} {}", verdict(&r), out(&r), err(&r), r.message);
        fillers.push(id);
    }
    let usage = |f: &str| {
        std::fs::read_to_string(pod.join(f))
            .ok()
            .and_then(|t| t.trim().parse::<u64>().ok())
            .unwrap_or(0)
    };
    eprintln!("pod holds {} MiB", usage("memory.usage_in_bytes") >> 20);
    let mut req = sandpool_tests::request("python", "b = bytearray(200 << 20)\nprint(len(b))", "");
    req.limits = Some(pb::Limits {
        memory_bytes: 320 << 20,
        wall_time_ms: 30_000,
        ..Default::default()
    });
    let r = c.execute(req).await.expect("execute").into_inner();
    let phase = r.run.clone().unwrap_or_default();
    eprintln!("pod peak {} MiB", usage("memory.max_usage_in_bytes") >> 20);
    assert_eq!(
        sandpool_tests::verdict(phase.verdict),
        "OK",
        "a stateless run inside its limits failed while sessions filled /work: {r:?}"
    );
    assert_eq!(String::from_utf8_lossy(&phase.stdout), format!("{}\n", 200 << 20));
}

/// A cgroup the test made, removed once the executor in it is gone (dropped before this, as
/// declared after it), also when the test fails.
struct RemovedOnDrop(std::path::PathBuf);

impl Drop for RemovedOnDrop {
    fn drop(&mut self) {
        let until = Instant::now() + Duration::from_secs(10);
        while std::fs::remove_dir(&self.0).is_err() && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// Finding 3 of issue 46: an interpreter killed between calls was restarted silently, and
/// the caller's next cell met a NameError. Now that call is refused with a typed "session
/// reset" (FAILED_PRECONDITION) and runs nothing; the one after runs in the fresh interpreter.
#[tokio::test]
async fn a_session_whose_interpreter_was_killed_says_so_on_its_next_call() {
    let ex = executor(1, &[]).await;
    let mut c = ex.client();
    let id = create(&mut c, "python", None).await.session_id;
    let r = run(&mut c, code(&id, "x = 42")).await;
    assert_eq!(verdict(&r), pb::Verdict::Ok, "{r:?}");
    // Seat 0 (uid_base + slots): everything its session runs, killed from the host.
    let uid = ex.uid_base + 1;
    let pids = procs_of(uid);
    assert!(!pids.is_empty(), "the session's interpreter was found");
    for pid in pids {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL);
    }
    let until = Instant::now() + Duration::from_secs(10);
    while !procs_of(uid).is_empty() {
        assert!(Instant::now() < until, "the interpreter did not die");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let e = c
        .run_in_session(code(&id, "print(x)"))
        .await
        .expect_err("a reset, not a NameError");
    assert_eq!(e.code(), Code::FailedPrecondition, "{e:?}");
    assert!(e.message().starts_with("session reset:"), "{}", e.message());
    assert!(e.message().contains("variables are gone"), "{}", e.message());
    let r = run(&mut c, code(&id, "x = 7\nprint(x)")).await;
    assert_eq!(out(&r), "7\n", "{r:?}");
    assert!(!r.state_reset, "{r:?}");
}

/// An executor that ends leaves none of its cgroups behind: its slots', its session seats'
/// (numbered past the slots, below the seats' parent, which issue 46 added) and the parent.
#[tokio::test]
async fn an_executor_that_ends_removes_its_seats_cgroups_too() {
    let mut ex = executor(1, &[]).await;
    let mut c = ex.client();
    for _ in 0..2 {
        let id = create(&mut c, "bash", None).await.session_id;
        let r = run(&mut c, code(&id, "echo hi")).await;
        assert_eq!(out(&r), "hi\n", "{r:?}");
    }
    let seats = |p: &std::path::PathBuf| p.parent().is_some_and(|d| d.ends_with("sessions"));
    assert!(
        slot_cgroups(&ex).iter().any(seats),
        "the sessions ran in seats' cgroups"
    );
    drop(c);
    ex.terminate(Duration::from_secs(30)).expect("the executor ended");
    let left = slot_cgroups(&ex);
    assert!(left.is_empty(), "left behind: {left:?}");
}

/// The `sandpool_phase_duration_seconds` samples of `phase` on the executor's /metrics:
/// (count, sum of seconds).
fn phase_samples(ex: &Executor, phase: &str) -> (f64, f64) {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(&ex.metrics_addr).expect("metrics connect");
    write!(s, "GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n").expect("metrics request");
    let mut body = String::new();
    s.read_to_string(&mut body).expect("metrics read");
    let sample = |what: &str| {
        let prefix = format!("sandpool_phase_duration_seconds_{what}{{phase=\"{phase}\"}} ");
        body.lines()
            .find_map(|l| l.strip_prefix(&prefix)?.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (sample("count"), sample("sum"))
}

/// A session's interpreter enters the sandbox the engine's one way, as every run: its life
/// is the `interpreter` phase on /metrics, and the watchdog tracks it against the session's
/// lifetime, not a call's wall time, so one idle past a call's allowance (its wall time
/// plus the watchdog's 60 s) is no stuck run.
#[tokio::test]
async fn a_session_interpreter_is_watched_and_timed_as_the_interpreter_phase() {
    let ex = executor(1, &[]).await;
    assert_eq!(phase_samples(&ex, "interpreter").0, 0.0, "no interpreter has run yet");
    let mut c = ex.client();
    let id = c
        .create_session(pb::CreateSessionRequest {
            language: "python".into(),
            call_limits: Some(pb::Limits {
                wall_time_ms: 2000,
                ..Default::default()
            }),
            ..Default::default()
        })
        .await
        .expect("CreateSession")
        .into_inner()
        .session_id;
    let r = run(&mut c, code(&id, "x = 41")).await;
    assert_eq!(verdict(&r), pb::Verdict::Ok, "{r:?}");

    // The watchdog's STUCK_AFTER (60 s) past the call's 2 s, and some.
    let idle = Duration::from_secs(70);
    tokio::time::sleep(idle).await;
    assert_eq!(
        ex.metric("sandpool_watchdog_stuck_runs"),
        0.0,
        "an idle interpreter counted as a stuck run"
    );
    assert_eq!(ex.metric("sandpool_watchdog_stuck_slots"), 0.0);
    let r = run(&mut c, code(&id, "x + 1")).await;
    assert_eq!(r.display, "42", "the same interpreter still runs: {r:?}");
    assert!(!r.state_reset, "{r:?}");

    c.close_session(pb::CloseSessionRequest { session_id: id.clone() })
        .await
        .expect("CloseSession");
    // Its life is recorded when its run ends (a kill, at close).
    let deadline = Instant::now() + Duration::from_secs(30);
    let (count, secs) = loop {
        let (count, secs) = phase_samples(&ex, "interpreter");
        if count >= 1.0 || Instant::now() > deadline {
            break (count, secs);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(count, 1.0, "one interpreter's life recorded");
    assert!(
        secs >= idle.as_secs_f64(),
        "its whole life, from start to kill: {secs} s"
    );
}
