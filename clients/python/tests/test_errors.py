"""`sandpool.errors`: what each failed call raises, through both clients, against fakes and a real executor."""

from __future__ import annotations

import os
import pickle
import signal
import time

import grpc
import grpc.aio
import pytest
import sandpool
from conftest import Executor, free_port
from fakes import FaultyExecutor, RefusingExecutor
from sandpool import Client, EvaluateRequest, Limits, RetryPolicy, StdioCase, StdioTests, errors

FAST = RetryPolicy(max_attempts=3, initial_backoff_s=0.01, max_backoff_s=0.02)

#: Each status a call can end with, and the class it raises.
RAISED = [
    ("INVALID_ARGUMENT", errors.InvalidArgument),
    ("PERMISSION_DENIED", errors.PermissionDenied),
    ("UNAUTHENTICATED", errors.Unauthenticated),
    ("UNIMPLEMENTED", errors.RequestRejected),
    ("FAILED_PRECONDITION", errors.RequestRejected),
    ("NOT_FOUND", errors.RequestRejected),
    ("UNAVAILABLE", errors.Unavailable),
    ("RESOURCE_EXHAUSTED", errors.Unavailable),
    ("INTERNAL", errors.Unavailable),
    ("DEADLINE_EXCEEDED", errors.DeadlineExceeded),
]


def req() -> EvaluateRequest:
    return EvaluateRequest(id="r", language="python", completion="print(1)", tests=StdioTests([StdioCase("", "1\n")]))


def check(e: BaseException, code: str, cls: type) -> None:
    """`e` is exactly `cls`, says `code`, keeps the raw gRPC error as its cause and passes for one."""
    assert type(e) is cls, repr(e)
    assert isinstance(e, errors.SandpoolError) and isinstance(e, errors.CallError)
    assert e.code() == e.status == grpc.StatusCode[code] and e.details() == e.message  # type: ignore[attr-defined]
    cause = e.__cause__
    assert isinstance(cause, grpc.RpcError) and not isinstance(cause, errors.SandpoolError), repr(cause)
    # Compatibility for one release: callers' `except grpc.RpcError` / `grpc.aio.AioRpcError` still catch it.
    assert isinstance(e, grpc.RpcError) and isinstance(e, grpc.aio.AioRpcError)


@pytest.mark.parametrize("code,cls", RAISED)
def test_each_status_maps_to_its_class(code: str, cls: type) -> None:
    assert errors.error_class(grpc.StatusCode[code]) is cls
    raw = grpc.aio.AioRpcError(grpc.StatusCode[code], None, None, details="why")
    e = errors.from_rpc(raw)
    assert type(e) is cls and e.code() == grpc.StatusCode[code] and e.message == "why"
    assert str(e) == f"{code}: why"
    assert errors.from_rpc(e) is e, "converted once"
    back = pickle.loads(pickle.dumps(e))
    assert type(back) is cls and back.code() == e.code() and back.message == "why"
    lost = pickle.loads(pickle.dumps(errors.SessionLost("0123456789abcdef", "gone")))
    assert lost.session_id == "0123456789abcdef" and lost.why == "gone"


@pytest.mark.parametrize("code,cls", [r for r in RAISED if r[0] != "DEADLINE_EXCEEDED"])
def test_sync_calls_raise_the_class_of_their_status(serve, code: str, cls: type) -> None:
    fake = RefusingExecutor(grpc.StatusCode[code])
    with Client(serve(fake), retry=FAST) as c:
        for call in (
            lambda: c.execute("python", "print(1)"),
            lambda: c.evaluate(req()),
            lambda: c.capabilities(),
            lambda: c.session("python"),
        ):
            with pytest.raises(errors.CallError) as e:
                call()
            check(e.value, code, cls)
    # Away or full: raised only once the retries are used up; a refusal at once.
    assert fake.calls == 4 * (FAST.max_attempts if cls is errors.Unavailable else 1)


@pytest.mark.parametrize("code,cls", [r for r in RAISED if r[0] != "DEADLINE_EXCEEDED"])
async def test_async_calls_raise_the_class_of_their_status(serve, code: str, cls: type) -> None:
    fake = RefusingExecutor(grpc.StatusCode[code])
    async with sandpool.AsyncClient(serve(fake), retry=FAST) as c:
        for call in (lambda: c.execute("python", "print(1)"), lambda: c.evaluate(req()), lambda: c.session("python")):
            with pytest.raises(errors.CallError) as e:
                await call()
            check(e.value, code, cls)


@pytest.mark.parametrize("code,cls", [("UNAUTHENTICATED", errors.Unauthenticated), ("INVALID_ARGUMENT", errors.InvalidArgument)])
def test_a_refused_stream_raises_request_rejected(serve, code: str, cls: type) -> None:
    fake = FaultyExecutor(grpc.StatusCode[code], breaks=100, answer=-1)
    with Client(serve(fake), retry=FAST) as c, pytest.raises(errors.RequestRejected) as e:
        list(c.evaluate_many([req()], concurrency=1, streams=2))
    check(e.value, code, cls)


