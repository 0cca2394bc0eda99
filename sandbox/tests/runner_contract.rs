//! The [`Runner`] contract, without gRPC: what every runner promises the
//! engine and the judge, checked against each mode directly.
//!
//! The suite is written once ([`contract`]) and instantiated per runner at
//! the bottom: `namespaces` and `restricted` run real programs (as root, as
//! the executor does: python3 and coreutils must be installed), and the
//! scripted `fake` runner (feature `testing`) is held to the part of the
//! contract it can honour, the plumbing (output, stdin, files both ways,
//! fresh work dirs, slots), so that unit tests written against it hold for
//! the real modes too.

use sandpool_sandbox::testing::{Call, FakeRunner, Reply};
use sandpool_sandbox::{
    DEFAULT_RO_PATHS, IsolationMode, Limits, PATH, RunOutcome, RunSpec, Runner, SandboxConfig, SandboxError,
    Termination, WorkDir,
};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// A runner under test and what it needs kept alive.
struct Harness {
    // Dropped before the work root it uses.
    runner: Box<dyn Runner>,
    work_root: Option<tempfile::TempDir>,
    /// What the tests' identity 0 is: slot 0, or the first session seat.
    base: usize,
}

static INSTANCE: AtomicU32 = AtomicU32::new(0);

impl Harness {
    /// A real runner of `mode` over a work root of its own.
    fn real(mode: IsolationMode) -> Harness {
        assert!(
            nix::unistd::geteuid().is_root(),
            "the Runner contract suite runs programs in real sandboxes: run it as root"
        );
        let n = INSTANCE.fetch_add(1, Ordering::SeqCst);
        // Distinct uids per runner (RLIMIT_NPROC counts per uid), apart from the e2e tests' 63000+.
        let uid_base = 71000 + (std::process::id() % 50) * 400 + n * 20;
        // Not under /tmp: the restricted mode rewrites `/tmp` in commands, and
        // a test that names the work root must name it as it is.
        let work_root = tempfile::Builder::new()
            .prefix("sandpool-contract-")
            .tempdir_in("/var/tmp")
            .expect("tempdir");
        let cfg = SandboxConfig {
            mode,
            network: sandpool_sandbox::NetworkIsolation::Auto,
            work_root: work_root.path().to_owned(),
            ro_paths: DEFAULT_RO_PATHS.iter().map(Into::into).collect(),
            slots: 2,
            seats: 2,
            uid_base,
            gpu_devices: vec![],
            seat_memory: None,
            work_dir_bytes: 64 << 20,
            tmp_bytes: 64 << 20,
            shared_dir: None,
        };
        let runner = sandpool_sandbox::open(cfg).unwrap_or_else(|e| panic!("opening {mode}: {e}"));
        assert_eq!(runner.mode(), mode);
        Harness {
            runner,
            work_root: Some(work_root),
            base: 0,
        }
    }

    /// The scripted runner, answering the suite's programs as a real one would.
    fn fake() -> Harness {
        let (runner, _calls) = FakeRunner::new(2, emulate);
        Harness {
            runner: Box::new(runner),
            work_root: None,
            base: 0,
        }
    }

    /// A namespaces runner whose tests run in its session seats instead of its slots.
    fn seats() -> Harness {
        let mut h = Harness::real(IsolationMode::Namespaces);
        assert_eq!(h.runner.seats(), 2);
        h.base = h.runner.slots();
        h
    }

    fn work_dir(&self, slot: usize) -> WorkDir {
        self.runner.work_dir(self.base + slot).expect("work dir")
    }

    async fn run(&self, slot: usize, work: &WorkDir, spec: &RunSpec) -> Result<RunOutcome, SandboxError> {
        self.runner.run(self.base + slot, work, spec).await
    }

    /// Runs `spec` in a fresh work dir of slot 0, expecting an outcome.
    async fn run_fresh(&self, spec: &RunSpec) -> RunOutcome {
        let work = self.work_dir(0);
        self.run(0, &work, spec).await.expect("run")
    }
}

/// Limits roomy enough for every program of the suite.
fn limits() -> Limits {
    Limits {
        wall: Duration::from_secs(20),
        cpu: Duration::from_secs(20),
        memory: 256 << 20,
        output: 1 << 20,
        processes: 64,
        file_size: 16 << 20,
    }
}

