//! The executor on a cgroup v2 kernel, in a container as Kubernetes makes one.
//!
//! The machines that run the other tests have cgroup v1; Kubernetes nodes have v2. This test
//! boots a VM (`scripts/cgroup2-vm.sh`: QEMU under software emulation, the host's root shared
//! read-only) whose init starts a container: its own cgroup (the root of a new cgroup
//! namespace), cgroup2 mounted read-only, /sys read-only, the capabilities the operator grants
//! and no_new_privs.
//! In it, [`guest_half`] (this same test binary) starts the real executor and checks, through
//! its gRPC API and the cgroup files, that cgroup v2 limits and accounts every run. The host
//! then checks that no cgroup of the executor's is left in the VM's tree.
//!
//! It fails, never skips, when QEMU, the kernel or busybox is missing (scripts/install-deps.sh
//! installs them). It is slow (a few minutes): one VM, few runs.

use sandpool_proto::v1 as pb;
use sandpool_tests::{Executor, Options, describe, request, stdout};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// Set in the guest: [`guest_half`] refuses to run anywhere else.
const GUEST_ENV: &str = "SANDPOOL_CGROUP2_VM_GUEST";
/// Where the guest sees the writable share (scripts/cgroup2-vm.sh).
const GUEST_OUT: &str = "/run/out";

#[test]
fn executor_confines_and_accounts_runs_with_cgroup_v2_in_a_container() {
    // Kept after the test (and replaced by the next run) for a look at what the guest saw.
    let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("cgroup2-vm");
    let _ = std::fs::remove_dir_all(&out);
    std::fs::create_dir_all(&out).expect("creating the VM's share");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/cgroup2-vm.sh");
    let me = std::env::current_exe().expect("current_exe");
    let executor = sandpool_tests::binary("sandpool-executor");
    let started = Instant::now();
    // The pod's capabilities, exactly as the operator grants them.
    let capabilities = sandpool_operator::build::NAMESPACES_CAPABILITIES
        .map(str::to_lowercase)
        .join(",");
    let status = Command::new(&script)
        .env("SANDPOOL_VM_CAPABILITIES", capabilities)
        .arg(&out)
        .arg("env")
        .arg(format!("{GUEST_ENV}=1"))
        .arg(format!("SANDPOOL_EXECUTOR_BIN={}", executor.display()))
        .arg("RUST_BACKTRACE=1")
        .arg(&me)
        .args(["--exact", "guest_half", "--ignored", "--nocapture", "--test-threads=1"])
        .status()
        .unwrap_or_else(|e| panic!("running {}: {e}", script.display()));
    let read = |name: &str| std::fs::read_to_string(out.join(name)).unwrap_or_default();
    let log = read("command.log");
    eprintln!(
        "--- guest (command.log) ---\n{log}\n--- console (last lines) ---\n{}",
        tail(&read("console.log"), 30)
    );
    eprintln!("VM test took {:.0} s", started.elapsed().as_secs_f64());
    assert!(
        status.success(),
        "{} failed: {status} (its files are in {})",
        script.display(),
        out.display()
    );

    let results: BTreeMap<String, String> = read("results")
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
    eprintln!("results: {results:?}");
    // Zero tests matching the filter would also exit 0: the guest half says it ran to the end.
    assert_eq!(results.get("guest_half").map(String::as_str), Some("done"), "{log}");

    // Seen from the node (the VM's root cgroup), once every process of the container is gone.
    let after = read("cgroups-after");
    assert!(
        after.contains("kubepods/pod-vm/executor\n"),
        "no container cgroup: {after}"
    );
    let ours: Vec<&str> = after
        .lines()
        .filter_map(|l| l.strip_prefix("kubepods/pod-vm/executor/"))
        .collect();
    // The executor's own processes lived in `supervisor` (v2's "no internal processes"
    // rule); it is empty now and goes with the container's cgroup. Nothing else may remain.
    assert!(
        ours.iter().all(|d| *d == "supervisor"),
        "cgroups left after the executor exited: {ours:?}"
    );
}

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// The executor's slot cgroups, as the container sees them.
fn slot_dirs() -> Vec<PathBuf> {
    let mut slots = vec![];
    for base in std::fs::read_dir("/sys/fs/cgroup").expect("/sys/fs/cgroup").flatten() {
        if !base.file_name().to_string_lossy().starts_with("sandpool-") {
            continue;
        }
        for slot in std::fs::read_dir(base.path()).expect("executor cgroup").flatten() {
            if slot.file_name().to_string_lossy().starts_with("slot-") {
                slots.push(slot.path());
            }
        }
    }
    slots.sort();
    slots
}

