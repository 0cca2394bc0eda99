"""Retries, proven against real executors: a full queue, an executor stopped mid-run, two executors."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import grpc
import sandpool
from sandpool import Client, EvaluateRequest, RetryPolicy, StdioCase, StdioTests, Verdict

# Enough attempts to outlast an executor restart (start-up probes the languages, about a second).
PATIENT = RetryPolicy(max_attempts=30, initial_backoff_s=0.1, max_backoff_s=1.0)


def slow_request(i: int, seconds: float = 0.3) -> EvaluateRequest:
    return EvaluateRequest(
        id=f"r{i}",
        language="python",
        completion=f"import time; time.sleep({seconds}); print({i})",
        tests=StdioTests(cases=[StdioCase("", f"{i}\n")]),
    )


def test_resource_exhausted_is_retried_until_it_runs(make_executor) -> None:
    ex = make_executor("tiny", slots=1, queue=1)
    with Client(ex.address, retry=PATIENT) as c, ThreadPoolExecutor(6) as pool:
        results = list(pool.map(lambda i: c.execute("python", f"import time; time.sleep(0.2); print({i})"), range(6)))
    assert [r.stdout.strip() for r in results] == [str(i) for i in range(6)]
    assert all(r.verdict is Verdict.OK for r in results)
    # One slot and one queue place for six concurrent calls: some were refused first and retried.
    assert max(r.attempts for r in results) > 1


def test_without_retries_a_full_queue_is_an_error(make_executor) -> None:
    ex = make_executor("tiny-no-retry", slots=1, queue=1)
    with Client(ex.address, retry=RetryPolicy(max_attempts=1)) as c, ThreadPoolExecutor(6) as pool:
        futures = [pool.submit(c.execute, "python", "import time; time.sleep(0.3)") for _ in range(6)]
        codes = []
        for f in futures:
            try:
                f.result()
                codes.append("OK")
            except grpc.RpcError as e:
                codes.append(e.code().name)
    assert "RESOURCE_EXHAUSTED" in codes


def test_execute_retries_while_the_executor_restarts(make_executor) -> None:
    ex = make_executor("before")
    ex.stop()
    restart = threading.Timer(0.5, ex.restart, args=("after",))
    restart.start()
    with Client(ex.address, retry=PATIENT) as c:
        r = c.execute("python", "print('back')", timeout=60)
    restart.join()
    assert r.verdict is Verdict.OK and r.stdout.strip() == "back"
    assert r.executor.name == "after" and r.attempts > 1


def test_evaluate_many_survives_the_executor_stopping_mid_run(make_executor) -> None:
    ex = make_executor("first")
    reqs = [slow_request(i) for i in range(16)]
    seen: list[sandpool.EvaluateResult] = []
    restarted = threading.Event()
    with Client(ex.address, retry=PATIENT) as c:
        for r in c.evaluate_many(reqs, concurrency=4, timeout=120):
            seen.append(r)
            if len(seen) == 3 and not restarted.is_set():
                # Stop (SIGTERM: drain, exit) with requests in flight, then come back on the same port.
                restart = threading.Thread(target=ex.restart, args=("second",))
                restart.start()
                restarted.set()
    restart.join()
    assert sorted(r.id for r in seen) == sorted(r.id for r in reqs), "every request answered exactly once"
    assert all(r.accepted for r in seen), [(r.id, r.verdict, r.message, r.error) for r in seen if not r.accepted]
    names = {r.executor.name for r in seen}
    assert names == {"first", "second"}, names
    # Requests cut off by the stop were resent: their attempt count shows it.
    assert any(r.attempts > 1 for r in seen), [(r.id, r.attempts, r.executor.name) for r in seen]


def test_round_robin_spreads_calls_over_both_executors(make_executor) -> None:
    a = make_executor("rr-a")
    b = make_executor("rr-b")
    target = f"ipv4:{a.address},{b.address}"
    with Client(target) as c, ThreadPoolExecutor(4) as pool:
        c.execute("python", "pass")  # connects the channel: round_robin rotates over connected pods only
        results = list(pool.map(lambda i: c.execute("python", f"print({i})"), range(20)))
    assert all(r.verdict is Verdict.OK for r in results)
    counts = {n: sum(r.executor.name == n for r in results) for n in ("rr-a", "rr-b")}
    # round_robin alternates picks: each executor gets about half, certainly more than a quarter.
    assert counts["rr-a"] >= 5 and counts["rr-b"] >= 5, counts


def test_evaluate_many_spreads_its_streams_over_both_executors(make_executor) -> None:
    a = make_executor("streams-a")
    b = make_executor("streams-b")
    reqs = [slow_request(i, 0.1) for i in range(16)]
    with Client(f"ipv4:{a.address},{b.address}") as c:
        # round_robin picks among connected pods only: wait until both have answered, as a
        # long-lived client would have, so neither stream lands on a pod still connecting.
        warm = {c.execute("python", "pass").executor.name for _ in range(10)}
        assert warm == {"streams-a", "streams-b"}, warm
        results = list(c.evaluate_many(reqs, concurrency=4, streams=2))
    assert sorted(r.id for r in results) == sorted(r.id for r in reqs)
    assert all(r.accepted for r in results)
    assert {r.executor.name for r in results} == {"streams-a", "streams-b"}


async def test_async_evaluate_many_spreads_and_survives_a_restart(make_executor) -> None:
    a = make_executor("async-a")
    b = make_executor("async-b")
    reqs = [slow_request(i, 0.2) for i in range(16)]
    seen = []
    restart = threading.Thread(target=b.restart, args=("async-b2",))
    async with sandpool.AsyncClient(f"ipv4:{a.address},{b.address}", retry=PATIENT) as c:
        async for r in c.evaluate_many(reqs, concurrency=4, streams=2):
            seen.append(r)
            if len(seen) == 2:
                restart.start()
    restart.join()
    assert sorted(r.id for r in seen) == sorted(r.id for r in reqs)
    assert all(r.accepted for r in seen), [(r.id, r.verdict, r.error) for r in seen if not r.accepted]
    assert "async-a" in {r.executor.name for r in seen}


def test_round_robin_routes_around_a_stopped_executor(make_executor) -> None:
    a = make_executor("alive")
    b = make_executor("stopping")
    with Client(f"ipv4:{a.address},{b.address}", retry=PATIENT) as c:
        for _ in range(4):
            assert c.execute("python", "print(1)").verdict is Verdict.OK
        b.stop()
        results = [c.execute("python", f"print({i})", timeout=30) for i in range(8)]
    assert all(r.verdict is Verdict.OK and r.executor.name == "alive" for r in results)
