//! Warm starts (docs/warm-starts.md): a Python program forked from the slot's
//! zygote behaves as `python3 main.py` started fresh. Each case runs warm and
//! cold (`cold_start`) on the same executor and the two must agree; and
//! nothing of one warm run is visible to the next.

use sandpool_proto::v1 as pb;
use sandpool_tests::{Executor, Options, describe, stdout};

async fn executor() -> Executor {
    Executor::start(Options {
        slots: 2,
        languages: vec!["python"],
        // Warm starts on, whatever the environment says.
        extra_args: vec!["--warm-starts".into(), "true".into()],
        ..Default::default()
    })
    .await
}

fn req(code: &str, stdin: &str, args: &[&str], files: &[(&str, &str)], cold: bool) -> pb::ExecuteRequest {
    pb::ExecuteRequest {
        language: "python".into(),
        code: code.into(),
        stdin: stdin.as_bytes().to_vec(),
        args: args.iter().map(|a| a.to_string()).collect(),
        files: files
            .iter()
            .map(|(p, c)| pb::File {
                path: p.to_string(),
                content: c.as_bytes().to_vec(),
                executable: false,
            })
            .collect(),
        cold_start: cold,
        ..Default::default()
    }
}

fn run(r: &pb::ExecuteResponse) -> &pb::PhaseResult {
    r.run.as_ref().expect("run phase")
}

fn stderr(r: &pb::ExecuteResponse) -> String {
    String::from_utf8_lossy(&run(r).stderr).into_owned()
}

/// Runs `code` warm and cold; asserts each ran as asked and both ended alike
/// (verdict, exit code, signal, stdout, stderr). Returns the warm response.
async fn same(exe: &Executor, code: &str, stdin: &str, args: &[&str], files: &[(&str, &str)]) -> pb::ExecuteResponse {
    let warm = exe.run(req(code, stdin, args, files, false)).await;
    let cold = exe.run(req(code, stdin, args, files, true)).await;
    assert!(run(&warm).warm, "not a warm start: {}", describe(&warm));
    assert!(!run(&cold).warm, "cold_start ran warm: {}", describe(&cold));
    let key = |r: &pb::ExecuteResponse| {
        let p = run(r);
        (r.verdict, p.exit_code, p.signal, stdout(r), stderr(r))
    };
    assert_eq!(key(&warm), key(&cold), "warm vs cold differ for:\n{code}");
    warm
}

#[tokio::test]
async fn the_script_sees_what_python3_main_py_shows_it() {
    let exe = executor().await;
    let code = r#"
import sys, os
print(sys.argv, __name__, __file__, sys.path[0], os.getcwd())
print(sys.orig_argv, sys.executable, sys.flags.dont_write_bytecode, sys.flags.isolated)
print(list(globals()), __spec__, __package__, __cached__, type(__loader__).__name__, __doc__)
print(sorted(os.environ.items()))
print(os.getuid(), os.getgid(), os.getgroups(), os.getpid(), os.getsid(0) == os.getpid())
print(sorted(os.listdir("/proc/self/fd")), os.listdir("/work"), sorted(os.listdir("/tmp")))
print(open("/proc/self/status").read().split("CapEff:")[1].split()[0])
print(open("/proc/self/status").read().split("NoNewPrivs:")[1].split()[0])
print(open("/proc/self/status").read().split("Seccomp:")[1].split()[0])
print(open("/proc/self/cgroup").read().strip().splitlines()[-1], open("/proc/self/oom_score_adj").read())
import resource
print([resource.getrlimit(r) for r in (resource.RLIMIT_NPROC, resource.RLIMIT_FSIZE, resource.RLIMIT_NOFILE, resource.RLIMIT_CORE, resource.RLIMIT_STACK)])
import signal
print([signal.getsignal(s) for s in (signal.SIGINT, signal.SIGPIPE, signal.SIGTERM, signal.SIGXFSZ, signal.SIGCHLD)])
print(signal.pthread_sigmask(signal.SIG_BLOCK, []))
import socket
print(socket.gethostname())
# What ps and pgrep -f see (a warm run's is padded with NULs: docs/warm-starts.md).
print(open("/proc/self/cmdline", "rb").read().rstrip(b"\0").split(b"\0"))
"#;
    let r = same(&exe, code, "", &["a", "b c"], &[("data.txt", "x")]).await;
    assert!(
        stdout(&r).contains("[b'python3', b'-B', b'main.py', b'a', b'b c']\n"),
        "{}",
        stdout(&r)
    );
    let out = stdout(&r);
    assert!(
        out.starts_with("['main.py', 'a', 'b c'] __main__ /work/main.py /work /work\n"),
        "{out}"
    );
    assert!(
        out.contains("['python3', '-B', 'main.py', 'a', 'b c'] /usr/bin/python3 1 0\n"),
        "{out}"
    );
    assert_eq!(r.verdict, pb::Verdict::Ok as i32, "{}", describe(&r));
}

