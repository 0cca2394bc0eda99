//! The gRPC contract around runs: bad input, admission, deadlines,
//! cancellation, draining, compression, health, reflection and metrics.

use sandpool_proto::v1 as pb;
use sandpool_tests::{Executor, Options, describe, request, stdout};
use std::time::{Duration, Instant};
use tonic::Code;
use tonic::codec::CompressionEncoding;

async fn executor() -> Executor {
    Executor::start(Options {
        slots: 2,
        languages: vec!["python", "c"],
        ..Default::default()
    })
    .await
}

fn sleep_req(seconds: f64) -> pb::ExecuteRequest {
    request(
        "python",
        &format!("import time\ntime.sleep({seconds})\nprint('slept')\n"),
        "",
    )
}

#[tokio::test]
async fn unknown_language_is_invalid_argument_listing_known_ones() {
    let exe = executor().await;
    let err = exe
        .client()
        .execute(request("cobol", "DISPLAY 'x'.", ""))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(
        err.message().contains("language") && err.message().contains("cobol"),
        "{}",
        err.message()
    );
    assert!(
        err.message().contains("python") && err.message().contains("c,"),
        "{}",
        err.message()
    );
}

#[tokio::test]
async fn unavailable_language_is_failed_precondition_naming_it() {
    // A table with a language whose toolchain is missing, none named with --enable-languages
    // (naming it would stop the executor at start: `refuses_to_start_when_an_enabled_...`).
    let dir = tempfile::tempdir().unwrap();
    let table = ghost_table(dir.path());
    let exe = Executor::start(Options {
        languages: vec![],
        extra_args: vec!["--languages".into(), table.display().to_string()],
        ..Default::default()
    })
    .await;
    let err = exe.client().execute(request("ghost", "boo", "")).await.unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition);
    assert!(err.message().contains("ghost"), "{}", err.message());
}

#[tokio::test]
async fn paths_outside_the_work_dir_are_invalid_arguments() {
    let exe = executor().await;
    for (path, field) in [
        ("../escape", "files[0].path"),
        ("/etc/passwd", "files[0].path"),
        ("a\0b", "files[0].path"),
        ("", "files[0].path"),
    ] {
        let mut req = request("python", "print(1)", "");
        req.files = vec![pb::File {
            path: path.into(),
            content: b"x".to_vec(),
            executable: false,
        }];
        let err = exe.client().execute(req).await.unwrap_err();
        assert_eq!(err.code(), Code::InvalidArgument, "{path:?}");
        assert!(err.message().contains(field), "{path:?}: {}", err.message());
    }
    // Paths that would only fail while being written (a SANDBOX_ERROR clients retry) are refused up front.
    let long = "x".repeat(256);
    for (paths, field) in [
        (vec!["dir/"], "files[0].path"),
        (vec![long.as_str()], "files[0].path"),
        (vec!["a.txt", "./a.txt"], "files[1].path"),
        (vec!["a", "a/b"], "files[0].path"),
    ] {
        let mut req = request("python", "print(1)", "");
        req.files = paths
            .iter()
            .map(|p| pb::File {
                path: (*p).into(),
                content: b"x".to_vec(),
                executable: false,
            })
            .collect();
        let err = exe.client().execute(req).await.unwrap_err();
        assert_eq!(err.code(), Code::InvalidArgument, "{paths:?}");
        assert!(err.message().contains(field), "{paths:?}: {}", err.message());
    }
    let mut req = request("python", "print(1)", "");
    req.args = vec!["ok".into(), "a\0b".into()];
    let err = exe.client().execute(req).await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(err.message().contains("args[1]"), "{}", err.message());
    let mut req = request("python", "print(1)", "");
    req.fetch_files = vec!["ok.txt".into(), "a/../../etc/shadow".into()];
    let err = exe.client().execute(req).await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(err.message().contains("fetch_files[1]"), "{}", err.message());
}

