"""E2B (docs/compatibility.md) with E2B's JavaScript SDKs, unmodified and pinned: npm `e2b`
2.51.0 and `@e2b/code-interpreter` 2.8.0 (the newest 2.x), run with node and pointed at a real
executor's HTTP port by `E2B_API_URL` and `E2B_SANDBOX_URL` alone (`E2B_API_KEY`: the
executor's token), as tests/test_e2b.py does with the Python SDKs. Also: an older pair
(`@e2b/code-interpreter` 2.7.0, the first whose runCode goes to E2B_SANDBOX_URL, with `e2b`
held at 2.28.0, which still creates with `POST /sandboxes`), and the newest pair through
`sandpool-gateway` over two executors.

The SDKs talk Connect with JSON (`useBinaryFormat: false`) to the envd paths and NDJSON to
`/execute`, over plain HTTP/1.1 (undici) when the URLs say `http://`. The npm packages are
installed once per pair under ~/.cache/sandpool-e2b-js (like tests/test_e2b.py's older venv);
node and npm are part of the test machine (scripts/install-deps.sh): without them this fails."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any, Iterator

import pytest

from conftest import Executor, free_port, start_gateway

# E2B's key format (`e2b_` and hex): e2b 2.25 to 2.45 check it on the client (the older pair's
# e2b 2.28.0 is one of them).
KEY = "e2b_" + "0123456789abcdef" * 2 + "01234567"
NAME = "pytest-e2b-js"
HOME = "/home/user"

# package.json `dependencies` (exact) and `overrides` (so that the code interpreter's own
# `e2b` range resolves to the pinned e2b, not the newest 2.x).
NEW_PAIR = {"e2b": "2.51.0", "@e2b/code-interpreter": "2.8.0"}
OLD_PAIR = {"e2b": "2.28.0", "@e2b/code-interpreter": "2.7.0"}

SCRIPT = r"""
import { Sandbox } from "@e2b/code-interpreter";
import { Sandbox as BaseSandbox } from "e2b";

const out = {};
// Runs f, keeping its value, or the error's class and message when it throws.
const attempt = async (name, f) => {
  try {
    out[name] = await f();
  } catch (e) {
    out[name] = { threw: e.constructor.name, message: String(e.message) };
  }
};

