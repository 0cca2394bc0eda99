//! The executor survives what its runs do: memory-cgroup OOM kills hit only
//! the run's own processes, a killed or cancelled run leaves nothing behind in
//! its slot, foreign system-call ABIs are killed, and runs learn nothing of
//! the host (device events, cgroup paths, the work root).

use sandpool_proto::v1 as pb;
use sandpool_tests::{Executor, Options, describe, request, stdout};
use std::time::Duration;

async fn executor(slots: usize) -> Executor {
    Executor::start(Options {
        slots,
        languages: vec!["python", "bash", "c"],
        ..Default::default()
    })
    .await
}

fn with_limits(mut r: pb::ExecuteRequest, l: pb::Limits) -> pb::ExecuteRequest {
    r.limits = Some(l);
    r
}

/// The executor process still exists and answers a plain run correctly.
async fn still_serving(exe: &Executor) {
    let alive = sandpool_tests::signal(exe.pid(), 0);
    assert!(alive, "the executor process died");
    let r = exe.run(request("python", "print('still here')", "")).await;
    assert_eq!(r.verdict, pb::Verdict::Ok as i32, "{}", describe(&r));
    assert_eq!(stdout(&r), "still here\n");
}

/// A run on another slot that must finish untouched while `attack` runs.
fn bystander() -> pb::ExecuteRequest {
    request("python", "import time\ntime.sleep(2)\nprint('bystander done')\n", "")
}

async fn attack_with_bystander(exe: &Executor, attack: pb::ExecuteRequest) -> pb::ExecuteResponse {
    let (a, b) = {
        let (mut c1, mut c2) = (exe.client(), exe.client());
        tokio::join!(c1.execute(attack), c2.execute(bystander()))
    };
    let b = b.expect("the bystander run failed at the gRPC level").into_inner();
    assert_eq!(b.verdict, pb::Verdict::Ok as i32, "bystander: {}", describe(&b));
    assert_eq!(stdout(&b), "bystander done\n");
    a.expect("the attacking run failed at the gRPC level").into_inner()
}

#[tokio::test]
async fn tmpfs_fill_of_work_tmp_and_shm_is_memory_limit_exceeded_and_nothing_else_dies() {
    let exe = executor(2).await;
    for dir in ["/work", "/tmp", "/dev/shm"] {
        // head's few pages make it smaller than anything sharing the executor's memory.
        let code = format!("exec head -c 400M /dev/zero > {dir}/fill\n");
        let attack = with_limits(
            request("bash", &code, ""),
            pb::Limits {
                memory_bytes: 48 << 20,
                wall_time_ms: 20_000,
                ..Default::default()
            },
        );
        let r = attack_with_bystander(&exe, attack).await;
        assert_eq!(
            r.verdict,
            pb::Verdict::MemoryLimitExceeded as i32,
            "{dir}: {}",
            describe(&r)
        );
        still_serving(&exe).await;
    }
}

#[tokio::test]
async fn many_small_processes_over_the_memory_limit_kill_only_the_run() {
    let exe = executor(2).await;
    let code = r#"
pids=""
for i in $(seq 1 40); do
  python3 -c 'import time; b = bytearray(8 << 20); time.sleep(3)' &
  pids="$pids $!"
done
fail=0
for p in $pids; do wait $p || fail=1; done
exit $fail
"#;
    let attack = with_limits(
        request("bash", code, ""),
        pb::Limits {
            memory_bytes: 96 << 20,
            wall_time_ms: 30_000,
            cpu_time_ms: 30_000,
            ..Default::default()
        },
    );
    let r = attack_with_bystander(&exe, attack).await;
    assert_eq!(r.verdict, pb::Verdict::MemoryLimitExceeded as i32, "{}", describe(&r));
    still_serving(&exe).await;
}