#[tokio::test]
async fn standard_streams_buffering_input_and_the_flush_at_exit() {
    let exe = executor().await;
    let code = r#"
import sys
print(sys.stdout.line_buffering, sys.stderr.line_buffering, sys.stdout.write_through)
print(sys.stdout.encoding, sys.stdin.encoding, sys.stdout.errors, sys.stderr.errors, sys.stdin.errors)
print(sys.stdout.isatty(), type(sys.stdout.buffer).__name__, sys.stdout.mode, sys.stdin.mode, sys.stdin.seekable())
print(sys.stdin is sys.__stdin__, sys.stdout is sys.__stdout__, sys.stdout.fileno(), sys.stderr.name)
name = input("name? ")
print("hello", name, "héllo ✓")
rest = sys.stdin.read()
print(repr(rest))
sys.stdout.write("no newline, flushed at exit")
sys.stderr.write("err line\nerr tail")
"#;
    let r = same(&exe, code, "ada\nline two\n", &[], &[]).await;
    assert!(
        stdout(&r).contains("hello ada héllo ✓\n'line two\\n'\nno newline, flushed at exit"),
        "{}",
        stdout(&r)
    );
    assert!(
        stdout(&r).starts_with("False True False\nutf-8 utf-8 strict backslashreplace strict\n"),
        "{}",
        stdout(&r)
    );
}

#[tokio::test]
async fn exit_codes_tracebacks_and_signals_match() {
    let exe = executor().await;
    let cases: &[(&str, i32, i32)] = &[
        ("print('ok')", 0, 0),
        ("import sys\nprint('x')\nsys.exit(3)", 3, 0),
        ("import sys\nsys.exit('boom')", 1, 0),
        ("import sys\nsys.exit(None)", 0, 0),
        ("import sys\nsys.exit(256 + 4)", 4, 0),
        ("raise SystemExit(True)", 1, 0),
        ("def f():\n    raise ValueError('x')\nprint('before')\nf()", 1, 0),
        ("import os\nprint('lost in the buffer')\nos._exit(7)", 7, 0),
        (
            "import os, signal\nprint('unflushed')\nos.kill(os.getpid(), signal.SIGTERM)",
            0,
            libc_sigterm(),
        ),
        ("raise KeyboardInterrupt", 0, 2),
        ("x = (", 1, 0),
        ("import sys\nsys.stdout.close()\nprint('after close')", 1, 0),
        (
            "class E(Exception):\n    pass\ntry:\n    1/0\nexcept ZeroDivisionError as e:\n    raise E('chained') from e",
            1,
            0,
        ),
    ];
    for (code, exit, signal) in cases {
        let r = same(&exe, code, "", &[], &[]).await;
        assert_eq!(
            (run(&r).exit_code, run(&r).signal),
            (*exit, *signal),
            "{code}: {}",
            describe(&r)
        );
    }
    let r = same(&exe, "def f():\n    raise ValueError('x')\nf()", "", &[], &[]).await;
    assert_eq!(
        stderr(&r),
        "Traceback (most recent call last):\n  File \"/work/main.py\", line 3, in <module>\n    f()\n  File \"/work/main.py\", line 2, in f\n    raise ValueError('x')\nValueError: x\n"
    );
}

fn libc_sigterm() -> i32 {
    15
}

