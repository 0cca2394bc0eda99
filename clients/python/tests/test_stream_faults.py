"""evaluate_many when a stream breaks, whatever status it reports, against an in-test gRPC server.

A real executor killed mid-stream reports UNAVAILABLE or, when the client's send fails first,
INTERNAL ("Internal error from Core"); a proxy or the transport may say CANCELLED or UNKNOWN.
Which one is a race, so the statuses are injected here, deterministically: the server answers a
few requests, then ends the stream with the status while others are in flight. The real-process
version (SIGKILL of an executor) is in test_load_fault.py.
"""

from __future__ import annotations

import grpc
import pytest
import sandpool
from sandpool import Client, EvaluateRequest, RetryPolicy, StdioCase, StdioTests, Verdict
from fakes import FaultyExecutor

FAST = RetryPolicy(max_attempts=4, initial_backoff_s=0.01, max_backoff_s=0.05)

#: What a broken transport may report; the requests it held must go to another stream.
BROKEN = ["UNAVAILABLE", "INTERNAL", "CANCELLED", "UNKNOWN", "ABORTED", "DATA_LOSS", "RESOURCE_EXHAUSTED"]
#: What says the call itself is refused: retrying cannot help, the caller hears it at once.
REFUSED = ["UNAUTHENTICATED", "PERMISSION_DENIED", "UNIMPLEMENTED", "INVALID_ARGUMENT", "FAILED_PRECONDITION"]


def requests(n: int, completion: str = "print(1)") -> list[EvaluateRequest]:
    return [
        EvaluateRequest(id=f"r{i}", language="python", completion=completion, tests=StdioTests([StdioCase("", "1\n")]))
        for i in range(n)
    ]


def run_sync(target: str, reqs: list[EvaluateRequest], **kw) -> list[sandpool.EvaluateResult]:
    with Client(target, retry=FAST) as c:
        return list(c.evaluate_many(reqs, **kw))


async def run_async(target: str, reqs: list[EvaluateRequest], **kw) -> list[sandpool.EvaluateResult]:
    async with sandpool.AsyncClient(target, retry=FAST) as c:
        return [r async for r in c.evaluate_many(reqs, **kw)]


@pytest.mark.parametrize("code", BROKEN)
@pytest.mark.parametrize("streams", [1, 3])
def test_sync_stream_broken_with_any_transport_status_resends_its_requests(serve, code: str, streams: int) -> None:
    fake = FaultyExecutor(grpc.StatusCode[code], answer=2 if streams == 1 else 0)
    reqs = requests(12)
    results = run_sync(serve(fake), reqs, concurrency=6, streams=streams)
    assert sorted(r.id for r in results) == sorted(r.id for r in reqs), "every request answered exactly once"
    assert all(r.accepted and r.verdict is Verdict.OK for r in results), [(r.id, r.error) for r in results]
    # One stream is reopened; with several, the others may take over everything it held first.
    assert fake.streams > 1 if streams == 1 else fake.streams >= streams
    assert any(r.attempts > 1 for r in results), "the request the stream broke on was resent"


@pytest.mark.parametrize("code", BROKEN)
@pytest.mark.parametrize("streams", [1, 3])
async def test_async_stream_broken_with_any_transport_status_resends_its_requests(
    serve, code: str, streams: int
) -> None:
    fake = FaultyExecutor(grpc.StatusCode[code], answer=2 if streams == 1 else 0)
    reqs = requests(12)
    results = await run_async(serve(fake), reqs, concurrency=6, streams=streams)
    assert sorted(r.id for r in results) == sorted(r.id for r in reqs), "every request answered exactly once"
    assert all(r.accepted and r.verdict is Verdict.OK for r in results), [(r.id, r.error) for r in results]
    assert fake.streams > 1 if streams == 1 else fake.streams >= streams
    assert any(r.attempts > 1 for r in results)


@pytest.mark.parametrize("code", REFUSED)
def test_sync_a_refused_stream_raises_at_once(serve, code: str) -> None:
    fake = FaultyExecutor(grpc.StatusCode[code], breaks=100, answer=-1)
    with pytest.raises(grpc.RpcError) as e:
        run_sync(serve(fake), requests(4), concurrency=4, streams=1)
    assert e.value.code() == grpc.StatusCode[code]
    assert fake.streams == 1, "a refused call is not retried"


