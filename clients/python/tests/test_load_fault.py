"""SIGKILL of one of two real executors while evaluate_many has requests on both (sync and async).

The killed executor's streams end with whatever gRPC makes of a dead connection (UNAVAILABLE,
or INTERNAL when a send fails first, ...): every record must still be answered exactly once, by
the survivor. test_stream_faults.py injects each status deterministically; this is the real thing.
"""

from __future__ import annotations

import threading
import time

import sandpool
from sandpool import Client, EvaluateRequest, RetryPolicy, StdioCase, StdioTests, Verdict

PATIENT = RetryPolicy(max_attempts=8, initial_backoff_s=0.05, max_backoff_s=0.5)


def slow(i: int) -> EvaluateRequest:
    # Short runs, many in flight: the client is sending on the streams most of the time, so the
    # kill often meets a send (which grpc.aio reports as INTERNAL) rather than an idle stream.
    return EvaluateRequest(
        id=f"k{i}",
        language="python",
        completion=f"print({i})",
        tests=StdioTests(cases=[StdioCase("", f"{i}\n")]),
    )


def kill_after(victim, seen: list, n: int) -> threading.Thread:
    """Kills `victim` (SIGKILL: no drain) once `n` results are in and the victim has answered one."""

    def run() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if len(seen) >= n and any(r.executor.name == victim.name for r in list(seen)):
                victim.kill()
                return
            time.sleep(0.01)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def check(seen: list, reqs: list, survivor: str, victim: str) -> None:
    assert sorted(r.id for r in seen) == sorted(r.id for r in reqs), "every record answered exactly once"
    assert all(r.accepted and r.verdict is Verdict.OK for r in seen), [
        (r.id, r.verdict, r.error) for r in seen if not (r.accepted and r.verdict is Verdict.OK)
    ]
    assert {r.executor.name for r in seen} == {survivor, victim}
    # What the killed executor held was resent to the survivor.
    assert any(r.attempts > 1 and r.executor.name == survivor for r in seen), [
        (r.id, r.attempts, r.executor.name) for r in seen
    ]


def warm(c: Client, names: set) -> None:
    """round_robin picks among connected pods only: connect both first."""
    for _ in range(20):
        if {c.execute("python", "pass").executor.name for _ in range(4)} == names:
            return
    raise AssertionError("both executors never answered")


def test_sync_evaluate_many_survives_sigkill_of_one_executor(make_executor) -> None:
    a = make_executor("kill-sync-a")
    b = make_executor("kill-sync-b")
    reqs = [slow(i) for i in range(120)]
    seen: list = []
    with Client(f"ipv4:{a.address},{b.address}", retry=PATIENT) as c:
        warm(c, {a.name, b.name})
        killer = kill_after(b, seen, 10)
        for r in c.evaluate_many(reqs, concurrency=32, streams=4):
            seen.append(r)
    killer.join()
    assert b.proc is None, "b was killed mid-run"
    check(seen, reqs, a.name, "kill-sync-b")


async def test_async_evaluate_many_survives_sigkill_of_one_executor(make_executor) -> None:
    a = make_executor("kill-async-a")
    b = make_executor("kill-async-b")
    reqs = [slow(i) for i in range(120)]
    seen: list = []
    target = f"ipv4:{a.address},{b.address}"
    with Client(target) as sc:
        warm(sc, {a.name, b.name})
    async with sandpool.AsyncClient(target, retry=PATIENT) as c:
        for _ in range(8):  # connect both, as above
            await c.execute("python", "pass")
        killer = kill_after(b, seen, 10)
        async for r in c.evaluate_many(reqs, concurrency=32, streams=4):
            seen.append(r)
    killer.join()
    assert b.proc is None, "b was killed mid-run"
    check(seen, reqs, a.name, "kill-async-b")
