//! Pausing and resuming sessions against the real executor over loopback
//! (docs/sessions.md, "Pause and resume"): /work kept exactly, nothing held while
//! paused, resumed on another executor sharing the store, only by its owner, and
//! deleted with its session.

use sandpool_proto::v1 as pb;
use std::path::Path;
use tonic::Code;

use sandpool_tests::session_calls::{Client, pause, pause_in, resume};
use sandpool_tests::{as_caller as as_, session_executor as executor};

async fn create(c: &mut Client, who: &str, auto_resume: bool) -> String {
    c.create_session(as_(
        who,
        pb::CreateSessionRequest {
            language: "python".into(),
            auto_resume,
            ..Default::default()
        },
    ))
    .await
    .expect("create")
    .into_inner()
    .session_id
}

fn input(id: &str, i: pb::run_in_session_request::Input) -> pb::RunInSessionRequest {
    pb::RunInSessionRequest {
        session_id: id.into(),
        input: Some(i),
        ..Default::default()
    }
}

async fn try_run(
    c: &mut Client,
    who: &str,
    id: &str,
    i: pb::run_in_session_request::Input,
) -> Result<pb::RunInSessionResponse, tonic::Status> {
    c.run_in_session(as_(who, input(id, i))).await.map(|r| r.into_inner())
}

/// The call's stdout and display, asserting it ran.
async fn run(c: &mut Client, who: &str, id: &str, i: pb::run_in_session_request::Input) -> String {
    let r = try_run(c, who, id, i).await.expect("run");
    let res = r.result.clone().unwrap_or_default();
    assert_eq!(
        r.verdict,
        pb::Verdict::Ok as i32,
        "{r:?}: {}",
        String::from_utf8_lossy(&res.stderr)
    );
    format!("{}{}", String::from_utf8_lossy(&res.stdout), r.display)
}

fn sh(cmd: &str) -> pb::run_in_session_request::Input {
    pb::run_in_session_request::Input::Command(cmd.into())
}

fn py(code: &str) -> pb::run_in_session_request::Input {
    pb::run_in_session_request::Input::Code(code.into())
}

/// Files the store holds below `dir`.
fn stored(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            match e.file_type().map(|t| t.is_dir()) {
                Ok(true) => todo.push(e.path()),
                _ => out.push(e.path().display().to_string()),
            }
        }
    }
    out
}

/// Pids on this host running as `uid`.
fn procs_of(uid: u32) -> usize {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_name().to_str().is_some_and(|n| n.parse::<u32>().is_ok()))
        .filter(|e| {
            std::fs::read_to_string(e.path().join("status")).ok().and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("Uid:"))
                    .and_then(|v| v.split_whitespace().next()?.parse::<u32>().ok())
            }) == Some(uid)
        })
        .count()
}

const MAKE_FILES: &str = "mkdir -p d && printf 'hello\\n' > a.txt && printf '#!/bin/sh\\necho ran\\n' > d/x.sh \
    && chmod 750 d/x.sh && chmod 600 a.txt && ln -s a.txt link && ln -s /nowhere dangling && echo ok";
const CHECK_FILES: &str =
    "stat -c '%n %a %F' a.txt d/x.sh link dangling && readlink link dangling && cat link && ./d/x.sh";

