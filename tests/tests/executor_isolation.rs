//! Every isolation promise, attacked: network, filesystem, other runs,
//! process tree, environment, privileges, and the supervisor's own reads.
//!
//! Each test runs in both isolation modes (`name::namespaces`,
//! `name::restricted`). Programs find their work dir as the current directory
//! and their temporary directory in `TMPDIR`: in restricted mode there is no
//! `/work`, and `/tmp` is the host's. A cell the README marks as not promised
//! in restricted mode is skipped through [`Executor::not_promised`], which
//! asserts that the executor reports the protection as not in force.

use sandpool_proto::v1 as pb;
use sandpool_tests::{Executor, Isolation, Options, describe, in_each_mode, request, stdout};
use std::time::{Duration, Instant};

in_each_mode!(
    outbound_tcp_udp_and_dns_fail_at_once,
    loopback_works_inside_one_run,
    each_run_gets_a_fresh_network_namespace,
    concurrent_runs_cannot_see_each_other,
    host_unix_sockets_under_read_only_binds_answer_only_to_their_file_mode,
    another_runs_command_line,
    daemonised_grandchild_is_gone_after_the_response,
    executor_environment_and_files_are_invisible,
    writes_outside_the_work_dir_fail,
    runs_are_unprivileged_and_dangerous_syscalls_are_denied,
    symlink_planted_under_a_fetch_files_name_does_not_leak,
    nothing_is_left_behind_after_the_response,
    a_cancelled_run_leaves_no_process_behind,
    no_socket_family_but_unix_and_no_host_abstract_socket,
);

/// Whether namespaces mode's runs get a network namespace (`--network-isolation namespace`,
/// or `auto` before Landlock ABI 6) or none (`seccomp`). Both are tested: run the suite
/// again with `SANDPOOL_NETWORK_ISOLATION=namespace` (and `=seccomp`), which the executor reads.
async fn has_netns(exe: &Executor) -> bool {
    let iso = exe.capabilities().await.isolation.expect("isolation");
    println!("network isolation: {}", iso.network);
    iso.network == "namespace"
}

async fn executor(isolation: Isolation) -> Executor {
    Executor::start(Options {
        slots: 2,
        languages: vec!["python", "c", "bash"],
        env: vec![("SANDPOOL_TEST_SECRET".into(), "hunter2-executor-env".into())],
        isolation,
        ..Default::default()
    })
    .await
}

/// Python lines naming the run's work and temporary directories `W` and `T`.
const DIRS: &str = "import os\nW, T = os.getcwd(), os.environ['TMPDIR']\n";

async fn py(exe: &Executor, code: &str) -> pb::ExecuteResponse {
    let r = exe.run(request("python", code, "")).await;
    sandpool_tests::assert_start_variant(&r);
    r
}

async fn outbound_tcp_udp_and_dns_fail_at_once(mode: Isolation) {
    let exe = executor(mode).await;
    let code = r#"
import socket
def tcp():
    s = socket.socket(); s.settimeout(5); s.connect(("10.0.0.1", 80))
def udp():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.sendto(b"x", ("10.0.0.1", 53))
def dns():
    socket.getaddrinfo("example.com", 80)
def tcp6():
    s = socket.socket(socket.AF_INET6); s.settimeout(5); s.connect(("2001:db8::1", 80))
for name, f in [("tcp", tcp), ("udp", udp), ("dns", dns), ("tcp6", tcp6)]:
    try:
        f(); print(name, "CONNECTED")
    except OSError as e:
        print(name, "blocked", type(e).__name__)
import os
try:
    print("interfaces", open("/proc/net/dev").read().count(":"))
except OSError as e:
    print("interfaces unreadable", e.errno)
"#;
    let t = Instant::now();
    let r = py(&exe, code).await;
    let out = stdout(&r);
    assert!(!out.contains("CONNECTED"), "{}", describe(&r));
    for n in ["tcp", "udp", "dns", "tcp6"] {
        assert!(out.contains(&format!("{n} blocked")), "{n}: {}", describe(&r));
    }
    if mode == Isolation::Restricted {
        exe.not_promised(
            "private_network",
            "runs share the pod's network interfaces; seccomp allows unix sockets only",
        )
        .await;
    } else if !has_netns(&exe).await {
        exe.not_promised(
            "net_namespace",
            "no network namespace: the socket filter refuses IP sockets",
        )
        .await;
    } else {
        // Only loopback exists: one interface line in /proc/net/dev.
        assert!(out.contains("interfaces 1"), "{}", describe(&r));
    }
    assert!(
        t.elapsed() < Duration::from_secs(4),
        "network failures were not immediate: {:?}",
        t.elapsed()
    );
}

