//! The executor's work root as a pod gives it, and as a second executor
//! would find it (issue 24 item 0's cause; the crash-loop of `notes/real-node.md`).

use sandpool_tests::{Executor, Isolation, Options, binary, describe, free_port, request, verdict};
use std::time::{Duration, Instant};

async fn runs_ok(ex: &Executor, n: usize) {
    for i in 0..n {
        let r = tokio::time::timeout(
            Duration::from_secs(60),
            ex.client().execute(request("python", &format!("print({i})"), "")),
        )
        .await
        .expect("answered within 60 s")
        .expect("Execute")
        .into_inner();
        assert_eq!(verdict(r.verdict), "OK", "{}", describe(&r));
    }
}

/// A pod's filesystem: `/` read-only, the work root a volume (emptyDir) of its own, and a
/// writable temporary directory (a pod's `/tmp` emptyDir; here inside that volume, since
/// mounting over `/tmp` would hide a checkout that lives there).
const POD_LIKE: &str = r#"
mkdir -p "$WORK_ROOT"
mount -t tmpfs -o size=256m,mode=0755 emptydir "$WORK_ROOT"
mkdir -p "$WORK_ROOT/.tmp" && export TMPDIR="$WORK_ROOT/.tmp"
mount -o remount,bind,ro /
"#;

#[tokio::test]
async fn the_work_root_may_be_a_mount_point_under_a_read_only_root() {
    for isolation in Isolation::ALL {
        if isolation == Isolation::Restricted {
            // Restricted executors run unprivileged: they cannot make the mount namespace
            // themselves, and mount nothing at the work root either.
            continue;
        }
        let ex = Executor::start(Options {
            slots: 2,
            languages: vec!["python", "c"],
            isolation,
            mount_setup: Some(POD_LIKE.into()),
            ..Default::default()
        })
        .await;
        runs_ok(&ex, 4).await;
        let r = ex
            .run(request("c", "#include <stdio.h>\nint main(){puts(\"built\");}", ""))
            .await;
        assert_eq!(verdict(r.verdict), "OK", "{}", describe(&r));
        // The executor's volume is still mounted in its namespace, and still its work root.
        let mountinfo = std::fs::read_to_string(format!("/proc/{}/mountinfo", ex.pid())).expect("mountinfo");
        let root = ex.work_root.path().display().to_string();
        assert!(
            mountinfo
                .lines()
                .any(|l| l.split_whitespace().nth(4) == Some(root.as_str()) && l.contains("emptydir")),
            "the work root's own mount is kept:\n{mountinfo}"
        );
    }
}

#[tokio::test]
async fn a_second_executor_on_a_live_work_root_is_refused_and_the_first_keeps_serving() {
    for isolation in Isolation::ALL {
        let ex = Executor::start(Options {
            slots: 2,
            languages: vec!["python"],
            isolation,
            ..Default::default()
        })
        .await;
        runs_ok(&ex, 2).await;
        // Started as the first one was (same privileges), on the same root.
        let mut cmd = match isolation {
            Isolation::Namespaces => std::process::Command::new(binary("sandpool-executor")),
            Isolation::Restricted => {
                let uid = ex.uid_base.to_string();
                let mut c = std::process::Command::new("setpriv");
                c.args([
                    format!("--reuid={uid}"),
                    format!("--regid={uid}"),
                    "--clear-groups".into(),
                    "--".into(),
                ])
                .arg(binary("sandpool-executor"))
                .args(["--isolation", "restricted"]);
                c
            }
        };
        let mut second = cmd
            .arg("--listen")
            .arg(format!("127.0.0.1:{}", free_port()))
            .arg("--work-root")
            .arg(ex.work_root.path())
            .arg("--uid-base")
            .arg(ex.uid_base.to_string())
            .args(["--slots", "2", "--enable-languages", "python"])
            .env("SANDPOOL_LOG_JSON", "false")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("second executor");
        let t = Instant::now();
        let status = loop {
            if let Some(s) = second.try_wait().expect("try_wait") {
                break s;
            }
            if t.elapsed() > Duration::from_secs(20) {
                let _ = second.kill();
                let _ = second.wait();
                panic!("a second executor started on a live work root");
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        let out = second.wait_with_output().expect("stderr");
        assert!(!status.success(), "refused to start: {status}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("in use by another executor") && stderr.contains(&format!("pid {}", ex.pid())),
            "says why and who: {stderr}"
        );
        // Not a terminal (a pod's log, a termination message's tail): no colour codes.
        assert!(!stderr.contains('\x1b'), "ANSI escapes in a piped log: {stderr:?}");
        assert!(t.elapsed() < Duration::from_secs(5));
        runs_ok(&ex, 6).await;
    }
}