#[tokio::test]
async fn a_paused_session_keeps_work_exactly_holds_nothing_and_answers_only_its_owner() {
    let store = tempfile::tempdir().expect("store dir");
    let exe = executor(store.path(), &[]).await;
    let mut c = exe.client();
    let id = create(&mut c, "alice", false).await;
    assert_eq!(run(&mut c, "alice", &id, sh(MAKE_FILES)).await.trim(), "ok");
    let before = run(&mut c, "alice", &id, sh(CHECK_FILES)).await;
    assert!(before.contains("d/x.sh 750 regular file"), "{before}");
    run(&mut c, "alice", &id, py("x = 41")).await;
    let uid: u32 = run(&mut c, "alice", &id, sh("id -u"))
        .await
        .trim()
        .parse()
        .expect("uid");
    assert!(procs_of(uid) > 0, "a live Python session runs its interpreter");
    assert_eq!(exe.metric("sandpool_sessions"), 1.0);

    // Another caller cannot pause it.
    let e = pause(&mut c, "mallory", &id).await.expect_err("mallory paused it");
    assert_eq!(e.code(), Code::NotFound, "{e:?}");
    let p = pause(&mut c, "alice", &id).await.expect("pause");
    assert_eq!(p.mode, pb::PauseMode::Filesystem as i32);
    assert!(p.stored_bytes > 0, "{p:?}");
    // Paused: no seat, no process, its archive in the store.
    assert_eq!(exe.metric("sandpool_sessions"), 0.0);
    assert_eq!(procs_of(uid), 0, "a paused session left processes");
    assert!(
        stored(store.path()).iter().any(|f| f.ends_with(&format!("{id}.blob"))),
        "{:?}",
        stored(store.path())
    );

    // Its calls are refused, saying how to resume; another caller's look like no session.
    let e = try_run(&mut c, "alice", &id, py("1"))
        .await
        .expect_err("a paused session ran");
    assert_eq!(e.code(), Code::FailedPrecondition, "{e:?}");
    assert!(
        e.message().contains("session paused") && e.message().contains("ResumeSession"),
        "{}",
        e.message()
    );
    let e = try_run(&mut c, "mallory", &id, py("1")).await.expect_err("mallory ran");
    assert_eq!(e.code(), Code::NotFound, "{e:?}");
    let e = resume(&mut c, "mallory", &id).await.expect_err("mallory resumed it");
    assert_eq!(e.code(), Code::NotFound, "{e:?}");

    let r = resume(&mut c, "alice", &id).await.expect("resume");
    assert_eq!(r.session_id, id);
    assert_eq!(exe.metric("sandpool_sessions"), 1.0);
    // The same files, modes and links; a cold interpreter.
    let after = run(&mut c, "alice", &id, sh(CHECK_FILES)).await;
    assert_eq!(after, before);
    assert!(
        after.contains("link 777 symbolic link") && after.contains("ran"),
        "{after}"
    );
    assert_eq!(run(&mut c, "alice", &id, py("'x' in globals()")).await, "False");
    // Resumed, its archive is the session's again: gone from the store.
    assert!(
        stored(store.path()).iter().all(|f| !f.ends_with(".blob")),
        "{:?}",
        stored(store.path())
    );

    // Paused again then closed: its archive goes with it.
    pause(&mut c, "alice", &id).await.expect("pause again");
    assert!(stored(store.path()).iter().any(|f| f.ends_with(".blob")));
    c.close_session(as_("alice", pb::CloseSessionRequest { session_id: id.clone() }))
        .await
        .expect("close a paused session");
    assert!(
        stored(store.path()).iter().all(|f| !f.ends_with(".blob")),
        "{:?}",
        stored(store.path())
    );
    let e = resume(&mut c, "alice", &id)
        .await
        .expect_err("a closed session resumed");
    assert_eq!(e.code(), Code::NotFound, "{e:?}");
}

#[tokio::test]
async fn a_session_paused_on_one_executor_resumes_on_another_sharing_the_store() {
    let store = tempfile::tempdir().expect("store dir");
    let (a, b) = (executor(store.path(), &[]).await, executor(store.path(), &[]).await);
    let (mut ca, mut cb) = (a.client(), b.client());
    let id = create(&mut ca, "alice", false).await;
    assert_eq!(run(&mut ca, "alice", &id, sh(MAKE_FILES)).await.trim(), "ok");
    let before = run(&mut ca, "alice", &id, sh(CHECK_FILES)).await;
    pause(&mut ca, "alice", &id).await.expect("pause");

    let e = resume(&mut cb, "bob", &id)
        .await
        .expect_err("bob resumed alice's session");
    assert_eq!(e.code(), Code::NotFound, "{e:?}");
    resume(&mut cb, "alice", &id).await.expect("resume on b");
    assert_eq!(run(&mut cb, "alice", &id, sh(CHECK_FILES)).await, before);
    assert_eq!(b.metric("sandpool_sessions"), 1.0);
    assert_eq!(a.metric("sandpool_sessions"), 0.0);
    // Live on b, it is no longer a's to resume.
    let e = resume(&mut ca, "alice", &id).await.expect_err("resumed twice");
    assert_eq!(e.code(), Code::NotFound, "{e:?}");
}