async fn loopback_works_inside_one_run(mode: Isolation) {
    let exe = executor(mode).await;
    let code = "import socket\ntry:\n    s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen(1)\nexcept OSError as e:\n    print('refused', e.errno); raise SystemExit\nc = socket.create_connection(s.getsockname())\na, _ = s.accept(); c.sendall(b'ping'); print(a.recv(4).decode())\n";
    let r = py(&exe, code).await;
    if mode == Isolation::Restricted {
        // The pod's loopback is shared by every run and the executor's own
        // ports: IP sockets are refused altogether (EPERM).
        assert_eq!(stdout(&r).trim(), "refused 1", "{}", describe(&r));
        exe.not_promised("private_network", "no loopback of a run's own").await;
    } else if !has_netns(&exe).await {
        // No network namespace: the host's loopback is the executor's, refused like any IP socket.
        assert_eq!(stdout(&r).trim(), "refused 1", "{}", describe(&r));
        exe.not_promised("net_namespace", "no loopback of a run's own").await;
    } else {
        assert_eq!(stdout(&r).trim(), "ping", "{}", describe(&r));
    }
}

async fn each_run_gets_a_fresh_network_namespace(mode: Isolation) {
    // One slot: both runs go through the same slot, one after the other.
    let exe = Executor::start(Options {
        slots: 1,
        languages: vec!["python"],
        isolation: mode,
        ..Default::default()
    })
    .await;
    if mode == Isolation::Restricted {
        // No run can open an IP socket (loopback_works_inside_one_run::restricted), so none leaves one behind.
        exe.not_promised("private_network", "no network namespace per run")
            .await;
        return;
    }
    if !has_netns(&exe).await {
        // No run can open an IP socket (loopback_works_inside_one_run), so none leaves one behind.
        exe.not_promised("net_namespace", "no network namespace per run").await;
        return;
    }
    // Closing the accepted side first leaves it in TIME_WAIT for a minute:
    // kernel state that outlives the run's processes.
    let a = r#"
import socket
s = socket.socket(); s.bind(("127.0.0.1", 45679)); s.listen(1)
c = socket.create_connection(("127.0.0.1", 45679))
a, _ = s.accept(); a.close(); c.recv(1); c.close(); s.close()
print("sockets", len(open("/proc/net/tcp").readlines()) - 1)
"#;
    let b = r#"
import socket
print("sockets", len(open("/proc/net/tcp").readlines()) - 1)
s = socket.socket(); s.bind(("127.0.0.1", 45679)); print("bound")
"#;
    let ra = py(&exe, a).await;
    let left: usize = stdout(&ra)
        .trim()
        .strip_prefix("sockets ")
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{}", describe(&ra)));
    assert!(left > 0, "run A left no socket to find: {}", describe(&ra));
    let rb = py(&exe, b).await;
    assert_eq!(stdout(&rb), "sockets 0\nbound\n", "{}", describe(&rb));
}