#[tokio::test]
async fn a_tiny_memory_limit_is_never_a_sandbox_error_and_kills_nothing_else() {
    let exe = executor(2).await;
    // Python's own memory alone is over the smaller limits; 4 MiB may or may not be enough.
    for bytes in [4u64 << 10, 64 << 10, 1 << 20, 4 << 20] {
        let attack = with_limits(
            request("python", "print('hi')", ""),
            pb::Limits {
                memory_bytes: bytes,
                ..Default::default()
            },
        );
        let (a, b) = {
            let (mut c1, mut c2) = (exe.client(), exe.client());
            tokio::join!(c1.execute(attack), c2.execute(bystander()))
        };
        let b = b.expect("bystander").into_inner();
        assert_eq!(b.verdict, pb::Verdict::Ok as i32, "bystander: {}", describe(&b));
        match a {
            // The request layer may refuse limits too small to start anything.
            Err(s) => {
                assert_eq!(s.code(), tonic::Code::InvalidArgument, "{bytes} bytes: {s:?}");
                assert!(s.message().contains("memory"), "{s:?}");
            }
            Ok(r) => {
                let r = r.into_inner();
                let expected = if bytes <= 1 << 20 {
                    [pb::Verdict::MemoryLimitExceeded; 2]
                } else {
                    [pb::Verdict::MemoryLimitExceeded, pb::Verdict::Ok]
                };
                assert!(
                    expected.iter().any(|v| *v as i32 == r.verdict),
                    "{bytes} bytes: {}",
                    describe(&r)
                );
                assert!(!r.message.contains("/sys/fs/cgroup"), "host path in {:?}", r.message);
            }
        }
        still_serving(&exe).await;
    }
}

/// Python that fills /tmp with 64 MiB, then does `then`.
fn fill_tmp_then(then: &str) -> String {
    format!("with open('/tmp/fill', 'wb') as f:\n    f.write(b'x' * (64 << 20))\nprint('filled', flush=True)\n{then}\n")
}

/// Runs that ask for less memory than the killed run left charged: each must be OK.
async fn slot_is_clean(exe: &Executor) {
    for i in 0..5 {
        let r = exe
            .run(with_limits(
                request("python", "import os\nprint(os.listdir('/tmp'))", ""),
                pb::Limits {
                    memory_bytes: 32 << 20,
                    ..Default::default()
                },
            ))
            .await;
        assert_eq!(r.verdict, pb::Verdict::Ok as i32, "run {i} after: {}", describe(&r));
        assert_eq!(stdout(&r), "[]\n");
    }
}

/// A run's work dir dissolves after the response, off the critical path (docs/performance.md,
/// "Per-run fixed cost"), but before its slot's next run: the 64 MiB a run left in `/work`
/// are neither seen by nor charged to the next run, which asks for 32 MiB.
#[tokio::test]
async fn a_full_work_dir_is_gone_before_the_slots_next_run() {
    let exe = executor(1).await;
    let fill = "with open('/work/fill', 'wb') as f:\n    f.write(b'x' * (64 << 20))\nprint('filled')\n";
    for i in 0..5 {
        let limits = pb::Limits {
            memory_bytes: 256 << 20,
            ..Default::default()
        };
        let r = exe.run(with_limits(request("python", fill, ""), limits)).await;
        assert_eq!(r.verdict, pb::Verdict::Ok as i32, "fill {i}: {}", describe(&r));
        assert_eq!(stdout(&r), "filled\n");
        let small = pb::Limits {
            memory_bytes: 32 << 20,
            ..Default::default()
        };
        let code = "import os\nprint(sorted(os.listdir('/work')))";
        let r = exe.run(with_limits(request("python", code, ""), small)).await;
        assert_eq!(r.verdict, pb::Verdict::Ok as i32, "run {i} after: {}", describe(&r));
        assert_eq!(stdout(&r), "['main.py']\n");
    }
}

#[tokio::test]
async fn a_run_killed_at_its_wall_limit_leaves_its_slot_clean() {
    let exe = executor(1).await;
    let r = exe
        .run(with_limits(
            request("python", &fill_tmp_then("import time\ntime.sleep(60)"), ""),
            pb::Limits {
                wall_time_ms: 3000,
                memory_bytes: 256 << 20,
                ..Default::default()
            },
        ))
        .await;
    assert_eq!(r.verdict, pb::Verdict::WallTimeLimitExceeded as i32, "{}", describe(&r));
    assert_eq!(stdout(&r), "filled\n", "{}", describe(&r));
    slot_is_clean(&exe).await;
}