/// A session that runs threads and processes of its own is paused all the same, in both
/// modes, and resumed with its files: the archive's `sh`, `find` and `tar` (held to 4
/// processes) run in its seat once the interpreter's run, and all it started, is gone.
#[tokio::test]
async fn a_session_running_threads_and_processes_is_paused_and_resumed() {
    let store = tempfile::tempdir().expect("store dir");
    let exe = executor(store.path(), &[]).await;
    let mut c = exe.client();
    for mode in [pb::PauseMode::Filesystem, pb::PauseMode::Full] {
        let id = create(&mut c, "alice", false).await;
        run(&mut c, "alice", &id, sh("echo kept > k.txt")).await;
        let busy = "import subprocess, threading, time\n\
                    ts = [threading.Thread(target=time.sleep, args=(60,), daemon=True) for _ in range(20)]\n\
                    [t.start() for t in ts]\n\
                    ps = [subprocess.Popen(['sleep', '60']) for _ in range(2)]\n\
                    threading.active_count() >= 5";
        assert_eq!(run(&mut c, "alice", &id, py(busy)).await, "True");
        let p = pause_in(&mut c, "alice", &id, mode)
            .await
            .expect("paused beside its threads");
        assert_eq!(p.mode, mode as i32);
        resume(&mut c, "alice", &id).await.expect("resume");
        assert_eq!(run(&mut c, "alice", &id, sh("cat k.txt")).await, "kept\n");
    }
}

#[tokio::test]
async fn a_session_created_with_auto_resume_is_resumed_by_its_next_call() {
    let store = tempfile::tempdir().expect("store dir");
    let exe = executor(store.path(), &[]).await;
    let mut c = exe.client();
    let id = create(&mut c, "alice", true).await;
    run(&mut c, "alice", &id, sh("echo kept > k.txt")).await;
    pause(&mut c, "alice", &id).await.expect("pause");
    assert_eq!(exe.metric("sandpool_sessions"), 0.0);
    assert_eq!(run(&mut c, "alice", &id, py("open('k.txt').read()")).await, "'kept\\n'");
    assert_eq!(exe.metric("sandpool_sessions"), 1.0);
}

/// A call that arrives while its auto_resume session is being paused waits for the pause,
/// then resumes the session and runs (it answered FAILED_PRECONDITION `session paused`). The
/// pause is made slow by the session itself: saving a global that takes 4 s to pickle.
#[tokio::test]
async fn a_call_arriving_during_the_pause_of_an_auto_resume_session_resumes_it() {
    let store = tempfile::tempdir().expect("store dir");
    let exe = executor(store.path(), &[]).await;
    let mut c = exe.client();
    let id = create(&mut c, "alice", true).await;
    let slow = "import time\nclass Slow:\n    def __reduce__(self):\n        time.sleep(4)\n        return (Slow, ())\ns = Slow()\nopen('k.txt', 'w').write('kept')";
    run(&mut c, "alice", &id, py(slow)).await;
    let pausing = {
        let (mut c, id) = (c.clone(), id.clone());
        tokio::spawn(async move { pause_full(&mut c, "alice", &id).await })
    };
    // The pause holds the session from its start; its save takes 4 s more.
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    assert_eq!(run(&mut c, "alice", &id, py("open('k.txt').read()")).await, "'kept'");
    pausing.await.expect("join").expect("pause");
}

#[tokio::test]
async fn an_idle_session_is_paused_after_the_pause_flag_and_resumes_with_its_files() {
    let store = tempfile::tempdir().expect("store dir");
    let exe = executor(store.path(), &["--session-pause-after-idle-ms", "1000"]).await;
    let mut c = exe.client();
    let id = create(&mut c, "alice", false).await;
    run(&mut c, "alice", &id, sh("echo kept > k.txt")).await;
    // Paused by the reaper once idle (bounded wait, generous for a loaded machine).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while exe.metric("sandpool_sessions") != 0.0 {
        assert!(std::time::Instant::now() < deadline, "the idle session was not paused");
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    let e = try_run(&mut c, "alice", &id, py("1"))
        .await
        .expect_err("a paused session ran");
    assert_eq!(e.code(), Code::FailedPrecondition, "{e:?}");
    resume(&mut c, "alice", &id).await.expect("resume");
    assert_eq!(run(&mut c, "alice", &id, sh("cat k.txt")).await, "kept\n");
}