async fn concurrent_runs_cannot_see_each_other(mode: Isolation) {
    let exe = executor(mode).await;
    // Run A plants files, an abstract and a pathname unix socket and a TCP listener, then waits.
    // What its mode refuses it outright is refused to B as well.
    let a = r#"
import os, socket, time
W, T = os.getcwd(), os.environ["TMPDIR"]
print("dirs", W, T, flush=True)
open(W + "/secret-a", "w").write("A-SECRET")
open(T + "/secret-a", "w").write("A-SECRET")
try: open("/dev/shm/secret-a", "w").write("A-SECRET")
except OSError as e: print("shm refused", e.errno)
try:
    u = socket.socket(socket.AF_UNIX); u.bind("\0sandpool-test-a"); u.listen(1)
    p = socket.socket(socket.AF_UNIX); p.bind(W + "/sock-a"); p.listen(1)
except OSError as e: print("unix refused", e.errno)
try: t = socket.socket(); t.bind(("127.0.0.1", 45678)); t.listen(1)
except OSError as e: print("tcp refused", e.errno)
import ctypes
if ctypes.CDLL(None).shmget(0x5a5a, 4096, 0o1666) < 0: print("sysv refused")  # IPC_CREAT: a SysV segment
print("ready", flush=True)
time.sleep(3)
"#;
    let b = r#"
import os, socket, time, sys
time.sleep(1)
found = []
for d in [os.getcwd(), os.environ["TMPDIR"], "/dev/shm"] + sys.stdin.read().split():
    try: found += [d + "/" + f for f in os.listdir(d) if "secret" in f]
    except OSError: pass
    try: found.append(open(d + "/secret-a").read())
    except OSError: pass
    try:
        s = socket.socket(socket.AF_UNIX); s.connect(d + "/sock-a"); found.append("unix socket in " + d)
    except OSError: pass
pids = [p for p in os.listdir("/proc") if p.isdigit()]
try:
    u = socket.socket(socket.AF_UNIX); u.connect("\0sandpool-test-a"); found.append("abstract socket")
except OSError: pass
try:
    socket.create_connection(("127.0.0.1", 45678), timeout=1); found.append("tcp listener")
except OSError: pass
import ctypes
if ctypes.CDLL(None).shmget(0x5a5a, 0, 0) >= 0: found.append("sysv shm")
print("found", found, "pids", len(pids))
"#;
    let (mut ca, mut cb) = (exe.client(), exe.client());
    let run_a = tokio::spawn(async move { ca.execute(request("python", a, "")).await });
    // In restricted mode A's directories have host paths, with a random part no run can
    // guess; B is told them anyway (read from outside while A runs): Landlock must hold.
    let told = if mode == Isolation::Restricted {
        let root = exe.work_root.path().join("runs");
        let t = std::time::Instant::now();
        loop {
            let dirs: Vec<String> = std::fs::read_dir(&root)
                .map(|d| d.flatten().map(|e| e.path().display().to_string()).collect())
                .unwrap_or_default();
            if dirs.len() >= 2 {
                break dirs.join(" ");
            }
            assert!(t.elapsed() < std::time::Duration::from_secs(30), "run A never started");
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    } else {
        String::new()
    };
    let rb = cb.execute(request("python", b, &told)).await;
    let ra = run_a.await.expect("join");
    let (ra, rb) = (ra.unwrap().into_inner(), rb.unwrap().into_inner());
    assert!(stdout(&ra).contains("ready"), "{}", describe(&ra));
    let out = stdout(&rb);
    assert!(out.contains("found []"), "{}", describe(&rb));
    if mode == Isolation::Restricted {
        // What has no namespace here is refused to A outright.
        for refused in ["shm refused 13", "tcp refused 1", "sysv refused", "unix refused 1"] {
            assert!(stdout(&ra).contains(refused), "{refused}: {}", describe(&ra));
        }
        exe.not_promised(
            "pid_namespace",
            "a run's /proc lists the pod's processes (it cannot read their environ, memory or descriptors)",
        )
        .await;
    } else {
        // Only B's own process(es) are visible in its /proc.
        assert!(out.contains("pids 1") || out.contains("pids 2"), "{}", describe(&rb));
    }

    // A later run in the same slot sees nothing of A either.
    let c = "import os\nshm = sorted(os.listdir('/dev/shm')) if os.access('/dev/shm', os.R_OK) and os.getcwd() == '/work' else []\nprint(sorted(os.listdir('.')), sorted(os.listdir(os.environ['TMPDIR'])), shm)\n";
    let rc = py(&exe, c).await;
    assert_eq!(stdout(&rc).trim(), "['main.py'] [] []", "{}", describe(&rc));
}

/// A unix socket that an image or a node agent leaves under a read-only bind (`/opt`
/// here): a read-only mount does not stop connect(2), which needs only write permission
/// on the socket file, and seccomp cannot read the address. In namespaces mode the run's
/// unprivileged uid in no group reaches only a socket whose mode lets anyone write (pinned,
/// as the README's isolation table says: refusing unix sockets outright would break tsx,
/// TypeScript's runner, and `multiprocessing.Manager`); restricted runs make no sockets.
async fn host_unix_sockets_under_read_only_binds_answer_only_to_their_file_mode(mode: Isolation) {
    use std::os::unix::fs::PermissionsExt;
    let exe = executor(mode).await;
    // Made after the executor started: the binds show the host's directories live.
    let dir = tempfile::Builder::new()
        .prefix("sandpool-agent-")
        .tempdir_in("/opt")
        .expect("a directory in /opt");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod dir");
    let mut listeners = Vec::new();
    for (name, mode) in [("private.sock", 0o660), ("open.sock", 0o777)] {
        let path = dir.path().join(name);
        let l = std::os::unix::net::UnixListener::bind(&path).expect("bind the agent's socket");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).expect("chmod socket");
        l.set_nonblocking(true).expect("nonblocking");
        listeners.push(l);
    }
    let code = format!(
        "import socket\nfor name in ['private.sock', 'open.sock']:\n    try:\n        s = socket.socket(socket.AF_UNIX)\n        s.connect({:?} + '/' + name)\n        print(name, 'connected')\n    except OSError as e:\n        print(name, 'refused', e.errno)\n",
        dir.path().display().to_string()
    );
    let r = py(&exe, &code).await;
    let expected = match mode {
        Isolation::Namespaces => "private.sock refused 13\nopen.sock connected\n",
        Isolation::Restricted => "private.sock refused 1\nopen.sock refused 1\n",
    };
    assert_eq!(stdout(&r), expected, "{}", describe(&r));
    assert!(
        matches!(listeners[0].accept(), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
        "the run reached a socket only root's group may write"
    );
}

/// Another run's command line carries its caller's `args`. Hidden by the run's pid
/// namespace; restricted mode has none and cannot mount `/proc` with `hidepid`, so there a
/// run reads concurrent runs' command lines, as the README's isolation table says (and
/// callers are told to pass secrets on stdin or in files, never in `args`).
async fn another_runs_command_line(mode: Isolation) {
    let exe = executor(mode).await;
    let mut a = request("python", "import time\nprint('ready', flush=True)\ntime.sleep(3)\n", "");
    a.args = vec!["sandpool-callers-arg-7f3a".into()];
    let mut ca = exe.client();
    let run_a = tokio::spawn(async move { ca.execute(a).await });
    let b = r#"
import os, time
time.sleep(1)
seen = []
for p in os.listdir("/proc"):
    try:
        if b"sandpool-callers-arg" in open("/proc/%s/cmdline" % p, "rb").read(): seen.append("cmdline")
    except OSError: pass
    try:
        if b"SANDPOOL_TEST_SECRET" in open("/proc/%s/environ" % p, "rb").read(): seen.append("environ")
    except OSError: pass
print(sorted(set(seen)))
"#;
    let rb = py(&exe, b).await;
    let ra = run_a.await.expect("join").expect("run A").into_inner();
    assert!(stdout(&ra).contains("ready"), "{}", describe(&ra));
    if mode == Isolation::Restricted {
        // Pinned as documented: the command line shows, the environment does not.
        assert_eq!(stdout(&rb), "['cmdline']\n", "{}", describe(&rb));
        exe.not_promised("pid_namespace", "a run reads other processes' command lines")
            .await;
    } else {
        assert_eq!(stdout(&rb), "[]\n", "{}", describe(&rb));
    }
}

/// uids of every process on the host.
fn host_uids() -> Vec<(u32, u32)> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| {
            let pid: u32 = e.file_name().to_str()?.parse().ok()?;
            let status = std::fs::read_to_string(e.path().join("status")).ok()?;
            let uid = status
                .lines()
                .find(|l| l.starts_with("Uid:"))?
                .split_whitespace()
                .nth(1)?
                .parse()
                .ok()?;
            Some((pid, uid))
        })
        .collect()
}

