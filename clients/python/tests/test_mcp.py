"""`sandpool mcp` driven by the official MCP Python SDK (PyPI `mcp`), over both transports:
stdio with an embedded executor, and streamable HTTP in front of a remote executor that wants
a token. Root needed (the executors sandbox); `cargo build --workspace` first."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import grpc
import httpx2
import pytest
from mcp import Client, ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client

from conftest import REPO
from sandpool.v1 import executor_pb2 as pb
from sandpool.v1 import executor_pb2_grpc

# Lists the program's open file descriptors.
FDS = "import os\nprint(sorted(os.listdir('/proc/self/fd')))"
TOOLS = {"run_code", "create_session", "run_in_session", "write_file", "read_file", "close_session"}


def sandpool_bin() -> Path:
    """$SANDPOOL_CLI_BIN, else target/debug/sandpool of this checkout."""
    p = Path(os.environ.get("SANDPOOL_CLI_BIN", REPO / "target" / "debug" / "sandpool"))
    if not p.exists():
        pytest.fail(f"{p} not found: run `cargo build --workspace` first")
    return p


def text(result: Any) -> str:
    return "\n".join(c.text for c in result.content if getattr(c, "type", "") == "text")


async def call(session: ClientSession, tool: str, args: dict) -> dict:
    """A successful call's structured result."""
    r = await session.call_tool(tool, args)
    assert not r.is_error, f"{tool} failed: {text(r)}"
    assert r.structured_content is not None, text(r)
    return r.structured_content


async def call_error(session: ClientSession, tool: str, args: dict) -> str:
    """A call that must fail as a tool error (not a protocol error): its text."""
    r = await session.call_tool(tool, args)
    assert r.is_error, f"{tool}({args}) should have failed: {text(r)}"
    return text(r)


async def exercise(session: ClientSession, languages: list[str]) -> None:
    """Lists the tools and calls each one, checking what comes back; `languages` are the
    executor's (both have python; the embedded one bash too)."""
    await session.initialize()
    listed = {t.name: t for t in (await session.list_tools()).tools}
    assert set(listed) == TOOLS

    run_code = listed["run_code"]
    schema = run_code.input_schema
    assert sorted(schema["required"]) == ["code", "language"]
    assert schema.get("additionalProperties") is False
    assert sorted(schema["properties"]["language"]["enum"]) == sorted(languages)
    assert run_code.output_schema is not None

    # The program sees its own stdin, stdout and stderr only, never this server's protocol pipes.
    r = await call(session, "run_code", {"language": "python", "code": FDS})
    assert r["stdout"] == "['0', '1', '2', '3']\n", r  # 3: the listing's own

    r = await call(session, "run_code", {"language": "python", "code": "print(6 * 7)"})
    assert (r["verdict"], r["stdout"], r["exit_code"], r["phase"]) == ("OK", "42\n", 0, "run")
    assert r["usage"]["wall_time_ms"] > 0 and r["usage"]["peak_memory_bytes"] > 0

    # stdin in, a failing exit code out: a verdict, not a tool error.
    code = "import sys\nprint(sys.stdin.read().upper())\nprint('oops', file=sys.stderr)\nsys.exit(3)"
    r = await call(session, "run_code", {"language": "python", "code": code, "stdin": "hi"})
    assert (r["verdict"], r["exit_code"], r["stdout"], r["stderr"]) == ("RUNTIME_ERROR", 3, "HI\n", "oops\n")

    r = await call(
        session,
        "run_code",
        {"language": "python", "code": "while True: pass", "limits": {"wall_time_ms": 300, "cpu_time_ms": 300}},
    )
    assert r["verdict"] in ("TIME_LIMIT_EXCEEDED", "WALL_TIME_LIMIT_EXCEEDED"), r

    argv = "import sys\nprint('-'.join(sys.argv[1:]))"
    r = await call(session, "run_code", {"language": "python", "code": argv, "args": ["a", "b c"]})
    assert r["stdout"] == "a-b c\n", r

    # Bad arguments: tool errors whose text names the field.
    assert "`code`" in await call_error(session, "run_code", {"language": "python"})
    msg = await call_error(session, "run_code", {"language": "python", "code": "", "limits": {"wall_time_ms": "x"}})
    assert "limits.wall_time_ms" in msg
    assert "`stdn`" in await call_error(session, "run_code", {"language": "python", "code": "", "stdn": "x"})
    assert "language" in await call_error(session, "run_code", {"language": "cobol-85", "code": "x"})
    msg = await call_error(session, "run_code", {"language": "python", "code": "", "limits": {"wall_time_ms": 10**9}})
    assert "limits.wall_time_ms" in msg

    await exercise_sessions(session, listed, languages)


