//! Sessions that outlive their executor (docs/sessions.md, "Surviving the pod"), against
//! real executors sharing a store directory over loopback: on SIGTERM an executor pauses
//! every live session (after the call in progress) before it exits; the next call on
//! another executor resumes it with its files; of two executors resuming one session at
//! once, exactly one wins.

use sandpool_proto::v1 as pb;
use sandpool_tests::Executor;
use std::path::Path;
use std::time::Duration;
use tonic::Code;

type Client = pb::executor_client::ExecutorClient<tonic::transport::Channel>;

use sandpool_tests::{as_caller as as_, session_executor as executor};

async fn create(c: &mut Client, who: &str) -> String {
    c.create_session(as_(
        who,
        pb::CreateSessionRequest {
            language: "python".into(),
            ..Default::default()
        },
    ))
    .await
    .expect("create")
    .into_inner()
    .session_id
}

fn sh(id: &str, cmd: &str) -> pb::RunInSessionRequest {
    pb::RunInSessionRequest {
        session_id: id.into(),
        input: Some(pb::run_in_session_request::Input::Command(cmd.into())),
        ..Default::default()
    }
}

/// Runs `cmd` in session `id`: its stdout, asserting it ran; and the executor that answered.
async fn run(c: &mut Client, who: &str, id: &str, cmd: &str) -> Result<(String, String), tonic::Status> {
    let r = c.run_in_session(as_(who, sh(id, cmd))).await?;
    let by = r
        .metadata()
        .get("x-sandpool-executor-address")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let r = r.into_inner();
    let res = r.result.clone().unwrap_or_default();
    assert_eq!(
        r.verdict,
        pb::Verdict::Ok as i32,
        "{r:?}: {}",
        String::from_utf8_lossy(&res.stderr)
    );
    Ok((String::from_utf8_lossy(&res.stdout).into_owned(), by))
}

/// Archives (`.blob`) the store holds below `dir`.
fn blobs(dir: &Path) -> Vec<String> {
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
    out.retain(|f| f.ends_with(".blob"));
    out
}

#[tokio::test]
async fn sigterm_pauses_every_session_and_another_executor_resumes_each_on_its_next_call() {
    let store = tempfile::tempdir().expect("store dir");
    let mut a = executor(store.path(), &[]).await;
    let b = executor(store.path(), &[]).await;
    let mut ca = a.client();
    let mut ids = Vec::new();
    for (i, who) in ["alice", "bob", "carol"].iter().enumerate() {
        let id = create(&mut ca, who).await;
        let (out, by) = run(
            &mut ca,
            who,
            &id,
            &format!("mkdir -p d && echo file-{i} > d/f && echo ok"),
        )
        .await
        .expect("write");
        assert_eq!(out.trim(), "ok");
        assert_eq!(by, a.addr, "a session call names the executor that served it");
        ids.push((who.to_string(), id));
    }
    // A call in progress when SIGTERM comes finishes, and what it wrote is kept.
    let (who0, id0) = ids[0].clone();
    let mut slow = a.client();
    let in_flight =
        tokio::spawn(async move { run(&mut slow, &who0, &id0, "sleep 2 && echo late > late.txt && echo done").await });
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert!(blobs(store.path()).is_empty(), "nothing paused before SIGTERM");
    let status = tokio::task::spawn_blocking(move || {
        let s = a.terminate(Duration::from_secs(60));
        (a, s)
    });
    let (a, status) = status.await.expect("join");
    assert!(status.is_some_and(|s| s.success()), "A exited badly: {status:?}");
    let (out, _) = in_flight.await.expect("join").expect("the call in progress at SIGTERM");
    assert_eq!(out.trim(), "done");
    // A exited only after pausing every session: their archives are in the store.
    let stored = blobs(store.path());
    for (_, id) in &ids {
        assert!(
            stored.iter().any(|f| f.ends_with(&format!("{id}.blob"))),
            "{id}: {stored:?}"
        );
    }
    drop(a);

    // Each session's next call, on B, resumes it there with its files.
    let mut cb = b.client();
    for (i, (who, id)) in ids.iter().enumerate() {
        // Another caller cannot reach it (nor resume it) on B either.
        let e = run(&mut cb, "mallory", id, "echo hi")
            .await
            .expect_err("mallory reached it");
        assert_eq!(e.code(), Code::NotFound, "{e:?}");
        if i == 2 {
            // GetSessionFiles resumes it as well.
            let got = cb
                .get_session_files(as_(
                    who,
                    pb::GetSessionFilesRequest {
                        session_id: id.clone(),
                        paths: vec!["d/f".into()],
                    },
                ))
                .await
                .expect("get files on B")
                .into_inner();
            assert_eq!(got.files.first().map(|f| f.content.clone()), Some(b"file-2\n".to_vec()));
        }
        let (out, by) = run(&mut cb, who, id, "cat d/f; cat late.txt 2>/dev/null; true")
            .await
            .expect("the next call on B");
        let want = if i == 0 {
            format!("file-{i}\nlate\n")
        } else {
            format!("file-{i}\n")
        };
        assert_eq!(out, want, "{id}");
        assert_eq!(by, b.addr, "the answer names B, which the client follows");
    }
    assert!(blobs(store.path()).is_empty(), "resumed sessions left archives");
    assert_eq!(b.metric("sandpool_sessions"), 3.0);
}