async fn daemonised_grandchild_is_gone_after_the_response(mode: Isolation) {
    let exe = executor(mode).await;
    // The classic daemon: fork, leave the session and group, fork again, let
    // the middle process exit so the grandchild is orphaned.
    let code = r#"
import os, time
if os.fork() == 0:
    for leave in (os.setsid, lambda: os.setpgid(0, 0)):
        try: leave()
        except OSError as e: print("refused", e.errno, flush=True)
    pid = os.fork()
    if pid == 0:
        os.closerange(0, 3)
        while True:
            time.sleep(0.1)
    print("grandchild", pid, flush=True)
    os._exit(0)
time.sleep(0.3)
print("uid", os.getuid())
"#;
    let r = py(&exe, code).await;
    let out = stdout(&r);
    let uid: u32 = out
        .lines()
        .find_map(|l| l.strip_prefix("uid "))
        .and_then(|u| u.parse().ok())
        .unwrap_or_else(|| panic!("{}", describe(&r)));
    assert_ne!(uid, 0);
    if mode == Isolation::Restricted {
        // Runs share the executor's uid: the grandchild is looked for by its pid (host pids, no pid namespace).
        assert!(
            out.contains("refused 1\nrefused 1\n"),
            "setsid/setpgid allowed: {}",
            describe(&r)
        );
        let pid: u32 = out
            .lines()
            .find_map(|l| l.strip_prefix("grandchild "))
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("{}", describe(&r)));
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        assert!(
            stat.is_empty() || !stat.contains("python"),
            "the grandchild {pid} survives: {stat}"
        );
        return;
    }
    let left: Vec<_> = host_uids().into_iter().filter(|(_, u)| *u == uid).collect();
    assert!(left.is_empty(), "processes of the run's uid {uid} survive: {left:?}");
}