async def exercise_sessions(session: ClientSession, listed: dict, languages: list[str]) -> None:
    """Each session tool, on a Python session and then, where the executor has bash, a bash
    one (one at a time: the test executors have two slots, and a session holds one)."""
    assert listed["create_session"].input_schema["properties"]["language"]["enum"] == languages  # python first
    assert sorted(listed["run_in_session"].input_schema["required"]) == ["session_id"]

    created = await call(session, "create_session", {"language": "python", "session_limits": {"idle_timeout_ms": 60000}})
    sid = created["session_id"]
    assert len(sid) >= 22 and created["language"] == "python", created
    assert created["session_limits"]["idle_timeout_ms"] == 60000

    # State lives across calls, like notebook cells; a final expression's value is displayed.
    assert (await call(session, "run_in_session", {"session_id": sid, "code": "x = 1"}))["verdict"] == "OK"
    r = await call(session, "run_in_session", {"session_id": sid, "code": "print(x)"})
    assert (r["verdict"], r["stdout"]) == ("OK", "1\n"), r
    r = await call(session, "run_in_session", {"session_id": sid, "code": "x + 41"})
    assert r["display"] == "42", r
    r = await call(session, "run_in_session", {"session_id": sid, "code": FDS})
    assert r["stdout"] == "['0', '1', '2', '3']\n", r

    # Files in, files out: text, and bytes that are not UTF-8.
    w = await call(session, "write_file", {"session_id": sid, "path": "in.txt", "content": "hello"})
    assert w["path"] == "in.txt" and w["disk_used_bytes"] >= 5, w
    code = "open('out.txt', 'w').write(open('in.txt').read().upper())"
    assert (await call(session, "run_in_session", {"session_id": sid, "code": code}))["verdict"] == "OK"
    f = await call(session, "read_file", {"session_id": sid, "path": "out.txt"})
    assert (f["content"], f["encoding"], f["size_bytes"]) == ("HELLO", "utf-8", 5), f
    args = {"session_id": sid, "path": "b.bin", "content": "AP8=", "encoding": "base64"}
    await call(session, "write_file", args)
    f = await call(session, "read_file", {"session_id": sid, "path": "b.bin"})
    assert (f["content"], f["encoding"]) == ("AP8=", "base64"), f
    r = await call(session, "run_in_session", {"session_id": sid, "code": "list(open('b.bin', 'rb').read())"})
    assert r["display"] == "[0, 255]", r

    # Errors that name the field.
    both = await call_error(session, "run_in_session", {"session_id": sid, "code": "1", "command": "ls"})
    assert "`code`" in both and "`command`" in both
    assert "`path`" in await call_error(session, "read_file", {"session_id": sid, "path": "missing.txt"})
    assert "`content`" in await call_error(session, "write_file", {**args, "content": "!!"})
    msg = await call_error(session, "write_file", {"session_id": sid, "path": "../x", "content": ""})
    assert msg.startswith("invalid argument: path"), msg

    # A call the client gives up on is cancelled (notifications/cancelled), not left to run on:
    # else the next call would wait for it, the calls of a session running one at a time.
    slow = {"session_id": sid, "code": "import time\ntime.sleep(50)", "limits": {"wall_time_ms": 55000}}
    with pytest.raises(Exception):
        await session.call_tool("run_in_session", slow, read_timeout_seconds=1)
    t0 = time.monotonic()
    r = await call(session, "run_in_session", {"session_id": sid, "code": "1 + 1"})
    assert (r["display"], r["state_reset"]) == ("2", True) and time.monotonic() - t0 < 10, (r, time.monotonic() - t0)

    closed = await call(session, "close_session", {"session_id": sid})
    assert closed["session_id"] == sid and closed["calls"] >= 5, closed
    assert "not found" in (await call_error(session, "run_in_session", {"session_id": sid, "code": "x"})).lower()

    # Nothing persists across sessions.
    sid = (await call(session, "create_session", {"language": "python"}))["session_id"]
    r = await call(session, "run_in_session", {"session_id": sid, "code": "import os\nprint(os.listdir('.'))\nx"})
    assert r["verdict"] == "RUNTIME_ERROR" and "NameError" in r["stderr"], r
    assert not {"in.txt", "out.txt", "b.bin"} & set(ast.literal_eval(r["stdout"])), r
    await call(session, "close_session", {"session_id": sid})
    if "bash" not in languages:
        return

    # A bash session keeps its working directory and files.
    created = await call(session, "create_session", {"language": "bash"})
    sid = created["session_id"]
    r = await call(session, "run_in_session", {"session_id": sid, "command": "mkdir -p sub && cd sub && echo hi > f"})
    assert r["verdict"] == "OK", r
    r = await call(session, "run_in_session", {"session_id": sid, "command": "pwd; cat f"})
    assert r["stdout"].split() == [r["cwd"], "hi"] and r["cwd"].endswith("/sub"), r
    await call(session, "close_session", {"session_id": sid})