#[tokio::test]
async fn with_pause_on_drain_off_sessions_end_with_the_executor() {
    let store = tempfile::tempdir().expect("store dir");
    let mut a = executor(store.path(), &["--session-pause-on-drain=false"]).await;
    let mut ca = a.client();
    let id = create(&mut ca, "alice").await;
    run(&mut ca, "alice", &id, "echo x > f").await.expect("write");
    let status = tokio::task::spawn_blocking(move || a.terminate(Duration::from_secs(60)))
        .await
        .expect("join");
    assert!(status.is_some_and(|s| s.success()), "{status:?}");
    assert!(blobs(store.path()).is_empty(), "{:?}", blobs(store.path()));
}

#[tokio::test]
async fn two_executors_resuming_one_paused_session_at_once_exactly_one_wins() {
    let store = tempfile::tempdir().expect("store dir");
    let a = executor(store.path(), &[]).await;
    let b = executor(store.path(), &[]).await;
    let c = executor(store.path(), &[]).await;
    let mut ca = a.client();
    for round in 0..3 {
        let id = create(&mut ca, "alice").await;
        run(&mut ca, "alice", &id, &format!("echo {round} > f"))
            .await
            .expect("write");
        ca.pause_session(as_(
            "alice",
            pb::PauseSessionRequest {
                session_id: id.clone(),
                mode: pb::PauseMode::Filesystem as i32,
            },
        ))
        .await
        .expect("pause");
        let resume = |e: &Executor| {
            let mut cl = e.client();
            let id = id.clone();
            async move {
                cl.resume_session(as_("alice", pb::ResumeSessionRequest { session_id: id }))
                    .await
                    .map(|r| r.into_inner())
            }
        };
        let (rb, rc) = tokio::join!(resume(&b), resume(&c));
        let won: Vec<&str> = [("b", &rb), ("c", &rc)]
            .iter()
            .filter(|(_, r)| r.is_ok())
            .map(|(n, _)| *n)
            .collect();
        assert_eq!(won.len(), 1, "round {round}: {rb:?} / {rc:?}");
        let lost = if rb.is_ok() { &rc } else { &rb };
        let code = lost.as_ref().expect_err("lost").code();
        // Refused while the winner held the claim (retry), or found nothing after it finished.
        assert!(
            matches!(code, Code::Unavailable | Code::NotFound),
            "round {round}: {lost:?}"
        );
        let live = b.metric("sandpool_sessions") + c.metric("sandpool_sessions");
        assert_eq!(live, (round + 1) as f64, "round {round}: the session is live once");
    }
}
