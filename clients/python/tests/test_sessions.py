"""Sessions through the sync and asyncio clients, against real executors."""

from __future__ import annotations

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


def test_routing_to_the_named_executor_and_a_lost_session(make_executor) -> None:
    e = make_executor("pytest-route", languages="python", args=["--max-sessions", "1"])
    # Dialled by another name than the one the executor advertises: the session gets a channel of its own.
    with Client(f"dns:///localhost:{e.port}") as c:
        s = c.session("python", limits=SessionLimits(max_calls=5))
        assert s.executor_address == e.address and s._channel is not None
        assert s.limits.max_calls == 5
        assert s.run("x = 1").ok
        e.restart("pytest-route-2")
        # The executor came back empty: the session is reported lost, never recreated silently.
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