def embedded(uid_base: int, work_root: Path) -> StdioServerParameters:
    """`sandpool mcp` on stdio with an embedded executor of two slots (so one session)."""
    return StdioServerParameters(
        command=str(sandpool_bin()),
        args=[
            "mcp",
            "--work-root", str(work_root),
            "--uid-base", str(uid_base),
            "--slots", "2",
            "--enable-languages", "python,bash",
        ],  # fmt: skip
    )


# Apart from conftest's executors (200000-204999) and the Rust e2e tests (100000-299999, 400000
# up), which may run at the same time on a developer's machine. An executor takes its slots'
# uids and, after them, one per session seat (64 by default).
UID_BASE = 500000 + 1000 * (os.getpid() % 50)
EMBEDDED_UIDS = 2 + 64


async def test_mcp_over_stdio_with_an_embedded_executor(tmp_path):
    async with stdio_client(embedded(UID_BASE, tmp_path)) as (read, write), ClientSession(read, write) as session:
        await exercise(session, ["python", "bash"])


def processes_of(uids: range) -> list[str]:
    """Pids of the host's processes whose real uid is in `uids`."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/status") as f:
                uid = next(int(line.split()[1]) for line in f if line.startswith("Uid:"))
        except (OSError, StopIteration, ValueError):
            continue
        if uid in uids:
            found.append(pid)
    return found


async def test_mcp_stdio_client_gone_leaves_no_session_running(tmp_path):
    uids = range(UID_BASE + 200, UID_BASE + 200 + EMBEDDED_UIDS)
    async with stdio_client(embedded(uids.start, tmp_path)) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        sid = (await call(session, "create_session", {"language": "python"}))["session_id"]
        await call(session, "run_in_session", {"session_id": sid, "code": "x = 1"})
        assert processes_of(uids), "the session's interpreter should be running"
    # The client left without close_session; the server ended the session as it exited.
    deadline = time.monotonic() + 15
    while processes_of(uids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not processes_of(uids)


class HttpServer:
    """`sandpool mcp --http-listen 127.0.0.1:0`; the port is read from its stderr."""

    def __init__(self, args: list[str], env: dict):
        env = {k: v for k, v in dict(os.environ, **env).items() if v is not None}
        self.proc = subprocess.Popen(
            [str(sandpool_bin()), "mcp", "--http-listen", "127.0.0.1:0", *args],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.url = ""
        assert self.proc.stderr is not None
        seen = []
        for line in self.proc.stderr:
            seen.append(line)
            m = re.search(r"serving MCP over streamable HTTP at (http://\S+)", line)
            if m:
                self.url = m.group(1)
                break
        if not self.url:
            pytest.fail(f"sandpool mcp exited before serving ({self.proc.wait()}): {''.join(seen)}")
        # Keep draining stderr so the server never blocks on a full pipe.
        threading.Thread(target=lambda: [None for _ in self.proc.stderr], daemon=True).start()

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def executor(make_executor):
    return make_executor("mcp-remote", env={"SANDPOOL_AUTH_TOKEN": "executor-secret"})


@pytest.fixture
def http_server(executor):
    server = HttpServer(
        ["--endpoint", executor.address, "--http-allowed-hosts", "mcp.example"],
        # The MCP server's own callers' token, and the one it sends the executor.
        {"SANDPOOL_MCP_TOKEN": "mcp-secret", "SANDPOOL_TOKEN": "executor-secret", "SANDPOOL_TOKEN_FILE": None},
    )
    yield server
    server.close()


def mcp_http(url: str):
    http = httpx2.AsyncClient(headers={"Authorization": "Bearer mcp-secret"}, timeout=httpx2.Timeout(30, read=300))
    return http, streamable_http_client(url, http_client=http)


async def test_mcp_over_streamable_http_with_a_remote_executor(http_server):
    http, transport = mcp_http(http_server.url)
    async with http, transport as (read, write), ClientSession(read, write) as session:
        await exercise(session, ["python"])


async def test_mcp_with_the_sdks_default_client_on_the_newest_protocol(http_server):
    # ClientSession above speaks the initialize handshake; mcp.Client (mode "auto") negotiates
    # the 2026-07-28 protocol, served statelessly over HTTP.
    http, transport = mcp_http(http_server.url)
    async with http, Client(transport) as client:
        assert client.protocol_version >= "2026-07-28"
        assert {t.name for t in (await client.list_tools()).tools} == TOOLS
        r = await client.call_tool("run_code", {"language": "python", "code": "print(6 * 7)"})
        assert r.structured_content["stdout"] == "42\n"
        sid = (await client.call_tool("create_session", {"language": "python"})).structured_content["session_id"]
        await client.call_tool("run_in_session", {"session_id": sid, "code": "x = 1"})
        r = await client.call_tool("run_in_session", {"session_id": sid, "code": "print(x)"})
        assert r.structured_content["stdout"] == "1\n"
        await client.call_tool("close_session", {"session_id": sid})


async def test_mcp_server_closes_its_sessions_when_stopped(http_server, executor):
    http, transport = mcp_http(http_server.url)
    async with http, transport as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        sid = (await call(session, "create_session", {"language": "python"}))["session_id"]
        await call(session, "run_in_session", {"session_id": sid, "code": "x = 1"})
    auth = (("authorization", "Bearer executor-secret"),)
    with grpc.insecure_channel(executor.address) as ch:
        stub = executor_pb2_grpc.ExecutorStub(ch)
        # Still alive with the MCP client gone (HTTP sessions outlive connections) ...
        r = stub.RunInSession(pb.RunInSessionRequest(session_id=sid, code="x"), metadata=auth, timeout=30)
        assert r.display == "1"
        # ... and ended when the server stops (SIGTERM), not left to its idle timeout.
        http_server.close()
        with pytest.raises(grpc.RpcError) as e:
            stub.RunInSession(pb.RunInSessionRequest(session_id=sid, code="x"), metadata=auth, timeout=30)
        assert e.value.code() == grpc.StatusCode.NOT_FOUND


def test_mcp_http_refuses_a_caller_without_the_token_or_from_a_browser(http_server):
    init = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}},
    }
    accept = {"Accept": "application/json, text/event-stream"}

    def post(**headers: str) -> int:
        # A connection each: a refused request's body may be left unread, and its connection closed.
        with httpx2.Client(timeout=30) as http:
            return http.post(http_server.url, json=init, headers=dict(accept, **headers)).status_code

    assert post() == 401
    assert post(Authorization="Bearer wrong") == 401
    good = {"Authorization": "Bearer mcp-secret"}
    # A page in a browser may reach loopback; its Origin gives it away.
    assert post(**good, Origin="http://evil.example") == 403
    # DNS rebinding: a name that resolves to loopback but is not one of ours.
    assert post(**good, Host="evil.example") == 403
    assert post(**good) == 200
    assert post(**good, Host="mcp.example") == 200  # --http-allowed-hosts


async def test_mcp_routes_session_calls_to_their_executor_and_says_when_it_is_lost(make_executor):
    # Two executors of one session each behind one --endpoint: a call sent anywhere but to its
    # session's executor gets NOT_FOUND there.
    executors = [make_executor(f"mcp-pool-{i}", env={"SANDPOOL_MAX_SESSIONS": "1"}) for i in range(2)]
    server = HttpServer(["--endpoint", ",".join(e.address for e in executors)], {"SANDPOOL_MCP_TOKEN": "mcp-secret"})
    try:
        http, transport = mcp_http(server.url)
        async with http, transport as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            sids: list[str] = []
            for _ in range(40):  # the balancer picks; the executor that has a session refuses a second
                r = await session.call_tool("create_session", {"language": "python"})
                if not r.is_error:
                    sids.append(r.structured_content["session_id"])
                    if len(sids) == 2:
                        break
                else:
                    assert "resource exhausted" in text(r) and "--max-sessions" in text(r), text(r)
            assert len(sids) == 2, "the balancer never reached the second executor"
            for sid, v in zip(sids, ("'one'", "'two'")):
                await call(session, "run_in_session", {"session_id": sid, "code": f"x = {v}"})
            for _ in range(4):
                for sid, v in zip(sids, ("'one'", "'two'")):
                    r = await call(session, "run_in_session", {"session_id": sid, "code": "x"})
                    assert r["display"] == v, r
            for e in executors:
                e.kill()
            msg = await call_error(session, "run_in_session", {"session_id": sids[0], "code": "x"})
            assert "session is lost" in msg, msg
    finally:
        server.close()


def test_mcp_http_trickled_bodies_are_cut_off_and_lock_no_one_out(executor):
    # Issue 24 item 7: clients trickling a body held every connection. With a 1 s body
    # deadline and 4 connections, 4 tricklers get 408 and the server still serves.
    server = HttpServer(
        ["--endpoint", executor.address, "--http-max-connections", "4"],
        {
            "SANDPOOL_MCP_TOKEN": "mcp-secret",
            "SANDPOOL_TOKEN": "executor-secret",
            "SANDPOOL_TOKEN_FILE": None,
            "SANDPOOL_MCP_BODY_TIMEOUT_MS": "1000",
        },
    )
    try:
        import socket
        from urllib.parse import urlparse

        u = urlparse(server.url)
        head = (
            f"POST {u.path} HTTP/1.1\r\nHost: {u.hostname}:{u.port}\r\nAuthorization: Bearer mcp-secret\r\n"
            "Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"
            "Content-Length: 100000\r\n\r\n{"
        ).encode()
        socks = []
        for _ in range(4):
            s = socket.create_connection((u.hostname, u.port), timeout=20)
            s.sendall(head)
            socks.append(s)
        t = time.monotonic()
        for s in socks:
            reply = s.recv(4096).decode(errors="replace")
            assert reply.startswith("HTTP/1.1 408"), reply
            s.close()
        assert time.monotonic() - t < 15, "cut off at the body deadline"
        init = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}},
        }
        with httpx2.Client(timeout=30) as http:
            r = http.post(
                server.url,
                json=init,
                headers={"Accept": "application/json, text/event-stream", "Authorization": "Bearer mcp-secret"},
            )
        assert r.status_code == 200, r.text
    finally:
        server.close()