@pytest.mark.parametrize("code", REFUSED)
async def test_async_a_refused_stream_raises_at_once(serve, code: str) -> None:
    fake = FaultyExecutor(grpc.StatusCode[code], breaks=100, answer=-1)
    target = serve(fake)
    # grpc.aio hides the real status behind INTERNAL when a send fails after the server ended the
    # call (see retry.py; likeliest while the connection is new, so connect first). The client
    # cannot tell that from a broken transport and tries again: the next try shows the real status.
    async with sandpool.AsyncClient(target, retry=FAST) as c:
        await c.execute("python", "pass")
        with pytest.raises(grpc.aio.AioRpcError) as e:
            _ = [r async for r in c.evaluate_many(requests(1), concurrency=1, streams=1)]
    assert e.value.code() == grpc.StatusCode[code]
    assert fake.streams < FAST.max_attempts


def _check_all_answered_as_errors(results: list[sandpool.EvaluateResult], n: int) -> None:
    assert sorted(r.id for r in results) == sorted(f"r{i}" for i in range(n)), "every request answered exactly once"
    for r in results:
        assert not r.accepted and r.error is not None and r.error.code == "INTERNAL", r
        assert "attempts" in r.error.message or "gave up" in r.error.message, r.error


def test_sync_a_stream_that_always_breaks_answers_every_request_with_the_error(serve) -> None:
    fake = FaultyExecutor(grpc.StatusCode.INTERNAL, breaks=10**6, answer=0)
    # More requests than the streams hold at once: those never sent are answered too.
    results = run_sync(serve(fake), requests(30), concurrency=8, streams=2)
    _check_all_answered_as_errors(results, 30)
    # Bounded: each stream gives up after max_attempts breaks in a row.
    assert fake.streams <= 2 * FAST.max_attempts


async def test_async_a_stream_that_always_breaks_answers_every_request_with_the_error(serve) -> None:
    fake = FaultyExecutor(grpc.StatusCode.INTERNAL, breaks=10**6, answer=0)
    results = await run_async(serve(fake), requests(30), concurrency=8, streams=2)
    _check_all_answered_as_errors(results, 30)
    assert fake.streams <= 2 * FAST.max_attempts


def test_a_per_request_error_is_a_result_not_a_broken_stream(serve) -> None:
    fake = FaultyExecutor(None)
    reqs = requests(3) + requests(1, completion="reject")[:1]
    reqs[-1].id = "bad"
    results = {r.id: r for r in run_sync(serve(fake), reqs, concurrency=4, streams=1)}
    assert set(results) == {"r0", "r1", "r2", "bad"}
    bad = results["bad"]
    assert not bad.accepted and bad.error is not None and bad.error.code == "INVALID_ARGUMENT"
    assert bad.attempts == 1 and fake.received["3"] == 1, "a rejected request is final, not resent"
    assert fake.streams == 1


def test_a_late_answer_from_a_broken_stream_is_not_counted_twice() -> None:
    from sandpool.stream import Lane, Source
    from sandpool.v1 import executor_pb2 as pb

    source = Source(iter(requests(1)), FAST, streams=2)
    first, second = Lane(), Lane()
    what, msg = source.next_to_send(first, 4)
    assert what == "send" and msg is not None
    assert source.close_lane(first, grpc.StatusCode.INTERNAL, "broke") == []
    # The broken stream's answer arrives after all (it was in a buffer): ignored.
    ok = pb.EvaluateResponse(id=msg.id, accepted=True, verdict=pb.OK)
    assert source.on_response(first, ok) is None
    # A closed lane sends nothing more; another stream resends the request and its answer counts.
    assert source.next_to_send(first, 4) == ("done", None)
    while (step := source.next_to_send(second, 4))[0] == "wait":
        pass
    assert step[0] == "send" and step[1].id == msg.id
    r = source.on_response(second, ok)
    assert r is not None and r.id == "r0" and r.attempts == 2
    assert source.on_response(second, ok) is None, "a duplicate answer is ignored"
    assert source.done()