fn spec(argv: &[&str]) -> RunSpec {
    RunSpec {
        argv: argv.iter().map(|a| a.to_string()).collect(),
        env: vec![("PATH".into(), PATH.into())],
        stdin: vec![],
        limits: limits(),
        gpu: false,
        warm: None,
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

const OUT_ERR_EXIT: &str = "echo out; echo err >&2; exit 3";

/// The fake's answers to the programs of the plumbing tests, as coreutils give them.
fn emulate(call: &Call) -> Reply {
    let argv: Vec<&str> = call.argv.iter().map(String::as_str).collect();
    match argv.as_slice() {
        ["sh", "-c", OUT_ERR_EXIT] => Reply::exit(3, "out\n", "err\n"),
        ["cat"] => Reply::ok(call.stdin.clone()),
        ["cat", file] => match call.files.get(*file) {
            Some(content) => Reply::ok(content.clone()),
            None => Reply::exit(1, "", format!("cat: {file}: No such file or directory\n")),
        },
        ["cp", from, to] => Reply::ok("").writing(to, call.file(from)),
        ["ls", "-A"] => Reply::ok(call.files.keys().map(|f| format!("{f}\n")).collect::<String>()),
        _ => Reply::sandbox_error("the fake runner does not know this program"),
    }
}

/// A number no other process on the machine has in its command line: what
/// the suite's `sleep`s are told to sleep, to be found in /proc afterwards.
fn marker() -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    format!("300.{}{:04}", std::process::id(), N.fetch_add(1, Ordering::SeqCst))
}

/// Live processes whose command line holds `marker`.
fn processes_with(marker: &str) -> Vec<String> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return vec![];
    };
    dir.flatten()
        .filter(|e| {
            e.file_name()
                .to_str()
                .is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit()))
        })
        .filter_map(|e| {
            let cmd = std::fs::read(e.path().join("cmdline")).ok()?;
            let cmd = text(&cmd).replace('\0', " ");
            cmd.contains(marker)
                .then(|| format!("{}: {cmd}", e.file_name().to_string_lossy()))
        })
        .collect()
}

/// The contract, one function per promise.
mod contract {
    use super::*;

    /// A program runs; its stdout, stderr and exit code come back.
    pub async fn runs_a_program_and_returns_its_output_and_exit_code(h: &Harness) {
        let o = h.run_fresh(&spec(&["sh", "-c", OUT_ERR_EXIT])).await;
        assert_eq!((text(&o.stdout), text(&o.stderr)), ("out\n".into(), "err\n".into()));
        assert_eq!((o.exit_code, o.signal, o.killed_by), (3, 0, None), "{o:?}");
        assert!(!o.stdout_truncated && !o.stderr_truncated && !o.oom_killed, "{o:?}");
    }

    /// The spec's stdin is the program's.
    pub async fn stdin_reaches_the_program(h: &Harness) {
        let mut s = spec(&["cat"]);
        s.stdin = b"one\ntwo\n".to_vec();
        let o = h.run_fresh(&s).await;
        assert_eq!(text(&o.stdout), "one\ntwo\n");
        assert_eq!(o.exit_code, 0);
    }

    /// Files written into the work dir are the program's (it starts there),
    /// and what it writes there is read back afterwards.
    pub async fn files_pass_through_the_work_dir_both_ways(h: &Harness) {
        let work = h.work_dir(0);
        work.write_file("in.txt", b"payload\n", false).expect("write");
        let o = h.run(0, &work, &spec(&["cp", "in.txt", "out.txt"])).await.expect("run");
        assert_eq!(o.exit_code, 0, "{o:?}");
        assert_eq!(work.read_file("out.txt", 100).expect("read back"), b"payload\n");
        let o = h.run(0, &work, &spec(&["cat", "out.txt"])).await.expect("run");
        assert_eq!(text(&o.stdout), "payload\n", "a later run of the same work dir sees it");
    }

