//! Attacks on pause, resume, snapshots and forks from hostile code inside a session and from
//! a caller with a token (docs/sessions.md, "What an attacker gets from pause and forks"),
//! against the real executor over loopback: a /work built to break the archive, the
//! caps and the quotas, and races of pause, resume, fork and close.

use sandpool_proto::v1 as pb;
use std::time::{Duration, Instant};
use tonic::Code;

use sandpool_tests::session_calls::{close, command as sh, create, pause, resume, try_command as try_sh};
use sandpool_tests::{as_caller as as_, session_executor as executor};

/// Every file below `dir` with its kind and size, sorted.
fn tree(dir: &std::path::Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let m = std::fs::symlink_metadata(e.path()).expect("lstat");
            if m.is_dir() {
                todo.push(e.path());
            }
            out.push(format!("{} {:?} {}", e.path().display(), m.file_type(), m.len()));
        }
    }
    out.sort();
    out
}

/// A /work made by hostile code: links out of the sandbox and at the host's store, a
/// hardlink, a fifo, a setuid file, a sparse file as large as a call may write, many tiny
/// files and a 3,000-byte path (one past PATH_MAX is not restored: docs/sessions.md). Pause and resume keep what a /work may hold, refuse nothing they can keep,
/// stay within the session's bounds, and touch nothing outside the store and the seat.
#[tokio::test]
async fn a_hostile_work_dir_pauses_and_resumes_without_reaching_outside_its_seat() {
    let store = tempfile::tempdir().expect("tmp");
    let ex = executor(store.path(), &[]).await;
    let mut c = ex.client();
    let id = create(&mut c, "alice", "bash").await;
    let host_store = store.path().display().to_string();
    let build = format!(
        "set -e; ln -s /etc etc; ln -s /proc/self me; ln -s {host_store} store; ln -s ../../.. up; \
         printf 'x\\n' > a; ln a hard; mkfifo fifo; cp /bin/true su; chmod 4755 su; \
         truncate -s $(( $(ulimit -f) * 1024 )) sparse; mkdir many; (cd many && seq 1 3000 | xargs touch); \
         n=$(printf 'n%.0s' $(seq 1 200)); mkdir deep; \
         (cd deep && for i in $(seq 1 15); do mkdir $n && cd $n; done && echo bottom > f); echo ok"
    );
    assert_eq!(sh(&mut c, "alice", &id, &build).await, "ok\n");
    let sparse: u64 = sh(&mut c, "alice", &id, "stat -c %s sparse")
        .await
        .trim()
        .parse()
        .expect("size");
    assert!(
        sparse >= 16 << 20,
        "a sparse file as large as a call may write: {sparse}"
    );
    let before_store = tree(store.path());
    let t = Instant::now();
    let paused = pause(&mut c, "alice", &id).await;
    let took = t.elapsed();
    // The executor lives and answers: the pause is kept or refused for its size, never an
    // executor failure.
    let alive = create(&mut c, "bob", "bash").await;
    assert_eq!(sh(&mut c, "bob", &alive, "echo up").await, "up\n");
    match &paused {
        Ok(p) => {
            assert!(
                p.stored_bytes < sparse / 2,
                "a sparse file's holes are not stored: {p:?}"
            );
        }
        Err(e) => panic!("pause of a hostile /work failed after {took:?}: {e:?}"),
    }
    // The store holds the one archive and its metadata, no file reached through a link.
    let after: Vec<String> = tree(store.path())
        .into_iter()
        .filter(|l| !before_store.contains(l) && !l.contains("is_dir: true"))
        .collect();
    assert!(
        after.len() == 2 && after.iter().all(|l| l.contains(&format!("/paused/{id}."))),
        "the store holds only the paused session: {after:#?}"
    );
    resume(&mut c, "alice", &id).await.expect("resume");
    let check = "stat -c '%n %F %s' etc me store up a hard fifo sparse | sort; readlink etc me store up; \
                 stat -c %h a; ls many | wc -l; (cd deep && for i in $(seq 1 15); do cd n*; done && cat f); \
                 test -u su && echo setuid || echo plain; ls etc/hostname >/dev/null && echo sandbox-etc";
    let out = sh(&mut c, "alice", &id, check).await;
    assert!(out.contains("etc symbolic link"), "{out}");
    assert!(out.contains("store symbolic link"), "{out}");
    assert!(out.contains("fifo fifo"), "{out}");
    assert!(out.contains(&format!("sparse regular file {sparse}")), "{out}");
    assert!(out.contains("/etc\n/proc/self\n"), "{out}");
    assert!(
        out.contains("\n2\n3000\nbottom\n"),
        "hardlink, tiny files, the deep path: {out}"
    );
    // Resumed: its archive is gone from the store, nothing else was left there.
    let left: Vec<String> = tree(store.path())
        .into_iter()
        .filter(|l| !before_store.contains(l) && !l.contains("is_dir: true"))
        .collect();
    assert!(left.is_empty(), "{left:#?}");
}

