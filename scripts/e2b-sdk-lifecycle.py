#!/usr/bin/env python3
"""Issue 47's lifecycle through the unmodified E2B SDKs (`e2b` / `e2b-code-interpreter` 2.x).

    e2b-sdk-lifecycle.py [BASE_URL]        (or E2B_SDK_BASE_URL; E2B_API_KEY, default "e2b-sdk")

BASE_URL is an executor's HTTP port or a pool's gateway (both E2B's control plane and its
sandbox URL). In order: a code-interpreter sandbox with a file under /home/user (files API,
read back by commands.run and run_code) and a Python variable and function; pause(mode=
"filesystem") and connect (file kept, interpreter cold); pause(mode="full") and connect
(file and variable kept); an auto-pause lifecycle (paused at its timeout, resumed by its next
call, file and variable kept); create_snapshot() (listed by list_snapshots(), the class's
and the sandbox's) and two Sandbox.create(snapshot_id) started back to back (through a
gateway over two executors: one on each), each with the file and the variable;
fork(count=2) of the running sandbox (each fork with the file and the variable, writes kept
apart); delete_snapshot (no longer listed); everything killed. Prints one line per step and last
`e2b-sdk: ok pause=... resume=... autopause=... snapshot=... executors=...`; exits 1 with
`e2b-sdk: FAILED <step>: <why>` at the first failure (2 when the SDK is missing).

Only the SDK and the standard library: the node e2e runs it from the executor image's python3
with the SDK's site-packages mounted on PYTHONPATH.
"""

import importlib.metadata
import os
import sys
import time
import traceback

USAGE = "usage: e2b-sdk-lifecycle.py BASE_URL (or E2B_SDK_BASE_URL), e.g. http://127.0.0.1:8080"
base = (sys.argv[1] if len(sys.argv) > 1 else os.environ.get("E2B_SDK_BASE_URL", "")).rstrip("/")
if not base.startswith(("http://", "https://")):
    print(f"e2b-sdk: FAILED arguments: {USAGE}", file=sys.stderr)
    sys.exit(2)
# The SDK reads these when it builds each connection; E2B_DEBUG would fake the control plane,
# E2B_DOMAIN and E2B_ACCESS_TOKEN would only confuse (docs: e2b-piston protocol notes).
os.environ["E2B_API_URL"] = base
os.environ["E2B_SANDBOX_URL"] = base
os.environ.setdefault("E2B_API_KEY", "e2b-sdk")
for k in ("E2B_DEBUG", "E2B_DOMAIN", "E2B_ACCESS_TOKEN"):
    os.environ.pop(k, None)

try:
    from e2b import Sandbox, SandboxState
    from e2b_code_interpreter import Sandbox as CodeSandbox
except ImportError as e:
    print(f"e2b-sdk: FAILED import: {e} (install e2b-code-interpreter 2.x, or put it on PYTHONPATH)", file=sys.stderr)
    sys.exit(2)

AUTO_TIMEOUT_S = int(os.environ.get("E2B_SDK_AUTOPAUSE_TIMEOUT", "5"))
WAIT_S = float(os.environ.get("E2B_SDK_WAIT", "90"))
DIR = "/home/user/e2b-sdk"
TEXT = "written through the files API"

made = []  # every sandbox id made, killed at the end
snapshots = []  # snapshot ids not yet deleted
seen = {}  # sandbox id -> the executor its id names (what a pool's gateway routes by)
timings = {}


class Failed(Exception):
    pass


def check(cond, what):
    if not cond:
        raise Failed(what)


def step(name):
    """Runs the decorated function at once as step NAME, timing it; the first failure ends the run."""

    def run(f):
        t0 = time.monotonic()
        try:
            f()
        except Exception as e:  # noqa: BLE001: any failure of the SDK or a check ends the run, named
            detail = "".join(traceback.format_exception_only(type(e), e)).strip()
            if os.environ.get("E2B_SDK_VERBOSE"):
                traceback.print_exc()
            print(f"e2b-sdk: FAILED {name}: {detail}", flush=True)
            cleanup()
            sys.exit(1)
        timings[name] = time.monotonic() - t0
        print(f"e2b-sdk: {name} ok ({timings[name]:.2f} s)", flush=True)
        return f

    return run


