"""A verl reward function that judges code with Sandpool's Python client.

verl config (Hydra overrides):

    custom_reward_function.path=examples/verl/reward.py
    custom_reward_function.name=compute_score

`ground_truth` is the usual code-RL shape (a dict or its JSON): {"inputs": [...],
"outputs": [...]} for stdin/stdout problems, plus "fn_name" for function-call ones
(arguments as JSON). The score is 1.0 when every test passes, else the fraction
of tests passed times 0.5 (set SANDPOOL_REWARD_PARTIAL=0 for plain 0/1).
SANDPOOL_TARGET picks the pool (default: dns:///sandpool.default.svc.cluster.local:50051).
"""

from __future__ import annotations

import json
import os
from typing import Any, Optional, Union

import sandpool
from sandpool import EvaluateRequest, FunctionCallTests, FunctionCase, StdioCase, StdioTests, Verdict

_client: Optional[sandpool.Client] = None


def client() -> sandpool.Client:
    """One client per reward worker; round_robin spreads its calls over the pool's pods."""
    global _client
    if _client is None:
        target = os.environ.get("SANDPOOL_TARGET") or sandpool.pool_target("sandpool", "default")
        _client = sandpool.Client(target, timeout=120)
    return _client


def tests_of(ground_truth: Union[str, dict[str, Any]]) -> sandpool.types.Tests:
    """Sandpool tests from verl's ground truth."""
    gt = json.loads(ground_truth) if isinstance(ground_truth, str) else ground_truth
    inputs, outputs = gt["inputs"], gt["outputs"]
    if len(inputs) != len(outputs):
        raise ValueError(f"ground_truth.outputs: {len(outputs)} outputs for {len(inputs)} inputs")
    if gt.get("fn_name"):
        cases = [
            FunctionCase(
                arguments_json=i if isinstance(i, str) else json.dumps(i),
                expected_json=o if isinstance(o, str) else json.dumps(o),
            )
            for i, o in zip(inputs, outputs)
        ]
        return FunctionCallTests(fn_name=gt["fn_name"], cases=cases)
    return StdioTests(cases=[StdioCase(stdin=i, expected_stdout=o) for i, o in zip(inputs, outputs)])


def compute_score(
    data_source: str, solution_str: str, ground_truth: Union[str, dict[str, Any]], extra_info: Optional[dict] = None
) -> float:
    """verl's reward signature: the model's whole response in, a score in [0, 1] out."""
    partial = os.environ.get("SANDPOOL_REWARD_PARTIAL", "1") != "0"
    language = (extra_info or {}).get("language", "python")
    r = client().evaluate(
        EvaluateRequest(
            language=language,
            completion=solution_str,
            tests=tests_of(ground_truth),
            options=sandpool.EvaluateOptions(run_all_cases=partial),
        )
    )
    if r.accepted:
        return 1.0
    if r.verdict == Verdict.SANDBOX_ERROR:
        # Retries ran out on the executor's failure, not the model's: do not teach the model from it.
        raise RuntimeError(f"sandpool: {r.message}")
    if not partial or not r.tests:
        return 0.0
    return 0.5 * sum(t.passed for t in r.tests) / len(r.tests)