#[tokio::test]
async fn atexit_del_threads_multiprocessing_recursion_and_warnings_match() {
    let exe = executor().await;
    let cases = [
        // atexit handlers run last-registered first, after an uncaught exception's traceback.
        "import atexit\natexit.register(print, 'first registered')\natexit.register(print, 'second')\nprint('body')\nraise RuntimeError('late')",
        "class A:\n    def __del__(self):\n        print('del at exit')\na = A()\nprint('made')",
        "import threading, time\ndef w():\n    time.sleep(0.2)\n    print('thread done')\nthreading.Thread(target=w).start()\nprint('main done')",
        "import threading\nt = threading.Thread(target=lambda: 1/0)\nt.start()\nt.join()\nprint('after')",
        "import multiprocessing as mp\ndef sq(x):\n    return x * x\nif __name__ == '__main__':\n    with mp.Pool(2) as p:\n        print(p.map(sq, range(6)))",
        "import multiprocessing as mp\ndef hi(q):\n    q.put(__name__)\nif __name__ == '__main__':\n    ctx = mp.get_context('spawn')\n    q = ctx.Queue()\n    p = ctx.Process(target=hi, args=(q,))\n    p.start()\n    print(q.get())\n    p.join()\n    print(p.exitcode)",
        "import subprocess, sys\nprint(subprocess.run([sys.executable, '-c', 'import sys; print(sys.argv)'], capture_output=True, text=True).stdout)",
        "import warnings\nwarnings.warn('careful')\nimport collections\nprint(type(collections).__name__)\nwarnings.warn('deprecated', DeprecationWarning)",
        "import inspect\ndef g():\n    return len(inspect.stack())\nprint(g() - len(inspect.stack()))",
        "print(open('data.txt').read())\nwith open('out.txt', 'w') as f:\n    f.write('written')\nimport os\nprint(sorted(os.listdir('.')), open('out.txt').read())",
    ];
    for code in cases {
        let r = same(&exe, code, "", &[], &[("data.txt", "given")]).await;
        assert!(matches!(r.verdict, 1 | 3), "{code}: {}", describe(&r));
    }
}

/// The recursion limit reads the same and bounds the script's own frames;
/// how deep a script gets may differ by one frame (docs/warm-starts.md).
#[tokio::test]
async fn the_recursion_limit_holds_within_a_frame() {
    let exe = executor().await;
    let code = "import sys\ndef f(n):\n    try:\n        return f(n + 1)\n    except RecursionError:\n        return n\nprint(sys.getrecursionlimit(), f(0))\nsys.setrecursionlimit(60)\nprint(sys.getrecursionlimit(), f(0))";
    let warm = exe.run(req(code, "", &[], &[], false)).await;
    let cold = exe.run(req(code, "", &[], &[], true)).await;
    assert!(run(&warm).warm && !run(&cold).warm);
    let nums = |r: &pb::ExecuteResponse| -> Vec<i64> {
        stdout(r)
            .split_whitespace()
            .map(|w| w.parse().expect("a number"))
            .collect()
    };
    let (w, c) = (nums(&warm), nums(&cold));
    assert_eq!((w[0], w[2]), (1000, 60), "{}", describe(&warm));
    assert_eq!((c[0], c[2]), (1000, 60), "{}", describe(&cold));
    for i in [1, 3] {
        assert!((w[i] - c[i]).abs() <= 1, "depth warm {} cold {}", w[i], c[i]);
    }
}

#[tokio::test]
async fn a_module_in_the_work_dir_shadows_a_preloaded_one_as_it_would_cold() {
    let exe = executor().await;
    let files = [("random.py", "X = 'mine'\n"), ("numpy/__init__.py", "Y = 'my numpy'\n")];
    let r = same(&exe, "import random, numpy\nprint(random.X, numpy.Y)", "", &[], &files).await;
    assert_eq!(stdout(&r), "mine my numpy\n", "{}", describe(&r));
    // Modules a preload imported without being named in the list (numpy imports
    // pickle and inspect), and ones the zygote's own code uses after the fork.
    let files = [
        ("pickle.py", "X = 'my pickle'\n"),
        ("inspect.py", "Y = 'my inspect'\n"),
        ("types.py", "Z = 'my types'\n"),
        ("atexit.py", "W = 'my atexit'\n"),
    ];
    let code =
        "import pickle, inspect, types, atexit\nprint(pickle.X, inspect.Y, types.Z, getattr(atexit, 'W', 'builtin'))";
    let r = same(&exe, code, "", &[], &files).await;
    assert_eq!(
        stdout(&r),
        "my pickle my inspect my types builtin\n",
        "{}",
        describe(&r)
    );
}