/// Two resumes and a close of one paused session at once: never two live copies, never a
/// session live again after its close answered OK, and the executor's count of live
/// sessions is what the calls say afterwards (no seat, cgroup or work dir leaked).
#[tokio::test]
async fn resumes_and_a_close_racing_leave_one_answer_and_no_leak() {
    let store = tempfile::tempdir().expect("tmp");
    let ex = executor(store.path(), &[]).await;
    let mut c = ex.client();
    for round in 0..4 {
        let id = create(&mut c, "alice", "bash").await;
        // Enough /work that the resume's extraction takes a while.
        sh(
            &mut c,
            "alice",
            &id,
            "head -c 24000000 /dev/urandom > big && echo kept > a",
        )
        .await;
        pause(&mut c, "alice", &id).await.expect("pause");
        let (mut c1, mut c2, mut c3) = (ex.client(), ex.client(), ex.client());
        let (r1, r2, closed) = tokio::join!(resume(&mut c1, "alice", &id), resume(&mut c2, "alice", &id), async {
            tokio::time::sleep(Duration::from_millis(20 * round)).await;
            close(&mut c3, "alice", &id).await
        });
        let live = try_sh(&mut c, "alice", &id, "cat a").await;
        if closed.is_ok() {
            assert!(
                live.as_ref().is_err_and(|e| e.code() == Code::NotFound),
                "round {round}: closed OK, yet live after: {live:?} (resumes {r1:?} {r2:?})"
            );
        } else {
            assert!(r1.is_ok() || r2.is_ok(), "round {round}: {closed:?} {r1:?} {r2:?}");
        }
        if live.is_ok() {
            close(&mut c, "alice", &id).await.expect("close the live one");
        }
        let _ = close(&mut c, "alice", &id).await;
        // Nothing live, nothing stored.
        let deadline = Instant::now() + Duration::from_secs(20);
        while ex.metric("sandpool_sessions") != 0.0 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert_eq!(ex.metric("sandpool_sessions"), 0.0, "round {round}: a session leaked");
        let left: Vec<String> = tree(store.path())
            .into_iter()
            .filter(|l| !l.contains("is_dir: true"))
            .collect();
        assert!(left.is_empty(), "round {round}: {left:#?}");
    }
}

/// A resume or a fork past `--max-sessions` is refused (RESOURCE_EXHAUSTED), never
/// over-admitted; the paused session stays in the store and resumes once there is room.
#[tokio::test]
async fn resumes_and_forks_past_the_cap_are_refused_and_lose_nothing() {
    let store = tempfile::tempdir().expect("tmp");
    let ex = executor(store.path(), &["--max-sessions", "2"]).await;
    let mut c = ex.client();
    let a = create(&mut c, "alice", "bash").await;
    sh(&mut c, "alice", &a, "echo kept > a").await;
    pause(&mut c, "alice", &a).await.expect("pause");
    let b = create(&mut c, "alice", "bash").await;
    let d = create(&mut c, "alice", "bash").await;
    let e = resume(&mut c, "alice", &a).await.expect_err("past the cap");
    assert_eq!(e.code(), Code::ResourceExhausted, "{e:?}");
    let e = c
        .fork_session(as_(
            "alice",
            pb::ForkSessionRequest {
                session_id: b.clone(),
                n: 1,
            },
        ))
        .await
        .expect_err("past the cap");
    assert_eq!(e.code(), Code::ResourceExhausted, "{e:?}");
    assert_eq!(ex.metric("sandpool_sessions"), 2.0);
    close(&mut c, "alice", &d).await.expect("close");
    resume(&mut c, "alice", &a).await.expect("room again");
    assert_eq!(sh(&mut c, "alice", &a, "cat a").await, "kept\n");
}

