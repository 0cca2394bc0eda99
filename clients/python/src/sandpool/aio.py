"""The asyncio client (grpc.aio)."""

from __future__ import annotations

import dataclasses

import asyncio
import time
from typing import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Optional, TypeVar, Union, cast

import grpc
import grpc.aio

from sandpool.v1 import executor_pb2 as pb
from sandpool.v1 import executor_pb2_grpc as pb_grpc

from . import convert
from . import session as _session
from .errors import from_rpc
from .client import _deadline, _raise_for, _tagged
from .retry import RetryPolicy, retryable_status, retryable_verdict
from .session import AsyncSession, SessionLimits
from .spread import Member, Spread, addresses, member_options, refused_unrun
from .stream import Lane, Source
from .target import auth_metadata, channel_options, default_target
from .target import compression as compression_of
from .types import CachePolicy, EvaluateRequest, EvaluateResult, ExecuteResult, File, Limits, Priority

T = TypeVar("T")

_POLL_S = 0.02


class AsyncClient:
    """asyncio Sandpool client; same arguments and behaviour as `Client`."""

    def __init__(
        self,
        target: Optional[str] = None,
        *,
        timeout: Optional[float] = 300.0,
        retry: Optional[RetryPolicy] = None,
        compression: Optional[str] = "gzip",
        load_balancing: str = "least_request",
        token: Optional[str] = None,
        priority: Optional[Union[Priority, str]] = None,
    ):
        self.target = target = target or default_target()
        self.timeout = timeout
        self.retry = retry or RetryPolicy()
        self._compression = compression_of(compression)
        # Sent on every call; the executor's --auth-token-file checks it (UNAUTHENTICATED otherwise).
        self._metadata = auth_metadata(token)
        # Every request's priority unless the call gives one (docs/tenants.md).
        convert.priority_value(priority)  # refused here, not on the first call
        self.priority = priority
        grpc_policy = "round_robin" if load_balancing == "least_request" else load_balancing
        self.channel = grpc.aio.insecure_channel(target, options=channel_options(target, grpc_policy))
        self.stub = pb_grpc.ExecutorStub(self.channel)
        # As `Client`: execute() and evaluate() go per call to the executor with the fewest outstanding.
        # Channels of executors gone are closed on the event loop, by the next call.
        self._retired: list[grpc.aio.Channel] = []
        self._spread: Optional[Spread[grpc.aio.Channel]] = None
        if load_balancing == "least_request" and addresses(target) is not None:
            self._spread = Spread(
                target,
                lambda a: grpc.aio.insecure_channel(a, options=member_options(a)),
                pb_grpc.ExecutorStub,
                self._retired.append,
            )

    def _prioritised(self, r: EvaluateRequest) -> EvaluateRequest:
        """`r` with the client's priority when it names none."""
        if r.priority is None and self.priority is not None:
            return dataclasses.replace(r, priority=self.priority)
        return r

    async def close(self) -> None:
        """Closes the channel."""
        if self._spread is not None:
            self._spread.close()
        await self._close_retired()
        await self.channel.close()

    async def _close_retired(self) -> None:
        while self._retired:
            await self._retired.pop().close()

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _call(
        self,
        fn: Callable[[pb_grpc.ExecutorStub, Optional[float]], Awaitable[T]],
        verdict_of: Callable[[T], int],
        timeout: Optional[float],
        spread: bool = False,
    ) -> tuple[T, int]:
        """Awaits `fn(stub, time_left)` until the result is final or retries run out; returns it and the attempt
        count. `spread` as in `Client._call`."""
        deadline = _deadline(timeout)
        attempt = 0
        tried: list[Member[grpc.aio.Channel]] = []
        while True:
            attempt += 1
            left = None if deadline is None else max(0.001, deadline - time.monotonic())
            m = await self._pick(tried) if spread else None
            refused = False
            try:
                r = await fn(m.stub if m is not None else self.stub, left)  # type: ignore[arg-type]
            except grpc.aio.AioRpcError as e:
                refused = m is not None and refused_unrun(e)
                if refused and self._spread is not None and len(tried) + 1 < len(self._spread.members()):
                    tried.append(m)  # type: ignore[arg-type]
                    attempt -= 1
                    continue
                if not retryable_status(e.code()) or not await self._may_retry(attempt, deadline):
                    raise from_rpc(e) from e
                tried = []
                continue
            finally:
                if m is not None and self._spread is not None:
                    self._spread.done(m, refused)
            if retryable_verdict(convert._verdict(verdict_of(r))) and await self._may_retry(attempt, deadline):
                continue
            return r, attempt

    async def _pick(self, tried: list[Member[grpc.aio.Channel]]) -> Optional[Member[grpc.aio.Channel]]:
        if self._spread is None:
            return None
        if self._spread.due():
            # The lookup blocks: off the event loop.
            await asyncio.to_thread(self._spread.refresh)
        await self._close_retired()
        return self._spread.pick(tried)

    async def _may_retry(self, attempt: int, deadline: Optional[float]) -> bool:
        if attempt >= self.retry.max_attempts:
            return False
        pause = self.retry.backoff(attempt)
        if deadline is not None and time.monotonic() + pause >= deadline:
            return False
        await asyncio.sleep(pause)
        return True

    async def execute(
        self,
        language: str,
        code: str,
        stdin: Union[str, bytes] = b"",
        *,
        files: Optional[list[File]] = None,
        limits: Optional[Limits] = None,
        compile_limits: Optional[Limits] = None,
        args: Optional[list[str]] = None,
        fetch_files: Optional[list[str]] = None,
        request_id: str = "",
        cache: CachePolicy = CachePolicy.DEFAULT,
        cold_start: bool = False,
        priority: Optional[Union[Priority, str]] = None,
        timeout: Optional[float] = None,
    ) -> ExecuteResult:
        """Compiles (if needed) and runs one program; `timeout` (s) bounds all attempts together.

        `cache` says whether the executor's result cache may answer or keep this request;
        `cold_start` runs it from a fresh interpreter where the language has warm starts.
        """
        req = convert.execute_request(
            language,
            code,
            stdin,
            files=files,
            limits=limits,
            compile_limits=compile_limits,
            args=args,
            fetch_files=fetch_files,
            request_id=request_id,
            cache=cache,
            cold_start=cold_start,
            priority=priority if priority is not None else self.priority,
        )
        r, n = await self._call(
            lambda stub, left: stub.Execute(
                req, timeout=left, compression=self._compression, metadata=self._metadata
            ),
            lambda m: m.verdict,
            timeout if timeout is not None else self.timeout,
            spread=True,
        )
        return convert.execute_result(r, attempts=n)

    async def evaluate(self, request: EvaluateRequest, *, timeout: Optional[float] = None) -> EvaluateResult:
        """Judges one completion. A rejected request raises `errors.RequestRejected`."""
        req = convert.evaluate_request(self._prioritised(request))
        r, n = await self._call(
            lambda stub, left: stub.Evaluate(
                req, timeout=left, compression=self._compression, metadata=self._metadata
            ),
            lambda m: m.verdict,
            timeout if timeout is not None else self.timeout,
            spread=True,
        )
        return convert.evaluate_result(r, attempts=n)

    async def capabilities(self, *, timeout: Optional[float] = 30.0) -> pb.Capabilities:
        """The executor's languages, limits and isolation (the raw message); as `Client.capabilities`."""
        r, _ = await self._call(
            lambda stub, left: stub.GetCapabilities(pb.GetCapabilitiesRequest(), timeout=left, metadata=self._metadata),
            lambda m: 1,
            timeout,
        )
        return r

    async def session(
        self,
        language: str = "python",
        *,
        limits: Optional[SessionLimits] = None,
        call_limits: Optional[Limits] = None,
        files: Union[Mapping[str, Union[str, bytes]], list[File], None] = None,
        route: bool = True,
        request_id: str = "",
        priority: Optional[Union[Priority, str]] = None,
        timeout: Optional[float] = None,
    ) -> AsyncSession:
        """Opens a stateful session; as `Client.session`. `async with await c.session() as s: ...`"""
        req = _session.create_request(language, limits, call_limits, files, request_id)
        req.priority = cast("pb.Priority", convert.priority_value(priority if priority is not None else self.priority))
        t = timeout if timeout is not None else self.timeout
        resp, _ = await self._call(
            lambda stub, left: stub.CreateSession(req, timeout=left, metadata=self._metadata),
            lambda m: 1,
            t,
        )
        address = _session.route(self.target, resp.executor_address, route)
        channel = _session.own_aio_channel(address) if address else None
        stub = pb_grpc.ExecutorStub(channel) if channel is not None else self.stub
        return AsyncSession(resp, stub, channel, self._metadata, t, self.stub)

    async def evaluate_many(
        self,
        requests: Iterable[EvaluateRequest],
        *,
        concurrency: int = 64,
        streams: int = 4,
        timeout: Optional[float] = None,
    ) -> AsyncIterator[EvaluateResult]:
        """Judges `requests` over EvaluateStream, yielding results as they finish (see `Client.evaluate_many`)."""
        # At least one stream per executor the target names, as `sandpool eval` does.
        executors = len(self._spread.members()) if self._spread is not None else 0
        n = max(1, min(max(streams, executors), concurrency))
        source = Source((self._prioritised(r) for r in requests), self.retry, streams=n)
        per_stream = -(-concurrency // n)
        out: "asyncio.Queue[object]" = asyncio.Queue()
        done = object()

        async def work() -> None:
            try:
                async for r in self._stream(source, per_stream, timeout):
                    await out.put(r)
            except Exception as e:  # handed to the caller
                await out.put(e)
            finally:
                await out.put(done)

        tasks = [asyncio.ensure_future(work()) for _ in range(n)]
        try:
            finished = 0
            while finished < n:
                item = await out.get()
                if item is done:
                    finished += 1
                elif isinstance(item, Exception):
                    raise item
                else:
                    yield item  # type: ignore[misc]
        finally:
            for t in tasks:
                t.cancel()
        _raise_for(source)

    async def _stream(
        self, source: Source, concurrency: int, timeout: Optional[float]
    ) -> AsyncIterator[EvaluateResult]:
        """One stream's results, reopening it when it breaks, until every request is answered or it gives up."""
        failures = 0
        last = (grpc.StatusCode.UNAVAILABLE, "")
        while not source.done():
            lane = Lane()

            async def gen(lane: Lane = lane) -> AsyncIterator[pb.EvaluateRequest]:
                while True:
                    what, msg = source.next_to_send(lane, concurrency)
                    if what == "done":
                        return
                    if msg is not None:  # "send"
                        yield msg
                    else:
                        await asyncio.sleep(_POLL_S)

            # Each (re)opened stream goes to the executor with the fewest outstanding (a stream counts
            # one), skipping one that refused a connection lately.
            member = await self._pick([])
            refused = False
            call = (member.stub if member is not None else self.stub).EvaluateStream(  # type: ignore[attr-defined]
                gen(), timeout=timeout, compression=self._compression, metadata=self._metadata
            )
            try:
                async for m in call:
                    failures = 0
                    r = source.on_response(lane, m)
                    if r is not None:
                        yield r
                if source.done():
                    break
                # The server ended the stream cleanly with requests unanswered (e.g. while draining).
                last = (grpc.StatusCode.UNAVAILABLE, "the stream ended with requests unanswered")
            except grpc.aio.AioRpcError as e:
                refused = member is not None and refused_unrun(e)
                # A failed send makes grpc.aio report INTERNAL whatever the server said: see retry.py.
                if not retryable_status(e.code()):
                    raise from_rpc(e) from e
                last = (e.code(), e.details() or "")
            finally:
                call.cancel()
                if member is not None and self._spread is not None:
                    self._spread.done(member, refused)
            for r in source.close_lane(lane, *last):
                yield r
            failures += 1
            if failures >= self.retry.max_attempts:
                break  # this stream gives up; the others take over what it held
            await asyncio.sleep(self.retry.backoff(failures))
        for r in source.leave(*last):
            yield r

    async def evaluate_many_ordered(
        self,
        requests: Iterable[EvaluateRequest],
        *,
        concurrency: int = 64,
        streams: int = 4,
        timeout: Optional[float] = None,
    ) -> AsyncIterator[EvaluateResult]:
        """As `evaluate_many`, but yields results in the order of `requests`."""
        buffered: dict[int, EvaluateResult] = {}
        want = 0
        async for r in self.evaluate_many(_tagged(requests), concurrency=concurrency, streams=streams, timeout=timeout):
            pos, _, r.id = r.id.partition("\x00")
            buffered[int(pos)] = r
            while want in buffered:
                yield buffered.pop(want)
                want += 1