#[tokio::test]
async fn nothing_of_one_warm_run_is_visible_to_the_next() {
    // One slot's zygote serves both runs: everything the first changes must be gone.
    let exe1 = Executor::start(Options {
        slots: 1,
        languages: vec!["python"],
        extra_args: vec!["--warm-starts".into(), "true".into()],
        ..Default::default()
    })
    .await;
    let first = r#"
import json, os, sys, numpy, random, collections
json.leak = 'secret-1'
collections.Counter.leak = 'secret-2'
sys.modules['leaky'] = json
os.environ['LEAK'] = 'secret-3'
sys.path.append('/leak')
open('/tmp/leak', 'w').write('secret-4')
open('/work/leak', 'w').write('secret-5')
open('/dev/shm/leak', 'w').write('secret-6')
fd = os.open('/work/leak', os.O_RDONLY)
os.dup2(fd, 100)
import threading, time
threading.Thread(target=time.sleep, args=(60,), daemon=True).start()
print(random.random(), numpy.random.rand())
"#;
    let second = r#"
import json, os, sys, numpy, random, collections
print(hasattr(json, 'leak'), hasattr(collections.Counter, 'leak'), 'leaky' in sys.modules)
print(os.environ.get('LEAK'), '/leak' in sys.path)
print([os.path.exists(p) for p in ('/tmp/leak', '/work/leak', '/dev/shm/leak')])
print(sorted(os.listdir('/proc/self/fd')), threading_count())
print(random.random(), numpy.random.rand())
"#
    .replace("threading_count()", "__import__('threading').active_count()");
    let a = exe1.run(req(first, "", &[], &[], false)).await;
    let b = exe1.run(req(&second, "", &[], &[], false)).await;
    assert!(run(&a).warm && run(&b).warm, "{} / {}", describe(&a), describe(&b));
    let out = stdout(&b);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines[..4],
        [
            "False False False",
            "None False",
            "[False, False, False]",
            "['0', '1', '2', '3'] 1"
        ],
        "{}",
        describe(&b)
    );
    // Random state is the run's own, not the zygote's.
    assert_ne!(stdout(&a).trim(), lines[4], "random numbers repeated across warm runs");
}

/// The executor's children whose command line names the zygote.
fn zygotes(exe: &Executor) -> Vec<i32> {
    let mut found = vec![];
    for e in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let ppid = stat
            .rsplit_once(") ")
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse::<u32>().ok());
        let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        if ppid == Some(exe.pid()) && String::from_utf8_lossy(&cmd).contains("Sandpool's Python zygote") {
            found.push(pid);
        }
    }
    found
}

#[tokio::test]
async fn a_dead_zygote_is_replaced_and_capabilities_say_who_starts_warm() {
    // No sessions: their seats' zygote is not a slot's.
    let exe = Executor::start(Options {
        slots: 1,
        languages: vec!["python"],
        extra_args: ["--warm-starts", "true", "--max-sessions", "0"]
            .map(String::from)
            .to_vec(),
        ..Default::default()
    })
    .await;
    let py = exe.language_info("python").await;
    assert!(py.warm_start, "{py:?}");
    assert!(py.preloaded.iter().any(|m| m == "numpy"), "{py:?}");
    let first = exe.run(req("print('one')", "", &[], &[], false)).await;
    assert!(run(&first).warm, "{}", describe(&first));
    let before = zygotes(&exe);
    assert_eq!(before.len(), 1, "one slot, one zygote: {before:?}");
    assert!(sandpool_tests::signal(before[0] as u32, 9), "killing the zygote");
    std::thread::sleep(std::time::Duration::from_millis(200));
    let second = exe.run(req("print('two')", "", &[], &[], false)).await;
    assert_eq!(stdout(&second), "two\n", "{}", describe(&second));
    assert!(run(&second).warm, "{}", describe(&second));
    let after = zygotes(&exe);
    assert_eq!(after.len(), 1, "{after:?}");
    assert_ne!(after, before, "the dead zygote was not replaced");
}