/// The tenant's store quota holds on snapshots and pauses alike: past it they are refused
/// (RESOURCE_EXHAUSTED naming the quota), the session goes on, and nothing is left behind.
#[tokio::test]
async fn snapshots_and_pauses_past_the_tenant_quota_are_refused_and_leave_nothing() {
    let store = tempfile::tempdir().expect("tmp");
    let ex = executor(store.path(), &["--session-store-tenant-bytes", "3000000"]).await;
    let mut c = ex.client();
    let id = create(&mut c, "alice", "bash").await;
    sh(
        &mut c,
        "alice",
        &id,
        "head -c 2000000 /dev/urandom > big && echo kept > a",
    )
    .await;
    let snap = c
        .snapshot_session(as_("alice", pb::SnapshotSessionRequest { session_id: id.clone() }))
        .await
        .expect("the first fits")
        .into_inner();
    let files =
        |s: &std::path::Path| -> Vec<String> { tree(s).into_iter().filter(|l| !l.contains("is_dir: true")).collect() };
    let before = files(store.path());
    let e = c
        .snapshot_session(as_("alice", pb::SnapshotSessionRequest { session_id: id.clone() }))
        .await
        .expect_err("past the quota");
    assert_eq!(e.code(), Code::ResourceExhausted, "{e:?}");
    assert!(e.message().contains("quota"), "{e:?}");
    let e = pause(&mut c, "alice", &id).await.expect_err("past the quota");
    assert_eq!(e.code(), Code::ResourceExhausted, "{e:?}");
    assert_eq!(files(store.path()), before, "a refused put left something");
    assert_eq!(sh(&mut c, "alice", &id, "cat a").await, "kept\n", "the session goes on");
    c.delete_snapshot(as_(
        "alice",
        pb::DeleteSnapshotRequest {
            snapshot_id: snap.snapshot_id,
        },
    ))
    .await
    .expect("delete");
    pause(&mut c, "alice", &id).await.expect("room again");
    resume(&mut c, "alice", &id).await.expect("resume");
    assert_eq!(sh(&mut c, "alice", &id, "cat a").await, "kept\n");
}

/// A resume stuck on its archive (a hung store: here the blob replaced by a fifo no one
/// writes) holds up only its own session: another session's resume goes ahead.
#[tokio::test]
async fn a_stuck_resume_holds_up_no_other_sessions_resume() {
    let store = tempfile::tempdir().expect("tmp");
    let ex = executor(store.path(), &[]).await;
    let mut c = ex.client();
    let a = create(&mut c, "alice", "bash").await;
    let b = create(&mut c, "bob", "bash").await;
    sh(&mut c, "alice", &a, "echo a > f").await;
    sh(&mut c, "bob", &b, "echo b > f").await;
    pause(&mut c, "alice", &a).await.expect("pause a");
    pause(&mut c, "bob", &b).await.expect("pause b");
    let blob = tree(store.path())
        .into_iter()
        .filter_map(|l| l.split(' ').next().map(str::to_owned))
        .find(|p| p.ends_with(&format!("{a}.blob")))
        .expect("a's blob");
    std::fs::remove_file(&blob).expect("rm");
    let made = std::process::Command::new("mkfifo")
        .arg(&blob)
        .status()
        .expect("mkfifo");
    assert!(made.success());
    let mut ca = ex.client();
    let a2 = a.clone();
    let stuck = tokio::spawn(async move { resume(&mut ca, "alice", &a2).await });
    tokio::time::sleep(Duration::from_millis(500)).await;
    let r = tokio::time::timeout(Duration::from_secs(20), resume(&mut c, "bob", &b))
        .await
        .expect("bob's resume waited for alice's stuck one");
    r.expect("bob's resume");
    assert_eq!(sh(&mut c, "bob", &b, "cat f").await, "b\n");
    // Unstick it: the archive ends at once, so alice's resume fails; nothing of it is left live.
    let w = std::fs::OpenOptions::new()
        .write(true)
        .open(&blob)
        .expect("open the fifo");
    drop(w);
    let r = tokio::time::timeout(Duration::from_secs(30), stuck)
        .await
        .expect("alice's resume ends")
        .expect("task");
    assert!(r.is_err(), "{r:?}");
    assert_eq!(ex.metric("sandpool_sessions"), 1.0, "bob's only");
}