    /// Every work dir starts empty, whatever another one of its slot holds.
    pub async fn each_work_dir_starts_empty(h: &Harness) {
        let first = h.work_dir(0);
        first.write_file("left.txt", b"x", false).expect("write");
        let o = h.run(0, &first, &spec(&["ls", "-A"])).await.expect("run");
        assert_eq!(text(&o.stdout), "left.txt\n");
        let second = h.work_dir(0);
        let o = h.run(0, &second, &spec(&["ls", "-A"])).await.expect("run");
        assert_eq!(text(&o.stdout), "", "a fresh work dir saw another's files");
        drop(first);
        let third = h.work_dir(0);
        let o = h.run(0, &third, &spec(&["ls", "-A"])).await.expect("run");
        assert_eq!(text(&o.stdout), "");
    }

    /// A work dir on the host is gone once dropped.
    pub async fn a_dropped_work_dir_is_removed(h: &Harness) {
        let work = h.work_dir(1);
        work.write_file("a/b.txt", b"x", false).expect("write");
        let _ = h.run(1, &work, &spec(&["ls", "-A"])).await.expect("run");
        let path = work.host_path().map(ToOwned::to_owned);
        drop(work);
        if let Some(p) = path {
            assert!(!p.exists(), "{} is left", p.display());
        }
    }

    /// Slots run side by side.
    pub async fn slots_run_side_by_side(h: &Harness) {
        let (w0, w1) = (h.work_dir(0), h.work_dir(1));
        let (mut s0, mut s1) = (spec(&["cat"]), spec(&["cat"]));
        s0.stdin = b"zero".to_vec();
        s1.stdin = b"one".to_vec();
        let (a, b) = tokio::join!(h.run(0, &w0, &s0), h.run(1, &w1, &s1));
        assert_eq!(text(&a.expect("slot 0").stdout), "zero");
        assert_eq!(text(&b.expect("slot 1").stdout), "one");
    }

    /// A bare name is looked up in the sandbox's PATH, and the environment is
    /// the spec's, nothing of the executor's.
    pub async fn the_environment_is_exactly_the_specs(h: &Harness) {
        let mut s = spec(&["env"]);
        s.env.push(("ONLY".into(), "this".into()));
        let o = h.run_fresh(&s).await;
        let mut lines: Vec<String> = text(&o.stdout).lines().map(str::to_owned).collect();
        lines.sort();
        assert_eq!(lines, vec!["ONLY=this".to_string(), format!("PATH={PATH}")]);
    }

    /// Programs run as their slot's uid, which owns the work dir: never root.
    pub async fn runs_as_the_slots_uid_which_owns_the_work_dir(h: &Harness) {
        let o = h.run_fresh(&spec(&["sh", "-c", "id -u; stat -c %u ."])).await;
        let ids: Vec<&str> = std::str::from_utf8(&o.stdout).expect("utf8").lines().collect();
        assert_eq!(ids.len(), 2, "{o:?}");
        assert_eq!(ids[0], ids[1], "the work dir is not the run's");
        assert_ne!(ids[0], "0", "runs as root");
    }

    /// A run sees its own cgroup as the root: no host cgroup path (the executor's, the
    /// slot's name) shows in `/proc/self/cgroup`, and the run is in a cgroup of its
    /// own, not the executor's (its memory is counted there: see the memory limit test).
    pub async fn the_run_sees_no_host_cgroup_path(h: &Harness) {
        let o = h.run_fresh(&spec(&["cat", "/proc/self/cgroup"])).await;
        let text = text(&o.stdout);
        assert_eq!(o.exit_code, 0, "{o:?}");
        for line in text.lines() {
            let path = line.splitn(3, ':').nth(2).unwrap_or("?");
            assert_eq!(path, "/", "{text}");
        }
        assert!(!text.contains("sandpool"), "{text}");
    }

    /// The wall-time limit ends a run that outlasts it.
    pub async fn the_wall_limit_ends_a_run(h: &Harness) {
        let mut s = spec(&["sleep", "30"]);
        s.limits.wall = Duration::from_secs(1);
        let o = h.run_fresh(&s).await;
        assert_eq!(o.killed_by, Some(Termination::WallTime), "{o:?}");
        assert_eq!(o.signal, libc::SIGKILL);
        assert!(
            o.wall >= Duration::from_secs(1) && o.wall < Duration::from_secs(10),
            "{o:?}"
        );
    }