#[tokio::test]
async fn warm_starts_can_be_turned_off_for_the_executor() {
    let exe = Executor::start(Options {
        slots: 1,
        languages: vec!["python"],
        extra_args: vec!["--warm-starts".into(), "false".into()],
        ..Default::default()
    })
    .await;
    let r = exe.run(req("print('cold')", "", &[], &[], false)).await;
    assert_eq!(stdout(&r), "cold\n", "{}", describe(&r));
    assert!(!run(&r).warm, "{}", describe(&r));
    let caps = exe.capabilities().await;
    assert!(caps.languages.iter().all(|l| !l.warm_start && l.preloaded.is_empty()));
    assert!(zygotes(&exe).is_empty());
}

/// numpy is carried only by the zygote for programs that name it (`warm.heavy`):
/// both kinds of run start warm, in one slot, alternating.
#[tokio::test]
async fn only_programs_that_name_numpy_fork_from_the_zygote_that_imported_it() {
    let exe = Executor::start(Options {
        slots: 1,
        languages: vec!["python"],
        extra_args: vec!["--warm-starts".into(), "true".into()],
        ..Default::default()
    })
    .await;
    // The name spelled so that the program does not name it.
    let plain = "import sys\nprint('num' + 'py' in sys.modules, 'json' in sys.modules)";
    let names = "import sys\nprint('num' + 'py' in sys.modules, 'json' in sys.modules)  # numpy";
    let imports = "import numpy as np\nprint(int(np.arange(4).sum()))";
    for _ in 0..2 {
        for (code, want) in [(plain, "False True\n"), (names, "True True\n"), (imports, "6\n")] {
            let r = exe.run(req(code, "", &[], &[], false)).await;
            assert_eq!(stdout(&r), want, "{}", describe(&r));
            assert!(r.run.as_ref().is_some_and(|p| p.warm), "{}", describe(&r));
        }
    }
    // A file of the request that names it counts too (a helper module the program imports).
    let r = exe
        .run(req(
            "import helper\nhelper.show()",
            "",
            &[],
            &[(
                "helper.py",
                "import sys\ndef show():\n    print('numpy' in sys.modules)\n# import numpy later\n",
            )],
            false,
        ))
        .await;
    assert_eq!(stdout(&r), "True\n", "{}", describe(&r));
}

async fn restricted_executor() -> Executor {
    Executor::start(Options {
        slots: 2,
        languages: vec!["python"],
        isolation: sandpool_tests::Isolation::Restricted,
        extra_args: vec!["--warm-starts".into(), "true".into()],
        ..Default::default()
    })
    .await
}

/// What a restricted run can see of itself, with its own directories' paths (which differ
/// from run to run) replaced by `W` and `T`.
const RESTRICTED_SELF: &str = r#"
import os, sys, signal, resource
W, T = os.getcwd(), os.environ["TMPDIR"]
def norm(s):
    return str(s).replace(W, "W").replace(T, "T")
print(norm(sys.argv), __name__, norm(__file__), norm(sys.path[0]), norm(sys.orig_argv))
print(norm(sorted(os.environ.items())))
print(os.getuid() == os.geteuid(), os.getgroups(), os.getsid(0) == os.getpid(), os.getpgid(0) == os.getpid())
print(sorted(os.listdir("/proc/self/fd")), sorted(os.listdir(".")), os.listdir(T))
status = open("/proc/self/status").read()
for key in ("CapEff:", "NoNewPrivs:", "Seccomp:", "Seccomp_filters:"):
    print(key, status.split(key)[1].split()[0])
print(open("/proc/self/oom_score_adj").read().strip())
print([resource.getrlimit(r) for r in (resource.RLIMIT_CPU, resource.RLIMIT_DATA, resource.RLIMIT_FSIZE, resource.RLIMIT_NOFILE, resource.RLIMIT_CORE, resource.RLIMIT_STACK, resource.RLIMIT_MEMLOCK)])
print([signal.getsignal(s) for s in (signal.SIGINT, signal.SIGPIPE, signal.SIGTERM, signal.SIGCHLD)], signal.pthread_sigmask(signal.SIG_BLOCK, []))
for what, f in (("parent", lambda: os.kill(os.getppid(), 0)), ("runs dir", lambda: os.listdir(os.path.dirname(W))), ("parent mem", lambda: open("/proc/%d/mem" % os.getppid(), "rb"))):
    try:
        f()
        print(what, "reached")
    except OSError as e:
        print(what, "refused", e.errno)
import socket
try:
    socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    print("inet socket made")
except OSError as e:
    print("inet socket refused", e.errno)
