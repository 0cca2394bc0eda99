"""Piston v2 (docs/compatibility.md) with Piston's own clients, unmodified and pinned:
PyPI `piston-rspy` (Rust bindings) and `aiopyston`, and npm's `piston-client` (run with
node), each pointed at a real executor's HTTP port by its base URL alone."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import urllib.request
from pathlib import Path

import piston_rspy
import pyston
import pytest

from conftest import free_port, start_gateway

PISTON_CLIENT_NPM = "piston-client@1.0.2"
KEY = "piston-key-0123456789abcdef"


@pytest.fixture(scope="module")
def piston_base(tmp_path_factory) -> str:
    """One executor with Python and C++ and a bearer token, serving HTTP; its base URL."""
    from conftest import Executor

    token = tmp_path_factory.mktemp("piston") / "token"
    token.write_text(KEY + "\n")
    port = free_port()
    e = Executor(
        "pytest-piston",
        languages="python,cpp",
        args=["--http-listen", f"127.0.0.1:{port}"],
        env={"SANDPOOL_AUTH_TOKEN_FILE": str(token)},
    ).start()
    yield f"http://127.0.0.1:{port}"
    e.close()


def test_piston_rspy(piston_base: str) -> None:
    async def main() -> None:
        c = piston_rspy.Client.with_url_and_key(f"{piston_base}/api/v2", KEY)
        runtimes = {r.language: r for r in await c.fetch_runtimes()}
        assert {"python", "c++"} <= set(runtimes), runtimes
        assert "cpp" in runtimes["c++"].aliases
        py = (
            piston_rspy.Executor()
            .set_language("python")
            .set_version(runtimes["python"].version)
            .add_file(piston_rspy.File(name="main.py", content="import sys\nprint(input() * 2, sys.argv[1:])"))
            .set_stdin("ab")
            .add_arg("x")
        )
        r = await c.execute(py)
        assert r.is_ok() and r.run.is_ok(), r
        assert r.run.stdout == "abab ['x']\n"
        assert r.compile is None
        bad = piston_rspy.Executor().set_language("cpp").add_file(piston_rspy.File(content="int main( {"))
        r = await c.execute(bad)
        assert r.compile is not None and r.compile.is_err(), r
        assert "error" in r.compile.stderr
        slow = (
            piston_rspy.Executor()
            .set_language("py")
            .add_file(piston_rspy.File(content="while True: pass"))
            .set_run_timeout(300)
        )
        r = await c.execute(slow)
        assert r.run.signal == "SIGKILL" and r.run.code is None, r
        # A wrong key is refused (piston_rs reports the status rather than raising).
        wrong = piston_rspy.Client.with_url_and_key(f"{piston_base}/api/v2", "wrong-key-0123456789")
        r = await wrong.execute(py)
        assert r.status == 401 and r.is_err(), r

    asyncio.run(main())


def test_aiopyston(piston_base: str) -> None:
    async def main() -> None:
        # aiopyston adds `runtimes/` and `execute/` (trailing slash) to its base.
        c = pyston.PystonClient(base_url=f"{piston_base}/api/v2/", api_key=KEY)
        try:
            assert {"python", "c++"} <= await c.languages()
            out = await c.execute("python", [pyston.File("print(6 * 7)")])
            assert out.run_stage.stdout == "42\n" and out.run_stage.code == 0
            out = await c.execute(
                "c++", [pyston.File('#include <cstdio>\nint main(){puts("hi"); return 3;}', "a.cpp")]
            )
            assert out.compile_stage.code == 0 and out.run_stage.stdout == "hi\n"
            assert out.run_stage.code == 3
            with pytest.raises(pyston.exceptions.ExecutionError, match="runtime is unknown"):
                await c.execute("cobol", [pyston.File("x")])
        finally:
            await c.close_session()

    asyncio.run(main())


def npm_piston(tmp_path: Path, base: str, cpp: bool = True) -> dict:
    """Runs npm's piston-client (installed into `tmp_path`) against `base`; what it got."""
    npm, node = shutil.which("npm"), shutil.which("node")
    assert npm and node, "node and npm are part of the test machine (scripts/install-deps.sh)"
    if not (tmp_path / "node_modules" / "piston-client").exists():
        subprocess.run(
            [npm, "install", "--no-audit", "--no-fund", "--prefix", str(tmp_path), PISTON_CLIENT_NPM],
            check=True,
            capture_output=True,
            timeout=300,
        )
    script = tmp_path / "run.mjs"
    script.write_text(
        'import piston from "piston-client";\n'
        "const client = piston({ server: process.argv[2] });\n"
        "const runtimes = await client.runtimes();\n"
        "const py = await client.execute('python', 'import sys\\nprint(sys.argv[1:])');\n"
        + (
            "const cpp = await client.execute({ language: 'c++', files: [{ content: 'int main(){return 4;}' }], args: [] });\n"
            if cpp
            else "const cpp = null;\n"
        )
        + "console.log(JSON.stringify({ runtimes, py, cpp }));\n"
    )
    out = subprocess.run(
        [node, str(script), base],
        check=True,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env=dict(os.environ, NODE_PATH=str(tmp_path / "node_modules")),
    )
    return json.loads(out.stdout)


