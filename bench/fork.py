#!/usr/bin/env python3
"""Fork latency (issue 47 item 5): one session with a 50 MiB /work forked into 16 copies,
against a baseline measured in the same run: 16 fresh sessions created at once.

Run as root from the repository root with the venv (grpcio, grpcio-tools):

    .venv/bin/python bench/fork.py [--executor target/release/sandpool-executor]
        [--n 16] [--mib 50] [--rounds 5] [--language bash|python]

It starts its own executor (namespaces isolation, a local session store in a temp dir),
compiles the proto with grpc_tools into a temp dir, and prints p50/p99 of:
- `create x N`: N CreateSession calls at once (the baseline: fresh seats, empty /work);
- `fork x N`: one ForkSession{n=N} of a session whose /work holds --mib MiB in 64 files;
- `snapshot` and `create from snapshot` (one each a round), for the record;
plus the fork's ratio to the baseline, and the target (500 ms for 16 copies of 50 MiB).
Each copy is closed before the next round. Timings include the gRPC round trip.
"""

import argparse
import concurrent.futures as cf
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def stubs(tmp):
    from grpc_tools import protoc

    out = os.path.join(tmp, "gen")
    os.makedirs(out)
    proto_dir = os.path.join(ROOT, "proto")
    import grpc_tools

    inc = os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")
    rc = protoc.main(
        ["protoc", f"-I{proto_dir}", f"-I{inc}", f"--python_out={out}", f"--grpc_python_out={out}"]
        + [os.path.join(proto_dir, "sandpool", "v1", f) for f in os.listdir(os.path.join(proto_dir, "sandpool", "v1"))]
    )
    if rc != 0:
        sys.exit(f"protoc failed: {rc}")
    # Regular packages, so that they win over the installed client's `sandpool`.
    for d in ("sandpool", "sandpool/v1"):
        open(os.path.join(out, d, "__init__.py"), "a").close()
    sys.path.insert(0, out)
    from sandpool.v1 import executor_pb2, executor_pb2_grpc

    return executor_pb2, executor_pb2_grpc


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, int(len(xs) * p + 0.999) - 1))] * 1000


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--executor", default=os.path.join(ROOT, "target", "debug", "sandpool-executor"))
    ap.add_argument("--n", type=int, default=16)
    ap.add_argument("--mib", type=int, default=50)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--slots", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--language", default="bash")
    a = ap.parse_args()
    import grpc

    tmp = tempfile.mkdtemp(prefix="sandpool-fork-bench-")
    pb, rpc = stubs(tmp)
    port = free_port()
    work_root = os.path.join(tmp, "root")
    os.makedirs(work_root)
    ex = subprocess.Popen(
        [
            a.executor,
            "--listen", f"127.0.0.1:{port}",
            "--metrics-listen", f"127.0.0.1:{free_port()}",
            "--work-root", work_root,
            "--slots", str(a.slots),
            "--enable-languages", "python,bash",
            "--max-sessions", str(2 * a.n + 4),
            "--work-dir-bytes", str((a.mib + 64) << 20),
            "--session-store-dir", os.path.join(tmp, "store"),
        ],
        stderr=subprocess.DEVNULL,
    )
    try:
        ch = grpc.insecure_channel(f"127.0.0.1:{port}")
        grpc.channel_ready_future(ch).result(timeout=60)
        c = rpc.ExecutorStub(ch)
        src = c.CreateSession(pb.CreateSessionRequest(language=a.language)).session_id
        per = max(1, a.mib * 1024 // 64)
        cmd = f"for i in $(seq 64); do head -c {per}K /dev/urandom > f$i; done; du -sm . | cut -f1"
        r = c.RunInSession(pb.RunInSessionRequest(session_id=src, command=cmd))
        print(f"source /work: {r.result.stdout.decode().strip()} MiB in 64 files, {a.language}, {a.slots} slots")
        pool = cf.ThreadPoolExecutor(a.n)
        creates, forks, snaps, froms = [], [], [], []
        for _ in range(a.rounds):
            t = time.monotonic()
            ids = list(pool.map(lambda _: c.CreateSession(pb.CreateSessionRequest(language=a.language)).session_id, range(a.n)))
            creates.append(time.monotonic() - t)
            for i in ids:
                c.CloseSession(pb.CloseSessionRequest(session_id=i))
            t = time.monotonic()
            got = c.ForkSession(pb.ForkSessionRequest(session_id=src, n=a.n)).sessions
            forks.append(time.monotonic() - t)
            assert len(got) == a.n
            for s in got:
                c.CloseSession(pb.CloseSessionRequest(session_id=s.session_id))
            t = time.monotonic()
            snap = c.SnapshotSession(pb.SnapshotSessionRequest(session_id=src)).snapshot_id
            snaps.append(time.monotonic() - t)
            t = time.monotonic()
            new = c.CreateSession(pb.CreateSessionRequest(from_snapshot=snap)).session_id
            froms.append(time.monotonic() - t)
            c.CloseSession(pb.CloseSessionRequest(session_id=new))
            c.DeleteSnapshot(pb.DeleteSnapshotRequest(snapshot_id=snap))
        print(f"{'what':28} {'p50 ms':>9} {'p99 ms':>9}")
        for name, xs in [
            (f"create x {a.n} (baseline)", creates),
            (f"fork x {a.n} ({a.mib} MiB)", forks),
            ("snapshot", snaps),
            ("create from snapshot", froms),
        ]:
            print(f"{name:28} {pct(xs, 0.5):9.1f} {pct(xs, 0.99):9.1f}")
        print(f"fork / baseline: {pct(forks, 0.5) / pct(creates, 0.5):.2f}x; target: fork x 16 of 50 MiB <= 500 ms")
    finally:
        ex.terminate()
        ex.wait(timeout=30)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