print(open("/proc/self/cmdline", "rb").read().split(b"\0")[:3])
"#;

/// Restricted mode forks Python runs from a per-slot zygote where Landlock scopes signals
/// (ABI 6): each child is confined as a cold restricted run is (session, uid, rlimits,
/// `no_new_privs`, its own Landlock domain, seccomp), and sees itself as a cold run does.
#[tokio::test]
async fn a_restricted_executor_forks_python_confined_as_a_cold_run() {
    let exe = restricted_executor().await;
    let py = exe.language_info("python").await;
    if !sandpool_sandbox::host::restricted_warm_starts() {
        // An older kernel: the executor says it starts cold, and does.
        assert!(!py.warm_start && py.preloaded.is_empty(), "{py:?}");
        let r = exe.run(req("print('one')", "", &[], &[], false)).await;
        assert_eq!(stdout(&r), "one\n", "{}", describe(&r));
        assert!(!run(&r).warm, "{}", describe(&r));
        return;
    }
    assert!(py.warm_start && !py.preloaded.is_empty(), "{py:?}");
    let warm = same(&exe, RESTRICTED_SELF, "", &["a b", "c"], &[("helper.py", "x = 1\n")]).await;
    let out = stdout(&warm);
    for line in [
        "['main.py', 'a b', 'c'] __main__ W/main.py W",
        "True [] True True",
        "NoNewPrivs: 1",
        "CapEff: 0000000000000000",
        "1000",
        "parent refused 1",
        "runs dir refused 13",
        "parent mem refused 13",
        "inet socket refused",
        "[b'python3', b'-B', b'main.py']",
    ] {
        assert!(out.contains(line), "missing {line:?} in:\n{out}");
    }
    assert!(
        out.contains("['0', '1', '2', '3']"),
        "only the standard streams (and listdir's own): {out}"
    );
}

/// Nothing of one warm restricted run reaches the next: module state, files in its
/// temporary directory, processes it left behind (killed with the run); and a zygote
/// killed between runs is replaced.
#[tokio::test]
async fn restricted_warm_runs_leave_nothing_for_the_next() {
    if !sandpool_sandbox::host::restricted_warm_starts() {
        eprintln!("skipped: this kernel's Landlock does not scope signals (restricted runs start cold)");
        return;
    }
    let exe = Executor::start(Options {
        slots: 1,
        languages: vec!["python"],
        isolation: sandpool_tests::Isolation::Restricted,
        extra_args: vec!["--warm-starts".into(), "true".into()],
        ..Default::default()
    })
    .await;
    let first = r#"
import os, json, subprocess, sys
json.LEFT = "by the first run"
open(os.path.join(os.environ["TMPDIR"], "left"), "w").write("x")
p = subprocess.Popen(["sleep", "60"], start_new_session=False)
print(p.pid, os.getppid())
"#;
    let r = exe.run(req(first, "", &[], &[], false)).await;
    assert!(run(&r).warm, "{}", describe(&r));
    let out = stdout(&r);
    let mut pids = out.split_whitespace().map(|p| p.parse::<u32>().expect("a pid"));
    let (sleeper, zygote) = (pids.next().expect("sleeper"), pids.next().expect("zygote"));
    assert!(
        !std::path::Path::new(&format!("/proc/{sleeper}")).exists(),
        "the run's background process outlived it"
    );
    let second = r#"
import os, json
print(getattr(json, "LEFT", None), os.listdir(os.environ["TMPDIR"]))
"#;
    let r = exe.run(req(second, "", &[], &[], false)).await;
    assert!(run(&r).warm, "{}", describe(&r));
    assert_eq!(stdout(&r), "None []\n", "{}", describe(&r));
    // The zygote dies between runs: the next run is still answered, and warm again
    // once a new zygote is up.
    assert!(
        sandpool_tests::signal(zygote, libc::SIGKILL),
        "the zygote {zygote} was not there to kill"
    );
    let r = exe.run(req("print('after')", "", &[], &[], false)).await;
    assert_eq!(stdout(&r), "after\n", "{}", describe(&r));
    let r = exe
        .run(req("import os; print(os.getppid())", "", &[], &[], false))
        .await;
    assert!(run(&r).warm, "{}", describe(&r));
    let zygote2: u32 = stdout(&r).trim().parse().expect("a pid");
    assert_ne!(zygote2, zygote, "a new zygote forked it");
    // The zygote dies mid-run (its child dies with it): the executor failed, not the
    // program, so SANDBOX_ERROR (retryable), and the next run is served.
    let mut client = exe.client();
    let during = tokio::spawn(async move {
        client
            .execute(req(
                "import time\nprint('up', flush=True)\ntime.sleep(5)",
                "",
                &[],
                &[],
                false,
            ))
            .await
    });
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    assert!(
        sandpool_tests::signal(zygote2, libc::SIGKILL),
        "the zygote {zygote2} was not there to kill"
    );
    let r = during.await.expect("join").expect("a response").into_inner();
    assert_eq!(r.verdict, pb::Verdict::SandboxError as i32, "{}", describe(&r));
    let r = exe.run(req("print('served')", "", &[], &[], false)).await;
    assert_eq!(stdout(&r), "served\n", "{}", describe(&r));
}