#[tokio::test]
async fn limits_above_the_ceilings_are_invalid_arguments_naming_the_field() {
    let exe = executor().await;
    let cases = [
        (
            pb::Limits {
                memory_bytes: 1 << 40,
                ..Default::default()
            },
            "limits.memory_bytes",
        ),
        (
            pb::Limits {
                wall_time_ms: 3_600_000,
                ..Default::default()
            },
            "limits.wall_time_ms",
        ),
        (
            pb::Limits {
                processes: 100_000,
                ..Default::default()
            },
            "limits.processes",
        ),
    ];
    for (limits, field) in cases {
        let mut req = request("python", "print(1)", "");
        req.limits = Some(limits);
        let err = exe.client().execute(req).await.unwrap_err();
        assert_eq!(err.code(), Code::InvalidArgument);
        assert!(err.message().contains(field), "{}", err.message());
    }
    let mut req = request("c", "int main(){return 0;}", "");
    req.compile_limits = Some(pb::Limits {
        cpu_time_ms: 10_000_000,
        ..Default::default()
    });
    let err = exe.client().execute(req).await.unwrap_err();
    assert!(
        err.message().contains("compile_limits.cpu_time_ms"),
        "{}",
        err.message()
    );
    // Lowering is always allowed, and files inside the work dir are fine.
    let mut req = request("python", "print(open('data/in.txt').read())", "");
    req.limits = Some(pb::Limits {
        memory_bytes: 64 << 20,
        wall_time_ms: 2000,
        ..Default::default()
    });
    req.files = vec![pb::File {
        path: "data/in.txt".into(),
        content: b"payload".to_vec(),
        executable: false,
    }];
    let r = exe.run(req).await;
    assert_eq!(stdout(&r).trim(), "payload", "{}", describe(&r));
}

#[tokio::test]
async fn oversize_payload_is_resource_exhausted_naming_the_limit() {
    let exe = Executor::start(Options {
        languages: vec!["python"],
        extra_args: vec!["--max-request-bytes".into(), "1048576".into()],
        ..Default::default()
    })
    .await;
    let big = format!("x = '{}'\n", "a".repeat(2 << 20));
    let err = exe.client().execute(request("python", &big, "")).await.unwrap_err();
    assert_eq!(err.code(), Code::ResourceExhausted, "{err:?}");
    assert!(err.message().contains("1048576"), "{}", err.message());
    // The executor is unharmed.
    let r = exe.run(request("python", "print('ok')", "")).await;
    assert_eq!(stdout(&r), "ok\n");
}

#[tokio::test]
async fn gzip_and_zstd_requests_are_accepted() {
    let exe = executor().await;
    let payload = "print(len('".to_owned() + &"z".repeat(100_000) + "'))";
    for enc in [CompressionEncoding::Gzip, CompressionEncoding::Zstd] {
        let mut c = exe.client().send_compressed(enc).accept_compressed(enc);
        let r = c.execute(request("python", &payload, "")).await.unwrap().into_inner();
        assert_eq!(stdout(&r).trim(), "100000", "{enc:?}: {}", describe(&r));
    }
}

#[tokio::test]
async fn full_queue_is_refused_at_once_and_queued_deadline_is_exceeded() {
    let exe = Executor::start(Options {
        slots: 1,
        queue: Some(1),
        languages: vec!["python"],
        ..Default::default()
    })
    .await;
    let mut c1 = exe.client();
    let busy = tokio::spawn(async move { c1.execute(sleep_req(3.0)).await });
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut c2 = exe.client();
    let queued = tokio::spawn(async move { c2.execute(request("python", "print('queued ran')", "")).await });
    tokio::time::sleep(Duration::from_millis(300)).await;

    let err = exe
        .client()
        .execute(request("python", "print(1)", ""))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::ResourceExhausted, "{err:?}");
    assert!(
        !busy.is_finished(),
        "the refusal must come while the slot is still busy"
    );

    let r = busy.await.unwrap().unwrap().into_inner();
    assert_eq!(stdout(&r), "slept\n");
    let r = queued.await.unwrap().unwrap().into_inner();
    assert_eq!(stdout(&r), "queued ran\n");

    // A deadline reached while queued: DEADLINE_EXCEEDED, and the program never runs.
    let mut c1 = exe.client();
    let busy = tokio::spawn(async move { c1.execute(sleep_req(3.0)).await });
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut req = tonic::Request::new(request("python", "open('/work/x','w')\nprint('ran')", ""));
    req.set_timeout(Duration::from_millis(1000));
    let t = Instant::now();
    let err = exe.client().execute(req).await.unwrap_err();
    assert_eq!(err.code(), Code::DeadlineExceeded, "{err:?}");
    assert!(t.elapsed() < Duration::from_millis(1500), "{:?}", t.elapsed());
    assert!(!busy.is_finished());
    busy.await.unwrap().unwrap();
}

#[tokio::test]
async fn a_cancelled_call_kills_its_run() {
    let exe = Executor::start(Options {
        slots: 1,
        languages: vec!["python"],
        ..Default::default()
    })
    .await;
    let mut req = tonic::Request::new(sleep_req(30.0));
    req.set_timeout(Duration::from_millis(800));
    let err = exe.client().execute(req).await.unwrap_err();
    assert!(
        matches!(err.code(), Code::DeadlineExceeded | Code::Cancelled),
        "{err:?}"
    );
    // The only slot is free again long before the 30 s sleep would end.
    let t = Instant::now();
    let r = exe.run(request("python", "print('free')", "")).await;
    assert_eq!(stdout(&r), "free\n");
    assert!(t.elapsed() < Duration::from_secs(5), "slot was held {:?}", t.elapsed());
}