async fn executor_environment_and_files_are_invisible(mode: Isolation) {
    let exe = executor(mode).await;
    // Namespaces mode: these paths do not exist in the sandbox. Restricted
    // mode: they exist (Landlock does not hide names from stat), but cannot be listed or read.
    let seen = if mode == Isolation::Restricted {
        "def seen(p):\n    try:\n        os.listdir(p) if os.path.isdir(p) else open(p).read(1)\n        return True\n    except OSError:\n        return False\n"
    } else {
        "seen = os.path.exists\n"
    };
    let code = format!("import os\n{seen}")
        + r#"
hits = []
if any("hunter2" in v for v in os.environ.values()): hits.append("environ")
for p in os.listdir("/proc"):
    for f in ("environ", "cmdline"):
        try:
            if b"hunter2" in open(f"/proc/{p}/{f}", "rb").read(): hits.append(f"/proc/{p}/{f}")
        except OSError: pass
for path in ["/root", "/home", "/var/run/secrets", "/run/secrets", "/var/lib/sandpool", "/sys", "/sys/class/net"]:
    if seen(path): hits.append(path)
print("hits", hits, sorted(os.environ))
"#;
    let r = py(&exe, &code).await;
    assert!(stdout(&r).starts_with("hits []"), "{}", describe(&r));
    // The work root lives on the host, invisible: nothing under it leaks by path.
    let wr = exe.work_root.path().display().to_string();
    let r = py(
        &exe,
        &format!("import os\n{seen}print(seen({wr:?}), seen({wr:?} + '/runs'))\n"),
    )
    .await;
    assert_eq!(stdout(&r).trim(), "False False", "{}", describe(&r));
}

async fn writes_outside_the_work_dir_fail(mode: Isolation) {
    let exe = executor(mode).await;
    let code = r#"
import os
W, T = os.getcwd(), os.environ["TMPDIR"]
ok = []
for p in ["/evil", "/usr/evil", "/etc/evil", "/bin/evil", "/proc/evil", "/dev/evil", "/tmp/evil", "/dev/shm/evil",
          W + "/../evil", T + "/../evil", os.path.dirname(W) + "/w99999"]:
    try:
        open(p, "w").write("x"); ok.append(p)
    except OSError: pass
try:
    os.remove("/usr/bin/env"); ok.append("rm /usr/bin/env")
except OSError: pass
open(W + "/fine", "w").write("x"); open(T + "/fine", "w").write("x")
print("wrote", ok)
"#;
    let r = py(&exe, code).await;
    // In namespaces mode /tmp and /dev/shm are the run's own: writing there is fine.
    let expected = if mode == Isolation::Restricted {
        "wrote []"
    } else {
        "wrote ['/tmp/evil', '/dev/shm/evil']"
    };
    assert_eq!(stdout(&r).trim(), expected, "{}", describe(&r));
    assert!(std::fs::metadata("/usr/evil").is_err() && std::fs::metadata("/evil").is_err());
}