fn read_u64(path: &Path) -> u64 {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.trim()
        .parse()
        .unwrap_or_else(|_| panic!("{}: {text:?}", path.display()))
}

/// `key value` from a flat-keyed cgroup file.
fn keyed(path: &Path, key: &str) -> u64 {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(' ')?.trim().parse().ok())
        .unwrap_or_else(|| panic!("{}: no {key} in {text:?}", path.display()))
}

/// Sum of one counter over every slot.
fn over_slots(slots: &[PathBuf], f: impl Fn(&Path) -> u64) -> u64 {
    slots.iter().map(|s| f(s)).sum()
}

/// Records a figure for the host half (appended at once: a later failure keeps it).
fn note(key: &str, value: impl std::fmt::Display) {
    use std::io::Write;
    let path = Path::new(GUEST_OUT).join("results");
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    writeln!(f, "{key}={value}").expect("writing results");
}

fn with_limits(mut r: pb::ExecuteRequest, l: pb::Limits) -> pb::ExecuteRequest {
    r.limits = Some(l);
    r
}

fn run(r: &pb::ExecuteResponse) -> &pb::PhaseResult {
    r.run.as_ref().expect("run phase")
}

#[tokio::test]
#[ignore = "the guest half of executor_confines_and_accounts_runs_with_cgroup_v2_in_a_container"]
async fn guest_half() {
    assert!(
        std::env::var_os(GUEST_ENV).is_some(),
        "runs only inside the VM that scripts/cgroup2-vm.sh starts"
    );
    let t = Instant::now();
    let exe = Executor::start(Options {
        slots: 2,
        languages: vec!["python"],
        ..Default::default()
    })
    .await;
    note("executor_start_ms", t.elapsed().as_millis());

    // The capabilities say cgroup v2 is in use, not the rlimit fallback.
    let caps = exe
        .client()
        .get_capabilities(pb::GetCapabilitiesRequest {})
        .await
        .expect("GetCapabilities")
        .into_inner();
    let features = caps.isolation.expect("isolation").features;
    let feature = |name: &str| {
        features
            .iter()
            .find(|f| f.name == name)
            .unwrap_or_else(|| panic!("no {name} in {features:?}"))
    };
    assert!(
        feature("cgroup_v2").available && feature("cgroup_v2").in_use,
        "{features:?}"
    );
    assert!(!feature("cgroup_v1").in_use, "{features:?}");
    let slots = slot_dirs();
    assert_eq!(slots.len(), 2, "slot cgroups: {slots:?}");
    for s in &slots {
        // Only the slot's spawner lives there between runs.
        assert_eq!(read_u64(&s.join("pids.current")), 1, "{}", s.display());
    }

    // A memory hog is killed by the slot's memory cgroup.
    let oom_before = over_slots(&slots, |s| keyed(&s.join("memory.events"), "oom_kill"));
    let hog = "x = []\nwhile True:\n    x.append(bytearray(16 * 1024 * 1024))\n";
    let r = exe
        .run(with_limits(
            request("python", hog, ""),
            pb::Limits {
                memory_bytes: 128 << 20,
                wall_time_ms: 60_000,
                cpu_time_ms: 30_000,
                ..Default::default()
            },
        ))
        .await;
    assert_eq!(r.verdict, pb::Verdict::MemoryLimitExceeded as i32, "{}", describe(&r));
    // Python starts warm (the default) in a pod's capabilities, cgroup v2 and this kernel.
    sandpool_tests::assert_start_variant(&r);
    let oom_after = over_slots(&slots, |s| keyed(&s.join("memory.events"), "oom_kill"));
    assert!(oom_after > oom_before, "no oom_kill in the slots' memory.events");
    let peak = run(&r).peak_memory_bytes;
    note("memory_hog_peak_bytes", peak);
    assert!(
        (100 << 20..=130 << 20).contains(&peak),
        "peak {peak} with a 128 MiB limit"
    );

    // A fork bomb: every process it makes is in the slot's pids cgroup, which it fills up to
    // pids.max, and none is left after the response.
    let bomb = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n";
    let watch = {
        let slots = slots.clone();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = stop.clone();
        let h = std::thread::spawn(move || {
            let mut most = (0, 0);
            while !flag.load(std::sync::atomic::Ordering::Relaxed) {
                for s in &slots {
                    let n = read_u64(&s.join("pids.current"));
                    if n > most.0 {
                        let max = std::fs::read_to_string(s.join("pids.max")).unwrap_or_default();
                        most = (n, max.trim().parse().unwrap_or(u64::MAX));
                    }
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            most
        });
        (stop, h)
    };
    let refused_before = over_slots(&slots, |s| keyed(&s.join("pids.events"), "max"));
    let t = Instant::now();
    let r = exe
        .run(with_limits(
            request("python", bomb, ""),
            pb::Limits {
                wall_time_ms: 5000,
                processes: 32,
                ..Default::default()
            },
        ))
        .await;
    let took = t.elapsed();
    watch.0.store(true, std::sync::atomic::Ordering::Relaxed);
    let (most, max) = watch.1.join().expect("watcher");
    note("fork_bomb_most_pids", most);
    note("fork_bomb_pids_max", max);
    note("fork_bomb_ms", took.as_millis());
    assert_ne!(r.verdict, pb::Verdict::Ok as i32, "{}", describe(&r));
    assert_ne!(r.verdict, pb::Verdict::SandboxError as i32, "{}", describe(&r));
    sandpool_tests::assert_start_variant(&r);
    // pids.max is the run's processes plus the slot's spawner and the run's init.
    assert_eq!(max, 34, "pids.max while the bomb ran");
    assert!((16..=max).contains(&most), "{most} processes seen in the slot");
    // pids.max is the limit (RLIMIT_NPROC is not set where a cgroup is): the forks it
    // refused, recorded.
    let refused = over_slots(&slots, |s| keyed(&s.join("pids.events"), "max")) - refused_before;
    note("fork_bomb_forks_refused_by_pids", refused);
    for s in &slots {
        assert_eq!(read_u64(&s.join("pids.current")), 1, "left in {}", s.display());
    }

    // CPU time comes from the slot's cpu.stat and is plausible.
    let usage = |s: &Path| keyed(&s.join("cpu.stat"), "usage_usec");
    let cpu_before = over_slots(&slots, usage);
    let spin = "import time\nt = time.process_time()\nwhile time.process_time() - t < 1.0:\n    pass\nprint('spun')\n";
    let r = exe
        .run(with_limits(
            request("python", spin, ""),
            pb::Limits {
                wall_time_ms: 60_000,
                cpu_time_ms: 30_000,
                ..Default::default()
            },
        ))
        .await;
    let cgroup_delta = over_slots(&slots, usage) - cpu_before;
    assert_eq!(r.verdict, pb::Verdict::Ok as i32, "{}", describe(&r));
    assert_eq!(stdout(&r), "spun\n");
    sandpool_tests::assert_start_variant(&r);
    let p = run(&r);
    note("spin_cpu_us", p.cpu_time_us);
    note("spin_wall_us", p.wall_time_us);
    note("spin_slot_cpu_delta_us", cgroup_delta);
    note("spin_peak_bytes", p.peak_memory_bytes);
    assert!(p.cpu_time_us >= 1_000_000, "cpu {} us for a 1 s spin", p.cpu_time_us);
    // Two vCPUs: a single-threaded spin cannot use more than its wall time (plus start-up).
    assert!(
        p.cpu_time_us <= p.wall_time_us + 500_000,
        "cpu {} us > wall {} us",
        p.cpu_time_us,
        p.wall_time_us
    );
    assert!(
        p.cpu_time_us <= cgroup_delta + 1 && p.cpu_time_us * 2 >= cgroup_delta,
        "reported {} us, the slots' cpu.stat moved {cgroup_delta} us",
        p.cpu_time_us
    );
    assert!(
        (1 << 20..=100 << 20).contains(&p.peak_memory_bytes),
        "peak {} for an idle interpreter",
        p.peak_memory_bytes
    );

    // The executor exits cleanly and removes its cgroups. (Off the runtime's thread, which
    // must keep serving the client's connection for the server's graceful shutdown.)
    let status = tokio::task::spawn_blocking(move || {
        let mut exe = exe;
        exe.terminate(Duration::from_secs(60))
    })
    .await
    .expect("terminate")
    .expect("executor status");
    assert!(status.success(), "executor exited with {status}");
    let left: Vec<String> = std::fs::read_dir("/sys/fs/cgroup")
        .expect("/sys/fs/cgroup")
        .flatten()
        .filter(|e| e.path().is_dir())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    note("cgroups_left_in_container", left.join(","));
    assert!(
        !left.iter().any(|d| d.starts_with("sandpool-")),
        "left after the executor exited: {left:?}"
    );
    note("guest_half", "done");
}
