"""Warm starts (`cold_start`, `PhaseResult.warm`) and the result cache (`cache`, `cached`) in the clients."""

from __future__ import annotations

import threading

import pytest
from conftest import Executor
from sandpool import (
    AsyncClient,
    CachePolicy,
    Client,
    EvaluateOptions,
    EvaluateRequest,
    Limits,
    StdioCase,
    StdioTests,
    Verdict,
)
from sandpool.v1 import executor_pb2 as pb
from sandpool.v1 import executor_pb2_grpc as pb_grpc


def _stdio(completion: str, expected: str, **kw) -> EvaluateRequest:
    return EvaluateRequest(
        language="python", completion=completion, tests=StdioTests([StdioCase("", expected)]), **kw
    )


class Recorder(pb_grpc.ExecutorServicer):
    """Keeps every request it is sent; answers warm and cached, so the flags' way back is seen too."""

    def __init__(self) -> None:
        self.execute: list[pb.ExecuteRequest] = []
        self.evaluate: list[pb.EvaluateRequest] = []
        self.lock = threading.Lock()

    def Execute(self, request, context):  # noqa: N802 (gRPC's name)
        with self.lock:
            self.execute.append(request)
        return pb.ExecuteResponse(verdict=pb.OK, run=pb.PhaseResult(verdict=pb.OK, warm=True), cached=True)

    def Evaluate(self, request, context):  # noqa: N802
        with self.lock:
            self.evaluate.append(request)
        test = pb.TestResult(index=0, passed=True, verdict=pb.OK, run=pb.PhaseResult(verdict=pb.OK, warm=True))
        return pb.EvaluateResponse(id=request.id, accepted=True, verdict=pb.OK, tests=[test], cached=True)


def test_cache_policy_enum_matches_the_proto() -> None:
    proto = {v.name.removeprefix("CACHE_POLICY_"): v.number for v in pb.CachePolicy.DESCRIPTOR.values}
    assert {p.name: p.value for p in CachePolicy} == proto


def test_options_reach_the_wire_and_flags_come_back(serve) -> None:
    fake = Recorder()
    with Client(serve(fake)) as c:
        plain = c.execute("python", "print(1)")
        c.execute("python", "print(1)", cold_start=True, cache=CachePolicy.INCLUDE_LIMITS)
        c.evaluate(_stdio("print(1)", "1"))
        judged = c.evaluate(
            _stdio("print(1)", "1", cache=CachePolicy.BYPASS, options=EvaluateOptions(cold_start=True))
        )
    # Unset options stay at the proto's zero values: the executor's defaults.
    assert not fake.execute[0].cold_start and fake.execute[0].cache == pb.CACHE_POLICY_DEFAULT
    assert fake.execute[1].cold_start and fake.execute[1].cache == pb.CACHE_POLICY_INCLUDE_LIMITS
    assert not fake.evaluate[0].options.cold_start and fake.evaluate[0].cache == pb.CACHE_POLICY_DEFAULT
    assert fake.evaluate[1].options.cold_start and fake.evaluate[1].cache == pb.CACHE_POLICY_BYPASS
    assert plain.cached and plain.run is not None and plain.run.warm
    assert judged.cached and judged.tests[0].run is not None and judged.tests[0].run.warm


async def test_async_options_reach_the_wire_and_flags_come_back(serve) -> None:
    fake = Recorder()
    async with AsyncClient(serve(fake)) as c:
        r = await c.execute("python", "print(1)", cold_start=True, cache=CachePolicy.BYPASS)
        e = await c.evaluate(_stdio("print(1)", "1", cache=CachePolicy.INCLUDE_LIMITS))
    assert fake.execute[0].cold_start and fake.execute[0].cache == pb.CACHE_POLICY_BYPASS
    assert fake.evaluate[0].cache == pb.CACHE_POLICY_INCLUDE_LIMITS
    assert r.cached and r.run is not None and r.run.warm
    assert e.cached and e.tests[0].run is not None and e.tests[0].run.warm


def test_python_starts_warm_unless_a_request_asks_for_cold(executor: Executor) -> None:
    with Client(executor.address) as c:
        warm = c.execute("python", "print(1)")
        cold = c.execute("python", "print(1)", cold_start=True)
        assert warm.verdict is Verdict.OK and cold.verdict is Verdict.OK
        assert warm.run is not None and warm.run.warm
        assert cold.run is not None and not cold.run.warm
        judged = c.evaluate(_stdio("print(2)", "2"))
        judged_cold = c.evaluate(_stdio("print(2)", "2", options=EvaluateOptions(cold_start=True)))
        assert judged.accepted and judged_cold.accepted
        assert judged.tests[0].run is not None and judged.tests[0].run.warm
        assert judged_cold.tests[0].run is not None and not judged_cold.tests[0].run.warm


async def test_async_cold_start(executor: Executor) -> None:
    async with AsyncClient(executor.address) as c:
        r = await c.execute("python", "print(1)", cold_start=True)
    assert r.verdict is Verdict.OK and r.run is not None and not r.run.warm


def test_the_result_cache_answers_repeats_as_the_policy_allows(make_executor) -> None:
    e = make_executor("pytest-cache", args=["--result-cache-entries", "64"])
    with Client(e.address) as c:
        first = c.execute("python", "print(40 + 2)")
        again = c.execute("python", "print(40 + 2)")
        assert not first.cached and again.cached and again.stdout == first.stdout == "42\n"
        assert not c.execute("python", "print(40 + 2)", cache=CachePolicy.BYPASS).cached
        # A limit verdict is kept only when the request (or the executor) says so.
        spin = "while True: pass"
        tle = Limits(cpu_time_ms=200)
        for _ in range(2):
            r = c.execute("python", spin, limits=tle)
            assert r.verdict is Verdict.TIME_LIMIT_EXCEEDED and not r.cached
        kept = [c.execute("python", spin, limits=tle, cache=CachePolicy.INCLUDE_LIMITS) for _ in range(2)]
        assert [r.verdict for r in kept] == [Verdict.TIME_LIMIT_EXCEEDED] * 2
        assert [r.cached for r in kept] == [False, True]
        judged = [c.evaluate(_stdio("print(3)", "3")) for _ in range(2)]
        assert all(j.accepted for j in judged) and [j.cached for j in judged] == [False, True]
        assert not c.evaluate(_stdio("print(3)", "3", cache=CachePolicy.BYPASS)).cached