async fn runs_are_unprivileged_and_dangerous_syscalls_are_denied(mode: Isolation) {
    let exe = executor(mode).await;
    let code = r#"
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
status = open("/proc/self/status").read()
caps = [l for l in status.splitlines() if l.startswith(("CapEff", "CapPrm", "NoNewPrivs", "Seccomp:"))]
res = {}
res["unshare"] = libc.unshare(0x10000000)  # CLONE_NEWUSER
res["mount"] = libc.mount(b"none", b"/tmp", b"tmpfs", 0, None)
res["ptrace"] = libc.ptrace(16, 1, 0, 0)  # PTRACE_ATTACH
res["setuid0"] = libc.setuid(0)
# Denied by the seccomp filter: EPERM (1) rather than the call's own error.
import platform
nrs = {"x86_64": {"io_uring_setup": 425, "bpf": 321, "keyctl": 250, "perf_event_open": 298, "kexec_load": 246,
                  "init_module": 175, "setns": 308, "userfaultfd": 323},
       "aarch64": {"io_uring_setup": 425, "bpf": 280, "keyctl": 219, "perf_event_open": 241, "kexec_load": 104,
                   "init_module": 105, "setns": 268, "userfaultfd": 282}}[platform.machine()]
errnos = {}
for name, nr in nrs.items():
    ctypes.set_errno(0)
    r = libc.syscall(nr, 0, 0, 0, 0, 0)
    errnos[name] = (r, ctypes.get_errno())
ctypes.set_errno(0)
errnos["tiocsti"] = (libc.ioctl(0, 0x5412, ctypes.c_char_p(b"x")), ctypes.get_errno())
print("uid", os.getuid(), "euid", os.geteuid(), caps, res, "errnos", errnos)
print("oom_score_adj", open("/proc/self/oom_score_adj").read().strip())
"#;
    let r = py(&exe, code).await;
    let out = stdout(&r);
    assert!(!out.contains("uid 0"), "{}", describe(&r));
    assert!(out.contains("'CapEff:\\t0000000000000000'"), "{}", describe(&r));
    assert!(out.contains("'NoNewPrivs:\\t1'"), "{}", describe(&r));
    assert!(out.contains("'Seccomp:\\t2'"), "{}", describe(&r));
    // Within the pod or node, the run is the OOM killer's first choice, never the executor.
    assert!(out.contains("oom_score_adj 1000"), "{}", describe(&r));
    for k in ["unshare", "mount", "ptrace", "setuid0"] {
        assert!(out.contains(&format!("'{k}': -1")), "{k}: {}", describe(&r));
    }
    for k in [
        "io_uring_setup",
        "bpf",
        "keyctl",
        "perf_event_open",
        "kexec_load",
        "init_module",
        "setns",
        "userfaultfd",
        "tiocsti",
    ] {
        assert!(
            out.contains(&format!("'{k}': (-1, 1)")),
            "{k} not denied with EPERM: {}",
            describe(&r)
        );
    }
}

async fn symlink_planted_under_a_fetch_files_name_does_not_leak(mode: Isolation) {
    let exe = executor(mode).await;
    let secret = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(secret.path(), "HOST-SECRET").unwrap();
    let target = secret.path().display().to_string();
    let (dir, base) = (
        secret.path().parent().unwrap().display().to_string(),
        secret.path().file_name().unwrap().to_string_lossy().into_owned(),
    );
    // A symlink to the host secret, one to a directory holding it (fetched through as
    // d/<name>), a FIFO, and a hard link to a host file (refused: another filesystem).
    let code = format!(
        "import os\nos.symlink({target:?}, 'out.txt')\nos.symlink('/etc/hostname', 'host.txt')\nos.symlink({dir:?}, 'd')\nos.mkfifo('fifo')\ntry:\n    os.link('/etc/hostname', 'hard.txt')\nexcept OSError:\n    pass\nopen('real.txt', 'w').write('ok')\n"
    );
    let mut req = request("python", &code, "");
    req.fetch_files = vec![
        "out.txt".into(),
        "host.txt".into(),
        format!("d/{base}"),
        "fifo".into(),
        "hard.txt".into(),
        "real.txt".into(),
        "missing.txt".into(),
    ];
    let t = Instant::now();
    let r = exe.run(req).await;
    assert_eq!(r.verdict, pb::Verdict::Ok as i32, "{}", describe(&r));
    assert!(t.elapsed() < Duration::from_secs(5), "a FIFO must not block the fetch");
    let names: Vec<&str> = r.files.iter().map(|f| f.path.as_str()).collect();
    assert_eq!(names, vec!["real.txt"], "message: {}", r.message);
    assert!(
        r.files
            .iter()
            .all(|f| !String::from_utf8_lossy(&f.content).contains("HOST-SECRET"))
    );
    assert!(
        r.message.contains("out.txt") && r.message.contains("not a regular file"),
        "{}",
        r.message
    );
}

