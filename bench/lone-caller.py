#!/usr/bin/env python3
"""A lone caller against a standalone executor: one request at a time, `--gap-ms` apart.

What one user's request to an otherwise idle executor pays. Back-to-back runs share some of
the kernel's costs (an RCU grace period is waited for once for the writes that come within
it); a lone caller pays them on every run. Baseline, measured in the same run at the same
pace: bare `python3 -I -S -c pass` (and bare trivial C). Sandboxed: the same programs through
an executor process started here (`sandpool-executor`, as deployed: not in this process),
`namespaces` mode, warm Python (forked from the slot's zygote).

    sudo .venv/bin/python bench/lone-caller.py [--executor target/release/sandpool-executor]
        [--runs 100] [--gap-ms 50]

Needs root (namespaces mode), gcc, and the Python client in the workspace's .venv
(scripts/test-python.sh installs it).
"""

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

from sandpool import Client, File

LANGUAGES = """
[bench_c]
source = "unused"
run = ["./trivial"]
version = ["true"]

[bench_python_warm]
source = "main.py"
run = ["python3", "-I", "-S", "main.py"]
version = ["python3", "--version"]
warm = { preload = [] }
"""


def system(name):
    # The sandbox finds python3 in its own PATH: the same system binary here (not a shim).
    for d in ("/usr/local/bin", "/usr/bin", "/bin"):
        if os.path.isfile(os.path.join(d, name)):
            return os.path.join(d, name)
    sys.exit(f"no {name} in /usr/local/bin, /usr/bin or /bin")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def p50(xs):
    return statistics.median(xs)


def measure(fn, runs, gap):
    for _ in range(10):
        fn()
    out = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t) * 1000)
        if gap:
            time.sleep(gap)
    return out


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--executor", default=os.path.join(root, "target/release/sandpool-executor"))
    ap.add_argument("--runs", type=int, default=100)
    ap.add_argument("--gap-ms", type=int, default=50)
    ap.add_argument("--slots", type=int, default=2)
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("run as root (namespaces mode needs it)")
    tmp = tempfile.mkdtemp(prefix="sandpool-lone-")
    table = os.path.join(tmp, "languages.toml")
    with open(table, "w") as f:
        f.write(LANGUAGES)
    with open(os.path.join(tmp, "trivial.c"), "w") as f:
        f.write("int main(void) { return 0; }\n")
    trivial = os.path.join(tmp, "trivial")
    subprocess.run(["gcc", "-O2", "-o", trivial, trivial + ".c"], check=True)
    port = free_port()
    ex = subprocess.Popen(
        [a.executor, "--listen", f"127.0.0.1:{port}", "--slots", str(a.slots), "--languages", table],
        stdout=subprocess.DEVNULL,
        stderr=open(os.path.join(tmp, "executor.log"), "w"),
    )
    try:
        c = Client(f"127.0.0.1:{port}", compression=None)
        deadline = time.time() + 30
        while True:
            try:
                c.execute("bench_python_warm", "")
                break
            except Exception:
                if time.time() > deadline or ex.poll() is not None:
                    raise
                time.sleep(0.2)
        with open(trivial, "rb") as f:
            c_file = [File(path="trivial", content=f.read(), executable=True)]

        def bare(argv):
            return lambda: subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, check=True)

        def sandboxed(lang, files):
            def run():
                r = c.execute(lang, "", files=files)
                if r.verdict.name != "OK":
                    raise RuntimeError(f"{lang}: {r.verdict.name} {r.message}")

            return run

        cells = [
            ("bare python3 -I -S -c pass", bare([system("python3"), "-I", "-S", "-c", "pass"])),
            ("warm python through the executor", sandboxed("bench_python_warm", None)),
            ("bare trivial C", bare([trivial])),
            ("trivial C through the executor", sandboxed("bench_c", c_file)),
        ]
        print(f"lone caller: {a.runs} runs per cell, {a.slots} slots, load {os.getloadavg()[0]:.2f}")
        print(f"{'workload':<36} {'back to back':>14} {f'{a.gap_ms} ms apart':>14}")
        res = {}
        for name, fn in cells:
            back = p50(measure(fn, a.runs, 0))
            spaced = p50(measure(fn, a.runs, a.gap_ms / 1000))
            res[name] = (back, spaced)
            print(f"{name:<36} {back:>11.2f} ms {spaced:>11.2f} ms")
        (bb, bs), (wb, ws) = res["bare python3 -I -S -c pass"], res["warm python through the executor"]
        print(f"warm python / bare python3, p50: {wb / bb:.2f}x back to back, {ws / bs:.2f}x {a.gap_ms} ms apart (target <= 0.5x)")
        (cb, cs), (sb, ss) = res["bare trivial C"], res["trivial C through the executor"]
        print(f"trivial C overhead over bare, p50: {sb - cb:.2f} ms back to back, {ss - cs:.2f} ms {a.gap_ms} ms apart (target <= 1 ms)")
    finally:
        ex.terminate()
        ex.wait(timeout=30)


if __name__ == "__main__":
    main()