#[tokio::test]
async fn sigterm_drains_in_flight_runs_then_exits() {
    let mut exe = Executor::start(Options {
        slots: 1,
        languages: vec!["python"],
        ..Default::default()
    })
    .await;
    let mut c = exe.client();
    let inflight = tokio::spawn(async move { c.execute(sleep_req(2.0)).await });
    tokio::time::sleep(Duration::from_millis(500)).await;
    let pid = exe.pid() as i32;
    sandpool_tests::signal(pid as u32, libc::SIGTERM);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut health = tonic_health::pb::health_client::HealthClient::new(exe.channel.clone());
    let st = health
        .check(tonic_health::pb::HealthCheckRequest { service: String::new() })
        .await;
    if let Ok(st) = st {
        assert_eq!(
            st.into_inner().status,
            tonic_health::pb::health_check_response::ServingStatus::NotServing as i32
        );
    }
    let r = inflight.await.unwrap().expect("in-flight run finishes").into_inner();
    assert_eq!(stdout(&r), "slept\n", "{}", describe(&r));
    let status = exe.terminate(Duration::from_secs(10)).expect("exited");
    assert!(status.success(), "{status:?}");
}

#[tokio::test]
async fn capabilities_health_reflection_and_metrics() {
    let exe = executor().await;
    let caps = exe.capabilities().await;
    let py = caps.languages.iter().find(|l| l.name == "python").unwrap();
    assert!(py.available && py.version.starts_with("Python 3"), "{py:?}");
    assert_eq!(caps.slots, 2);
    assert_eq!(caps.default_limits.unwrap().wall_time_ms, 10_000);
    assert_eq!(caps.default_limits.unwrap().memory_bytes, 512 << 20);
    let iso = caps.isolation.unwrap();
    assert_eq!(iso.mode, "namespaces");
    // The network is kept off by a namespace per run, or (Landlock ABI >= 6) by the seccomp
    // filter and Landlock scoping: the features in use say which.
    let net = match iso.network.as_str() {
        "namespace" => "net_namespace",
        "seccomp" => "landlock",
        other => panic!("isolation.network {other:?}"),
    };
    for f in ["pid_namespace", net, "mount_namespace", "seccomp"] {
        assert!(
            iso.features.iter().any(|x| x.name == f && x.in_use),
            "{f} not in use: {:?}",
            iso.features
        );
    }
    let r = exe.run(request("python", "print(1)", "")).await;
    let info = r.executor.unwrap();
    assert_eq!(info.isolation, "namespaces");
    assert!(info.toolchain.starts_with("Python 3"));
    assert!(!info.name.is_empty() && !info.version.is_empty());

    let mut health = tonic_health::pb::health_client::HealthClient::new(exe.channel.clone());
    for svc in ["", "sandpool.v1.Executor", "liveness"] {
        let st = health
            .check(tonic_health::pb::HealthCheckRequest { service: svc.into() })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(
            st.status,
            tonic_health::pb::health_check_response::ServingStatus::Serving as i32,
            "{svc}"
        );
    }

    // Both reflection versions, so that every grpcurl works; same messages, distinct packages.
    macro_rules! lists_our_service {
        ($v:ident) => {{
            use tonic_reflection::pb::$v;
            let req = $v::ServerReflectionRequest {
                host: String::new(),
                message_request: Some($v::server_reflection_request::MessageRequest::ListServices(
                    String::new(),
                )),
            };
            let mut stream = $v::server_reflection_client::ServerReflectionClient::new(exe.channel.clone())
                .server_reflection_info(tokio_stream::iter(vec![req]))
                .await
                .unwrap()
                .into_inner();
            let msg = stream.message().await.unwrap().unwrap();
            assert!(
                format!("{msg:?}").contains("sandpool.v1.Executor"),
                "{}: {msg:?}",
                stringify!($v)
            );
        }};
    }
    lists_our_service!(v1);
    lists_our_service!(v1alpha);

    let body = http_get(&exe.metrics_addr, "/metrics").await;
    assert!(
        body.contains("sandpool_runs_total{language=\"python\",verdict=\"OK\"}"),
        "{body}"
    );
    assert!(body.contains("sandpool_phase_duration_seconds_bucket{le="), "{body}");
    assert!(
        body.contains("phase=\"queue\"") && body.contains("phase=\"run\""),
        "{body}"
    );
    assert!(
        body.contains("sandpool_busy_slots") && body.contains("sandpool_queue_length"),
        "{body}"
    );
}

/// A minimal HTTP/1.1 GET over loopback.
async fn http_get(addr: &str, path: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    out
}