#[tokio::test]
async fn a_run_killed_at_its_cpu_limit_leaves_its_slot_clean() {
    let exe = executor(1).await;
    let r = exe
        .run(with_limits(
            request("python", &fill_tmp_then("while True:\n    pass"), ""),
            pb::Limits {
                cpu_time_ms: 1500,
                wall_time_ms: 30_000,
                memory_bytes: 256 << 20,
                ..Default::default()
            },
        ))
        .await;
    assert_eq!(r.verdict, pb::Verdict::TimeLimitExceeded as i32, "{}", describe(&r));
    slot_is_clean(&exe).await;
}

#[tokio::test]
async fn a_run_killed_for_its_output_leaves_its_slot_clean() {
    let exe = executor(1).await;
    let r = exe
        .run(with_limits(
            request(
                "python",
                &fill_tmp_then("import sys\nwhile True:\n    sys.stdout.write('x' * 65536)"),
                "",
            ),
            pb::Limits {
                output_bytes: 100_000,
                memory_bytes: 256 << 20,
                ..Default::default()
            },
        ))
        .await;
    assert_eq!(r.verdict, pb::Verdict::OutputLimitExceeded as i32, "{}", describe(&r));
    slot_is_clean(&exe).await;
}

#[tokio::test]
async fn a_cancelled_run_leaves_its_slot_clean() {
    let exe = executor(1).await;
    let req = with_limits(
        request("python", &fill_tmp_then("import time\ntime.sleep(60)"), ""),
        pb::Limits {
            wall_time_ms: 60_000,
            memory_bytes: 256 << 20,
            ..Default::default()
        },
    );
    let mut client = exe.client();
    // Dropping the call mid-run resets the stream: the server drops the run.
    let cut = tokio::time::timeout(Duration::from_secs(4), client.execute(req)).await;
    assert!(cut.is_err(), "the run ended before it was cancelled: {cut:?}");
    slot_is_clean(&exe).await;
}

#[cfg(target_arch = "x86_64")]
#[tokio::test]
async fn x32_and_i386_system_calls_kill_the_program() {
    let exe = executor(1).await;
    for (what, call) in [
        // The x32 ABI: x86_64 numbers with bit 30 set.
        ("x32", "r = syscall(SYS_getpid | 0x40000000);"),
        // The i386 ABI through int 0x80 (getpid is 20 there).
        (
            "i386",
            "__asm__ volatile(\"int $0x80\" : \"=a\"(r) : \"a\"(20L) : \"memory\");",
        ),
    ] {
        let code = format!(
            "#include <stdio.h>\n#include <unistd.h>\n#include <sys/syscall.h>\n\
             int main(void) {{ long r = 0; {call} printf(\"returned %ld\\n\", r); return 0; }}\n"
        );
        let r = exe.run(request("c", &code, "")).await;
        let run = r
            .run
            .as_ref()
            .unwrap_or_else(|| panic!("{what}: no run phase: {}", describe(&r)));
        assert_eq!(run.signal, libc::SIGSYS, "{what}: {}", describe(&r));
        assert_eq!(stdout(&r), "", "{what}: the call returned");
    }
}

#[tokio::test]
async fn runs_see_no_host_device_events_cgroup_paths_or_work_root() {
    let exe = executor(1).await;
    let code = r#"
import socket
try:
    s = socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, 15)  # NETLINK_KOBJECT_UEVENT
    s.bind((0, 1))
    print("uevent socket opened")
except OSError as e:
    print("uevent refused", e.errno)
print(open('/proc/self/cgroup').read(), end='')
print(open('/proc/self/mountinfo').read(), end='')
"#;
    let r = exe.run(request("python", code, "")).await;
    assert_eq!(r.verdict, pb::Verdict::Ok as i32, "{}", describe(&r));
    let out = stdout(&r);
    let mut lines = out.lines();
    assert!(lines.next().is_some_and(|l| l.starts_with("uevent refused")), "{out}");
    let root = exe.work_root.path().to_string_lossy().into_owned();
    assert!(!out.contains(&root), "the work root {root} is visible:\n{out}");
    assert!(!out.contains("sandpool-"), "a host path is visible:\n{out}");
    let cgroups: Vec<&str> = lines
        .take_while(|l| l.split(':').count() == 3 && !l.contains(' '))
        .collect();
    assert!(!cgroups.is_empty(), "no /proc/self/cgroup lines in:\n{out}");
    for line in cgroups {
        assert!(line.ends_with(":/"), "cgroup line {line:?} shows a host path");
    }
}