def test_an_item_error_in_a_stream_stays_data(serve) -> None:
    fake = FaultyExecutor(None)
    with Client(serve(fake)) as c:
        [r] = list(c.evaluate_many([EvaluateRequest(id="x", language="python", completion="reject", tests=req().tests)]))
    assert not r.accepted and r.error is not None and r.error.code == "INVALID_ARGUMENT"


def test_real_executor_invalid_argument_deadline_and_nobody_listening(executor: Executor) -> None:
    with Client(executor.address) as c:
        with pytest.raises(errors.InvalidArgument) as e:
            c.execute("python", "print(1)", limits=Limits(wall_time_ms=10**9))
        check(e.value, "INVALID_ARGUMENT", errors.InvalidArgument)
        assert "limits.wall_time_ms" in e.value.message
        with pytest.raises(errors.DeadlineExceeded) as d:
            c.execute("python", "import time; time.sleep(30)", timeout=1.0)
        check(d.value, "DEADLINE_EXCEEDED", errors.DeadlineExceeded)
        with c.session("python") as s, pytest.raises(errors.InvalidArgument) as si:
            s.run("1", limits=Limits(wall_time_ms=10**9))
        check(si.value, "INVALID_ARGUMENT", errors.InvalidArgument)
    with Client(f"127.0.0.1:{free_port()}", retry=FAST) as c, pytest.raises(errors.Unavailable) as u:
        c.execute("python", "print(1)", timeout=10)
    check(u.value, "UNAVAILABLE", errors.Unavailable)


async def test_real_executor_async_invalid_argument(executor: Executor) -> None:
    async with sandpool.AsyncClient(executor.address) as c:
        with pytest.raises(errors.InvalidArgument) as e:
            await c.execute("python", "print(1)", limits=Limits(wall_time_ms=10**9))
        check(e.value, "INVALID_ARGUMENT", errors.InvalidArgument)


def test_real_executor_session_lost_keeps_its_cause(make_executor, tmp_path) -> None:
    e = make_executor("pytest-errors-lost", languages="python")
    with Client(e.address) as c:
        s = c.session("python")
        # Back with another session store than the one its drain paused the session into: none.
        e.extra_args += ["--session-store-dir", str(tmp_path)]
        e.restart("pytest-errors-lost-2")
        with pytest.raises(errors.SessionLost) as lost:
            s.run("1")
    assert isinstance(lost.value, errors.SandpoolError) and not isinstance(lost.value, grpc.RpcError)
    assert isinstance(lost.value.__cause__, grpc.RpcError) and lost.value.session_id == s.id
    assert sandpool.SessionLost is errors.SessionLost and sandpool.session.SessionLost is errors.SessionLost


def test_a_session_reset_is_its_own_class() -> None:
    """FAILED_PRECONDITION `session reset: ...` is `SessionReset`; other FAILED_PRECONDITIONs stay `RequestRejected`."""
    raw = grpc.aio.AioRpcError(grpc.StatusCode.FAILED_PRECONDITION, None, None, details="session reset: gone")
    e = errors.from_rpc(raw)
    assert type(e) is errors.SessionReset and e.message == "session reset: gone"
    assert not isinstance(e, errors.RequestRejected), "sending it again runs it, on a fresh interpreter"
    back = pickle.loads(pickle.dumps(e))
    assert type(back) is errors.SessionReset
    other = errors.from_rpc(grpc.aio.AioRpcError(grpc.StatusCode.FAILED_PRECONDITION, None, None, details="x"))
    assert type(other) is errors.RequestRejected
    assert sandpool.SessionReset is errors.SessionReset


def _procs_of(uid: int) -> list[int]:
    pids = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                if os.stat(f"/proc/{d}").st_uid == uid:
                    pids.append(int(d))
            except FileNotFoundError:
                pass
    return pids


def test_real_executor_session_reset_after_its_interpreter_was_killed(make_executor) -> None:
    """A session whose interpreter died between calls raises `SessionReset` on its next call, not a NameError."""
    e = make_executor("pytest-errors-reset", slots=1, languages="python")
    with Client(e.address) as c:
        s = c.session("python")
        s.run("x = 42")
        seat = e.uid_base + e.slots  # the first session seat's uid
        pids = _procs_of(seat)
        assert pids, "the session's interpreter was found"
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + 10
        while _procs_of(seat):
            assert time.monotonic() < deadline, "the interpreter did not die"
            time.sleep(0.05)
        with pytest.raises(errors.SessionReset) as reset:
            s.run("print(x)")
        assert "variables are gone" in reset.value.message
        assert s.run("x = 7\nprint(x)").stdout == "7\n"
