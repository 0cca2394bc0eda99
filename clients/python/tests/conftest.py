"""Fixtures that start real `sandpool-executor` processes on free loopback ports (root needed)."""

from __future__ import annotations

import itertools
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Iterator, Optional

import grpc
import pytest

REPO = Path(__file__).resolve().parents[3]
_uid_slots = itertools.count()


def executor_bin() -> Path:
    """$SANDPOOL_EXECUTOR_BIN, else target/debug/sandpool-executor of this checkout."""
    p = Path(os.environ.get("SANDPOOL_EXECUTOR_BIN", REPO / "target" / "debug" / "sandpool-executor"))
    if not p.exists():
        pytest.fail(f"{p} not found: run `cargo build --workspace` first")
    return p


def gateway_bin() -> Path:
    """$SANDPOOL_GATEWAY_BIN, else target/debug/sandpool-gateway of this checkout."""
    p = Path(os.environ.get("SANDPOOL_GATEWAY_BIN", REPO / "target" / "debug" / "sandpool-gateway"))
    if not p.exists():
        pytest.fail(f"{p} not found: run `cargo build --workspace` first")
    return p


def start_gateway(backends: dict[str, str]) -> tuple[subprocess.Popen, str]:
    """A `sandpool-gateway` over `backends` (executor name -> HTTP host:port); its base URL.
    Waits for /readyz on its metrics port."""
    port, metrics = free_port(), free_port()
    cmd = [str(gateway_bin()), "--listen", f"127.0.0.1:{port}", "--metrics-listen", f"127.0.0.1:{metrics}"]
    for name, addr in backends.items():
        cmd += ["--backend", f"{name}={addr}"]
    quiet = subprocess.DEVNULL if os.environ.get("SANDPOOL_TEST_QUIET") else None
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stderr=quiet)
    deadline = time.monotonic() + 30
    while True:
        if proc.poll() is not None:
            pytest.fail(f"sandpool-gateway exited during start-up: {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", metrics), timeout=1) as c:
                c.sendall(b"GET /readyz HTTP/1.0\r\nHost: x\r\n\r\n")
                if c.recv(64).split(b" ")[1:2] == [b"200"]:
                    return proc, f"http://127.0.0.1:{port}"
        except OSError:
            pass
        if time.monotonic() > deadline:
            proc.kill()
            pytest.fail("sandpool-gateway not ready after 30 s")
        time.sleep(0.05)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Executor:
    """One executor process; `restart()` brings it back on the same port, under a new name."""

    def __init__(
        self,
        name: str,
        slots: int = 2,
        queue: Optional[int] = None,
        port: Optional[int] = None,
        env: Optional[dict] = None,
        languages: str = "python",
        args: Optional[list] = None,
    ):
        self.name = name
        self.languages = languages
        self.extra_args = args or []
        self.extra_env = env or {}
        self.slots = slots
        self.queue = queue
        self.port = port or free_port()
        # Far from the Rust e2e tests' uid ranges (63000+) and from other executors of this run.
        # 100 uids each: the slots, then the session seats (uid_base + slots + k).
        self.uid_base = 200000 + 100 * (next(_uid_slots) % 10) + 1000 * (os.getpid() % 5)
        self.work_root = tempfile.mkdtemp(prefix="sandpool-pytest-")
        self.proc: Optional[subprocess.Popen] = None
        # start/stop/restart may come from a test's thread and from the fixture's teardown at once:
        # one at a time, so a stop never pulls the process from under a restart's wait.
        self._lock = threading.RLock()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> "Executor":
        with self._lock:
            self._start()
        return self

    def _start(self) -> None:
        cmd = [
            str(executor_bin()),
            "--listen", self.address,
            "--work-root", self.work_root,
            "--uid-base", str(self.uid_base),
            "--slots", str(self.slots),
            "--enable-languages", self.languages,
            "--drain-timeout-ms", "5000",
        ]  # fmt: skip
        cmd += self.extra_args
        if self.queue is not None:
            cmd += ["--queue", str(self.queue)]
        env = dict(os.environ, SANDPOOL_NAME=self.name, **self.extra_env)
        quiet = subprocess.DEVNULL if os.environ.get("SANDPOOL_TEST_QUIET") else None
        self.proc = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL, stderr=quiet)
        self._wait_serving(self.proc)

    def _wait_serving(self, proc: subprocess.Popen, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        with grpc.insecure_channel(self.address) as ch:
            # grpc.health.v1.Health/Check with an empty request; b"\x08\x01" is {status: SERVING}.
            check = ch.unary_unary("/grpc.health.v1.Health/Check", lambda b: b, lambda b: b)
            while True:
                if proc.poll() is not None:
                    pytest.fail(f"executor {self.name} exited during start-up: {proc.returncode}")
                if time.monotonic() > deadline:
                    pytest.fail(f"executor {self.name} not SERVING after {timeout} s")
                try:
                    if check(b"", timeout=1) == b"\x08\x01":
                        return
                except grpc.RpcError:
                    pass
                time.sleep(0.05)

    def stop(self, timeout: float = 15.0) -> None:
        """SIGTERM (the executor drains, then exits), SIGKILL if it lingers."""
        with self._lock:
            if self.proc is None:
                return
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.proc = None

    def kill(self) -> None:
        """SIGKILL, no drain: the process dies with whatever it holds."""
        with self._lock:
            if self.proc is None:
                return
            self.proc.kill()
            self.proc.wait()
            self.proc = None

    def restart(self, name: str) -> None:
        with self._lock:
            self.stop()
            self.name = name
            self._start()

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.work_root, ignore_errors=True)


@pytest.fixture
def make_executor() -> Iterator:
    started: list[Executor] = []

    def make(name: str, **kw) -> Executor:
        e = Executor(name, **kw).start()
        started.append(e)
        return e

    yield make
    for e in started:
        e.close()


@pytest.fixture(scope="module")
def executor() -> Iterator[Executor]:
    e = Executor("pytest-main", slots=2).start()
    yield e
    e.close()


@pytest.fixture
def serve() -> Iterator:
    """Starts in-test fake executors (tests/fakes.py); returns their addresses."""
    from fakes import start_fake

    servers: list[grpc.Server] = []

    def start(servicer) -> str:
        server, address = start_fake(servicer)
        servers.append(server)
        return address

    yield start
    for s in servers:
        s.stop(None)