async fn nothing_is_left_behind_after_the_response(mode: Isolation) {
    let exe = executor(mode).await;
    let r = py(
        &exe,
        &format!("{DIRS}open(W + '/left', 'w').write('x' * 1000)\nopen(T + '/left', 'w').write('x')\n"),
    )
    .await;
    assert_eq!(r.verdict, pb::Verdict::Ok as i32, "{}", describe(&r));
    // Work dirs are detached mounts: nothing of a run ever shows on the host,
    // neither in the mount table nor under the work root.
    let root = exe.work_root.path().display().to_string();
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let ours: Vec<&str> = mounts.lines().filter(|l| l.contains(&root)).collect();
    assert!(ours.is_empty(), "mounts left on the host: {ours:#?}");
    let files: Vec<_> = walk(exe.work_root.path());
    assert!(
        files.iter().all(|p| !p.ends_with("left")),
        "run files on the host: {files:?}"
    );
    // The next run in the same slot starts clean.
    let r = py(&exe, &format!("{DIRS}print(os.listdir(W), os.listdir(T))\n")).await;
    assert_eq!(stdout(&r).trim(), "['main.py'] []", "{}", describe(&r));
}

/// Processes whose command line is exactly `argv` (NUL-separated in /proc).
fn processes_running(argv: &[&str]) -> Vec<u32> {
    let want = argv.join("\0") + "\0";
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| {
            let pid: u32 = e.file_name().to_str()?.parse().ok()?;
            let cmdline = std::fs::read(e.path().join("cmdline")).ok()?;
            (cmdline == want.as_bytes()).then_some(pid)
        })
        .collect()
}