/// Starts the executor as a Pod Security `restricted` pod would be started
/// (non-root uid, no capabilities, the runtime-default stand-in filter) and
/// returns its stderr, expecting it to refuse to start.
fn refused_start(mode: &str, env: &[(&str, &str)], writable_work_root: bool) -> String {
    let work_root = tempfile::tempdir().unwrap();
    if writable_work_root {
        std::os::unix::fs::chown(work_root.path(), Some(65534), Some(65534)).unwrap();
    }
    let out = std::process::Command::new(sandpool_tests::binary("sandpool-pod-seccomp"))
        .args(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"])
        .args(["--inh-caps=-all", "--bounding-set=-all", "--no-new-privs", "--"])
        .arg(sandpool_tests::binary("sandpool-executor"))
        .args(["--isolation", mode, "--listen", "127.0.0.1:0", "--work-root"])
        .arg(work_root.path().join("w"))
        .envs(env.iter().copied())
        .output()
        .unwrap();
    assert!(!out.status.success());
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn refuses_to_start_when_the_isolation_mode_cannot_be_had() {
    // Namespaces mode in an unprivileged pod.
    let err = refused_start("namespaces", &[], true);
    assert!(err.contains("namespaces") && err.contains("not available"), "{err}");
    assert!(
        err.contains("pid_namespace") && err.contains("--isolation restricted"),
        "{err}"
    );
    // Restricted mode where the runtime's profile predates Landlock.
    let err = refused_start("restricted", &[("SANDPOOL_POD_SECCOMP_NO_LANDLOCK", "1")], true);
    assert!(err.contains("restricted") && err.contains("not available"), "{err}");
    assert!(
        err.contains("Landlock is not available") && err.contains("seccomp profile"),
        "{err}"
    );
    // Restricted mode with a work root its uid cannot write.
    let err = refused_start("restricted", &[], false);
    assert!(err.contains("must be a directory uid 65534 can write"), "{err}");
}

#[tokio::test]
async fn gpu_languages_get_the_gpu_only_on_gpu_machines() {
    if !std::path::Path::new("/dev/nvidia0").exists() {
        println!("skipped: no /dev/nvidia0 on this machine, so the GPU pass-through cannot be tested here");
        return;
    }
    let exe = Executor::start(Options {
        languages: vec!["python", "python_gpu"],
        extra_args: vec!["--gpu".into()],
        ..Default::default()
    })
    .await;
    let code = "import os\nprint(os.path.exists('/dev/nvidia0'), os.environ.get('CUDA_VISIBLE_DEVICES'))\n";
    let r = exe.run(request("python_gpu", code, "")).await;
    assert!(stdout(&r).starts_with("True"), "{}", describe(&r));
    let r = exe.run(request("python", code, "")).await;
    assert_eq!(stdout(&r).trim(), "False None", "{}", describe(&r));
}

/// A pool's `spec.languages` becomes `--enable-languages`: a name the table lacks, or a language
/// whose toolchain the image does not have, stops the executor with a message naming it (the
/// termination message a crash-looping pod shows), rather than a Ready pool that refuses it.
#[test]
fn refuses_to_start_when_an_enabled_language_cannot_run() {
    let dir = tempfile::tempdir().unwrap();
    let table = ghost_table(dir.path());
    let start = |enable: &str| {
        // Under `timeout`: an executor that starts anyway would serve until killed.
        std::process::Command::new("timeout")
            .arg("60")
            .arg(sandpool_tests::binary("sandpool-executor"))
            .args(["--listen", "127.0.0.1:0", "--work-root"])
            .arg(dir.path().join("w"))
            .arg("--languages")
            .arg(&table)
            .args(["--enable-languages", enable])
            .env("SANDPOOL_SLOTS", "1")
            .output()
            .unwrap()
    };
    for (enable, says) in [
        ("bash,ghost", "ghost: "),
        ("bash,cobol", "cobol: not in the language table"),
    ] {
        let out = start(enable);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "--enable-languages {enable} started: {err}");
        assert!(
            err.contains("--enable-languages names languages this executor cannot run") && err.contains(says),
            "{err}"
        );
        assert!(!err.contains("bash:"), "bash works and is not named: {err}");
    }
}

/// A language table of bash and `ghost`, a language whose toolchain is missing everywhere.
fn ghost_table(dir: &std::path::Path) -> std::path::PathBuf {
    let table = dir.join("languages.toml");
    std::fs::write(
        &table,
        "[bash]\nsource = \"main.sh\"\nrun = [\"bash\", \"main.sh\"]\nversion = [\"bash\", \"--version\"]\n\n\
         [ghost]\nsource = \"main.gh\"\nrun = [\"/nonexistent/ghost\", \"main.gh\"]\nversion = [\"/nonexistent/ghost\", \"--version\"]\n",
    )
    .unwrap();
    table
}
