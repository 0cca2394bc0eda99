"""The recipes under examples/ against a real executor: promptfoo's assertion, verl's reward, humaneval.py, the agent loops."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
from conftest import REPO, Executor

FENCE = "```"


def load(path: Path, target: str, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.setenv("SANDPOOL_TARGET", target)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec and spec.loader
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    return m


def test_promptfoo_assertion_judges_the_three_problems(executor: Executor, monkeypatch) -> None:
    m = load(REPO / "examples/promptfoo/validate_and_run_code.py", executor.address, monkeypatch)
    problems = {
        "factorial": ("5", "120", "def factorial(n):\n    return 1 if n <= 1 else n * factorial(n - 1)"),
        "is_palindrome": ("'racecar'", "True", "def is_palindrome(s):\n    return s == s[::-1]"),
        "find_largest": ("[1, 5, 3, 9, 2]", "9", "def find_largest(xs):\n    return max(xs)"),
    }
    for name, (inp, expected, code) in problems.items():
        ctx = {"vars": {"function_name": name, "test_input": inp, "expected_output": expected}}
        good = m.get_assert(f"Here you go:\n{FENCE}python\n{code}\n{FENCE}\n", ctx)
        assert good == {"pass": True, "score": 1, "reason": f"Correct output: got {expected}"}, good
    ctx = {"vars": {"function_name": "find_largest", "test_input": "[1, 5, 3, 9, 2]", "expected_output": "9"}}
    wrong = m.get_assert(f"{FENCE}python\ndef find_largest(xs):\n    return min(xs)\n{FENCE}", ctx)
    assert wrong["pass"] is False and "got 1" in wrong["reason"], wrong
    # Printing the expected value and leaving early does not pass (the executor's nonce).
    cheat = m.get_assert(f"{FENCE}python\ndef find_largest(xs):\n    print(9); raise SystemExit(0)\n{FENCE}", ctx)
    assert cheat["pass"] is False, cheat
    none = m.get_assert("I cannot help with that.", ctx)
    assert none == {"pass": False, "score": 0, "reason": "No function definition found"}
    hog = m.get_assert(f"{FENCE}python\ndef find_largest(xs):\n    while True: pass\n{FENCE}", ctx)
    assert hog["pass"] is False and hog["reason"].startswith("TIME_LIMIT_EXCEEDED"), hog


def test_verl_reward(executor: Executor, monkeypatch) -> None:
    m = load(REPO / "examples/verl/reward.py", executor.address, monkeypatch)
    gt = json.dumps({"inputs": ["2\n", "3\n"], "outputs": ["4\n", "6\n"]})
    assert m.compute_score("codecontests", f"{FENCE}python\nprint(int(input()) * 2)\n{FENCE}", gt) == 1.0
    assert m.compute_score("codecontests", f"{FENCE}python\nprint(4)\n{FENCE}", gt) == 0.25
    monkeypatch.setenv("SANDPOOL_REWARD_PARTIAL", "0")
    assert m.compute_score("codecontests", f"{FENCE}python\nprint(4)\n{FENCE}", gt) == 0.0
    fn = {"fn_name": "add", "inputs": [[1, 2], [5, 5]], "outputs": [3, 10]}
    assert m.compute_score("leetcode", "def add(a, b):\n    return a + b\n", fn) == 1.0


def test_humaneval_recipe_scores_canonical_and_stub_samples(executor: Executor, tmp_path: Path) -> None:
    script = REPO / "examples/humaneval.py"
    run = lambda *args: subprocess.run(  # noqa: E731
        [sys.executable, str(script), "--target", executor.address, "--limit", "6", *args],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    canonical = run("--canonical")
    assert canonical.returncode == 0, canonical.stderr
    assert "pass@1: 1.0000" in canonical.stdout, canonical.stdout
    import sandpool

    tasks = list(sandpool.eval.read_problems())[:6]
    samples = tmp_path / "samples.jsonl"
    problems = sandpool.eval.read_problems()
    lines = []
    for t in tasks:  # two samples per task: the reference and a stub
        lines.append({"task_id": t, "completion": problems[t]["canonical_solution"]})
        lines.append({"task_id": t, "completion": "    return None\n"})
    samples.write_text("".join(json.dumps(s) + "\n" for s in lines))
    mixed = run("--samples", str(samples), "--k", "1,2")
    assert mixed.returncode == 0, mixed.stderr
    assert "pass@1: 0.5000" in mixed.stdout and "pass@2: 1.0000" in mixed.stdout, mixed.stdout


def test_agent_session_loop_fixes_the_bug_over_several_turns(make_executor, monkeypatch) -> None:
    e = make_executor("pytest-agent", languages="python")
    m = load(REPO / "examples/agent_session.py", e.address, monkeypatch)
    out = m.agent(e.address)
    turns = out["turns"]
    assert out["answer"].startswith("median() fixed"), out
    assert "AssertionError" in turns[1]["observation"], turns[1]
    assert "[value] 3" in turns[2]["observation"], turns[2]
    assert "all passed" in turns[3]["observation"], turns[3]


def test_e2b_agent_loop_runs_on_sandpool_with_environment_variables_only(make_executor, monkeypatch) -> None:
    """examples/e2b_agent.py is plain E2B SDK code: only E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY
    point it at an executor's HTTP port."""
    from conftest import free_port

    port = free_port()
    make_executor("pytest-e2b-agent", languages="python,bash", args=["--http-listen", f"127.0.0.1:{port}"])
    for var in ("E2B_API_URL", "E2B_SANDBOX_URL"):
        monkeypatch.setenv(var, f"http://127.0.0.1:{port}")
    monkeypatch.setenv("E2B_API_KEY", "any-key-without-auth")
    monkeypatch.delenv("E2B_DEBUG", raising=False)
    m = load(REPO / "examples/e2b_agent.py", "", monkeypatch)
    out = m.agent()
    turns = out["turns"]
    assert out["answer"] == "median() fixed: the tests pass", out
    assert out["sandbox"].endswith("-pytest-e2b-agent"), out["sandbox"]
    assert "AssertionError: even: got 3" in turns[2]["observation"], turns[2]
    assert "[value] 3" in turns[3]["observation"], turns[3]
    assert "all passed" in turns[5]["observation"], turns[5]
