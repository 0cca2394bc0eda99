"""Stateful sessions: a sandbox whose /work, and for Python the interpreter's state, lives across calls.

A session lives on one executor. `Client.session(...)` creates it and, by default, sends its later
calls straight to the executor the create response names (`executor_address`), on a channel of its
own. When that executor cannot be reached (it drained on SIGTERM, pausing the session into the
store executors share), the call is sent once more through the client's main target, where another
executor resumes it, and later calls follow the executor the answer names. When the session is gone
(its executor died without a drain, or it expired), calls raise `SessionLost` (from
`sandpool.errors`): a session is never silently replaced by a new, empty one.
Any other failed call raises the `errors.CallError` its status maps to.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Optional, Union

import grpc
import grpc.aio

from sandpool.v1 import executor_pb2 as pb
from sandpool.v1 import executor_pb2_grpc as pb_grpc

from . import convert
from .errors import SessionLost, from_rpc
from .target import channel_options
from .types import File, Limits, PhaseResult, Verdict


@dataclass
class SessionLimits:
    """Totals for a whole session; 0 means the executor's default (`disk_bytes` is only reported)."""

    lifetime_ms: int = 0
    idle_timeout_ms: int = 0
    max_calls: int = 0
    memory_bytes: int = 0
    cpu_time_ms: int = 0
    disk_bytes: int = 0


@dataclass
class SessionResult:
    """One call's outcome. `display` is repr() of a Python cell's final expression (empty if none)."""

    verdict: Verdict
    result: Optional[PhaseResult]
    display: str = ""
    calls_left: int = 0
    #: True when the interpreter was restarted in this call: variables are gone, /work stays.
    state_reset: bool = False
    cwd: str = ""
    message: str = ""

    @property
    def ok(self) -> bool:
        return self.verdict is Verdict.OK

    @property
    def stdout(self) -> str:
        return self.result.stdout.decode("utf-8", "replace") if self.result else ""

    @property
    def stderr(self) -> str:
        return self.result.stderr.decode("utf-8", "replace") if self.result else ""

    @property
    def exit_code(self) -> int:
        return self.result.exit_code if self.result else 0


def session_limits_pb(lim: Optional[SessionLimits]) -> Optional[pb.SessionLimits]:
    if lim is None:
        return None
    return pb.SessionLimits(
        lifetime_ms=lim.lifetime_ms,
        idle_timeout_ms=lim.idle_timeout_ms,
        max_calls=lim.max_calls,
        memory_bytes=lim.memory_bytes,
        cpu_time_ms=lim.cpu_time_ms,
        disk_bytes=lim.disk_bytes,
    )


def _session_limits(m: pb.SessionLimits) -> SessionLimits:
    return SessionLimits(
        lifetime_ms=m.lifetime_ms,
        idle_timeout_ms=m.idle_timeout_ms,
        max_calls=m.max_calls,
        memory_bytes=m.memory_bytes,
        cpu_time_ms=m.cpu_time_ms,
        disk_bytes=m.disk_bytes,
    )


def _limits(m: pb.Limits) -> Limits:
    return Limits(
        wall_time_ms=m.wall_time_ms,
        cpu_time_ms=m.cpu_time_ms,
        memory_bytes=m.memory_bytes,
        output_bytes=m.output_bytes,
        processes=m.processes,
        file_size_bytes=m.file_size_bytes,
    )


def _files(files: Union[Mapping[str, Union[str, bytes]], list[File], None]) -> list[pb.File]:
    if files is None:
        return []
    if isinstance(files, Mapping):
        files = [File(path=p, content=convert._bytes(c)) for p, c in files.items()]
    return [convert.file_pb(f) for f in files]


def create_request(
    language: str,
    limits: Optional[SessionLimits],
    call_limits: Optional[Limits],
    files: Union[Mapping[str, Union[str, bytes]], list[File], None],
    request_id: str,
) -> pb.CreateSessionRequest:
    return pb.CreateSessionRequest(
        language=language,
        session_limits=session_limits_pb(limits),
        call_limits=convert.limits_pb(call_limits),
        files=_files(files),
        request_id=request_id,
    )


def _run_request(
    session_id: str, code: Optional[str], command: Optional[str], stdin: Union[str, bytes], limits: Optional[Limits]
) -> pb.RunInSessionRequest:
    if (code is None) == (command is None):
        raise ValueError("give code or command, not both")
    m = pb.RunInSessionRequest(
        session_id=session_id,
        stdin=stdin.encode() if isinstance(stdin, str) else stdin,
        limits=convert.limits_pb(limits),
    )
    if code is not None:
        m.code = code
    else:
        m.command = command or ""
    return m


def _result(m: pb.RunInSessionResponse) -> SessionResult:
    return SessionResult(
        verdict=convert._verdict(m.verdict),
        result=convert.phase(m.result) if m.HasField("result") else None,
        display=m.display,
        calls_left=m.calls_left,
        state_reset=m.state_reset,
        cwd=m.cwd,
        message=m.message,
    )