def track(sbx):
    made.append(sbx.sandbox_id)
    # E2B ids here are 32 hex digits, '-', the executor's name.
    seen[sbx.sandbox_id] = sbx.sandbox_id.partition("-")[2] or "?"
    return sbx


def stdout(ex):
    check(ex.error is None, f"run_code raised {ex.error}")
    return "".join(ex.logs.stdout)


def wait_state(sid, want):
    deadline = time.monotonic() + WAIT_S
    state = None
    while time.monotonic() < deadline:
        state = Sandbox.get_info(sid).state
        if state == want:
            return
        time.sleep(0.5)
    raise Failed(f"{sid} is {state}, not {want}, {WAIT_S:.0f} s after its timeout")


def has_state(sbx, var="x"):
    """The file (through commands and run_code) and `inc(var)` == 42 in SBX."""
    r = sbx.commands.run(f"cat {DIR}/data.txt")
    check((r.exit_code, r.stdout) == (0, TEXT), f"commands.run cat: {r}")
    out = stdout(sbx.run_code(f"print(open('{DIR}/data.txt').read(), inc({var}))"))
    check(out == f"{TEXT} 42\n", f"run_code saw {out!r}")


def cleanup():
    for sid in snapshots:
        try:
            Sandbox.delete_snapshot(sid)
        except Exception:  # noqa: BLE001: best effort on the way out
            pass
    for sid in made:
        try:
            Sandbox.kill(sid)
        except Exception:  # noqa: BLE001
            pass


def version(dist):
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "?"


print(f"e2b-sdk: e2b {version('e2b')}, e2b-code-interpreter {version('e2b-code-interpreter')}, against {base}", flush=True)
state = {}


@step("create")
def _():
    sbx = track(CodeSandbox.create(timeout=300))
    sbx.files.write(f"{DIR}/data.txt", TEXT)
    r = sbx.commands.run(f"cat {DIR}/data.txt; echo; pwd; echo $HOME")
    check(r.exit_code == 0 and r.stdout == f"{TEXT}\n/home/user\n/home/user\n", f"commands.run: {r}")
    out = stdout(sbx.run_code(f"print(open('{DIR}/data.txt').read())"))
    check(out == TEXT + "\n", f"run_code read {out!r}")
    stdout(sbx.run_code("x = 41\ndef inc(v):\n    return v + 1"))
    state["sbx"] = sbx


@step("pause-filesystem")
def _():
    sbx = state["sbx"]
    check(sbx.pause(mode="filesystem") is True, "pause(mode='filesystem') did not pause")
    check(Sandbox.get_info(sbx.sandbox_id).state == SandboxState.PAUSED, "get_info: not paused")
    check(sbx.pause(mode="filesystem") is False, "a second pause paused again")


@step("resume-filesystem")
def _():
    sbx = CodeSandbox.connect(state["sbx"].sandbox_id, timeout=300)
    check(sbx.files.read(f"{DIR}/data.txt") == TEXT, "files.read after the filesystem pause")
    r = sbx.commands.run(f"cat {DIR}/data.txt")
    check(r.stdout == TEXT, f"commands.run after the filesystem pause: {r}")
    out = stdout(sbx.run_code("print('x' in globals())"))
    check(out == "False\n", f"a filesystem pause kept the interpreter ({out!r})")
    stdout(sbx.run_code("x = 41\ndef inc(v):\n    return v + 1"))
    state["sbx"] = sbx


@step("pause-full")
def _():
    check(state["sbx"].pause(mode="full") is True, "pause(mode='full') did not pause")


@step("resume-full")
def _():
    sbx = CodeSandbox.connect(state["sbx"].sandbox_id, timeout=300)
    has_state(sbx)
    check(sbx.is_running(), "not running after connect")
    state["sbx"] = sbx