/// A request dropped mid-run (the client went away) kills the whole tree,
/// an orphaned grandchild included, in both modes.
async fn a_cancelled_run_leaves_no_process_behind(mode: Isolation) {
    let exe = executor(mode).await;
    // A distinct sleep per mode: the two tests may run side by side.
    let secs = if mode == Isolation::Restricted {
        "987.654"
    } else {
        "987.655"
    };
    let code = format!(
        "import os, subprocess, time\nif os.fork() == 0:\n    subprocess.Popen(['sleep', '{secs}'])\n    os._exit(0)\ntime.sleep(60)\n"
    );
    let mut req = request("python", &code, "");
    req.limits = Some(pb::Limits {
        wall_time_ms: 60_000,
        ..Default::default()
    });
    let mut client = exe.client();
    let call = tokio::spawn(async move { client.execute(req).await });
    let t = Instant::now();
    while processes_running(&["sleep", secs]).is_empty() {
        assert!(t.elapsed() < Duration::from_secs(20), "the run never started its sleep");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Dropping the call resets the stream: the server drops the run.
    call.abort();
    let t = Instant::now();
    while !processes_running(&["sleep", secs]).is_empty() {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "the orphaned sleep outlived its cancelled run"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The slot is usable again.
    let r = py(&exe, "print('next')").await;
    assert_eq!(stdout(&r).trim(), "next", "{}", describe(&r));
}

/// Restricted mode started as root: runs do not share the executor's uid but
/// get their slot's (`uid_base + slot`), under the same confinement.
#[tokio::test]
async fn restricted_mode_under_root_runs_each_slot_as_its_own_uid() {
    let exe = Executor::start(Options {
        slots: 1,
        languages: vec!["python"],
        extra_args: vec!["--isolation".into(), "restricted".into()],
        ..Default::default()
    })
    .await;
    let code = "import os\nbad = []\nfor p in ['/etc/evil', '/tmp/evil', os.path.dirname(os.getcwd()) + '/w99']:\n    try: open(p, 'w'); bad.append(p)\n    except OSError: pass\nopen('ok', 'w').write('x')\nprint(os.getuid(), os.geteuid(), bad)\n";
    let r = py(&exe, code).await;
    let out = stdout(&r);
    let uid: u32 = out
        .split_whitespace()
        .next()
        .and_then(|u| u.parse().ok())
        .unwrap_or_else(|| panic!("{}", describe(&r)));
    assert!(uid >= 63000, "runs as uid {uid}: {}", describe(&r));
    assert!(out.trim().ends_with(&format!("{uid} []")), "{}", describe(&r));
    let caps = exe.capabilities().await;
    let iso = caps.isolation.unwrap();
    assert_eq!(iso.mode, "restricted");
    assert!(
        iso.features.iter().any(|f| f.name == "per_slot_uid" && f.in_use),
        "{:?}",
        iso.features
    );
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = vec![];
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() && !p.is_symlink() {
            out.extend(walk(&p));
        }
        out.push(p);
    }
    out
}

/// Every socket family but unix is refused or reaches nothing (inet, inet6, packet, raw,
/// netlink, vsock, ...), and an abstract unix socket the host (this test) listens on is
/// out of reach: in its own network namespace, or outside its Landlock domain.
async fn no_socket_family_but_unix_and_no_host_abstract_socket(mode: Isolation) {
    let exe = executor(mode).await;
    let name = format!("sandpool-host-{}-{}", std::process::id(), mode.name());
    use std::os::linux::net::SocketAddrExt;
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).expect("abstract name");
    let host = std::os::unix::net::UnixListener::bind_addr(&addr).expect("bind the host's abstract socket");
    host.set_nonblocking(true).expect("nonblocking");
    let code = format!(
        r#"
import socket
name = {name:?}
tried = [("inet", socket.AF_INET, socket.SOCK_STREAM, 0), ("inet6", socket.AF_INET6, socket.SOCK_DGRAM, 0),
         ("packet", socket.AF_PACKET, socket.SOCK_RAW, 0x300), ("raw", socket.AF_INET, socket.SOCK_RAW, 1),
         ("netlink", socket.AF_NETLINK, socket.SOCK_RAW, 0), ("uevent", socket.AF_NETLINK, socket.SOCK_DGRAM, 15),
         ("vsock", 40, socket.SOCK_STREAM, 0), ("bluetooth", 31, socket.SOCK_STREAM, 0)]
for label, fam, ty, proto in tried:
    try:
        s = socket.socket(fam, ty, proto)
    except OSError as e:
        print(label, "refused"); continue
    # Made in the run's own namespace: it must reach nothing outside.
    try:
        if label == "inet": s.settimeout(2); s.connect(("10.0.0.1", 80))
        elif label == "netlink": s.bind((0, 0)); print(label, "bound own namespace")
        elif label == "packet": print(label, "made", len(open("/proc/net/dev").read().splitlines()) - 2, "interfaces")
        else: print(label, "made")
        if label == "inet": print(label, "CONNECTED")
    except OSError as e:
        print(label, "blocked")
try:
    u = socket.socket(socket.AF_UNIX); u.connect("\0" + name); print("host abstract CONNECTED")
except OSError as e:
    print("host abstract refused", e.errno)
a, b = socket.socketpair(); a.send(b"x"); print("socketpair", b.recv(1).decode())
"#
    );
    // Warm (forked by the slot's zygote) and cold (the init's program): each enters its domain.
    for cold_start in [false, true] {
        let r = exe
            .run(pb::ExecuteRequest {
                cold_start,
                ..request("python", &code, "")
            })
            .await;
        // Warm only where warm starts are on (the suite runs again with them off).
        let warm = !cold_start && sandpool_tests::warm_starts();
        assert_eq!(r.run.as_ref().map(|p| p.warm), Some(warm), "{}", describe(&r));
        check_no_socket_family(&exe, mode, &host, &r).await;
    }
}

async fn check_no_socket_family(
    exe: &Executor,
    mode: Isolation,
    host: &std::os::unix::net::UnixListener,
    r: &pb::ExecuteResponse,
) {
    let out = stdout(r);
    assert!(!out.contains("CONNECTED"), "{}", describe(r));
    assert!(out.contains("host abstract refused"), "{}", describe(r));
    assert!(out.contains("socketpair x"), "{}", describe(r));
    assert!(
        matches!(host.accept(), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
        "a run reached the host's abstract socket"
    );
    if mode == Isolation::Restricted || !has_netns(exe).await {
        // No network namespace: every family but unix is refused outright.
        for label in [
            "inet",
            "inet6",
            "packet",
            "raw",
            "netlink",
            "uevent",
            "vsock",
            "bluetooth",
        ] {
            assert!(out.contains(&format!("{label} refused")), "{label}: {}", describe(r));
        }
    } else {
        // In the run's own namespace: only loopback, and no host device events.
        assert!(out.contains("uevent refused"), "{}", describe(r));
        assert!(
            !out.contains("packet made") || out.contains("packet made 1 interfaces"),
            "{}",
            describe(r)
        );
    }
}
