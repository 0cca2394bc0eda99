#!/usr/bin/env python3
"""Inspect on Sandpool against Inspect's `local` sandbox: samples/s and peak memory.

The same task in both: N samples at once (max_samples = max_sandboxes = N), each an agent loop
of a scripted mockllm model (no network) that calls bash() and python() and writes a file the
scorer reads (as clients/python/tests/test_inspect.py). Each run is a child process of this one;
memory is the peak of the summed PSS of that child's process tree, plus, for sandpool, the
executor's tree (the executor itself, its zygotes, and every sandbox it runs). Needs root and the
Python package's test extras (its venv), and a built executor:

    SANDPOOL_EXECUTOR_BIN=target/debug/sandpool-executor \\
        .venv/bin/python bench/inspect_bench.py --samples 64 --repeat 3
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Optional

REPO = Path(__file__).resolve().parents[1]


def child(mode: str, samples: int, target: str) -> None:
    """One eval, in this process; prints {"seconds": ..., "correct": ...} as its last line."""
    os.environ.setdefault("INSPECT_LOG_DIR", tempfile.mkdtemp(prefix="inspect-bench-logs-"))
    from inspect_ai import Task, eval
    from inspect_ai.dataset import Sample
    from inspect_ai.model import ModelOutput, ModelUsage, get_model
    from inspect_ai.scorer import Score, Target, accuracy, scorer
    from inspect_ai.solver import TaskState, generate, use_tools
    from inspect_ai.tool import bash, python
    from inspect_ai.util import sandbox

    def scripted(messages: list, tools: Any, tool_choice: Any, config: Any) -> ModelOutput:
        n = sum(1 for m in messages if m.role == "tool")
        if n == 0:
            out = ModelOutput.for_tool_call("mockllm/model", "bash", {"command": "mkdir -p out && echo hi > out/log"})
        elif n == 1:
            code = "import pathlib\npathlib.Path('out/answer.txt').write_text(str(6 * 7))"
            out = ModelOutput.for_tool_call("mockllm/model", "python", {"code": code})
        else:
            out = ModelOutput.from_content("mockllm/model", "done")
        out.usage = ModelUsage(input_tokens=1, output_tokens=1, total_tokens=2)  # no tiktoken download
        return out

    @scorer(metrics=[accuracy()])
    def file_written() -> Any:
        async def score(state: TaskState, target: Target) -> Score:
            answer = await sandbox().read_file("out/answer.txt")
            return Score(value="C" if answer == target.text else "I")

        return score

    task = Task(
        dataset=[Sample(input="go", target="42", id=i) for i in range(samples)],
        solver=[use_tools([bash(timeout=60), python(timeout=60)]), generate()],
        scorer=file_written(),
    )
    if mode == "sandpool":
        from sandpool.inspect_sandbox import SandpoolSandboxConfig

        spec: Any = ("sandpool", SandpoolSandboxConfig(target=target))
    else:
        spec = "local"
    t0 = time.monotonic()
    [log] = eval(
        task,
        model=get_model("mockllm/model", custom_outputs=scripted),
        sandbox=spec,
        display="none",
        max_samples=samples,
        max_sandboxes=samples,
        # local runs its commands as host subprocesses, by default at most cpu_count at once:
        # lifted here so local is the floor (no isolation, no throttle).
        max_subprocesses=samples,
    )
    seconds = time.monotonic() - t0
    correct = sum(1 for s in log.samples or [] if s.scores and s.scores["file_written"].value == "C")
    print(json.dumps({"seconds": seconds, "correct": correct, "status": log.status}))


def tree_pss(pids: list[int]) -> int:
    import psutil

    total = 0
    for pid in pids:
        try:
            root = psutil.Process(pid)
            procs = [root, *root.children(recursive=True)]
        except psutil.Error:
            continue
        for p in procs:
            try:
                total += p.memory_full_info().pss
            except psutil.Error:
                pass
    return total


def measure(mode: str, samples: int, target: str, executor_pid: Optional[int]) -> dict:
    proc = subprocess.Popen(
        [sys.executable, __file__, "--child", mode, "--samples", str(samples), "--target", target],
        stdout=subprocess.PIPE,
        text=True,
    )
    peak = 0
    stop = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not stop.is_set():
            pids = [proc.pid] + ([executor_pid] if executor_pid else [])
            peak = max(peak, tree_pss(pids))
            stop.wait(0.2)

    t = threading.Thread(target=sample, daemon=True)
    t.start()
    out, _ = proc.communicate(timeout=1800)
    stop.set()
    t.join()
    r = json.loads(out.strip().splitlines()[-1])
    return {"mode": mode, "samples_per_s": samples / r["seconds"], "peak_mib": peak / 2**20, **r}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--child")
    ap.add_argument("--target", default="")
    a = ap.parse_args()
    if a.child:
        child(a.child, a.samples, a.target)
        return
    sys.path.insert(0, str(REPO / "clients" / "python" / "tests"))
    from conftest import Executor  # the tests' executor fixture: free port, temp work root

    ex = Executor(
        "inspect-bench", slots=os.cpu_count() or 2, languages="python,bash", args=["--max-sessions", str(a.samples + 16)]
    ).start()
    try:
        assert ex.proc is not None
        for _ in range(a.repeat):
            for mode in ("local", "sandpool"):
                pid = ex.proc.pid if mode == "sandpool" else None
                print(json.dumps(measure(mode, a.samples, ex.address, pid)), flush=True)
    finally:
        ex.close()


if __name__ == "__main__":
    main()