    /// The CPU-time limit ends a busy run before its wall limit.
    pub async fn the_cpu_limit_ends_a_busy_run(h: &Harness) {
        let mut s = spec(&["sh", "-c", "while :; do :; done"]);
        s.limits.cpu = Duration::from_secs(1);
        // Far off, so that a loaded machine's slow second of CPU is still no wall-time kill.
        s.limits.wall = Duration::from_secs(120);
        let o = h.run_fresh(&s).await;
        assert!(o.cpu_exceeded, "{o:?}");
        assert_ne!(o.signal, 0, "{o:?}");
        assert_ne!(o.killed_by, Some(Termination::WallTime), "{o:?}");
    }

    /// A run that grows past its memory limit is reported as out of memory.
    pub async fn the_memory_limit_ends_a_run_that_grows_past_it(h: &Harness) {
        let grow = "x = []\nwhile True:\n    x.append(b'\\x01' * (1 << 20))\n";
        let mut s = spec(&["python3", "-c", grow]);
        s.limits.memory = 128 << 20;
        let o = h.run_fresh(&s).await;
        assert!(o.oom_killed, "{o:?}");
        assert!(o.exit_code != 0 || o.signal != 0, "{o:?}");
        assert_eq!(o.killed_by, None, "no other limit is at work: {o:?}");
    }

    /// Output past its cap is cut at the cap, and ends a run that keeps writing.
    pub async fn stdout_past_its_cap_is_cut_and_ends_the_run(h: &Harness) {
        let mut s = spec(&["yes"]);
        s.limits.output = 4096;
        let o = h.run_fresh(&s).await;
        assert_eq!(o.stdout.len(), 4096);
        assert!(o.stdout_truncated && !o.stderr_truncated, "{o:?}");
        assert_eq!(o.killed_by, Some(Termination::Output));
        assert!(o.wall < Duration::from_secs(10), "{o:?}");
    }

    /// Each stream has the cap of its own.
    pub async fn stderr_has_a_cap_of_its_own(h: &Harness) {
        let mut s = spec(&["sh", "-c", "echo fine; yes >&2"]);
        s.limits.output = 4096;
        let o = h.run_fresh(&s).await;
        assert_eq!(text(&o.stdout), "fine\n");
        assert_eq!(o.stderr.len(), 4096);
        assert!(o.stderr_truncated && !o.stdout_truncated, "{o:?}");
        assert_eq!(o.killed_by, Some(Termination::Output));
    }

    /// `/tmp` is each run's own.
    pub async fn tmp_is_private_to_each_run(h: &Harness) {
        let o = h
            .run_fresh(&spec(&["sh", "-c", "echo secret > /tmp/leak && cat /tmp/leak"]))
            .await;
        assert_eq!(text(&o.stdout), "secret\n", "{o:?}");
        let o = h.run_fresh(&spec(&["sh", "-c", "cat /tmp/leak"])).await;
        assert_ne!(o.exit_code, 0, "{o:?}");
        assert_eq!(text(&o.stdout), "");
    }

    /// A run reaches neither another live run's work dir nor the work root.
    pub async fn other_work_dirs_and_the_work_root_are_out_of_reach(h: &Harness) {
        let theirs = h.work_dir(0);
        theirs.write_file("secret.txt", b"TOPSECRET", false).expect("write");
        let mine = h.work_dir(1);
        let root = h
            .work_root
            .as_ref()
            .expect("a real runner")
            .path()
            .display()
            .to_string();
        let mut script = format!("cat /work/secret.txt; ls -R {root}; cat $(find {root} -name secret.txt)");
        if let Some(p) = theirs.host_path() {
            script.push_str(&format!("; cat {}/secret.txt", p.display()));
        }
        let o = h.run(1, &mine, &spec(&["sh", "-c", &script])).await.expect("run");
        let all = text(&o.stdout) + &text(&o.stderr);
        assert!(!all.contains("TOPSECRET"), "{all}");
        assert!(!all.contains("secret.txt\n"), "the work root was listed: {all}");
    }

