"""E2B (docs/compatibility.md) with E2B's own SDKs, unmodified and pinned: PyPI `e2b` 2.63.0 and
`e2b-code-interpreter` 2.11.5, sync and asyncio, pointed at a real executor's HTTP port by
`E2B_API_URL` and `E2B_SANDBOX_URL` alone (`E2B_API_KEY`: the executor's token). Also: an older
pair (`e2b` 2.26.0, `e2b-code-interpreter` 2.9.0) in a venv of its own, two tenants that cannot
see each other's sandboxes, and a pool of two executors behind `sandpool-gateway`.

An E2B sandbox is a Sandpool session (a Python one, for `base` and `code-interpreter-v1` alike,
whose interpreter also runs the sandbox's commands); `/home/user` is the session's `/work`."""

from __future__ import annotations

import concurrent.futures
import io
import json
import os
import subprocess
import sys
import time
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Callable, Iterator

import httpx
import pytest
from e2b import (
    AsyncSandbox,
    AuthenticationException,
    CommandExitException,
    FileNotFoundException,
    FileType,
    PtySize,
    Sandbox,
    SandboxException,
    SandboxNotFoundException,
    SandboxNotRunningException,
    SandboxQuery,
    SandboxState,
    TimeoutException,
)
from e2b_code_interpreter import AsyncSandbox as AsyncCodeSandbox
from e2b_code_interpreter import Sandbox as CodeSandbox

from conftest import Executor, free_port, start_gateway

# E2B's key format (`e2b_` and hex): e2b 2.25 to 2.45 check it on the client (the old pair
# below is one of them); 2.46 and later take any token, as the tenants test shows.
KEY = "e2b_" + "0123456789abcdef" * 2 + "01234567"
NAME = "pytest-e2b"
# The executor's session lifetime ceiling (--max-session-lifetime-ms): set_timeout never
# moves a sandbox's end past it.
LIFETIME_S = 600
# What a refused E2B feature's message says (volumes, file watches, a pty, metrics, ...).
UNSUPPORTED = r"(?i)not supported by sandpool|sandpool does not support"
HOME = "/home/user"

# An older pair that still honours E2B_API_URL and E2B_SANDBOX_URL: e2b-code-interpreter 2.9.0
# (2026-07) is the first whose run_code goes to E2B_SANDBOX_URL (earlier ones always dial
# https://49999-<id>.<domain>), and e2b 2.26.0 (2026-06) is the oldest e2b it takes; that e2b
# talks to the sandbox over httpx/httpcore and its own Connect client, not pyqwest/connectrpc.
OLD_PAIR = ("e2b==2.26.0", "e2b-code-interpreter==2.9.0")


def e2b_args(port: int, sessions: int) -> list[str]:
    return [
        "--http-listen", f"127.0.0.1:{port}",
        "--max-sessions", str(sessions),
        "--session-lifetime-ms", str(LIFETIME_S * 1000),
        "--max-session-lifetime-ms", str(LIFETIME_S * 1000),
    ]  # fmt: skip


@pytest.fixture(scope="module")
def e2b_base(tmp_path_factory) -> Iterator[str]:
    """One executor with sessions and a bearer token, serving HTTP; its base URL."""
    token = tmp_path_factory.mktemp("e2b") / "token"
    token.write_text(KEY + "\n")
    port = free_port()
    e = Executor(
        NAME,
        slots=8,
        languages="python,bash",
        args=e2b_args(port, 8),
        env={"SANDPOOL_AUTH_TOKEN_FILE": str(token)},
    ).start()
    yield f"http://127.0.0.1:{port}"
    e.close()