@step("autopause")
def _():
    auto = track(
        CodeSandbox.create(
            timeout=AUTO_TIMEOUT_S,
            lifecycle={"on_timeout": {"action": "pause", "mode": "full"}, "auto_resume": True},
        )
    )
    auto.files.write(f"{DIR}/data.txt", TEXT)
    stdout(auto.run_code("y = 41\ndef inc(v):\n    return v + 1"))
    wait_state(auto.sandbox_id, SandboxState.PAUSED)
    # The next call resumes it (auto_resume): the data plane with the handle from before.
    has_state(auto, "y")
    check(Sandbox.get_info(auto.sandbox_id).state == SandboxState.RUNNING, "get_info: not running after the call")
    auto.kill()


@step("snapshot")
def _():
    sbx = state["sbx"]
    info = sbx.create_snapshot()
    check(bool(info.snapshot_id), f"create_snapshot: {info}")
    snapshots.append(info.snapshot_id)
    # The source goes on, with its state.
    has_state(sbx)
    state["snap"] = info.snapshot_id
    # Listed: among the caller's, and as the source's only one.
    listed = {s.snapshot_id for s in Sandbox.list_snapshots().next_items()}
    check(info.snapshot_id in listed, f"Sandbox.list_snapshots() left it out: {listed}")
    mine = [s.snapshot_id for s in sbx.list_snapshots().next_items()]
    check(mine == [info.snapshot_id], f"sbx.list_snapshots() gave {mine}")


@step("from-snapshot")
def _():
    # Back to back: a pool's gateway sends consecutive creates to different executors, so
    # through one over two executors, one copy is restored on the other one from the store.
    copies = [track(CodeSandbox.create(state["snap"], timeout=300)) for _ in range(2)]
    for c in copies:
        check(c.sandbox_id != state["sbx"].sandbox_id, "the copy has the source's id")
        has_state(c)
    copies[0].files.write(f"{DIR}/data.txt", "changed in a copy")
    check(state["sbx"].files.read(f"{DIR}/data.txt") == TEXT, "a copy's write reached the source")
    check(copies[1].files.read(f"{DIR}/data.txt") == TEXT, "a copy's write reached the other copy")
    state["copies"] = copies


@step("fork")
def _():
    # E2B's fork(count): copies of a running sandbox, each with the source's files and (a
    # Python session) its interpreter's names, on the source's executor; the source goes on.
    src = state["sbx"]
    forks = src.fork(timeout=300, count=2)
    check(len(forks) == 2, f"fork(count=2) gave {len(forks)}: {forks}")
    for f in forks:
        check(not isinstance(f, Exception), f"a fork failed: {f!r}")
        track(f)
        check(f.sandbox_id != src.sandbox_id, "the fork has the source's id")
        has_state(f)
    forks[0].files.write(f"{DIR}/data.txt", "changed in a fork")
    check(src.files.read(f"{DIR}/data.txt") == TEXT, "a fork's write reached the source")
    check(forks[1].files.read(f"{DIR}/data.txt") == TEXT, "a fork's write reached the other fork")
    has_state(src)


@step("delete-snapshot")
def _():
    snap = snapshots.pop()
    check(Sandbox.delete_snapshot(snap) is True, "delete_snapshot did not delete")
    listed = {s.snapshot_id for s in Sandbox.list_snapshots().next_items()}
    check(snap not in listed, "Sandbox.list_snapshots() still lists the deleted snapshot")
    try:
        track(CodeSandbox.create(snap, timeout=60))
    except Exception as e:  # noqa: BLE001: the SDK's own exception for an unknown template
        check("not found" in str(e).lower(), f"create from a deleted snapshot: {e}")
    else:
        raise Failed("a deleted snapshot started a sandbox")


@step("kill")
def _():
    for sid in made:
        Sandbox.kill(sid)  # True, or False for one already gone (the auto-pause one)
    running = {s.sandbox_id for s in Sandbox.list().next_items()}
    left = running & set(made)
    check(not left, f"still listed after kill: {left}")
    made.clear()


executors = sorted(set(seen.values()))
print(
    "e2b-sdk: ok pause=filesystem,full resume=connect autopause=paused,resumed snapshot=created,listed,2-copies,deleted fork=2 "
    f"executors={','.join(executors)} "
    f"times=pause:{timings['pause-full']:.2f}s,resume:{timings['resume-full']:.2f}s,snapshot:{timings['snapshot']:.2f}s,fork:{timings['fork']:.2f}s",
    flush=True,
)
