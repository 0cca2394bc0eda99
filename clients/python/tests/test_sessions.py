"""Sessions through the sync and asyncio clients, against real executors."""

from __future__ import annotations

import asyncio
import os

import pytest
from conftest import Executor
from sandpool import AsyncClient, Client, Limits, SessionLimits, SessionLost, Verdict


@pytest.fixture(scope="module")
def sessions_executor() -> Executor:
    e = Executor("pytest-sessions", slots=2, languages="python,bash", args=["--max-sessions", "2"]).start()
    yield e
    e.close()


def test_state_files_and_close_on_exit(sessions_executor: Executor) -> None:
    with Client(sessions_executor.address) as c:
        with c.session("python", files={"data.txt": "21"}) as s:
            assert s.language == "python" and s.id.endswith("-pytest-sessions"), s.id  # the executor names itself
            assert s.executor_address == sessions_executor.address
            assert s.limits.max_calls > 0 and s.call_limits.wall_time_ms > 0
            r = s.run("n = int(open('data.txt').read())")
            assert r.ok and r.display == "", r
            r = s.run("print('double'); n * 2")
            assert r.ok and r.stdout == "double\n" and r.display == "42", r
            bad = s.run("undefined_name")
            assert bad.verdict is Verdict.RUNTIME_ERROR and "NameError" in bad.stderr
            assert s.run("n").display == "21", "an exception keeps the state"
            assert s.command("echo $((6*7)) > out.txt && cat data.txt").stdout == "21"
            assert s.read_file("out.txt") == b"42\n"
            assert s.write_files({"sub/x.py": "VALUE = 5\n"}) > 0
            assert s.run("import sys; sys.path.insert(0, '/work/sub'); import x; x.VALUE").display == "5"
            with pytest.raises(FileNotFoundError, match="missing"):
                s.read_file("missing")
            slow = s.run("import time; time.sleep(30)", limits=Limits(wall_time_ms=300))
            assert slow.verdict is Verdict.WALL_TIME_LIMIT_EXCEEDED and slow.state_reset
            assert s.run("'n' in globals()").display == "False"
            sid = s.id
        assert s.closed
        # Closed on exit: the id is gone on the executor.
        with pytest.raises(SessionLost):
            s.run("1")
        with c.session("bash") as b:
            assert b.run("cd /tmp 2>/dev/null; mkdir -p /work/p && cd /work/p").ok
            assert b.run("pwd").stdout == "/work/p\n"
            assert b.id != sid


def test_routing_to_the_named_executor_and_a_lost_session(make_executor, tmp_path) -> None:
    e = make_executor("pytest-route", languages="python", args=["--max-sessions", "1"])
    # Dialled by another name than the one the executor advertises: the session gets a channel of its own.
    with Client(f"dns:///localhost:{e.port}") as c:
        s = c.session("python", limits=SessionLimits(max_calls=5))
        assert s.executor_address == e.address and s._channel is not None
        assert s.limits.max_calls == 5
        assert s.run("x = 1").ok
        # SIGTERM pauses the session into the store (by default under the work root, which the
        # restarted executor keeps): its next call resumes it there.
        e.restart("pytest-route-2")
        assert s.run("assert x == 1").ok
        # Back with another store, it has no such session: the session is reported lost, never
        # recreated silently.
        e.extra_args += ["--session-store-dir", str(tmp_path)]
        e.restart("pytest-route-3")
        with pytest.raises(SessionLost, match="restarted executor"):
            s.run("x")
        s.close()
        s2 = c.session("python")
        assert s2.run("x = 2").ok
        e.kill()
        with pytest.raises(SessionLost, match="cannot be reached"):
            s2.run("x")
        assert s2.close() is None


async def test_async_sessions(sessions_executor: Executor) -> None:
    async with AsyncClient(sessions_executor.address) as c:
        async with await c.session("python") as s:
            assert (await s.run("import math; r = math.sqrt(16)")).ok
            r = await s.run("r + 1")
            assert r.display == "5.0" and r.calls_left == s.limits.max_calls - 2
            await s.write_files({"a.txt": b"hello"})
            assert await s.read_files(["a.txt", "nope"]) == {"a.txt": b"hello"}
            assert (await s.command("cat a.txt")).stdout == "hello"
        assert s.closed
        with pytest.raises(SessionLost):
            await s.run("r")


@pytest.mark.parametrize("aio", [False, True])
def test_a_routed_session_follows_its_executor_after_a_drain(make_executor, tmp_path, aio: bool) -> None:
    """Issue 47, item 4: two executors share a session store; SIGTERM pauses the session the first
    holds into it and the first exits. The session's next call cannot reach it, so it goes once
    more through the client's main target, where the other executor resumes it (its variable and
    file kept); later calls go straight to the executor that answer named."""
    store = str(tmp_path / "store")
    os.makedirs(store)
    a = make_executor("pytest-move-a", languages="python", args=["--session-store-dir", store])
    b = make_executor("pytest-move-b", languages="python", args=["--session-store-dir", store])
    target = f"ipv4:{a.address},{b.address}"

    def sync() -> tuple[str, str, str, str]:
        with Client(target) as c:
            s = c.session("python")
            first, other = (a, b) if s.executor_address == a.address else (b, a)
            assert s._channel is not None, "routed: a channel of its own"
            assert s.run("x = 41").ok
            s.write_files({"kept.txt": "kept"})
            first.stop()
            r = s.run("print(x + 1)")
            moved = s.executor_address
            again = s.run("print(open('kept.txt').read())")
            s.close()
            return r.stdout, moved, again.stdout, other.address

    async def asynchronous() -> tuple[str, str, str, str]:
        async with AsyncClient(target) as c:
            s = await c.session("python")
            first, other = (a, b) if s.executor_address == a.address else (b, a)
            assert s._channel is not None, "routed: a channel of its own"
            assert (await s.run("x = 41")).ok
            await s.write_files({"kept.txt": "kept"})
            await asyncio.get_running_loop().run_in_executor(None, first.stop)
            r = await s.run("print(x + 1)")
            moved = s.executor_address
            again = await s.run("print(open('kept.txt').read())")
            await s.close()
            return r.stdout, moved, again.stdout, other.address

    out, moved, again, other = asyncio.run(asynchronous()) if aio else sync()
    assert out.strip() == "42", "resumed with its interpreter's variable"
    assert moved == other, "later calls follow the executor the answer named"
    assert again.strip() == "kept"
