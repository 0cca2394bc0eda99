#!/usr/bin/env python3
"""Pause, resume and agent scale with pauses (issue 47 item 6; docs/sessions.md, "Measured").

Starts a real executor (`sandpool-executor`, as deployed: its own process) with a session
store, and measures through gRPC:

  create    the same-run baseline: CreateSession with a WORK_KIB file in /work, then its
            first call (the interpreter starts then): p50/p99
  fs        filesystem mode: a session with a WORK_KIB file (random bytes) and a live
            interpreter is paused, resumed, and called (the file checked): pause, resume RPC,
            and resume + first call p50/p99; bytes stored per session
  full      full mode with a small interpreter state (a dict of 1,000 entries, a function, a
            class and its instance, an import): the same, the first call checks the state
  fork      ForkSession{n=16}, when the executor's API has it
  churn     (--sessions N --live L) N sessions created with auto_resume, paused by the executor
            itself after --pause-after-ms of idleness (`--session-pause-after-idle-ms`); random
            sessions are then called at the rate that keeps about L live, for --seconds: the
            latency of calls that found their session paused (auto-resume) and of those that
            found it live, the executor's RSS, live sessions, store bytes

Prints a table, the anchors' published figures beside ours, and one line `SESSIONS_JSON {...}`.

    .venv/bin/python bench/sessions.py                           # local-directory store
    .venv/bin/python bench/sessions.py --store s3                # S3: scripts/s3.sh up first
    .venv/bin/python bench/sessions.py --store both --sessions 300 --live 30

Needs root (namespaces mode) and the Python client in the workspace's .venv
(scripts/test-python.sh installs it). S3: the SeaweedFS of `scripts/s3.sh up` (its endpoint and
credentials from `scripts/s3.sh env`, read here); the bench writes a key file (S3 requires one).
"""

import argparse
import atexit
import concurrent.futures
import json
import os
import random
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

import grpc

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def stubs():
    """Stubs compiled from this checkout's proto (the executor's API, ForkSession included),
    as bench/fork.py does; the installed client's where grpc_tools is missing."""
    try:
        import grpc_tools
        from grpc_tools import protoc
    except ImportError:
        from sandpool.v1 import executor_pb2, executor_pb2_grpc

        return executor_pb2, executor_pb2_grpc
    out = tempfile.mkdtemp(prefix="sandpool-bench-stubs-")
    atexit.register(shutil.rmtree, out, True)
    proto = os.path.join(ROOT, "proto")
    v1 = os.path.join(proto, "sandpool", "v1")
    inc = os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")
    argv = ["protoc", f"-I{proto}", f"-I{inc}", f"--python_out={out}", f"--grpc_python_out={out}"]
    if protoc.main(argv + [os.path.join(v1, f) for f in os.listdir(v1) if f.endswith(".proto")]) != 0:
        sys.exit("protoc failed on proto/sandpool/v1")
    for d in ("sandpool", "sandpool/v1"):  # regular packages, ahead of the installed client's
        open(os.path.join(out, d, "__init__.py"), "a").close()
    sys.path.insert(0, out)
    from sandpool.v1 import executor_pb2, executor_pb2_grpc

    return executor_pb2, executor_pb2_grpc


pb, pb_grpc = stubs()

# Published figures of the anchors, with where they are published (never invented here).
ANCHORS = {
    "e2b_pause": "about 4 s per 1 GB of RAM (e2b.dev/docs/sandbox/persistence, 'Limitations while in beta')",
    "e2b_resume": "about 1 s (same page)",
    "e2b_fork": "not published (E2B has no fork; snapshots start new sandboxes)",
    "e2b_bytes": "not published",
}