def test_npm_piston_client(tmp_path: Path) -> None:
    """npm's piston-client sends no key and posts JSON as text/plain: an executor without auth."""
    from conftest import Executor

    port = free_port()
    e = Executor("pytest-piston-npm", languages="python,cpp", args=["--http-listen", f"127.0.0.1:{port}"]).start()
    try:
        got = npm_piston(tmp_path, f"http://127.0.0.1:{port}")
        assert {r["language"] for r in got["runtimes"]} == {"python", "c++"}
        # The client's default args are ["1", "2", "3"].
        assert got["py"]["run"]["stdout"] == "['1', '2', '3']\n", got
        assert got["cpp"]["compile"]["code"] == 0 and got["cpp"]["run"]["code"] == 4, got
    finally:
        e.close()


def piston_requests(metrics_port: int) -> float:
    """`sandpool_http_requests_total{protocol="piston"}` on one executor, every status."""
    body = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10).read().decode()
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in body.splitlines()
        if line.startswith('sandpool_http_requests_total{protocol="piston"')
    )


def test_clients_through_the_gateway_over_two_executors(make_executor, tmp_path: Path) -> None:
    """One base URL for a pool: the gateway spreads each request (one keep-alive client
    included) over both executors, which answer as one."""
    pool = {name: (free_port(), free_port()) for name in ("pytest-piston-a", "pytest-piston-b")}
    for name, (http, metrics) in pool.items():
        make_executor(
            name,
            languages="python",
            args=["--http-listen", f"127.0.0.1:{http}", "--metrics-listen", f"127.0.0.1:{metrics}"],
        )
    gw, base = start_gateway({name: f"127.0.0.1:{http}" for name, (http, _) in pool.items()})
    try:

        async def main() -> None:
            c = piston_rspy.Client.with_url(f"{base}/api/v2")
            assert "python" in {r.language for r in await c.fetch_runtimes()}
            prog = piston_rspy.Executor().set_language("python").add_file(piston_rspy.File(content="print(1)"))
            for _ in range(12):
                r = await c.execute(prog)
                assert r.is_ok() and r.run.stdout == "1\n", r
            p = pyston.PystonClient(base_url=f"{base}/api/v2/")
            try:
                out = await p.execute("python", [pyston.File("print(6 * 7)")])
                assert out.run_stage.stdout == "42\n"
            finally:
                await p.close_session()

        asyncio.run(main())
        # npm's piston-client too: its runtimes list and a run, through the same base URL.
        got = npm_piston(tmp_path, base, cpp=False)
        assert {r["language"] for r in got["runtimes"]} == {"python"}, got
        assert got["py"]["run"]["stdout"] == "['1', '2', '3']\n", got
        counts = [piston_requests(metrics) for _, metrics in pool.values()]
        assert sum(counts) == 16 and min(counts) >= 3, f"piston requests per executor: {counts}"
    finally:
        gw.terminate()
        gw.wait(10)