/// A path past PATH_MAX (which tar archives but cannot extract) is refused at the pause,
/// naming it, and the session goes on: never a paused session that no resume can restore.
#[tokio::test]
async fn a_path_longer_than_a_resume_can_restore_is_refused_at_the_pause() {
    let store = tempfile::tempdir().expect("tmp");
    let ex = executor(store.path(), &[]).await;
    let mut c = ex.client();
    let id = create(&mut c, "alice", "bash").await;
    // 25 levels of 200 bytes, with a newline in the last name (a line-based check misses it).
    let build = "n=$(printf 'n%.0s' $(seq 1 200)); mkdir deep && cd deep && \
                 for i in $(seq 1 24); do mkdir $n && cd $n; done && mkdir \"$(printf 'a\\nb')\" && \
                 echo bottom > \"$(printf 'a\\nb')/f\" && echo ok";
    assert_eq!(sh(&mut c, "alice", &id, build).await, "ok\n");
    let e = pause(&mut c, "alice", &id).await.expect_err("not restorable");
    assert_eq!(e.code(), Code::ResourceExhausted, "{:.300}", e.message());
    assert!(e.message().contains("longer than"), "{:.300}", e.message());
    assert!(e.message().len() < 1000, "{}", e.message().len());
    assert_eq!(
        sh(&mut c, "alice", &id, "rm -rf deep && echo ok").await,
        "ok\n",
        "still live"
    );
    pause(&mut c, "alice", &id).await.expect("pause once it is gone");
    resume(&mut c, "alice", &id).await.expect("resume");
}

/// A fork and a pause of one session at once: whichever goes first, every session the calls
/// report live is live, no other is, and the live count matches (no seat leaked).
#[tokio::test]
async fn a_fork_racing_a_pause_of_its_session_leaks_nothing() {
    let store = tempfile::tempdir().expect("tmp");
    let ex = executor(store.path(), &[]).await;
    let mut c = ex.client();
    for round in 0..3u64 {
        let id = create(&mut c, "alice", "bash").await;
        sh(
            &mut c,
            "alice",
            &id,
            "head -c 4000000 /dev/urandom > big && echo kept > a",
        )
        .await;
        let (mut c1, mut c2) = (ex.client(), ex.client());
        let id2 = id.clone();
        let (forked, paused) = tokio::join!(
            async move {
                c1.fork_session(as_("alice", pb::ForkSessionRequest { session_id: id2, n: 3 }))
                    .await
                    .map(|r| r.into_inner())
            },
            async {
                tokio::time::sleep(Duration::from_millis(10 * round)).await;
                pause(&mut c2, "alice", &id).await
            }
        );
        let mut live = Vec::new();
        if let Ok(f) = &forked {
            assert_eq!(f.sessions.len(), 3);
            live.extend(f.sessions.iter().map(|s| s.session_id.clone()));
        }
        if paused.is_err() {
            live.push(id.clone());
        }
        assert!(forked.is_ok() || paused.is_ok(), "round {round}: {forked:?} {paused:?}");
        for s in &live {
            assert_eq!(sh(&mut c, "alice", s, "cat a").await, "kept\n", "round {round}");
        }
        assert_eq!(ex.metric("sandpool_sessions"), live.len() as f64, "round {round}");
        for s in live.iter().chain(std::iter::once(&id)) {
            let _ = close(&mut c, "alice", s).await;
        }
        let deadline = Instant::now() + Duration::from_secs(20);
        while ex.metric("sandpool_sessions") != 0.0 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert_eq!(ex.metric("sandpool_sessions"), 0.0, "round {round}: a session leaked");
    }
}