def _normal(address: str) -> str:
    """host:port of a target, without a dns:/// or ipv4: scheme."""
    for prefix in ("dns:///", "dns:", "ipv4:", "ipv6:"):
        if address.startswith(prefix):
            return address[len(prefix) :]
    return address


def _lost(session_id: str, address: str, e: grpc.RpcError) -> Optional[SessionLost]:
    """The SessionLost a failed call means, or None when the call itself was at fault."""
    code = e.code()
    if code == grpc.StatusCode.NOT_FOUND:
        return SessionLost(session_id, "closed, expired or unknown to its executor (a restarted executor has none)")
    if code == grpc.StatusCode.UNAVAILABLE:
        return SessionLost(session_id, f"its executor {address} cannot be reached ({e.details()})")
    return None


def _failure(session_id: str, address: str, e: grpc.RpcError) -> Exception:
    lost = _lost(session_id, address, e)
    return lost if lost is not None else from_rpc(e)


#: Where an executor says a session's later calls go (it may have resumed one another drained).
EXECUTOR_ADDRESS = "x-sandpool-executor-address"


def _named_address(md) -> str:
    for k, v in md or ():
        if k == EXECUTOR_ADDRESS:
            return v.decode() if isinstance(v, bytes) else v
    return ""


class _Base:
    def __init__(self, resp: pb.CreateSessionResponse, address: str):
        self.id: str = resp.session_id
        self.language: str = resp.language
        #: The executor holding the session ("host:port").
        self.executor_address: str = address
        self.limits = _session_limits(resp.session_limits)
        self.call_limits = _limits(resp.call_limits)
        self.closed = False