/// A fork bomb in a warm restricted run fails on the process limit, and is not taken for a
/// memory failure: its members each map the zygote's pages, which summed over them came
/// "near the limit" (two runs in three read MEMORY_LIMIT_EXCEEDED before the check looked
/// at the largest process, as the per-process limit does).
#[tokio::test]
async fn a_restricted_warm_fork_bomb_is_not_a_memory_failure() {
    if !sandpool_sandbox::host::restricted_warm_starts() {
        eprintln!("skipped: this kernel's Landlock does not scope signals (restricted runs start cold)");
        return;
    }
    let exe = restricted_executor().await;
    for _ in 0..4 {
        let mut r = req("import os\nwhile True:\n    os.fork()\n", "", &[], &[], false);
        r.limits = Some(pb::Limits {
            wall_time_ms: 2_000,
            memory_bytes: 128 << 20,
            processes: 16,
            ..Default::default()
        });
        let r = exe.run(r).await;
        assert!(run(&r).warm, "{}", describe(&r));
        assert_eq!(r.verdict, pb::Verdict::RuntimeError as i32, "{}", describe(&r));
    }
}

/// Pids whose command line is exactly `argv`.
fn processes_running(argv: &[&str]) -> Vec<u32> {
    let want = argv.join("\0") + "\0";
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return vec![];
    };
    dir.flatten()
        .filter_map(|e| {
            let pid: u32 = e.file_name().to_str()?.parse().ok()?;
            let cmdline = std::fs::read(e.path().join("cmdline")).ok()?;
            (cmdline == want.as_bytes()).then_some(pid)
        })
        .collect()
}

/// The children of every thread of `pid`.
fn children_of(pid: u32) -> Vec<u32> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return vec![];
    };
    tasks
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("children")).ok())
        .flat_map(|s| {
            s.split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect::<Vec<u32>>()
        })
        .collect()
}