/// A session store that takes connections and never answers (an S3 endpoint gone silent),
/// on loopback: a pause and a resume are refused as retryable (UNAVAILABLE, naming the
/// store) at `--session-store-timeout-ms`, not held for the minutes the S3 client's own
/// retries take; the session whose pause failed goes on, and the executor still serves.
#[tokio::test]
async fn a_hung_store_makes_pauses_and_resumes_retryable_not_stuck() {
    let dir = tempfile::tempdir().expect("tempdir");
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let endpoint = format!("http://{}", l.local_addr().expect("addr"));
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for c in l.incoming().flatten() {
            held.push(c);
        }
    });
    let creds = dir.path().join("creds");
    std::fs::create_dir_all(&creds).expect("creds dir");
    std::fs::write(creds.join("access_key_id"), "k").expect("creds");
    std::fs::write(creds.join("secret_access_key"), "s").expect("creds");
    let key = dir.path().join("key");
    std::fs::write(&key, "11".repeat(32)).expect("key");
    let args: Vec<String> = [
        "--session-store-s3-bucket",
        "b",
        "--session-store-s3-endpoint",
        &endpoint,
        "--session-store-s3-credentials-dir",
        &creds.display().to_string(),
        "--session-store-key-file",
        &key.display().to_string(),
        "--session-store-timeout-ms",
        "1000",
    ]
    .map(str::to_owned)
    .to_vec();
    let exe = sandpool_tests::Executor::start(sandpool_tests::Options {
        slots: 2,
        languages: vec!["python", "bash"],
        extra_args: args,
        isolation: sandpool_tests::Isolation::Namespaces,
        ..Default::default()
    })
    .await;
    let mut c = exe.client();
    let id = create(&mut c, "alice", "bash").await;
    assert_eq!(sh(&mut c, "alice", &id, "echo kept > k.txt; cat k.txt").await, "kept\n");
    let t = Instant::now();
    let e = pause(&mut c, "alice", &id).await.expect_err("paused into a hung store");
    assert_eq!(e.code(), Code::Unavailable, "{e:?}");
    assert!(e.message().contains("session store"), "{e:?}");
    let e = resume(&mut c, "alice", "0123456789abcdef0123456789abcdef-x")
        .await
        .expect_err("resumed from a hung store");
    assert_eq!(e.code(), Code::Unavailable, "{e:?}");
    assert!(t.elapsed() < Duration::from_secs(20), "{:?}", t.elapsed());
    // The session is live, its files kept; the executor serves.
    assert_eq!(sh(&mut c, "alice", &id, "cat k.txt").await, "kept\n");
}

/// Two executors with the same uids, as a pool's pods on one node have: A's session holds
/// processes under its seat's uid while B pauses the session in B's seat of the same uid. The
/// pause's `tar` (4 processes) was held by RLIMIT_NPROC, which counts every task of the uid
/// on the host, A's included: `sh: Cannot fork`, and on the real node a drain lost sessions
/// (3 in one rollout) to the new pods' interpreters. A run's processes are now counted by
/// its cgroup alone; A's session can no more take B's sessions' room than it can take its
/// calls'.
#[tokio::test]
async fn a_pod_sharing_uids_takes_no_process_room_from_another() {
    let dir = tempfile::tempdir().expect("tempdir");
    let uid_base = 100_000 + (std::process::id() % 50) * 4000 + 3_000;
    let start = |store: std::path::PathBuf| {
        sandpool_tests::Executor::start(sandpool_tests::Options {
            slots: 2,
            languages: vec!["python", "bash"],
            extra_args: vec!["--session-store-dir".into(), store.display().to_string()],
            isolation: sandpool_tests::Isolation::Namespaces,
            uid_base: Some(uid_base),
            ..Default::default()
        })
    };
    let a = start(dir.path().join("a")).await;
    let b = start(dir.path().join("b")).await;
    let (mut ca, mut cb) = (a.client(), b.client());
    let busy = create(&mut ca, "alice", "python").await;
    let hog = create(&mut cb, "bob", "bash").await;
    let (ua, ub) = (
        sh(&mut ca, "alice", &busy, "id -u").await,
        sh(&mut cb, "bob", &hog, "id -u").await,
    );
    assert_eq!(ua, ub, "the two seats share a uid");
    // A's session keeps 12 processes running between its calls (a call may start 64 here).
    sh(
        &mut ca,
        "alice",
        &busy,
        "for i in $(seq 12); do setsid sleep 60 < /dev/null > /dev/null 2>&1 & done; echo started",
    )
    .await;
    let running = sh(&mut ca, "alice", &busy, "pgrep -c -x sleep").await;
    assert_eq!(running.trim(), "12", "A's processes outlive its call");
    sh(&mut cb, "bob", &hog, "echo kept > k.txt").await;
    pause(&mut cb, "bob", &hog)
        .await
        .expect("B pauses beside A's processes");
    resume(&mut cb, "bob", &hog).await.expect("resume");
    assert_eq!(sh(&mut cb, "bob", &hog, "cat k.txt").await, "kept\n");
}