FULL_STATE = """
import json as j
data = {i: str(i) for i in range(1000)}
def f(x):
    return x * 2
class C:
    def __init__(self, v):
        self.v = v
c = C(21)
"""


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pct(xs, p):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    i = max(1, min(len(xs), int(-(-len(xs) * p // 1)))) - 1
    return xs[i]


def ms(t0):
    return (time.perf_counter() - t0) * 1000


def tree_bytes(path):
    total = 0
    for d, _, files in os.walk(path):
        for f in files:
            try:
                total += os.lstat(os.path.join(d, f)).st_size
            except OSError:
                pass
    return total


class S3:
    """The SeaweedFS of scripts/s3.sh (it must be up), and a bucket name of this run's own."""

    def __init__(self, tmp):
        out = subprocess.run([os.path.join(ROOT, "scripts/s3.sh"), "env"], capture_output=True, text=True)
        if out.returncode != 0:
            sys.exit(f"--store s3 needs scripts/s3.sh up first: {out.stderr.strip()}")
        env = dict(re.findall(r"export (\w+)=(\S+)", out.stdout))
        self.endpoint = env["SANDPOOL_TEST_S3_ENDPOINT"]
        self.bucket = env["SANDPOOL_TEST_S3_BUCKET"]
        self.region = env["SANDPOOL_TEST_S3_REGION"]
        self.creds = os.path.join(tmp, "s3-credentials")
        os.makedirs(self.creds, exist_ok=True)
        for name, var in (("access_key_id", "SANDPOOL_TEST_S3_ACCESS_KEY"), ("secret_access_key", "SANDPOOL_TEST_S3_SECRET_KEY")):
            with open(os.path.join(self.creds, name), "w") as f:
                f.write(env[var])
        self.key = os.path.join(tmp, "store.key")
        with open(self.key, "w") as f:
            f.write(os.urandom(32).hex())
        self.prefix = f"bench-{os.getpid()}-{int(time.time())}"

    def flags(self):
        return [
            "--session-store-s3-bucket", self.bucket,
            "--session-store-s3-endpoint", self.endpoint,
            "--session-store-s3-region", self.region,
            "--session-store-s3-credentials-dir", self.creds,
            "--session-store-key-file", self.key,
            "--session-store-prefix", self.prefix,
        ]


class Executor:
    def __init__(self, a, tmp, name, store, extra=()):
        self.work_root = os.path.join(tmp, name)
        os.makedirs(self.work_root)
        self.store_dir = os.path.join(self.work_root, "session-store")
        self.port, self.metrics_port = free_port(), free_port()
        argv = [
            a.executor,
            "--listen", f"127.0.0.1:{self.port}",
            "--metrics-listen", f"127.0.0.1:{self.metrics_port}",
            "--slots", str(a.slots),
            "--enable-languages", "python,bash",
            "--work-root", self.work_root,
            "--uid-base", str(400_000 + (os.getpid() % 50) * 4000),
            # The memory budget and the caps are not what this measures (the tests cover them);
            # --memory-bytes sets it to see what a real budget admits.
            "--session-memory-bytes", str(a.memory_bytes),
            "--result-cache-entries", "0",
            *(store.flags() if store else ["--session-store-dir", self.store_dir]),
            *(["--session-store-key-file", a.key_file] if a.seal and not store else []),
            *(["--session-store-tenant-bytes", str(a.store_tenant_bytes)] if a.store_tenant_bytes else []),
            *extra,
        ]
        self.log = open(os.path.join(tmp, f"{name}.log"), "w")
        self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=self.log)
        self.channel = grpc.insecure_channel(
            f"127.0.0.1:{self.port}",
            options=[("grpc.max_receive_message_length", 64 << 20), ("grpc.max_send_message_length", 64 << 20)],
        )
        self.stub = pb_grpc.ExecutorStub(self.channel)
        deadline = time.time() + 60
        while True:
            try:
                self.stub.Execute(pb.ExecuteRequest(language="python", code="pass"), timeout=10)
                break
            except grpc.RpcError:
                if time.time() > deadline or self.proc.poll() is not None:
                    raise SystemExit(f"the executor did not start; see {self.log.name}")
                time.sleep(0.3)

    def rss_mib(self):
        with open(f"/proc/{self.proc.pid}/status") as f:
            m = re.search(r"VmRSS:\s+(\d+) kB", f.read())
        return int(m.group(1)) / 1024 if m else float("nan")

    def fds(self):
        try:
            return len(os.listdir(f"/proc/{self.proc.pid}/fd"))
        except OSError:
            return -1

    def live_sessions(self):
        try:
            text = urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5).read().decode()
        except OSError:
            return -1
        m = re.search(r"^sandpool_sessions(?:\{[^}]*\})? (\S+)$", text, re.M)
        return int(float(m.group(1))) if m else -1

    def stop(self):
        self.channel.close()
        self.proc.terminate()
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


def cell(sid, code):
    return pb.RunInSessionRequest(session_id=sid, code=code)


def call(ex, sid, code, want):
    r = ex.stub.RunInSession(cell(sid, code), timeout=120)
    if r.verdict != pb.OK or (r.display or r.result.stdout.decode(errors="replace").strip()) != want:
        raise RuntimeError(f"{code!r} answered {pb.Verdict.Name(r.verdict)} {r.display!r} {r.message} {r.result.stderr[-300:]!r}")


def work_file(kib):
    return [pb.File(path="blob.bin", content=os.urandom(kib << 10))]


def latency(a, ex, store_name):
    """create, fs, full (and fork) figures of one executor."""
    kib = a.work_kib
    size = str(kib << 10)
    check = "import os; os.path.getsize('blob.bin')"
    for _ in range(5):  # warm-up: zygotes, the first interpreters, the store opened
        s = ex.stub.CreateSession(pb.CreateSessionRequest(language="python"))
        call(ex, s.session_id, "1", "1")
        ex.stub.PauseSession(pb.PauseSessionRequest(session_id=s.session_id))
        ex.stub.ResumeSession(pb.ResumeSessionRequest(session_id=s.session_id))
        ex.stub.CloseSession(pb.CloseSessionRequest(session_id=s.session_id))
    out = {k: [] for k in ("create", "create_call", "fs_pause", "fs_resume", "fs_resume_call",
                           "full_pause", "full_resume", "full_resume_call")}
    stored, on_disk = [], []
    for i in range(a.runs):
        t = time.perf_counter()
        s = ex.stub.CreateSession(pb.CreateSessionRequest(language="python", files=work_file(kib)))
        out["create"].append(ms(t))
        call(ex, s.session_id, check, size)
        out["create_call"].append(ms(t))
        ex.stub.CloseSession(pb.CloseSessionRequest(session_id=s.session_id))

        s = ex.stub.CreateSession(pb.CreateSessionRequest(language="python", files=work_file(kib)))
        call(ex, s.session_id, f"x = {i}\nx", str(i))
        before = tree_bytes(ex.store_dir) if store_name == "dir" else 0
        t = time.perf_counter()
        p = ex.stub.PauseSession(pb.PauseSessionRequest(session_id=s.session_id, mode=pb.PAUSE_MODE_FILESYSTEM))
        out["fs_pause"].append(ms(t))
        stored.append(p.stored_bytes)
        if store_name == "dir":
            on_disk.append(tree_bytes(ex.store_dir) - before)
        t = time.perf_counter()
        ex.stub.ResumeSession(pb.ResumeSessionRequest(session_id=s.session_id))
        out["fs_resume"].append(ms(t))
        call(ex, s.session_id, check, size)
        out["fs_resume_call"].append(ms(t))
        ex.stub.CloseSession(pb.CloseSessionRequest(session_id=s.session_id))

        s = ex.stub.CreateSession(pb.CreateSessionRequest(language="python"))
        call(ex, s.session_id, FULL_STATE + "c.v", "21")
        t = time.perf_counter()
        p = ex.stub.PauseSession(pb.PauseSessionRequest(session_id=s.session_id, mode=pb.PAUSE_MODE_FULL))
        out["full_pause"].append(ms(t))
        if list(p.lost_names):
            raise RuntimeError(f"full pause lost {list(p.lost_names)}")
        t = time.perf_counter()
        ex.stub.ResumeSession(pb.ResumeSessionRequest(session_id=s.session_id))
        out["full_resume"].append(ms(t))
        call(ex, s.session_id, "(f(len(data)), c.v, j.dumps(1))", "(2000, 21, '1')")
        out["full_resume_call"].append(ms(t))
        ex.stub.CloseSession(pb.CloseSessionRequest(session_id=s.session_id))
    res = {k: {"p50": pct(v, 0.5), "p99": pct(v, 0.99)} for k, v in out.items()}
    res["stored_bytes"] = statistics.mean(stored)
    if on_disk:
        res["on_disk_bytes"] = statistics.mean(on_disk)
    res["fork16"] = fork(ex, a) if hasattr(pb, "ForkSessionRequest") else None
    return res


def fork(ex, a):
    """ForkSession{n=16} of a session with a WORK_KIB /work and a small state: p50/p99 of runs."""
    times = []
    for _ in range(max(3, a.runs // 3)):
        s = ex.stub.CreateSession(pb.CreateSessionRequest(language="python", files=work_file(a.work_kib)))
        call(ex, s.session_id, FULL_STATE + "c.v", "21")
        t = time.perf_counter()
        r = ex.stub.ForkSession(pb.ForkSessionRequest(session_id=s.session_id, n=16))
        times.append(ms(t))
        ids = [x.session_id for x in r.sessions]
        if len(ids) != 16:
            raise RuntimeError(f"ForkSession answered {len(ids)} sessions")
        for sid in ids + [s.session_id]:
            ex.stub.CloseSession(pb.CloseSessionRequest(session_id=sid))
    return {"p50": pct(times, 0.5), "p99": pct(times, 0.99)}


def churn(a, ex, store_name):
    """N sessions, about L live, the rest paused by the executor after idling."""
    n, live, idle_s = a.sessions, a.live, a.pause_after_ms / 1000
    rate = live / idle_s  # calls per second that keep about L sessions touched within an idle period
    t = time.perf_counter()

    # Created no faster than the executor pauses them: at most max(2 L, 32) live at once, as
    # the full size (10,000 sessions) would never have all its interpreters live together.
    cap = max(2 * live, 32)
    kib = a.churn_work_kib if a.churn_work_kib is not None else a.work_kib
    lang = a.language
    # What a call checks lives in /work (an idle pause keeps it in either mode).
    check = (lambda i: ("cat id", str(i))) if lang == "bash" else (lambda i: ("open('id').read()", repr(str(i))))
    progress = []  # (seconds since the start, sessions created, live, executor RSS MiB, fds)

    def make(i):
        while i % 8 == 0 and ex.live_sessions() > cap:
            time.sleep(0.2)
        files = work_file(kib) + [pb.File(path="id", content=str(i).encode())]
        s = ex.stub.CreateSession(pb.CreateSessionRequest(language=lang, auto_resume=True, files=files), timeout=120)
        call(ex, s.session_id, *check(i))
        if i % 500 == 499:
            progress.append((time.perf_counter() - t, i + 1, ex.live_sessions(), ex.rss_mib(), ex.fds()))
            print(f"  created {i + 1} in {progress[-1][0]:.0f} s: live {progress[-1][2]}, "
                  f"RSS {progress[-1][3]:.0f} MiB, fds {progress[-1][4]}", file=sys.stderr, flush=True)
        return s.session_id

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        ids = list(pool.map(make, range(n)))
    created_s = time.perf_counter() - t
    last = {i: time.monotonic() for i in range(n)}
    # Wait for the executor to pause the idle ones.
    deadline = time.monotonic() + idle_s + 60 + n * 0.5
    while ex.live_sessions() > live and time.monotonic() < deadline:
        time.sleep(0.5)
    settled_live = ex.live_sessions()
    lock = threading.Lock()
    busy = set()
    resumed, warm, errors, done = [], [], [], []
    samples = []
    stop = time.monotonic() + a.seconds
    next_at = [time.monotonic()]

    def worker():
        rng = random.Random()
        while True:
            with lock:
                now = time.monotonic()
                if now >= stop:
                    return
                wait = next_at[0] - now
                next_at[0] = max(next_at[0], now) + 1 / rate
                free = [i for i in rng.sample(range(n), min(n, 16)) if i not in busy]
                if not free:
                    continue
                i = free[0]
                busy.add(i)
                idle = now - last[i]
            if wait > 0:
                time.sleep(wait)
            t0 = time.perf_counter()
            try:
                call(ex, ids[i], *check(i))
                took = ms(t0)
                done.append(took)
                # Past the idle period plus the reaper's sweep and a pause's length: paused.
                if idle > idle_s + 2:
                    resumed.append(took)
                elif idle < idle_s * 0.8:
                    warm.append(took)
            except Exception as e:  # counted and reported; the first is printed
                errors.append(str(e))
            with lock:
                last[i] = time.monotonic()
                busy.discard(i)

    def sampler():
        while time.monotonic() < stop:
            samples.append((ex.live_sessions(), ex.rss_mib(), ex.fds()))
            time.sleep(1)

    threads = [threading.Thread(target=worker) for _ in range(a.workers)] + [threading.Thread(target=sampler)]
    t = time.monotonic()
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    wall = time.monotonic() - t
    calls = len(done)
    lives = [s[0] for s in samples if s[0] >= 0]
    rss = [s[1] for s in samples]
    paused = max(0, n - (lives[-1] if lives else 0))
    fds = [s[2] for s in samples]
    store_bytes = tree_bytes(ex.store_dir) if store_name == "dir" else None
    seat_pss = seats_pss_mib(ex)
    cgroup = seats_charged_mib(ex)
    pauses = auto_pauses_ms(ex)
    res = {
        "sessions": n, "live_target": live, "pause_after_ms": a.pause_after_ms, "seconds": a.seconds,
        "created_s": created_s, "live_after_settle": settled_live,
        "rate_target": rate, "rate": (calls + len(errors)) / wall,
        "resume_call": {"p50": pct(resumed, 0.5), "p99": pct(resumed, 0.99), "n": len(resumed)},
        "live_call": {"p50": pct(warm, 0.5), "p99": pct(warm, 0.99), "n": len(warm)},
        "all_calls": {"p50": pct(done, 0.5), "p99": pct(done, 0.99), "n": len(done)},
        "errors": len(errors), "first_error": errors[0] if errors else None,
        "live": {"mean": statistics.mean(lives) if lives else None, "max": max(lives) if lives else None},
        "executor_rss_mib": {"mean": statistics.mean(rss) if rss else None, "max": max(rss) if rss else None},
        "seats_pss_mib": seat_pss, "live_at_end": lives[-1] if lives else None,
        "seats_charged_mib": cgroup, "language": lang, "work_kib": kib,
        "executor_fds": {"mean": statistics.mean(fds) if fds else None, "max": max(fds) if fds else None},
        "auto_pause": {"p50": pct(pauses, 0.5), "p99": pct(pauses, 0.99), "n": len(pauses)},
        "create_progress": progress,
        "store_bytes": store_bytes, "store_bytes_per_paused": (store_bytes / paused) if store_bytes and paused else None,
    }
    def close(sid):
        try:
            ex.stub.CloseSession(pb.CloseSessionRequest(session_id=sid), timeout=60)
        except grpc.RpcError:
            pass

    t = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        list(pool.map(close, ids))
    res["closed_s"] = time.perf_counter() - t
    return res


def auto_pauses_ms(ex):
    """How long each idle pause took, from the executor's log (`idle session paused ... ms=`)."""
    ex.log.flush()
    out = []
    with open(ex.log.name, errors="replace") as f:
        for line in f:
            if "idle session paused" in line:
                m = re.search(r"\bms=(\d+)", line)
                if m:
                    out.append(int(m.group(1)))
    return out


def seats_charged_mib(ex):
    """What the seats' cgroups are charged together (cgroup v1 `memory.usage_in_bytes` of the
    executor's `sessions` cgroup, or v2's `memory.current`), MiB, and the seats holding a
    process: the memory budget is measured in these, not in PSS."""
    h = 0xCBF29CE484222325
    for b in ex.work_root.encode():  # sandbox/src/config.rs, cgroup_name
        h = ((h ^ b) * 0x100000001B3) & (2**64 - 1)
    name = f"sandpool-{h & 0xFFFFFFFF:08x}"
    own = {}
    with open(f"/proc/{ex.proc.pid}/cgroup") as f:
        for line in f:
            _, ctrls, path = line.rstrip("\n").split(":", 2)
            for c in ctrls.split(",") if ctrls else [""]:
                own[c] = path.lstrip("/")
    for base, file in ((f"/sys/fs/cgroup/memory/{own.get('memory', '')}", "memory.usage_in_bytes"),
                       (f"/sys/fs/cgroup/{own.get('', '')}", "memory.current")):
        d = os.path.join(base, name, "sessions")
        try:
            with open(os.path.join(d, file)) as f:
                total = int(f.read())
        except OSError:
            continue
        seats = 0
        for e in os.listdir(d):
            try:
                with open(os.path.join(d, e, "cgroup.procs")) as f:
                    seats += bool(f.read().strip())
            except OSError:
                pass
        return {"mib": total / 2**20, "seats": seats}
    return None


def seats_pss_mib(ex):
    """PSS of every process of the seats' uids (the live sessions' inits and interpreters), MiB."""
    base = 400_000 + (os.getpid() % 50) * 4000
    total = 0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/status") as f:
                uid = int(re.search(r"^Uid:\s+(\d+)", f.read(), re.M).group(1))
            if not base <= uid < base + 40_000:
                continue
            with open(f"/proc/{pid}/smaps_rollup") as f:
                m = re.search(r"^Pss:\s+(\d+) kB", f.read(), re.M)
            total += int(m.group(1)) if m else 0
        except (OSError, AttributeError):
            pass
    return total / 1024


def row(name, v, anchor=""):
    print(f"{name:<44} {v['p50']:>9.1f} {v['p99']:>9.1f}  {anchor}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--executor", default=os.path.join(ROOT, "target/debug/sandpool-executor"))
    ap.add_argument("--store", choices=["dir", "s3", "both"], default="dir")
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--work-kib", type=int, default=1024)
    ap.add_argument("--slots", type=int, default=2)
    ap.add_argument("--seal", action="store_true", help="seal the directory store's blobs too (S3's always are)")
    ap.add_argument("--sessions", type=int, default=0, help="churn: sessions held (0: no churn phase)")
    ap.add_argument("--live", type=int, default=20, help="churn: sessions kept live")
    ap.add_argument("--pause-after-ms", type=int, default=5000, help="churn: --session-pause-after-idle-ms")
    ap.add_argument("--seconds", type=int, default=60, help="churn: how long")
    ap.add_argument("--workers", type=int, default=4, help="churn: callers at once")
    ap.add_argument("--language", choices=["python", "bash"], default="python",
                    help="churn: the sessions' language (python pauses in full mode when idle, bash in filesystem mode)")
    ap.add_argument("--churn-work-kib", type=int, default=None, help="churn: /work's file per session (default --work-kib)")
    ap.add_argument("--max-live", type=int, default=None,
                    help="churn: --max-sessions, the live sessions (seats) the executor has (default --sessions + 16)")
    ap.add_argument("--memory-bytes", type=int, default=1 << 40,
                    help="--session-memory-bytes (default 1 TiB: the budget is not what this measures)")
    ap.add_argument("--store-tenant-bytes", type=int, default=0,
                    help="--session-store-tenant-bytes (0: the executor's default, 10 GiB)")
    ap.add_argument("--no-latency", action="store_true", help="churn only: skip the create/fs/full/fork latencies")
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("run as root (namespaces mode needs it)")
    tmp = tempfile.mkdtemp(prefix="sandpool-bench-sessions-")
    a.key_file = os.path.join(tmp, "dir.key")
    with open(a.key_file, "w") as f:
        f.write(os.urandom(32).hex())
    stores = ["dir", "s3"] if a.store == "both" else [a.store]
    result = {"work_kib": a.work_kib, "sealed_dir": a.seal, "runs": a.runs, "slots": a.slots, "cpus": os.cpu_count(),
              "load": os.getloadavg()[0], "executor": os.path.basename(a.executor), "anchors": ANCHORS}
    try:
        for name in stores:
            s3 = S3(tmp) if name == "s3" else None
            if not a.no_latency:
                ex = Executor(a, tmp, f"latency-{name}", s3)
                try:
                    result[name] = latency(a, ex, name)
                finally:
                    ex.stop()
            if a.sessions:
                ex = Executor(a, tmp, f"churn-{name}", s3, [
                    "--max-sessions", str(a.max_live or a.sessions + 16),
                    "--session-pause-after-idle-ms", str(a.pause_after_ms),
                    "--session-idle-timeout-ms", str(3_600_000),
                    "--session-lifetime-ms", str(4 * 3_600_000),
                ])
                try:
                    result[f"churn_{name}"] = churn(a, ex, name)
                finally:
                    ex.stop()
        report(a, result, stores)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def report(a, r, stores):
    print(f"sessions: {a.runs} runs, /work {a.work_kib} KiB, {a.slots} slots, {r['cpus']} CPUs, "
          f"load {r['load']:.1f} at start, {r['executor']}")
    for name in stores:
        if name not in r:
            churn_report(r.get(f"churn_{name}"), name)
            continue
        x = r[name]
        sealed = " sealed" if name == "s3" or a.seal else ""
        print(f"\n[{name} store{sealed}]{'':<{31 - len(sealed)}} {'p50 ms':>9} {'p99 ms':>9}  anchor (published)")
        row("create + first call (baseline)", x["create_call"])
        row("  create RPC alone", x["create"])
        row("fs pause (1 MiB /work, live interpreter)", x["fs_pause"], "E2B: " + ANCHORS["e2b_pause"])
        row("fs resume RPC", x["fs_resume"])
        row("fs resume + first call", x["fs_resume_call"], "E2B: " + ANCHORS["e2b_resume"])
        row("full pause (small state)", x["full_pause"])
        row("full resume RPC", x["full_resume"])
        row("full resume + first call (state checked)", x["full_resume_call"])
        if x["fork16"]:
            row("ForkSession n=16", x["fork16"], "E2B: " + ANCHORS["e2b_fork"])
        else:
            print(f"{'ForkSession n=16':<44} {'not in this build':>19}")
        ratio = x["fs_resume_call"]["p50"] / x["create_call"]["p50"]
        x["fs_resume_vs_create_p50"] = ratio
        disk = f", {x['on_disk_bytes'] / 1024:.0f} KiB on disk with metadata" if "on_disk_bytes" in x else ""
        print(f"bytes stored per session (fs, archive): {x['stored_bytes'] / 1024:.0f} KiB{disk}; E2B: {ANCHORS['e2b_bytes']}")
        target = 100 if name == "dir" else 300
        print(f"fs resume + first call / create + first call, p50: {ratio:.2f}x; "
              f"target p50 <= {target} ms: {'met' if x['fs_resume_call']['p50'] <= target else 'MISSED'}")
        churn_report(r.get(f"churn_{name}"), name)
    print("SESSIONS_JSON " + json.dumps(r, sort_keys=True))


def churn_report(c, name):
    """The churn phase's figures."""
    if c:
        print(f"\n[churn, {name} store] {c['sessions']} sessions, target {c['live_target']} live, auto-pause after "
              f"{c['pause_after_ms']} ms, {c['seconds']} s at {c['rate']:.1f} calls/s (target {c['rate_target']:.1f})")
        print(f"  created in {c['created_s']:.1f} s; live after settling {c['live_after_settle']}; live during: "
              f"mean {c['live']['mean']:.1f}, max {c['live']['max']}")
        row(f"  call on a paused session (auto-resume) n={c['resume_call']['n']}", c["resume_call"])
        row(f"  call on a live session n={c['live_call']['n']}", c["live_call"])
        row(f"  every call n={c['all_calls']['n']}", c["all_calls"])
        row(f"  idle auto-pause (executor's log) n={c['auto_pause']['n']}", c["auto_pause"])
        print(f"  executor RSS: mean {c['executor_rss_mib']['mean']:.0f} MiB, max {c['executor_rss_mib']['max']:.0f} MiB; "
              f"fds mean {c['executor_fds']['mean']:.0f}, max {c['executor_fds']['max']}; "
              f"seats' processes PSS {c['seats_pss_mib']:.0f} MiB for {c['live_at_end']} live")
        if c["seats_charged_mib"]:
            ch = c["seats_charged_mib"]
            print(f"  seats' cgroups charged {ch['mib']:.0f} MiB for {ch['seats']} seats holding a process"
                  + (f" ({ch['mib'] / ch['seats']:.1f} MiB each)" if ch["seats"] else ""))
        print(f"  closed all {c['sessions']} in {c['closed_s']:.1f} s ({c['language']}, /work {c['work_kib']} KiB each)")
        if c["store_bytes"] is not None:
            per = c["store_bytes_per_paused"]
            print(f"  store: {c['store_bytes'] / 2**20:.1f} MiB" + (f", {per / 1024:.0f} KiB per paused session" if per else ""))
        print(f"  errors: {c['errors']}" + (f" (first: {c['first_error']})" if c["first_error"] else ""))


if __name__ == "__main__":
    main()