/// Requests dropped at every point of a warm restricted start (before the child said its
/// pid, before it was told to go, mid-program) leave nothing: no program of theirs runs
/// unwatched, and the zygotes hold no child (a zombie they were never told to reap).
#[tokio::test]
async fn restricted_warm_starts_cancelled_at_any_point_leave_nothing() {
    if !sandpool_sandbox::host::restricted_warm_starts() {
        eprintln!("skipped: this kernel's Landlock does not scope signals (restricted runs start cold)");
        return;
    }
    let exe = restricted_executor().await;
    let code = "import subprocess, time\nsubprocess.Popen(['sleep', '987.652'])\ntime.sleep(60)\n";
    for i in 0..40u64 {
        let mut r = req(code, "", &[], &[], false);
        r.limits = Some(pb::Limits {
            wall_time_ms: 60_000,
            ..Default::default()
        });
        let mut client = exe.client();
        let call = tokio::spawn(async move { client.execute(r).await });
        // 0-9.75 ms: through the fork, the pid, the go-ahead and the program's start.
        tokio::time::sleep(std::time::Duration::from_micros(i * 250)).await;
        call.abort();
    }
    let t = std::time::Instant::now();
    let zygote = "# Sandpool's Python zygote";
    loop {
        let sleeps = processes_running(&["sleep", "987.652"]);
        let zygotes: Vec<u32> = children_of(exe.pid())
            .into_iter()
            .filter(|&p| {
                std::fs::read(format!("/proc/{p}/cmdline")).is_ok_and(|c| String::from_utf8_lossy(&c).contains(zygote))
            })
            .collect();
        let held: Vec<u32> = zygotes.iter().flat_map(|&z| children_of(z)).collect();
        if sleeps.is_empty() && held.is_empty() && !zygotes.is_empty() {
            break;
        }
        assert!(
            t.elapsed() < std::time::Duration::from_secs(10),
            "left behind: sleeps {sleeps:?}, zygotes {zygotes:?} still holding {held:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    // Both slots serve warm runs again.
    for _ in 0..2 {
        let r = exe.run(req("print('next')", "", &[], &[], false)).await;
        assert_eq!(stdout(&r), "next\n", "{}", describe(&r));
        assert!(run(&r).warm, "{}", describe(&r));
    }
}

/// Each slot's plain zygote starts with the executor, not with the slot's first
/// warm run (which would otherwise wait up to a second for it), and so does the one
/// session seats' interpreters fork from.
#[tokio::test]
async fn zygotes_start_with_the_executor() {
    let exe = Executor::start(Options {
        slots: 2,
        languages: vec!["python"],
        extra_args: vec!["--warm-starts".into(), "true".into()],
        ..Default::default()
    })
    .await;
    let zygotes = || {
        std::fs::read_dir("/proc")
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
            .filter(|p| {
                let stat = std::fs::read_to_string(format!("/proc/{p}/stat")).unwrap_or_default();
                let ppid = stat.rsplit(')').next().and_then(|r| r.split_whitespace().nth(1));
                ppid == Some(&exe.pid().to_string())
                    && std::fs::read(format!("/proc/{p}/cmdline"))
                        .is_ok_and(|c| String::from_utf8_lossy(&c).contains("Sandpool's Python zygote"))
            })
            .count()
    };
    let t = std::time::Instant::now();
    // Two slots' and the seats'.
    while zygotes() < 3 {
        assert!(t.elapsed().as_secs() < 60, "{} zygotes started", zygotes());
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let r = exe.run(req("print('one')", "", &[], &[], false)).await;
    assert!(r.run.as_ref().is_some_and(|p| p.warm), "{}", describe(&r));
    // Still the same three: the run used one of them (no numpy named, no second kind).
    assert_eq!(zygotes(), 3);
}

/// Attack round 2, item 11: what a program can tell apart warm and cold, pinned as
/// docs/warm-starts.md lists it: only `getppid()` (0 warm, 1 cold). Both are pid 2 and lead
/// their own session and process group, neither sees pid 1 (the init is root's, hidden by
/// `hidepid=2`), and `kill(0, SIGSTOP)` stops the program's own group alike: the run ends at
/// its wall limit.
#[tokio::test]
async fn what_a_program_can_tell_apart_warm_and_cold_is_what_the_docs_list() {
    let exe = executor().await;
    let probe = "import os\nprint(os.getppid(), os.path.exists('/proc/1'), os.getpgrp() == os.getpid(), os.getsid(0) == os.getpid(), sorted(int(p) for p in os.listdir('/proc') if p.isdigit()))";
    let warm = exe.run(req(probe, "", &[], &[], false)).await;
    let cold = exe.run(req(probe, "", &[], &[], true)).await;
    assert!(run(&warm).warm && !run(&cold).warm);
    assert_eq!(stdout(&warm), "0 False True True [2]\n", "{}", describe(&warm));
    assert_eq!(stdout(&cold), "1 False True True [2]\n", "{}", describe(&cold));
    let stop = "import os, signal\nprint('before', flush=True)\nos.kill(0, signal.SIGSTOP)\nprint('after')";
    let limited = |cold| {
        let mut r = req(stop, "", &[], &[], cold);
        r.limits = Some(pb::Limits {
            wall_time_ms: 1500,
            ..Default::default()
        });
        r
    };
    for cold in [false, true] {
        let r = exe.run(limited(cold)).await;
        assert_eq!(run(&r).warm, !cold);
        assert_eq!(r.verdict, pb::Verdict::WallTimeLimitExceeded as i32, "{}", describe(&r));
        assert_eq!(stdout(&r), "before\n", "{}", describe(&r));
    }
    // The slot is fine afterwards.
    let r = exe.run(req("print('ok')", "", &[], &[], false)).await;
    assert_eq!(stdout(&r), "ok\n", "{}", describe(&r));
}