const sbx = await Sandbox.create({ metadata: { sdk: "js" }, envs: { GREETING: "hey" } });
out.id = sbx.sandboxId;
try {
  const first = await sbx.runCode("x = 1");
  const second = await sbx.runCode("x + 1");
  out.first = { results: first.results.map((r) => r.text), error: first.error ?? null };
  out.second = { results: second.results.map((r) => r.text), error: second.error ?? null };
  const streamed = [];
  const p = await sbx.runCode(
    "import sys, os\nfor i in range(3):\n    print(i)\nprint('to stderr', file=sys.stderr)\nos.environ['GREETING']",
    { onStdout: (m) => streamed.push(m.line) },
  );
  out.logs = p.logs;
  out.streamed = streamed;
  out.envText = p.results.map((r) => r.text);
  const e = await sbx.runCode("1/0");
  out.error = e.error ? { name: e.error.name, value: e.error.value } : null;
  await attempt("contexts", async () => (await sbx.listCodeContexts()).map((c) => c.language));

  out.written = (await sbx.files.write("notes/hello.txt", "hi from js")).path;
  out.read = await sbx.files.read("notes/hello.txt");
  out.octet = (await sbx.files.write("a/b.bin", new Uint8Array([0, 1, 2, 255]), { useOctetStream: true })).path;
  out.bytes = Array.from(await sbx.files.read("a/b.bin", { format: "bytes" }));
  await sbx.files.write("g.txt", "zipped", { gzip: true });
  out.gzipRead = await sbx.files.read("g.txt");
  out.listed = (await sbx.files.list("notes")).map((f) => f.name);
  out.exists = await sbx.files.exists("/home/user/notes/hello.txt");
  out.renamed = (await sbx.files.rename("g.txt", "notes/g.txt")).path;
  await sbx.files.remove("a/b.bin");
  out.removedExists = await sbx.files.exists("a/b.bin");
  await attempt("missing", () => sbx.files.read("nope.txt"));
  await attempt("outside", () => sbx.files.read("/etc/passwd"));
  await attempt("watch", () => sbx.files.watchDir("/home/user", () => {}));

  const c = await sbx.commands.run("echo hi; cat notes/hello.txt; echo; echo $GREETING; pwd");
  out.command = { stdout: c.stdout, stderr: c.stderr, exitCode: c.exitCode };
  out.envCwd = (await sbx.commands.run("echo $FOO; pwd", { envs: { FOO: "bar" }, cwd: "/home/user/notes" })).stdout;
  await attempt("failed", async () => {
    try {
      await sbx.commands.run("echo oops >&2; exit 3");
      return "did not throw";
    } catch (err) {
      return { name: err.constructor.name, exitCode: err.exitCode, stderr: err.stderr };
    }
  });
  await attempt("background", async () => {
    const h = await sbx.commands.run("sleep 30", { background: true });
    const listed = (await sbx.commands.list()).map((p) => p.pid).includes(h.pid);
    return { listed, killed: await h.kill() };
  });
  await attempt("stdin", async () => {
    const h = await sbx.commands.run("read x; echo got:$x", { background: true, stdin: true });
    await sbx.commands.sendStdin(h.pid, "abc\n");
    return (await h.wait()).stdout;
  });
  await attempt("pty", () => sbx.pty.create({ cols: 80, rows: 24, onData: () => {} }));

  out.connected = (await (await Sandbox.connect(sbx.sandboxId)).runCode("x * 10")).results.map((r) => r.text);
  const listed = await Sandbox.list({ query: { metadata: { sdk: "js" } } }).nextItems();
  out.listedIds = listed.map((i) => i.sandboxId);
  const info = await sbx.getInfo();
  out.info = { templateId: info.templateId, metadata: info.metadata, state: info.state, envdVersion: info.envdVersion };
  out.runningBefore = await sbx.isRunning();
  await attempt("pause", () => sbx.betaPause());
  await attempt("wrongKey", () => Sandbox.connect(sbx.sandboxId, { apiKey: "e2b_" + "f".repeat(40) }));
} finally {
  await sbx.kill();
}
out.runningAfter = await sbx.isRunning();
await attempt("afterKill", () => sbx.runCode("1"));
out.killAgain = await Sandbox.kill(sbx.sandboxId);

const base = await BaseSandbox.create();
try {
  const r = await base.commands.run("python3 -c 'print(6 * 7)'");
  out.base = { stdout: r.stdout, template: (await base.getInfo()).templateId };
} finally {
  await base.kill();
}
await attempt("badTemplate", () => BaseSandbox.create("my-custom-template"));
console.log(JSON.stringify(out));
// runCode leaves its request timer (60 s) armed when the response is an error (afterKill):
// don't wait for it. (stdout to a pipe is written synchronously on Linux.)
process.exit(0);
"""


# Through a gateway: sandboxes spread over the pool, and each one's calls reach its executor.
POOL_SCRIPT = r"""
import { Sandbox } from "@e2b/code-interpreter";