def point(monkeypatch: pytest.MonkeyPatch, base: str, key: str) -> None:
    """The SDK's whole configuration: both URLs at one base, the key; no debug mode."""
    for k in ("E2B_DEBUG", "E2B_DOMAIN", "E2B_ACCESS_TOKEN", "E2B_HTTP_VERSION"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("E2B_API_URL", base)
    monkeypatch.setenv("E2B_SANDBOX_URL", base)
    monkeypatch.setenv("E2B_API_KEY", key)


@pytest.fixture(autouse=True)
def e2b_env(monkeypatch: pytest.MonkeyPatch, e2b_base: str) -> str:
    point(monkeypatch, e2b_base, KEY)
    return e2b_base


class Made:
    """Creates sandboxes and remembers them, so that each test's are killed after it."""

    def __init__(self) -> None:
        self.made: list[tuple[str, dict]] = []

    def _keep(self, sbx: Any, kw: dict) -> Any:
        self.made.append((sbx.sandbox_id, {k: kw[k] for k in ("api_key", "api_url") if k in kw}))
        return sbx

    def create(self, cls: Any = Sandbox, **kw: Any) -> Any:
        return self._keep(cls.create(**kw), kw)

    async def acreate(self, cls: Any = AsyncSandbox, **kw: Any) -> Any:
        return self._keep(await cls.create(**kw), kw)


@pytest.fixture
def sandboxes() -> Iterator[Made]:
    m = Made()
    yield m
    for sid, opts in m.made:
        try:
            Sandbox.kill(sid, request_timeout=10, **opts)
        except Exception:  # noqa: BLE001 - already gone, or its executor is
            pass


def within(seconds: float, fn: Callable, *args: Any, **kw: Any) -> Any:
    """fn's answer (or exception), failing the test when it has none within `seconds`: a
    gone sandbox must be reported, never waited on or retried forever."""
    pool = concurrent.futures.ThreadPoolExecutor(1)
    fut = pool.submit(fn, *args, **kw)
    try:
        return fut.result(timeout=seconds)
    except concurrent.futures.TimeoutError:
        pytest.fail(f"{getattr(fn, '__name__', fn)} did not answer within {seconds} s")
    finally:
        pool.shutdown(wait=False)


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


# --- the main flow, sync and asyncio ---------------------------------------------------------


def test_code_interpreter_main_flow_sync(sandboxes: Made) -> None:
    sbx = sandboxes.create(CodeSandbox)
    assert sbx.sandbox_id.endswith(f"-{NAME}"), sbx.sandbox_id  # a session id names its executor
    first = sbx.run_code("x = 1")
    assert first.error is None and first.results == [], first
    ex = sbx.run_code("x + 1")
    assert ex.error is None, ex.error
    assert [r.text for r in ex.results] == ["2"] and ex.text == "2", ex
    w = sbx.files.write(f"{HOME}/data.txt", "hello e2b")
    assert (w.name, w.path) == ("data.txt", f"{HOME}/data.txt"), w
    assert sbx.files.read("data.txt") == "hello e2b"
    assert sbx.run_code("open('/work/data.txt').read()").text == "'hello e2b'"
    r = sbx.commands.run("cat /work/data.txt")
    assert (r.exit_code, r.stdout, r.stderr) == (0, "hello e2b", ""), r
    assert sbx.is_running()
    assert sbx.kill() is True
    assert within(30, sbx.is_running) is False


def test_home_user_is_the_sandboxs_home(sandboxes: Made) -> None:
    """Code written for E2B, unchanged: a file written through the files API at /home/user is
    there for the sandbox's commands and its interpreter, which start in /home/user as E2B's
    `user` (issue 47, item 1). It failed with FileNotFoundError when only the files API knew
    the path."""
    sbx = sandboxes.create(CodeSandbox)
    sbx.files.write("/home/user/a.txt", "written by the files API")
    r = sbx.commands.run("cat /home/user/a.txt; echo; pwd; whoami; echo $HOME")
    assert r.stdout == "written by the files API\n/home/user\nuser\n/home/user\n", r
    ex = sbx.run_code("open('/home/user/a.txt').read()")
    assert ex.error is None and ex.text == "'written by the files API'", ex
    ex = sbx.run_code("import os, getpass\n(os.getcwd(), os.environ['HOME'], getpass.getuser(), open('a.txt').read())")
    assert ex.text == "('/home/user', '/home/user', 'user', 'written by the files API')", ex
    # And back: what the sandbox writes in its home, the files API reads.
    sbx.run_code("open('made.txt', 'w').write('by run_code')")
    sbx.commands.run("echo by a command > ~/cmd.txt")
    assert sbx.files.read("/home/user/made.txt") == "by run_code"
    assert sbx.files.read("/home/user/cmd.txt") == "by a command\n"


async def test_code_interpreter_main_flow_async(sandboxes: Made) -> None:
    sbx = await sandboxes.acreate(AsyncCodeSandbox)
    assert sbx.sandbox_id.endswith(f"-{NAME}"), sbx.sandbox_id
    assert (await sbx.run_code("x = 20")).error is None
    ex = await sbx.run_code("x + 22")
    assert ex.error is None and ex.text == "42", ex
    w = await sbx.files.write("async.bin", b"\x00\x01bytes")
    assert w.path == f"{HOME}/async.bin", w
    assert await sbx.files.read(f"{HOME}/async.bin", format="bytes") == bytearray(b"\x00\x01bytes")
    r = await sbx.commands.run("wc -c < /work/async.bin")
    assert r.exit_code == 0 and r.stdout.strip() == "7", r
    with pytest.raises(CommandExitException) as e:
        await sbx.commands.run("echo async && exit 4")
    assert e.value.exit_code == 4 and e.value.stdout == "async\n"
    assert await sbx.is_running()
    assert await sbx.kill() is True
    assert await sbx.is_running() is False


async def test_base_sandbox_async(sandboxes: Made) -> None:
    """`e2b.AsyncSandbox` (template `base`): files and commands."""
    sbx = await sandboxes.acreate(AsyncSandbox, envs={"WHO": "async"})
    await sbx.files.write_files([{"path": "a/1.txt", "data": "one"}, {"path": f"{HOME}/a/2.txt", "data": "two"}])
    assert sorted(e.name for e in await sbx.files.list("a")) == ["1.txt", "2.txt"]
    r = await sbx.commands.run('cat /work/a/1.txt /work/a/2.txt && echo " $WHO"')
    assert r.stdout == "onetwo async\n", r
    info = await sbx.get_info()
    assert info.template_id == "base" and info.sandbox_id == sbx.sandbox_id, info
    assert await sbx.kill() is True


# --- the code interpreter --------------------------------------------------------------------


def test_run_code_output_errors_and_counts(sandboxes: Made) -> None:
    sbx = sandboxes.create(CodeSandbox)
    out, err, results = [], [], []
    ex = sbx.run_code(
        "import sys\nprint('out line')\nprint('err line', file=sys.stderr)\n6 * 7",
        on_stdout=out.append,
        on_stderr=err.append,
        on_result=results.append,
    )
    assert ex.error is None, ex.error
    assert "".join(ex.logs.stdout) == "out line\n" and "".join(ex.logs.stderr) == "err line\n", ex.logs
    assert ex.text == "42" and ex.results[0].is_main_result, ex.results
    # The callbacks are called (when is not checked: output is streamed as the cell writes it).
    assert "".join(m.line for m in out) == "out line\n" and not any(m.error for m in out), out
    assert "".join(m.line for m in err) == "err line\n" and all(m.error for m in err), err
    assert [r.text for r in results] == ["42"]
    first_count = ex.execution_count
    assert isinstance(first_count, int) and first_count >= 1, ex

    errors = []
    bad = sbx.run_code("y = 5\n1 / 0", on_error=errors.append)
    assert bad.error is not None, bad
    assert bad.error.name == "ZeroDivisionError", bad.error
    assert "division by zero" in bad.error.value, bad.error
    assert "ZeroDivisionError" in bad.error.traceback and "line 2" in bad.error.traceback, bad.error.traceback
    assert "1 / 0" in bad.error.traceback, bad.error.traceback  # the failing line, as Jupyter shows it
    assert errors and errors[0].name == "ZeroDivisionError"
    assert bad.execution_count > first_count, (bad.execution_count, first_count)
    # An exception keeps the state, the lines before it included.
    again = sbx.run_code("y * 2")
    assert again.text == "10" and again.execution_count > bad.execution_count, again
    name_error = sbx.run_code("undefined_name")
    assert name_error.error.name == "NameError" and "undefined_name" in name_error.error.value, name_error.error
    assert sbx.run_code("print('no value')").results == []
    # A failed cell's own stderr is a log, apart from the traceback.
    noisy = sbx.run_code("import sys\nprint('before', file=sys.stderr)\n[][1]")
    assert "".join(noisy.logs.stderr) == "before\n" and noisy.error.name == "IndexError", (noisy.logs, noisy.error)

    contexts = sbx.list_code_contexts()
    assert [c.language for c in contexts] == ["python"], [vars(c) for c in contexts]
    assert contexts[0].id


# --- control plane ---------------------------------------------------------------------------


def test_envs_metadata_timeout_and_info(sandboxes: Made) -> None:
    before = utcnow()
    sbx = sandboxes.create(
        Sandbox, metadata={"suite": "info", "owner": "ada"}, envs={"GREETING": "hello world", "N": "7"}, timeout=120
    )
    r = sbx.commands.run('echo "$GREETING/$N"')
    assert r.stdout == "hello world/7\n", r
    info = sbx.get_info()
    assert info.sandbox_id == sbx.sandbox_id
    assert info.template_id == "base", info
    assert info.metadata == {"suite": "info", "owner": "ada"}, info.metadata
    assert before - timedelta(seconds=5) <= info.started_at <= utcnow() + timedelta(seconds=5), info.started_at
    assert abs((info.end_at - info.started_at).total_seconds() - 120) < 5, (info.started_at, info.end_at)
    assert Sandbox.get_info(sbx.sandbox_id).metadata == info.metadata

    ci = sandboxes.create(CodeSandbox, envs={"GREETING": "from create"})
    assert ci.run_code("import os; os.environ['GREETING']").text == "'from create'"
    assert ci.commands.run("echo $GREETING").stdout == "from create\n"
    assert ci.get_info().template_id == "code-interpreter-v1"


def test_connect_list_and_set_timeout(sandboxes: Made) -> None:
    tag = uuid.uuid4().hex
    made = [sandboxes.create(Sandbox, metadata={"batch": tag, "i": str(i)}) for i in range(3)]
    sandboxes.create(Sandbox, metadata={"batch": "another"})
    want = {s.sandbox_id for s in made}

    pager = Sandbox.list(query=SandboxQuery(metadata={"batch": tag}), limit=2)
    pages = []
    while pager.has_next:
        pages.append(pager.next_items())
        assert len(pages) < 10, "the pager never ends"
    assert [len(p) for p in pages] == [2, 1], pages
    assert {s.sandbox_id for p in pages for s in p} == want
    listed = pages[0][0]
    assert listed.metadata["batch"] == tag and listed.template_id == "base", listed
    one = Sandbox.list(query=SandboxQuery(metadata={"batch": tag, "i": "1"})).next_items()
    assert [s.sandbox_id for s in one] == [made[1].sandbox_id], one
    both = SandboxQuery(metadata={"batch": tag}, state=[SandboxState.RUNNING, SandboxState.PAUSED])
    assert {s.sandbox_id for s in Sandbox.list(query=both).next_items()} == want
    paused = SandboxQuery(metadata={"batch": tag}, state=[SandboxState.PAUSED])
    assert Sandbox.list(query=paused).next_items() == []  # nothing here is ever paused

    again = Sandbox.connect(made[0].sandbox_id)
    assert again.sandbox_id == made[0].sandbox_id
    made[0].files.write("note.txt", "written by the first handle")
    assert again.files.read(f"{HOME}/note.txt") == "written by the first handle"
    assert again.commands.run("cat /work/note.txt").stdout == "written by the first handle"

    made[0].set_timeout(200)
    moved = made[0].get_info()
    assert abs((moved.end_at - utcnow()).total_seconds() - 200) < 10, moved.end_at
    made[0].set_timeout(100_000)
    clamped = made[0].get_info()
    assert clamped.end_at > moved.end_at
    assert clamped.end_at <= clamped.started_at + timedelta(seconds=LIFETIME_S + 5), (clamped.started_at, clamped.end_at)
    assert again.is_running()


def test_base_urls_with_a_trailing_slash(sandboxes: Made, monkeypatch, e2b_base: str) -> None:
    """`http://host:port/` as people write it: the SDKs then ask for `//execute` and the like."""
    point(monkeypatch, e2b_base + "/", KEY)
    sbx = sandboxes.create(CodeSandbox)
    assert sbx.run_code("6 * 7").text == "42"
    sbx.files.write("slash.txt", "ok")
    assert sbx.files.read("slash.txt") == "ok"
    assert sbx.commands.run("cat /work/slash.txt").stdout == "ok"
    assert sbx.files.exists("slash.txt")
    assert sbx.get_info().template_id == "code-interpreter-v1"
    assert sbx.kill() is True


def test_what_sandpool_refuses(sandboxes: Made) -> None:
    with pytest.raises(SandboxException, match="no-such-template"):
        within(30, Sandbox.create, template="no-such-template")
    with pytest.raises(SandboxException, match="(?i)internet"):
        within(30, Sandbox.create, allow_internet_access=True)
    with pytest.raises(SandboxException, match=UNSUPPORTED):
        within(30, Sandbox.create, volume_mounts={"/data": "some-volume"})
    sbx = sandboxes.create(Sandbox)
    # list_snapshots() is served (GET /snapshots): this sandbox has none.
    assert within(30, lambda: sbx.list_snapshots().next_items()) == []
    # fork() is served (a ForkSession; tests/tests/gateway.rs runs it with state): a copy runs.
    forks = within(30, sbx.fork)
    assert len(forks) == 1 and not isinstance(forks[0], Exception), forks
    assert forks[0].commands.run("echo forked").stdout == "forked\n"
    assert within(30, forks[0].kill) is True
    with pytest.raises(SandboxException, match=UNSUPPORTED):
        within(30, sbx.files.watch_dir, HOME)
    with pytest.raises(SandboxException, match=UNSUPPORTED):
        within(30, sbx.pty.create, PtySize(rows=24, cols=80))
    with pytest.raises(SandboxException, match=UNSUPPORTED):
        within(30, sbx.get_metrics)
    # Refusals leave the sandbox as it was.
    assert sbx.is_running()
    assert sbx.commands.run("echo still here").stdout == "still here\n"


def test_kill_then_gone(sandboxes: Made) -> None:
    sbx = sandboxes.create(CodeSandbox)
    sid = sbx.sandbox_id
    assert sbx.run_code("x = 1").error is None
    assert within(30, sbx.kill) is True
    assert within(30, sbx.is_running) is False
    with pytest.raises(SandboxNotFoundException):
        within(30, sbx.get_info)
    with pytest.raises(SandboxNotFoundException):
        within(30, sbx.set_timeout, 60)
    with pytest.raises(SandboxNotFoundException):
        within(30, Sandbox.connect, sid)
    # The data plane: e2b's not-running error (a TimeoutException), the code interpreter's
    # TimeoutException.
    with pytest.raises(SandboxNotRunningException):
        within(60, sbx.files.read, "anything.txt")
    with pytest.raises(SandboxNotRunningException):
        within(60, sbx.commands.run, "echo hi")
    with pytest.raises(TimeoutException):
        within(60, sbx.run_code, "x")
    assert within(30, Sandbox.kill, sid) is False
    assert within(30, Sandbox.kill, "0" * 32 + f"-{NAME}") is False
    assert within(30, Sandbox.kill, "not-a-sandbox") is False
    assert sid not in {s.sandbox_id for s in Sandbox.list().next_items()}


# --- files and commands ----------------------------------------------------------------------


def test_files(sandboxes: Made) -> None:
    sbx = sandboxes.create(Sandbox)
    fs = sbx.files
    info = fs.write("rel/a.txt", "alpha")  # relative: under the home, i.e. /work
    assert (info.name, info.path, info.type) == ("a.txt", f"{HOME}/rel/a.txt", FileType.FILE), info
    fs.write(f"{HOME}/b.bin", bytes(range(256)))
    assert fs.read(f"{HOME}/rel/a.txt") == "alpha"
    assert fs.read("b.bin", format="bytes") == bytearray(range(256))
    assert sbx.commands.run("cat /work/rel/a.txt && wc -c < /work/b.bin").stdout == "alpha256\n"

    assert fs.exists("rel/a.txt") and fs.exists(f"{HOME}/rel") and not fs.exists("rel/none.txt")
    assert fs.make_dir(f"{HOME}/d/e") is True
    assert fs.make_dir("d/e") is False  # already there
    top = {(e.name, e.type) for e in fs.list(HOME)}
    assert {("rel", FileType.DIR), ("b.bin", FileType.FILE), ("d", FileType.DIR)} <= top, top
    entries = fs.list("rel")
    assert [(e.name, e.path, e.type, e.size) for e in entries] == [("a.txt", f"{HOME}/rel/a.txt", FileType.FILE, 5)]

    moved = fs.rename("rel/a.txt", f"{HOME}/d/e/a2.txt")
    assert (moved.name, moved.path) == ("a2.txt", f"{HOME}/d/e/a2.txt"), moved
    assert not fs.exists("rel/a.txt") and fs.read("d/e/a2.txt") == "alpha"
    fs.remove(f"{HOME}/d")
    assert not fs.exists("d/e/a2.txt") and not fs.exists("d")
    fs.remove("b.bin")
    assert not fs.exists("b.bin")

    written = fs.write_files([{"path": "m/1.txt", "data": "one"}, {"path": f"{HOME}/m/2.txt", "data": b"two"}])
    assert sorted(w.path for w in written) == [f"{HOME}/m/1.txt", f"{HOME}/m/2.txt"], written
    # A command's working directory is the home, /home/user (= /work): relative paths agree.
    assert sbx.commands.run("cat m/1.txt m/2.txt").stdout == "onetwo"

    with pytest.raises(FileNotFoundException):
        fs.read("missing.txt")
    with pytest.raises(FileNotFoundException):
        fs.read(f"{HOME}/no/such/dir/file.txt")


def test_octet_stream_gzip_and_streamed_uploads(sandboxes: Made) -> None:
    """envdVersion 0.5.7: the SDK also uploads as application/octet-stream, gzip-compressed on
    request, and streams file objects and iterables of chunks that way."""
    sbx = sandboxes.create(Sandbox)
    fs = sbx.files
    big = os.urandom(300_000)
    assert fs.write("o/raw.bin", big, use_octet_stream=True).path == f"{HOME}/o/raw.bin"
    text = "compressed " * 5000
    assert fs.write(f"{HOME}/o/gz.txt", text, gzip=True).name == "gz.txt"
    fs.write("o/chunks.bin", iter([b"ab", b"cd", b"ef"]))
    fs.write("o/file.bin", io.BytesIO(b"from a file object"))
    assert fs.read("o/raw.bin", format="bytes") == bytearray(big)
    assert fs.read("o/gz.txt") == text
    assert fs.read("o/gz.txt", gzip=True) == text
    assert fs.read("o/chunks.bin") == "abcdef"
    assert fs.read("o/file.bin") == "from a file object"
    with fs.read("o/raw.bin", format="stream") as stream:
        assert b"".join(stream) == big
    assert sbx.commands.run("wc -c < /work/o/raw.bin").stdout.strip() == "300000"


def test_commands(sandboxes: Made) -> None:
    sbx = sandboxes.create(Sandbox)
    with pytest.raises(CommandExitException) as e:
        sbx.commands.run("echo hi && exit 3")
    assert e.value.exit_code == 3 and e.value.stdout == "hi\n", e.value
    r = sbx.commands.run("echo $FOO", envs={"FOO": "bar"})
    assert (r.exit_code, r.stdout) == (0, "bar\n"), r
    r = sbx.commands.run("echo err >&2; echo out")
    assert (r.stdout, r.stderr) == ("out\n", "err\n"), r
    sbx.files.write("sub/f.txt", "in sub")
    r = sbx.commands.run("pwd && cat f.txt", cwd=f"{HOME}/sub")
    assert r.stdout == "/home/user/sub\nin sub", r
    # envs= and cwd= are that command's: the next one starts in the home without them.
    r = sbx.commands.run('pwd && echo "${FOO:-unset}"')
    assert r.stdout == "/home/user\nunset\n", r
    chunks: list[str] = []
    r = sbx.commands.run("echo one; echo two", on_stdout=chunks.append)
    assert "".join(chunks) == "one\ntwo\n" == r.stdout, (chunks, r)
    assert isinstance(sbx.commands.list(), list)
    # Commands in a code-interpreter sandbox too, beside its interpreter.
    ci = sandboxes.create(CodeSandbox)
    ci.run_code("open('made_by_python.txt', 'w').write('py')")
    assert ci.commands.run("cat /work/made_by_python.txt").stdout == "py"


def test_background_commands_stdin_kill_list_and_connect(sandboxes: Made) -> None:
    """Commands run as processes of the sandbox that outlive the call that started them."""
    sbx = sandboxes.create(Sandbox)
    seen: list[str] = []
    h = sbx.commands.run("for i in 1 2 3; do echo line$i; sleep 0.2; done", background=True)
    assert h.pid > 0
    r = within(30, h.wait, on_stdout=seen.append)
    assert (r.exit_code, r.stdout) == (0, "line1\nline2\nline3\n"), r
    assert "".join(seen) == r.stdout, seen

    h = sbx.commands.run("read a; echo got:$a", background=True, stdin=True)
    sbx.commands.send_stdin(h.pid, "hello\n")
    assert within(30, h.wait).stdout == "got:hello\n"
    h = sbx.commands.run("cat; echo '<eof>'", background=True, stdin=True)
    sbx.commands.send_stdin(h.pid, "abc")
    sbx.commands.close_stdin(h.pid)
    assert within(30, h.wait).stdout == "abc<eof>\n"

    sleeper = sbx.commands.run("sleep 60", background=True)
    listed = {p.pid: p for p in sbx.commands.list()}
    assert sleeper.pid in listed, listed
    assert sbx.commands.kill(sleeper.pid) is True
    with pytest.raises(CommandExitException):
        within(30, sleeper.wait)
    assert sleeper.pid not in {p.pid for p in sbx.commands.list()}
    assert sbx.commands.kill(sleeper.pid) is False

    late = sbx.commands.run("sleep 1; echo done", background=True)
    again = sbx.commands.connect(late.pid)
    assert within(30, again.wait).stdout == "done\n"
    # A foreground command past its timeout is stopped and reported, not waited on.
    started = time.monotonic()
    with pytest.raises((TimeoutException, CommandExitException)):
        within(30, sbx.commands.run, "sleep 20", timeout=2)
    assert time.monotonic() - started < 15
    assert sbx.commands.run("echo after").stdout == "after\n"


# --- auth and tenants ------------------------------------------------------------------------


def test_the_data_plane_needs_the_access_token(sandboxes: Made, e2b_env: str) -> None:
    sbx = sandboxes.create(CodeSandbox)
    sbx.files.write("secret.txt", "s3cret")
    for token in ({"X-Access-Token": "wrong-token"}, {}):
        headers = {"E2b-Sandbox-Id": sbx.sandbox_id, **token}
        r = httpx.post(
            f"{e2b_env}/execute",
            json={"code": "open('/work/secret.txt').read()"},
            headers={**headers, "E2b-Sandbox-Port": "49999"},
            timeout=30,
        )
        assert r.status_code >= 400 and "s3cret" not in r.text, (token, r.status_code, r.text)
        r = httpx.get(f"{e2b_env}/files", params={"path": "secret.txt"}, headers=headers, timeout=30)
        assert r.status_code >= 400 and "s3cret" not in r.text, (token, r.status_code, r.text)
    # The SDK's own calls, which carry it, still work.
    assert sbx.run_code("open('/work/secret.txt').read()").text == "'s3cret'"


def test_a_wrong_api_key_is_the_sdks_authentication_error() -> None:
    """The control plane's 401 in E2B's error shape (`code`, `message`), which the SDK's client
    parses: anything else surfaces as a KeyError from deep inside it."""
    with pytest.raises(AuthenticationException):
        within(30, Sandbox.create, api_key="wrong-key-0123456789")
    with pytest.raises(AuthenticationException):
        within(30, lambda: Sandbox.list(api_key="wrong-key-0123456789").next_items())


def test_tenants_see_only_their_own_sandboxes(make_executor, tmp_path: Path, sandboxes: Made, monkeypatch) -> None:
    alice, bob = "alice-token-0123456789abcdef", "bob-token-0123456789abcdef"
    tenants = tmp_path / "tenants.toml"
    tenants.write_text(f'[[tenant]]\nname = "alice"\ntoken = "{alice}"\n\n[[tenant]]\nname = "bob"\ntoken = "{bob}"\n')
    port = free_port()
    make_executor(
        "pytest-e2b-tenants",
        slots=4,
        languages="python,bash",
        args=e2b_args(port, 4),
        env={"SANDPOOL_TENANTS_FILE": str(tenants)},
    )
    point(monkeypatch, f"http://127.0.0.1:{port}", alice)
    tag = uuid.uuid4().hex
    mine = sandboxes.create(Sandbox, metadata={"tag": tag})
    theirs = sandboxes.create(Sandbox, metadata={"tag": tag}, api_key=bob)
    assert theirs.commands.run("echo bob").stdout == "bob\n"

    def listed(key: str) -> set[str]:
        return {s.sandbox_id for s in Sandbox.list(query=SandboxQuery(metadata={"tag": tag}), api_key=key).next_items()}

    assert listed(alice) == {mine.sandbox_id}
    assert listed(bob) == {theirs.sandbox_id}
    with pytest.raises(SandboxNotFoundException):
        Sandbox.get_info(mine.sandbox_id, api_key=bob)
    with pytest.raises(SandboxNotFoundException):
        Sandbox.connect(mine.sandbox_id, api_key=bob)
    with pytest.raises(SandboxNotFoundException):
        Sandbox.set_timeout(mine.sandbox_id, 30, api_key=bob)
    assert Sandbox.kill(mine.sandbox_id, api_key=bob) is False
    # Untouched by all that.
    assert mine.get_info().end_at > utcnow() + timedelta(seconds=60)
    assert mine.commands.run("echo alice").stdout == "alice\n"


# --- a pool behind the gateway ---------------------------------------------------------------


GATEWAY_POOL = ("pytest-e2b-gw-a", "pytest-e2b-gw-b")


@pytest.fixture(scope="module")
def gateway_base(tmp_path_factory) -> Iterator[str]:
    """Two executors behind a `sandpool-gateway`; the gateway's base URL."""
    token = tmp_path_factory.mktemp("e2b-gw") / "token"
    token.write_text(KEY + "\n")
    http = {name: free_port() for name in GATEWAY_POOL}
    pool = [
        Executor(
            name,
            slots=4,
            languages="python,bash",
            args=e2b_args(http[name], 4),
            env={"SANDPOOL_AUTH_TOKEN_FILE": str(token)},
        ).start()
        for name in GATEWAY_POOL
    ]
    gw, base = start_gateway({name: f"127.0.0.1:{port}" for name, port in http.items()})
    yield base
    gw.terminate()
    gw.wait(10)
    for e in pool:
        e.close()


def test_code_interpreter_through_the_gateway_over_two_executors(
    gateway_base: str, sandboxes: Made, monkeypatch
) -> None:
    """One base URL for a pool: creates spread over both executors, and every later call of a
    sandbox (control and data plane) reaches the executor its id names."""
    point(monkeypatch, gateway_base, KEY)
    made = [sandboxes.create(CodeSandbox, metadata={"n": str(i)}) for i in range(6)]
    holders = {s.sandbox_id.split("-", 1)[1] for s in made}
    assert holders == set(GATEWAY_POOL), [s.sandbox_id for s in made]
    for i, sbx in enumerate(made):
        assert sbx.run_code(f"v = {i}").error is None
        assert sbx.run_code("v * 2").text == str(2 * i)
        sbx.files.write(f"{HOME}/n.txt", str(i))
        assert sbx.files.read("n.txt") == str(i)
        assert sbx.commands.run("cat /work/n.txt").stdout == str(i)
        assert sbx.get_info().metadata == {"n": str(i)}
        assert Sandbox.connect(sbx.sandbox_id).files.read("n.txt") == str(i)
    for sbx in made:
        assert sbx.kill() is True
        assert within(30, sbx.is_running) is False
        with pytest.raises(SandboxNotFoundException):
            within(30, sbx.get_info)


def test_list_through_the_gateway_sees_every_executor(gateway_base: str, sandboxes: Made, monkeypatch) -> None:
    """`Sandbox.list` names no sandbox, so the gateway cannot route it by id: it must ask every
    executor of the pool and answer the union, as one E2B API would."""
    point(monkeypatch, gateway_base, KEY)
    tag = uuid.uuid4().hex
    made = [sandboxes.create(Sandbox, metadata={"tag": tag}) for _ in range(4)]
    assert {s.sandbox_id.split("-", 1)[1] for s in made} == set(GATEWAY_POOL), [s.sandbox_id for s in made]
    want = {s.sandbox_id for s in made}
    for _ in range(3):  # whichever executor the gateway picks
        got = {s.sandbox_id for s in Sandbox.list(query=SandboxQuery(metadata={"tag": tag})).next_items()}
        assert got == want, f"listed {sorted(got)}, created {sorted(want)}"
    # Paged over the pool as one list.
    pager = Sandbox.list(query=SandboxQuery(metadata={"tag": tag}), limit=3)
    pages = []
    while pager.has_next:
        pages.append([s.sandbox_id for s in pager.next_items()])
        assert len(pages) < 10, "the pager never ends"
    assert [len(p) for p in pages] == [3, 1] and {i for p in pages for i in p} == want, pages


# --- an older SDK pair -----------------------------------------------------------------------

OLD_SCRIPT = r"""
import asyncio, json
from e2b import CommandExitException, FileNotFoundException, Sandbox
from e2b_code_interpreter import AsyncSandbox as AsyncCodeSandbox, Sandbox as CodeSandbox

out = {}
# e2b before 2.51.0 sends allow_internet_access=True and autoResume {"enabled": false} on every
# create (to POST /sandboxes): taken, as the defaults they are.
sbx = CodeSandbox.create(metadata={"sdk": "old"}, envs={"WHO": "old"})
try:
    out["id"] = sbx.sandbox_id
    out["first_error"] = repr(sbx.run_code("x = 20").error)
    ex = sbx.run_code("x + 22")
    out["text"] = ex.text
    out["stdout"] = sbx.run_code("print('printed')").logs.stdout
    out["error_name"] = sbx.run_code("1 / 0").error.name
    out["write_path"] = sbx.files.write("/home/user/f.txt", "file body").path
    out["read"] = sbx.files.read("f.txt")
    out["list"] = sorted(e.name for e in sbx.files.list("/home/user"))
    try:
        sbx.files.read("missing.txt")
    except FileNotFoundException:
        out["missing"] = "FileNotFoundException"
    out["cmd"] = sbx.commands.run("cat /work/f.txt && echo \" $WHO\"").stdout
    try:
        sbx.commands.run("echo hi && exit 3")
    except CommandExitException as e:
        out["exit"] = [e.exit_code, e.stdout]
    info = sbx.get_info()
    out["info"] = [info.template_id, info.metadata]
    out["listed"] = sbx.sandbox_id in {s.sandbox_id for s in Sandbox.list().next_items()}
    out["connect"] = Sandbox.connect(sbx.sandbox_id).files.read("f.txt")
finally:
    out["kill"] = sbx.kill()
out["running_after_kill"] = sbx.is_running()


async def main():
    a = await AsyncCodeSandbox.create()
    try:
        await a.run_code("y = 2")
        out["async_text"] = (await a.run_code("y ** 10")).text
        await a.files.write("g.txt", "async body")
        out["async_cmd"] = (await a.commands.run("cat /work/g.txt")).stdout
    finally:
        out["async_kill"] = await a.kill()


asyncio.run(main())
print(json.dumps(out))
"""


def old_sdk_python() -> Path:
    """A venv with OLD_PAIR, made once and kept under ~/.cache (like test_piston's npm install)."""
    root = Path.home() / ".cache" / "sandpool-e2b" / "-".join(p.replace("==", "-") for p in OLD_PAIR)
    py, done = root / "bin" / "python", root / ".installed"
    if not done.exists():
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(root)], check=True, timeout=120)
        r = subprocess.run(
            [str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check", *OLD_PAIR],
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert r.returncode == 0, f"pip install {OLD_PAIR} failed:\n{r.stdout}\n{r.stderr}"
        done.write_text(" ".join(OLD_PAIR) + "\n")
    return py


def test_an_older_sdk_pair(e2b_env: str, tmp_path: Path) -> None:
    py = old_sdk_python()
    script = tmp_path / "old_e2b.py"
    script.write_text(OLD_SCRIPT)
    env = {k: v for k, v in os.environ.items() if not k.startswith("E2B_")}
    env.update(E2B_API_URL=e2b_env, E2B_SANDBOX_URL=e2b_env, E2B_API_KEY=KEY)
    started = time.monotonic()
    r = subprocess.run([str(py), str(script)], capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    assert r.returncode == 0, f"{OLD_PAIR} failed after {time.monotonic() - started:.0f} s:\n{r.stdout}\n{r.stderr}"
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert got["id"].endswith(f"-{NAME}"), got
    assert got["first_error"] == "None" and got["text"] == "42", got
    assert got["stdout"] == ["printed\n"] and got["error_name"] == "ZeroDivisionError", got
    assert got["write_path"] == f"{HOME}/f.txt" and got["read"] == "file body", got
    assert "f.txt" in got["list"] and got["missing"] == "FileNotFoundException", got
    assert got["cmd"] == "file body old\n" and got["exit"] == [3, "hi\n"], got
    assert got["info"] == ["code-interpreter-v1", {"sdk": "old"}] and got["listed"], got
    assert got["connect"] == "file body", got
    assert got["kill"] is True and got["running_after_kill"] is False, got
    assert got["async_text"] == "1024" and got["async_cmd"] == "async body" and got["async_kill"] is True, got