async fn pause_full(c: &mut Client, who: &str, id: &str) -> Result<pb::PauseSessionResponse, tonic::Status> {
    pause_in(c, who, id, pb::PauseMode::Full).await
}

/// A session's interpreter state, some of which cannot be kept (an open file, a thread, a
/// generator).
const MAKE_STATE: &str = r#"
import json as j
import threading
x = [1, 2, 3]
def double(v):
    return [i * 2 for i in v]
class Point:
    def __init__(self, a, b):
        self.a, self.b = a, b
    def total(self):
        return self.a + self.b + len(x)
p = Point(3, 4)
f = open('/work/open.txt', 'w')
t = threading.Thread(target=lambda: None)
g = (i for i in range(3))
"#;

#[tokio::test]
async fn a_full_pause_keeps_variables_functions_classes_and_imports_on_another_executor() {
    let store = tempfile::tempdir().expect("store dir");
    let (a, b) = (executor(store.path(), &[]).await, executor(store.path(), &[]).await);
    let (mut ca, mut cb) = (a.client(), b.client());
    let id = create(&mut ca, "alice", false).await;
    run(&mut ca, "alice", &id, py(MAKE_STATE)).await;
    run(&mut ca, "alice", &id, sh("echo kept > k.txt; mkdir -p sub")).await;
    run(&mut ca, "alice", &id, py("import os; os.chdir('sub')")).await;
    let p = pause_full(&mut ca, "alice", &id).await.expect("pause");
    assert_eq!(p.mode, pb::PauseMode::Full as i32);
    let mut lost = p.lost_names.clone();
    lost.sort();
    assert_eq!(lost, ["f", "g", "t"], "{p:?}");
    assert_eq!(a.metric("sandpool_sessions"), 0.0);

    let e = resume(&mut cb, "bob", &id)
        .await
        .expect_err("bob resumed alice's session");
    assert_eq!(e.code(), Code::NotFound, "{e:?}");
    resume(&mut cb, "alice", &id).await.expect("resume on b");
    let state = "j.dumps([double(x), p.total(), isinstance(p, Point), [n in globals() for n in 'fgt'], os.getcwd(), open('/work/k.txt').read()])";
    assert_eq!(
        run(&mut cb, "alice", &id, py(state)).await,
        r#"'[[2, 4, 6], 10, true, [false, false, false], "/work/sub", "kept\\n"]'"#
    );
    // Functions and methods read the session's globals, not copies taken at the pause.
    run(&mut cb, "alice", &id, py("x.append(4)")).await;
    assert_eq!(
        run(&mut cb, "alice", &id, py("(p.total(), double(x)[-1])")).await,
        "(11, 8)"
    );
    // The state was read once: an interpreter started later does not load it again.
    assert_eq!(
        run(
            &mut cb,
            "alice",
            &id,
            sh("ls -A /work/.sandpool | grep -c state || true")
        )
        .await
        .trim(),
        "0"
    );
}

#[tokio::test]
async fn a_full_pause_leaves_out_what_passes_the_bound_and_keeps_the_rest() {
    let store = tempfile::tempdir().expect("store dir");
    let exe = executor(
        store.path(),
        &["--work-dir-bytes", "16777216", "--session-memory-bytes", "1073741824"],
    )
    .await;
    let mut c = exe.client();
    let id = create(&mut c, "alice", false).await;
    run(&mut c, "alice", &id, py("big = bytes(24 << 20)\nsmall = 'kept'")).await;
    let p = pause_full(&mut c, "alice", &id).await.expect("pause");
    assert_eq!(p.lost_names, ["big"], "{p:?}");
    assert!(p.stored_bytes < 16 << 20, "{p:?}");
    resume(&mut c, "alice", &id).await.expect("resume");
    assert_eq!(
        run(&mut c, "alice", &id, py("(small, 'big' in globals())")).await,
        "('kept', False)"
    );
}

