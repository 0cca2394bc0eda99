"""promptfoo assertion: run the LLM's function in a Sandpool sandbox and check its result.

Sandpool replaces Docker + epicbox: the executor extracts the fenced code, runs it
in a fresh sandbox (1 s CPU, 64 MiB, no network) and judges the check below; a
program that exits early or prints the expected text without computing it fails.
Set SANDPOOL_TARGET (default 127.0.0.1:50051), e.g. dns:///sandpool.evals.svc.cluster.local:50051.
"""

from __future__ import annotations

import os
from typing import Any

import sandpool
from sandpool import AssertTests, EvaluateOptions, EvaluateRequest, Limits, Verdict

_client = None


def client() -> sandpool.Client:
    """One client per promptfoo worker process (the channel is reused across assertions)."""
    global _client
    if _client is None:
        _client = sandpool.Client(os.environ.get("SANDPOOL_TARGET", "127.0.0.1:50051"), timeout=60)
    return _client


def get_assert(output: str, context: dict[str, Any]) -> dict[str, Any]:
    """promptfoo's entry point: {'pass', 'score', 'reason'} for one LLM output."""
    v = context["vars"]
    fn, test_input, expected = v["function_name"], v["test_input"], str(v["expected_output"])
    # As the epicbox original: call the function on the input and compare str(result).
    test = f"_result = {fn}({test_input})\nassert str(_result) == {expected!r}, f'got {{_result!r}}'\n"
    r = client().evaluate(
        EvaluateRequest(
            language="python",
            completion=output,
            tests=AssertTests(test_code=test),
            options=EvaluateOptions(run_limits=Limits(cpu_time_ms=1000, memory_bytes=64 << 20)),
        )
    )
    if f"def {fn}" not in r.extracted_code:
        return {"pass": False, "score": 0, "reason": "No function definition found"}
    if r.accepted:
        return {"pass": True, "score": 1, "reason": f"Correct output: got {expected}"}
    run = r.tests[0].run if r.tests else None
    stderr = run.stderr.decode("utf-8", "replace").strip() if run else r.message
    if r.verdict == Verdict.SANDBOX_ERROR:
        raise RuntimeError(f"sandpool: {r.message}")  # not the model's fault: let promptfoo report an error
    return {"pass": False, "score": 0, "reason": f"{r.verdict.name}: {stderr[-2000:]}"}