const out = [];
for (let i = 0; i < 6; i++) {
  const sbx = await Sandbox.create({ metadata: { n: String(i) } });
  const got = { id: sbx.sandboxId };
  out.push(got);
  try {
    await sbx.runCode(`v = ${i}`);
    got.text = (await sbx.runCode("v * 2")).results.map((r) => r.text);
    await sbx.files.write("n.txt", String(i));
    got.read = await sbx.files.read("n.txt");
    got.cat = (await sbx.commands.run("cat /work/n.txt")).stdout;
    const again = await Sandbox.connect(sbx.sandboxId);
    got.connected = [await again.files.read("n.txt"), (await again.getInfo()).metadata];
  } finally {
    got.killed = await sbx.kill();
  }
}
console.log(JSON.stringify(out));
"""


def sdk_dir(pair: dict[str, str]) -> Path:
    """node_modules with `pair`, installed once and kept under ~/.cache."""
    npm, node = shutil.which("npm"), shutil.which("node")
    assert npm and node, "node and npm are part of the test machine (scripts/install-deps.sh)"
    root = Path.home() / ".cache" / "sandpool-e2b-js" / "-".join(f"{k.replace('/', '+')}-{v}" for k, v in pair.items())
    done = root / ".installed"
    if not done.exists():
        shutil.rmtree(root, ignore_errors=True)
        root.mkdir(parents=True)
        package = {"name": "sandpool-e2b-js", "private": True, "dependencies": pair, "overrides": {"e2b": pair["e2b"]}}
        (root / "package.json").write_text(json.dumps(package))
        r = subprocess.run(
            [npm, "install", "--no-audit", "--no-fund", "--prefix", str(root)],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert r.returncode == 0, f"npm install {pair} failed:\n{r.stdout}\n{r.stderr}"
        done.write_text(json.dumps(pair) + "\n")
    for name, version in pair.items():
        got = json.loads((root / "node_modules" / name / "package.json").read_text())["version"]
        assert got == version, f"{name}: {got} installed under {root}, {version} pinned"
    return root / "node_modules"


def run_sdk(pair: dict[str, str], base: str, tmp_path: Path, script_text: str = SCRIPT) -> Any:
    """A node script with `pair`, pointed at `base` by the environment alone; its JSON."""
    modules = sdk_dir(pair)
    # ES modules resolve packages from the script's folder up, not by NODE_PATH.
    (tmp_path / "node_modules").symlink_to(modules, target_is_directory=True)
    script = tmp_path / "e2b_js.mjs"
    script.write_text(script_text)
    env = {k: v for k, v in os.environ.items() if not k.startswith("E2B_")}
    env.update(E2B_API_URL=base, E2B_SANDBOX_URL=base, E2B_API_KEY=KEY)
    started = time.monotonic()
    node = shutil.which("node")
    assert node, "node is part of the test machine (scripts/install-deps.sh)"
    r = subprocess.run([node, str(script)], capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    took = time.monotonic() - started
    assert r.returncode == 0, f"node with {pair} failed after {took:.0f} s:\n{r.stdout}\n{r.stderr}"
    return json.loads(r.stdout.strip().splitlines()[-1])


def check(got: dict[str, Any]) -> None:
    """What SCRIPT saw, for either pair, against one executor."""
    assert got["id"].endswith(f"-{NAME}"), got["id"]
    # Interpreter state lives across calls.
    assert got["first"] == {"results": [], "error": None}, got
    assert got["second"] == {"results": ["2"], "error": None}, got
    # stdout arrives in the chunks the cell's (buffered) writes make.
    assert "".join(got["logs"]["stdout"]) == "0\n1\n2\n" and got["logs"]["stderr"] == ["to stderr\n"], got
    assert "".join(got["streamed"]) == "0\n1\n2\n" and got["envText"] == ["'hey'"], got
    assert got["error"] == {"name": "ZeroDivisionError", "value": "division by zero"}, got
    assert got["contexts"] == ["python"], got
    # Files: multipart, octet-stream and gzip uploads; text and bytes reads.
    assert got["written"] == f"{HOME}/notes/hello.txt" and got["read"] == "hi from js", got
    assert got["octet"] == f"{HOME}/a/b.bin" and got["bytes"] == [0, 1, 2, 255], got
    assert got["gzipRead"] == "zipped", got
    assert got["listed"] == ["hello.txt"] and got["exists"] is True, got
    assert got["renamed"] == f"{HOME}/notes/g.txt" and got["removedExists"] is False, got
    assert got["missing"]["threw"] == "FileNotFoundError", got
    assert got["outside"]["threw"] == "FileNotFoundError" and "outside" in got["outside"]["message"], got
    # No directory watching: refused (the message is not asserted; see docs/compatibility.md).
    assert got["watch"].get("threw") == "SandboxError", got
    # Commands: foreground, env and cwd, a failing one, background with kill and stdin.
    assert got["command"] == {"stdout": "hi\nhi from js\nhey\n/home/user\n", "stderr": "", "exitCode": 0}, got
    assert got["envCwd"] == "bar\n/home/user/notes\n", got
    assert got["failed"] == {"name": "CommandExitError", "exitCode": 3, "stderr": "oops\n"}, got
    assert got["background"] == {"listed": True, "killed": True}, got
    assert got["stdin"] == "got:abc\n", got
    assert got["pty"]["threw"] == "SandboxError" and "unimplemented" in got["pty"]["message"], got
    # Control plane: connect, list by metadata, info, refusals, another key, kill.
    assert got["connected"] == ["10"], got
    assert got["id"] in got["listedIds"], got
    assert got["info"] == {
        "templateId": "code-interpreter-v1",
        "metadata": {"sdk": "js"},
        "state": "running",
        "envdVersion": "0.5.7",
    }, got
    # betaPause (no memory flag) is a filesystem pause; the paused sandbox is then killed.
    assert got["pause"] is True, got
    assert got["wrongKey"]["threw"] == "AuthenticationError", got
    assert got["runningBefore"] is True and got["runningAfter"] is False, got
    assert got["afterKill"]["threw"] == "TimeoutError" and "was not found" in got["afterKill"]["message"], got
    assert got["killAgain"] is False, got
    assert got["base"] == {"stdout": "42\n", "template": "base"}, got
    assert got["badTemplate"]["threw"] == "SandboxError" and "my-custom-template" in got["badTemplate"]["message"], got


@pytest.fixture(scope="module")
def token(tmp_path_factory) -> str:
    p = tmp_path_factory.mktemp("e2b-js") / "token"
    p.write_text(KEY + "\n")
    return str(p)


def start_executor(name: str, port: int, token: str) -> Executor:
    args = ["--http-listen", f"127.0.0.1:{port}", "--max-sessions", "4"]
    return Executor(name, slots=4, languages="python,bash", args=args, env={"SANDPOOL_AUTH_TOKEN_FILE": token}).start()


@pytest.fixture(scope="module")
def js_base(token: str) -> Iterator[str]:
    """One executor with sessions and a bearer token, serving HTTP; its base URL."""
    port = free_port()
    e = start_executor(NAME, port, token)
    yield f"http://127.0.0.1:{port}"
    e.close()


def test_js_sdks(js_base: str, tmp_path: Path) -> None:
    check(run_sdk(NEW_PAIR, js_base, tmp_path))


def test_an_older_js_pair(js_base: str, tmp_path: Path) -> None:
    check(run_sdk(OLD_PAIR, js_base, tmp_path))


def test_js_sdks_through_the_gateway(token: str, tmp_path: Path) -> None:
    """Two executors behind sandpool-gateway: creates spread over both, and the SDK's later
    calls of a sandbox reach the executor its id names (control plane by the id in the path,
    data plane by the E2b-Sandbox-Id header)."""
    names = ("pytest-e2b-js-a", "pytest-e2b-js-b")
    executors, backends = [], {}
    try:
        for name in names:
            port = free_port()
            executors.append(start_executor(name, port, token))
            backends[name] = f"127.0.0.1:{port}"
        gateway, base = start_gateway(backends)
        try:
            got = run_sdk(NEW_PAIR, base, tmp_path, POOL_SCRIPT)
        finally:
            gateway.terminate()
            gateway.wait(10)
    finally:
        for e in executors:
            e.close()
    assert {s["id"].split("-", 1)[1] for s in got} == set(names), got
    for i, s in enumerate(got):
        want = {"text": [str(2 * i)], "read": str(i), "cat": str(i), "connected": [str(i), {"n": str(i)}]}
        assert {k: v for k, v in s.items() if k != "id"} == {**want, "killed": True}, got