    /// Every process a run started is dead when the run returns, those it
    /// left in the background included.
    pub async fn nothing_of_a_run_outlives_it(h: &Harness) {
        let m = marker();
        let script = format!("sleep {m} & (sleep {m} &); echo started");
        let o = h.run_fresh(&spec(&["sh", "-c", &script])).await;
        assert_eq!((text(&o.stdout).as_str(), o.exit_code), ("started\n", 0), "{o:?}");
        assert_eq!(processes_with(&m), Vec::<String>::new());

        let m = marker();
        let mut s = spec(&["sh", "-c", &format!("sleep {m} & (sleep {m} &); sleep {m}")]);
        s.limits.wall = Duration::from_secs(1);
        let o = h.run_fresh(&s).await;
        assert_eq!(o.killed_by, Some(Termination::WallTime), "{o:?}");
        assert_eq!(processes_with(&m), Vec::<String>::new());
    }

    /// Dropping a run's future kills the run, all of it.
    pub async fn a_dropped_run_is_killed(h: &Harness) {
        let m = marker();
        let work = h.work_dir(0);
        let s = spec(&["sh", "-c", &format!("sleep {m} & (sleep {m} &); sleep {m}")]);
        let started = async {
            let t = Instant::now();
            loop {
                let seen = processes_with(&m).len();
                if seen >= 3 || t.elapsed() > Duration::from_secs(20) {
                    return seen;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        };
        // The run's future is dropped when `started` wins.
        let seen = tokio::select! {
            r = h.run(0, &work, &s) => panic!("the run ended first: {r:?}"),
            seen = started => seen,
        };
        assert!(seen >= 3, "the run never started its processes");
        let t = Instant::now();
        while !processes_with(&m).is_empty() && t.elapsed() < Duration::from_secs(10) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(processes_with(&m), Vec::<String>::new(), "left running after the drop");
        // The slot is usable again.
        drop(work);
        let o = h.run_fresh(&spec(&["sh", "-c", OUT_ERR_EXIT])).await;
        assert_eq!(o.exit_code, 3, "{o:?}");
    }

    /// A program that cannot be started is the sandbox's error, not an outcome.
    pub async fn a_missing_program_is_an_exec_error(h: &Harness) {
        let work = h.work_dir(0);
        let r = h.run(0, &work, &spec(&["/nonexistent/program"])).await;
        assert!(matches!(r, Err(SandboxError::Exec { .. })), "{r:?}");
    }
}

/// `suite!(module: harness; tests...)`: one `#[tokio::test]` per contract test.
macro_rules! suite {
    ($module:ident: $harness:expr; $($test:ident),* $(,)?) => {
        mod $module {
            use super::*;
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $test() {
                    let h: Harness = $harness;
                    contract::$test(&h).await;
                }
            )*
        }
    };
}

/// What every runner promises: the fake runner too.
macro_rules! plumbing {
    ($module:ident: $harness:expr $(; $($more:ident),*)?) => {
        suite!($module: $harness;
            runs_a_program_and_returns_its_output_and_exit_code,
            stdin_reaches_the_program,
            files_pass_through_the_work_dir_both_ways,
            each_work_dir_starts_empty,
            a_dropped_work_dir_is_removed,
            slots_run_side_by_side,
            $($($more),*)?
        );
    };
}

/// What runners of real programs promise besides.
macro_rules! real {
    ($module:ident: $harness:expr) => {
        plumbing!($module: $harness;
            the_environment_is_exactly_the_specs,
            runs_as_the_slots_uid_which_owns_the_work_dir,
            the_wall_limit_ends_a_run,
            the_cpu_limit_ends_a_busy_run,
            the_memory_limit_ends_a_run_that_grows_past_it,
            stdout_past_its_cap_is_cut_and_ends_the_run,
            stderr_has_a_cap_of_its_own,
            tmp_is_private_to_each_run,
            other_work_dirs_and_the_work_root_are_out_of_reach,
            nothing_of_a_run_outlives_it,
            a_dropped_run_is_killed,
            a_missing_program_is_an_exec_error
        );
    };
}

real!(namespaces: Harness::real(IsolationMode::Namespaces));
// Session seats keep every promise of slots, without a spawner in their cgroup.
real!(seats: Harness::seats());
suite!(namespaces_cgroups: Harness::real(IsolationMode::Namespaces); the_run_sees_no_host_cgroup_path);
suite!(seats_cgroups: Harness::seats(); the_run_sees_no_host_cgroup_path);
real!(restricted: Harness::real(IsolationMode::Restricted));
plumbing!(fake: Harness::fake());
