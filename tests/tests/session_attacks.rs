//! Attacks on pause, resume, snapshots and forks from hostile code inside a session and from
//! a caller with a token (docs/sessions.md, "What an attacker gets from pause and forks"),
//! against the real executor over loopback: a /work built to break the archive, the
//! caps and the quotas, and races of pause, resume, fork and close.

use sandpool_proto::v1 as pb;
use std::time::{Duration, Instant};
use tonic::Code;

type Client = pb::executor_client::ExecutorClient<tonic::transport::Channel>;

use sandpool_tests::{as_caller as as_, session_executor as executor};

async fn create(c: &mut Client, who: &str, language: &str) -> String {
    c.create_session(as_(
        who,
        pb::CreateSessionRequest {
            language: language.into(),
            ..Default::default()
        },
    ))
    .await
    .expect("create")
    .into_inner()
    .session_id
}

async fn try_sh(c: &mut Client, who: &str, id: &str, cmd: &str) -> Result<pb::RunInSessionResponse, tonic::Status> {
    c.run_in_session(as_(
        who,
        pb::RunInSessionRequest {
            session_id: id.into(),
            input: Some(pb::run_in_session_request::Input::Command(cmd.into())),
            ..Default::default()
        },
    ))
    .await
    .map(|r| r.into_inner())
}

/// The command's stdout, asserting it ran.
async fn sh(c: &mut Client, who: &str, id: &str, cmd: &str) -> String {
    let r = try_sh(c, who, id, cmd).await.expect("run");
    let res = r.result.clone().unwrap_or_default();
    let err = String::from_utf8_lossy(&res.stderr);
    assert_eq!(
        r.verdict,
        pb::Verdict::Ok as i32,
        "{cmd:.200}: exit {}: {:.300}",
        res.exit_code,
        err.chars()
            .rev()
            .take(300)
            .collect::<String>()
            .chars()
            .rev()
            .collect::<String>()
    );
    String::from_utf8_lossy(&res.stdout).into_owned()
}

async fn pause(c: &mut Client, who: &str, id: &str) -> Result<pb::PauseSessionResponse, tonic::Status> {
    c.pause_session(as_(
        who,
        pb::PauseSessionRequest {
            session_id: id.into(),
            mode: pb::PauseMode::Filesystem as i32,
        },
    ))
    .await
    .map(|r| r.into_inner())
}

async fn resume(c: &mut Client, who: &str, id: &str) -> Result<pb::ResumeSessionResponse, tonic::Status> {
    c.resume_session(as_(who, pb::ResumeSessionRequest { session_id: id.into() }))
        .await
        .map(|r| r.into_inner())
}

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
