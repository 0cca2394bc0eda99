"""The sync and asyncio clients against a real executor."""

from __future__ import annotations

import time

import grpc
import pytest
import sandpool
from conftest import Executor
from sandpool import (
    AsyncClient,
    Client,
    EvaluateRequest,
    FunctionCallTests,
    FunctionCase,
    Limits,
    StdioCase,
    StdioTests,
    Verdict,
)


@pytest.fixture(scope="module")
def problems() -> list[dict]:
    return list(sandpool.eval.read_problems().values())[:12]


def test_execute_returns_typed_results(executor: Executor) -> None:
    with Client(executor.address) as c:
        ok = c.execute("python", "import sys; print(sys.stdin.read().upper())", "ada")
        assert ok.verdict is Verdict.OK and ok.stdout.strip() == "ADA"
        assert ok.executor.name == "pytest-main" and ok.attempts == 1
        assert ok.run is not None and ok.run.wall_time_us > 0
        bad = c.execute("python", "raise SystemExit(3)")
        assert bad.verdict is Verdict.RUNTIME_ERROR and bad.run is not None and bad.run.exit_code == 3
        # A verdict about the code is final: never retried.
        assert bad.attempts == 1


def test_invalid_request_names_the_field_and_is_not_retried(executor: Executor) -> None:
    with Client(executor.address) as c:
        t = time.monotonic()
        with pytest.raises(grpc.RpcError) as e:
            c.execute("python", "print(1)", limits=Limits(wall_time_ms=10**9))
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "limits.wall_time_ms" in e.value.details()
        assert time.monotonic() - t < 1.0


def test_deadline_is_per_call_and_kills_the_run(executor: Executor) -> None:
    with Client(executor.address) as c:
        t = time.monotonic()
        with pytest.raises(grpc.RpcError) as e:
            c.execute("python", "import time; time.sleep(30)", timeout=1.0)
        assert e.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        assert time.monotonic() - t < 5


def test_evaluate_judges_each_test_kind(executor: Executor) -> None:
    with Client(executor.address, compression="none") as c:
        stdio = c.evaluate(
            EvaluateRequest(
                language="python",
                completion="```python\nprint(int(input()) * 2)\n```",
                tests=StdioTests(cases=[StdioCase("2\n", "4\n"), StdioCase("5\n", "11\n")]),
            )
        )
        assert not stdio.accepted and stdio.verdict is Verdict.WRONG_ANSWER
        assert [t.passed for t in stdio.tests] == [True, False]
        assert stdio.extracted_code.strip() == "print(int(input()) * 2)"
        fc = c.evaluate(
            EvaluateRequest(
                language="python",
                completion="def add(a, b):\n    return a + b\n",
                tests=FunctionCallTests(
                    fn_name="add", cases=[FunctionCase("[1, 2]", "3"), FunctionCase("[2, 2]", "4")]
                ),
            )
        )
        assert fc.accepted and fc.verdict is Verdict.OK and len(fc.tests) == 2


def test_evaluate_many_humaneval_canonical_and_stubs(executor: Executor, problems: list[dict]) -> None:
    good = [sandpool.eval.humaneval_request(p, p["canonical_solution"], id=f"good:{p['task_id']}") for p in problems]
    bad = [sandpool.eval.humaneval_request(p, "    return None\n", id=f"bad:{p['task_id']}") for p in problems]
    with Client(executor.address) as c:
        results = list(c.evaluate_many(good + bad, concurrency=4))
    ids = sorted(r.id for r in results)
    assert ids == sorted(r.id for r in good + bad)
    for r in results:
        assert r.accepted == r.id.startswith("good:"), (r.id, r.verdict, r.message)
        assert r.verdict in ((Verdict.OK,) if r.accepted else (Verdict.WRONG_ANSWER, Verdict.RUNTIME_ERROR))


def test_evaluate_many_ordered_keeps_input_order(executor: Executor) -> None:
    # Earlier requests sleep longer, so they finish last; the ordered variant must still yield them first.
    reqs = [
        EvaluateRequest(
            id=f"r{i}",
            language="python",
            completion=f"import time; time.sleep({0.05 * (6 - i)}); print({i})",
            tests=StdioTests(cases=[StdioCase("", f"{i}\n")]),
        )
        for i in range(6)
    ]
    with Client(executor.address) as c:
        unordered = [r.id for r in c.evaluate_many(reqs, concurrency=6)]
        ordered = list(c.evaluate_many_ordered(reqs, concurrency=6))
    assert [r.id for r in ordered] == [f"r{i}" for i in range(6)]
    assert all(r.accepted for r in ordered)
    assert sorted(unordered) == sorted(r.id for r in ordered)