#[tokio::test]
async fn a_bash_session_is_refused_a_full_pause_naming_mode() {
    let store = tempfile::tempdir().expect("store dir");
    let exe = executor(store.path(), &[]).await;
    let mut c = exe.client();
    let id = c
        .create_session(as_(
            "alice",
            pb::CreateSessionRequest {
                language: "bash".into(),
                ..Default::default()
            },
        ))
        .await
        .expect("create")
        .into_inner()
        .session_id;
    let e = pause_full(&mut c, "alice", &id)
        .await
        .expect_err("a full pause of bash");
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
    assert!(e.message().contains("mode"), "{e:?}");
    pause(&mut c, "alice", &id).await.expect("a filesystem pause still");
}

/// A resume whose caller goes away mid-extraction (its deadline passed) gives its claim on the
/// archive back: the session stays resumable at once (it was refused as "being resumed by
/// another executor" until the claim went stale, 10 minutes).
#[tokio::test]
async fn a_resume_cut_short_by_its_caller_leaves_the_session_resumable() {
    let store = tempfile::tempdir().expect("store dir");
    let exe = executor(store.path(), &[]).await;
    let mut c = exe.client();
    let id = create(&mut c, "alice", false).await;
    // Enough to extract that a short deadline ends the resume in the middle.
    run(
        &mut c,
        "alice",
        &id,
        sh("head -c 48M /dev/urandom > big && md5sum big > sum && echo ok"),
    )
    .await;
    let mut cut = false;
    for ms in [400u64, 200, 100, 50, 25, 800, 1600] {
        pause(&mut c, "alice", &id).await.expect("pause");
        let mut req = as_("alice", pb::ResumeSessionRequest { session_id: id.clone() });
        req.set_timeout(std::time::Duration::from_millis(ms));
        match c.resume_session(req).await {
            Ok(_) => continue,
            Err(e) => {
                // The client's own timer (CANCELLED) or the server's (DEADLINE_EXCEEDED).
                assert!(matches!(e.code(), Code::Cancelled | Code::DeadlineExceeded), "{e:?}");
                cut = true;
                break;
            }
        }
    }
    assert!(cut, "no deadline cut the resume short");
    // Its claim given back: resumable (a retry only while the cut resume winds down).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        match resume(&mut c, "alice", &id).await {
            Ok(_) => break,
            Err(e) if e.code() == Code::Unavailable && std::time::Instant::now() < deadline => {
                tokio::time::sleep(std::time::Duration::from_millis(250)).await;
            }
            Err(e) => panic!("resume after a cut one: {e:?}; store: {:?}", stored(store.path())),
        }
    }
    assert_eq!(run(&mut c, "alice", &id, sh("md5sum -c sum")).await, "big: OK\n");
    assert!(
        !stored(store.path()).iter().any(|p| p.ends_with(".claim")),
        "{:?}",
        stored(store.path())
    );
}

/// Issue 47 item 3: paused sessions are deleted by their TTL. Nothing swept the store, so a
/// TTL never ended anything; now each executor sweeps it every `--session-store-sweep-secs`.
#[tokio::test]
async fn a_paused_session_past_its_ttl_is_swept_from_the_store() {
    let store = tempfile::tempdir().expect("store dir");
    let a = executor(
        store.path(),
        &["--session-store-ttl-secs", "1", "--session-store-sweep-secs", "1"],
    )
    .await;
    let mut c = a.client();
    let id = create(&mut c, "alice", false).await;
    assert_eq!(run(&mut c, "alice", &id, sh(MAKE_FILES)).await.trim(), "ok");
    pause(&mut c, "alice", &id).await.expect("pause");
    let held = |id: &str| stored(store.path()).iter().any(|f| f.contains(id));
    assert!(held(&id), "paused into the store: {:?}", stored(store.path()));
    let t = std::time::Instant::now();
    while held(&id) {
        assert!(
            t.elapsed() < std::time::Duration::from_secs(60),
            "still in the store a minute past its TTL: {:?}",
            stored(store.path())
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    let e = resume(&mut c, "alice", &id).await.expect_err("resumed past its TTL");
    assert_eq!(e.code(), Code::NotFound, "{e:?}");
}