class Session(_Base):
    """A session on one executor (see the module's doc). Use it as a context manager: it closes on exit.

    Create it with `Client.session(...)`.
    """

    def __init__(
        self,
        resp: pb.CreateSessionResponse,
        stub: pb_grpc.ExecutorStub,
        channel: Optional[grpc.Channel],
        metadata: tuple,
        timeout: Optional[float],
        main_stub: Optional[pb_grpc.ExecutorStub] = None,
    ):
        super().__init__(resp, resp.executor_address)
        self._stub = stub
        self._channel = channel  # owned: closed with the session
        self._metadata = metadata
        self._timeout = timeout
        #: The client's own stub (its main target), for a routed session whose executor is gone.
        self._main_stub = main_stub if channel is not None else None

    def _call(self, name: str, req, timeout: Optional[float]):
        """Calls `name` on the session's executor. A routed call whose executor cannot be reached
        (it drained, pausing the session into the shared store) is sent once more through the
        client's main target, where another executor resumes it; later calls follow the executor
        the answer names (`x-sandpool-executor-address`)."""
        if self.closed:
            raise SessionLost(self.id, "closed by this client")
        t = timeout if timeout is not None else self._timeout
        try:
            resp, call = getattr(self._stub, name).with_call(req, timeout=t, metadata=self._metadata)
        except grpc.RpcError as e:
            if self._main_stub is None or e.code() != grpc.StatusCode.UNAVAILABLE:
                raise _failure(self.id, self.executor_address, e) from e
            try:
                resp, call = getattr(self._main_stub, name).with_call(req, timeout=t, metadata=self._metadata)
            except grpc.RpcError as e2:
                raise _failure(self.id, self.executor_address, e2) from e2
        self._follow(_named_address(call.initial_metadata()))
        return resp

    def _follow(self, address: str) -> None:
        if self._channel is None or not address or _normal(address) == _normal(self.executor_address):
            return
        old, self._channel = self._channel, own_channel(address)
        self._stub = pb_grpc.ExecutorStub(self._channel)
        self.executor_address = address
        old.close()

    def run(
        self,
        code: Optional[str] = None,
        *,
        command: Optional[str] = None,
        stdin: Union[str, bytes] = b"",
        limits: Optional[Limits] = None,
        timeout: Optional[float] = None,
    ) -> SessionResult:
        """Runs `code` (the session's language) or a shell `command`; `limits` are this call's."""
        req = _run_request(self.id, code, command, stdin, limits)
        return _result(self._call("RunInSession", req, timeout))

    def command(self, command: str, **kw) -> SessionResult:
        """Runs a shell command in /work (bash -c)."""
        return self.run(command=command, **kw)

    def write_files(self, files: Union[Mapping[str, Union[str, bytes]], list[File]]) -> int:
        """Writes files into /work (paths relative to it); returns the bytes /work holds after."""
        req = pb.PutSessionFilesRequest(session_id=self.id, files=_files(files))
        return self._call("PutSessionFiles", req, None).disk_used_bytes

    def read_files(self, paths: list[str]) -> dict[str, bytes]:
        """Reads files from /work; paths that could not be read are left out (see `read_file`)."""
        req = pb.GetSessionFilesRequest(session_id=self.id, paths=paths)
        return {f.path: f.content for f in self._call("GetSessionFiles", req, None).files}

    def read_file(self, path: str) -> bytes:
        """One file from /work; FileNotFoundError (with the executor's reason) when it cannot be read."""
        r = self._call("GetSessionFiles", pb.GetSessionFilesRequest(session_id=self.id, paths=[path]), None)
        for f in r.files:
            return f.content
        why = r.errors[0].message if r.errors else "not returned"
        raise FileNotFoundError(f"{path}: {why}")

    def close(self) -> Optional[int]:
        """Ends the session (its processes killed, /work gone); returns the calls it served, None if already lost."""
        if self.closed:
            return None
        try:
            return self._call("CloseSession", pb.CloseSessionRequest(session_id=self.id), None).calls
        except SessionLost:
            return None
        finally:
            self.closed = True
            if self._channel is not None:
                self._channel.close()

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncSession(_Base):
    """asyncio form of `Session`: `async with await client.session(...) as s: await s.run(...)`."""

    def __init__(
        self,
        resp: pb.CreateSessionResponse,
        stub: pb_grpc.ExecutorStub,
        channel: Optional[grpc.aio.Channel],
        metadata: tuple,
        timeout: Optional[float],
        main_stub: Optional[pb_grpc.ExecutorStub] = None,
    ):
        super().__init__(resp, resp.executor_address)
        self._stub = stub
        self._channel = channel
        self._metadata = metadata
        self._timeout = timeout
        self._main_stub = main_stub if channel is not None else None

    async def _call(self, name: str, req, timeout: Optional[float]):
        """As `Session._call`."""
        if self.closed:
            raise SessionLost(self.id, "closed by this client")
        t = timeout if timeout is not None else self._timeout
        try:
            call = getattr(self._stub, name)(req, timeout=t, metadata=self._metadata)
            resp = await call
        except grpc.aio.AioRpcError as e:
            if self._main_stub is None or e.code() != grpc.StatusCode.UNAVAILABLE:
                raise _failure(self.id, self.executor_address, e) from e
            try:
                call = getattr(self._main_stub, name)(req, timeout=t, metadata=self._metadata)
                resp = await call
            except grpc.aio.AioRpcError as e2:
                raise _failure(self.id, self.executor_address, e2) from e2
        await self._follow(_named_address(await call.initial_metadata()))
        return resp

    async def _follow(self, address: str) -> None:
        if self._channel is None or not address or _normal(address) == _normal(self.executor_address):
            return
        old, self._channel = self._channel, own_aio_channel(address)
        self._stub = pb_grpc.ExecutorStub(self._channel)
        self.executor_address = address
        await old.close()

    async def run(
        self,
        code: Optional[str] = None,
        *,
        command: Optional[str] = None,
        stdin: Union[str, bytes] = b"",
        limits: Optional[Limits] = None,
        timeout: Optional[float] = None,
    ) -> SessionResult:
        req = _run_request(self.id, code, command, stdin, limits)
        return _result(await self._call("RunInSession", req, timeout))

    async def command(self, command: str, **kw) -> SessionResult:
        return await self.run(command=command, **kw)

    async def write_files(self, files: Union[Mapping[str, Union[str, bytes]], list[File]]) -> int:
        req = pb.PutSessionFilesRequest(session_id=self.id, files=_files(files))
        return (await self._call("PutSessionFiles", req, None)).disk_used_bytes

    async def read_files(self, paths: list[str]) -> dict[str, bytes]:
        req = pb.GetSessionFilesRequest(session_id=self.id, paths=paths)
        return {f.path: f.content for f in (await self._call("GetSessionFiles", req, None)).files}

    async def read_file(self, path: str) -> bytes:
        req = pb.GetSessionFilesRequest(session_id=self.id, paths=[path])
        r = await self._call("GetSessionFiles", req, None)
        for f in r.files:
            return f.content
        why = r.errors[0].message if r.errors else "not returned"
        raise FileNotFoundError(f"{path}: {why}")

    async def close(self) -> Optional[int]:
        if self.closed:
            return None
        try:
            return (await self._call("CloseSession", pb.CloseSessionRequest(session_id=self.id), None)).calls
        except SessionLost:
            return None
        finally:
            self.closed = True
            if self._channel is not None:
                await self._channel.close()

    async def __aenter__(self) -> "AsyncSession":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


def route(target: str, address: str, enabled: bool) -> Optional[str]:
    """The address to open a channel of the session's own to, or None to keep the client's channel."""
    if not enabled or not address or _normal(address) == _normal(target):
        return None
    return address


def own_channel(address: str) -> grpc.Channel:
    return grpc.insecure_channel(address, options=channel_options(address, "pick_first"))


def own_aio_channel(address: str) -> grpc.aio.Channel:
    return grpc.aio.insecure_channel(address, options=channel_options(address, "pick_first"))


__all__ = ["AsyncSession", "Session", "SessionLimits", "SessionLost", "SessionResult"]