def test_evaluate_many_reports_rejected_requests_in_place(executor: Executor) -> None:
    reqs = [
        EvaluateRequest(id="ok", language="python", completion="print(1)", tests=StdioTests([StdioCase("", "1")])),
        EvaluateRequest(id="bad", language="klingon", completion="x", tests=StdioTests([StdioCase("", "1")])),
    ]
    with Client(executor.address) as c:
        by_id = {r.id: r for r in c.evaluate_many(reqs)}
    assert by_id["ok"].accepted and by_id["ok"].error is None
    err = by_id["bad"].error
    assert err is not None and err.code == "INVALID_ARGUMENT" and "language" in err.message
    assert by_id["bad"].attempts == 1


async def test_async_client(executor: Executor, problems: list[dict]) -> None:
    async with AsyncClient(executor.address) as c:
        r = await c.execute("python", "print(6 * 7)")
        assert r.verdict is Verdict.OK and r.stdout.strip() == "42"
        p = problems[0]
        e = await c.evaluate(sandpool.eval.humaneval_request(p, p["canonical_solution"]))
        assert e.accepted and e.id == p["task_id"]
        reqs = [sandpool.eval.humaneval_request(p, p["canonical_solution"]) for p in problems[:6]]
        reqs.append(sandpool.eval.humaneval_request(problems[0], "    return None\n", id="stub"))
        got = {r.id: r async for r in c.evaluate_many(reqs, concurrency=3)}
        assert set(got) == {r.id for r in reqs}
        assert [k for k, v in got.items() if not v.accepted] == ["stub"]
        ordered = [r.id async for r in c.evaluate_many_ordered(reqs, concurrency=3)]
        assert ordered == [r.id for r in reqs]


def test_an_error_in_the_callers_requests_reaches_the_caller(executor: Executor) -> None:
    def records():
        yield EvaluateRequest(
            id="fine", language="python", completion="print(1)", tests=StdioTests([StdioCase("", "1")])
        )
        yield sandpool.eval.record_request({"task_id": "broken", "code": "print(1)"})  # no tests: ValueError

    with Client(executor.address) as c:
        got = []
        with pytest.raises(ValueError, match="broken"):
            for r in c.evaluate_many(records(), streams=1):
                got.append(r.id)
    assert got == ["fine"], "what was sent before the error is still answered"


def test_stopping_early_ends_the_streams(executor: Executor) -> None:
    # Two streams of one request each fill the executor's two slots, so request 0 (which answers at
    # once) always runs first; its stream then sends a sleeper, and the other stream holds one.
    # Without cancellation those two would hold both slots for 5 s.
    reqs = [
        EvaluateRequest(
            id=str(i),
            language="python",
            completion="pass" if i == 0 else "import time; time.sleep(5)",
            tests=StdioTests([StdioCase("", "")]),
        )
        for i in range(10)
    ]
    t = time.monotonic()
    with Client(executor.address) as c:
        for _ in c.evaluate_many(reqs, concurrency=2, streams=2):
            break
        # A slot is free again at once: the abandoned streams were cancelled (killing their runs), not drained.
        assert c.execute("python", "print(1)", timeout=10).verdict is Verdict.OK
    assert time.monotonic() - t < 4


def test_benchmark_rows_judged_as_their_harnesses_mean(executor: Executor) -> None:
    """MultiPL-E's prompt is not cut by its stop tokens; an uncalled check and prelude-less imports fail loudly."""
    row = {
        "name": "HumanEval_0_root",
        "language": "py",
        "prompt": "from typing import List\n\ndef root(x: float) -> float:\n",
        "tests": "def check(candidate):\n    assert candidate(4.0) == 2.0\n\ndef test_check():\n    check(root)\n\ntest_check()\n",
        "stop_tokens": ["\ndef", "\n#", "\nif", "\nclass"],
        "completions": ["    return math.sqrt(x)\n\ndef root(x):\n    return 0\n", "    return 0.0\n"],
    }
    with Client(executor.address) as c:
        got = {r.id: r for r in c.evaluate_many(sandpool.eval.record_requests(row))}
        assert got["HumanEval_0_root.0"].accepted and not got["HumanEval_0_root.1"].accepted
        # Without the prelude, the forgotten `import math` fails as in MultiPL-E's own harness.
        bare = c.evaluate(sandpool.eval.record_requests(row, prelude=False)[0])
        assert bare.verdict is Verdict.RUNTIME_ERROR and b"NameError" in bare.tests[0].run.stderr
        he = {"task_id": "T", "prompt": "def sq(x):\n", "test": "def check(candidate):\n    assert candidate(2) == 4\n"}
        with pytest.raises(grpc.RpcError) as e:
            c.evaluate(sandpool.eval.record_request({**he, "completion": "    return None\n"}))
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "entry_point" in e.value.details()
