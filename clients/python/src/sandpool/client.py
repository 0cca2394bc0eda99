"""The synchronous client."""

from __future__ import annotations

import dataclasses
import queue
import threading
import time
from typing import Callable, Iterable, Iterator, Mapping, Optional, TypeVar, Union, cast

import grpc

from sandpool.v1 import executor_pb2 as pb
from sandpool.v1 import executor_pb2_grpc as pb_grpc

from . import convert
from . import session as _session
from .errors import from_rpc
from .retry import RetryPolicy, retryable_status, retryable_verdict
from .session import Session, SessionLimits
from .spread import Member, Spread, addresses, member_options, refused_unrun
from .stream import Lane, Source
from .target import auth_metadata, channel_options, default_target
from .target import compression as compression_of
from .types import CachePolicy, EvaluateRequest, EvaluateResult, ExecuteResult, File, Limits, Priority

T = TypeVar("T")

#: How often a blocked request generator re-checks for work (seconds).
_POLL_S = 0.02


class Client:
    """Synchronous Sandpool client.

    `target` is a gRPC target, e.g. `pool_target("sandpool", "evals")`; by default `default_target()`:
    $SANDPOOL_TARGET, else dns:///$SANDPOOL_POOL.$SANDPOOL_NAMESPACE.svc.cluster.local:50051.
    `token` (else $SANDPOOL_TOKEN) is sent as `authorization: Bearer <token>` on every call.
    """

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
        channel: Optional[grpc.Channel] = None,
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
        self.channel = channel or grpc.insecure_channel(target, options=channel_options(target, grpc_policy))
        self.stub = pb_grpc.ExecutorStub(self.channel)
        # execute() and evaluate() go per call to the executor with the fewest outstanding (spread.py);
        # streams, sessions' creation and capabilities keep the gRPC channel.
        self._spread: Optional[Spread[grpc.Channel]] = None
        if channel is None and load_balancing == "least_request" and addresses(target) is not None:
            self._spread = Spread(
                target,
                lambda a: grpc.insecure_channel(a, options=member_options(a)),
                pb_grpc.ExecutorStub,
                lambda ch: ch.close(),
            )

    def _prioritised(self, r: EvaluateRequest) -> EvaluateRequest:
        """`r` with the client's priority when it names none."""
        if r.priority is None and self.priority is not None:
            return dataclasses.replace(r, priority=self.priority)
        return r

    def close(self) -> None:
        """Closes the channel."""
        if self._spread is not None:
            self._spread.close()
        self.channel.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(
        self,
        fn: Callable[[pb_grpc.ExecutorStub], T],
        verdict_of: Callable[[T], int],
        timeout: Optional[float],
        spread: bool = False,
    ) -> tuple[T, int]:
        """Calls `fn(stub)` until it returns something final or retries run out; returns it and the attempt count.

        With `spread`, each attempt goes to the executor with the fewest outstanding calls; one that refused the
        connection (the call never ran) is left for another at once, without using an attempt.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        attempt = 0
        tried: list[Member[grpc.Channel]] = []
        while True:
            attempt += 1
            m = self._pick(tried) if spread else None
            refused = False
            try:
                r = fn(m.stub if m is not None else self.stub)  # type: ignore[arg-type]
            except grpc.RpcError as e:
                refused = m is not None and refused_unrun(e)
                if refused and self._spread is not None and len(tried) + 1 < len(self._spread.members()):
                    tried.append(m)  # type: ignore[arg-type]
                    attempt -= 1
                    continue
                if not retryable_status(e.code()) or not self._may_retry(attempt, deadline):
                    raise from_rpc(e) from e
                tried = []
                continue
            finally:
                if m is not None and self._spread is not None:
                    self._spread.done(m, refused)
            if retryable_verdict(convert._verdict(verdict_of(r))) and self._may_retry(attempt, deadline):
                continue
            return r, attempt

    def _pick(self, tried: list[Member[grpc.Channel]]) -> Optional[Member[grpc.Channel]]:
        if self._spread is None:
            return None
        self._spread.refresh()
        return self._spread.pick(tried)

    def _may_retry(self, attempt: int, deadline: Optional[float]) -> bool:
        """Sleeps the backoff and says True if another attempt fits the policy and the deadline."""
        if attempt >= self.retry.max_attempts:
            return False
        pause = self.retry.backoff(attempt)
        if deadline is not None and time.monotonic() + pause >= deadline:
            return False
        time.sleep(pause)
        return True

    @staticmethod
    def _left(deadline: Optional[float]) -> Optional[float]:
        return None if deadline is None else max(0.001, deadline - time.monotonic())

    def execute(
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
        deadline = _deadline(timeout if timeout is not None else self.timeout)
        r, n = self._call(
            lambda stub: stub.Execute(
                req, timeout=self._left(deadline), compression=self._compression, metadata=self._metadata
            ),
            lambda m: m.verdict,
            timeout if timeout is not None else self.timeout,
            spread=True,
        )
        return convert.execute_result(r, attempts=n)

    def evaluate(self, request: EvaluateRequest, *, timeout: Optional[float] = None) -> EvaluateResult:
        """Judges one completion. A refused request raises `errors.RequestRejected` (`InvalidArgument`: the field)."""
        req = convert.evaluate_request(self._prioritised(request))
        t = timeout if timeout is not None else self.timeout
        deadline = _deadline(t)
        r, n = self._call(
            lambda stub: stub.Evaluate(
                req, timeout=self._left(deadline), compression=self._compression, metadata=self._metadata
            ),
            lambda m: m.verdict,
            t,
            spread=True,
        )
        return convert.evaluate_result(r, attempts=n)

    def capabilities(self, *, timeout: Optional[float] = 30.0) -> pb.Capabilities:
        """The executor's languages, limits and isolation (the raw message)."""
        r, _ = self._call(
            lambda stub: stub.GetCapabilities(pb.GetCapabilitiesRequest(), timeout=timeout, metadata=self._metadata),
            lambda m: 1,
            timeout,
        )
        return r

    def session(
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
    ) -> Session:
        """Opens a stateful session (`python` or `bash`); use it as a context manager to close it.

        With `route` (the default) the session's calls go to the executor the create response names,
        on a channel of the session's own; without, over this client's channel (right when that
        reaches one executor only). Create is retried like `execute` (an executor away, full or
        draining); a session orphaned by a response lost on the way ends at its idle timeout.
        Calls in the session are never retried: they are not idempotent.
        """
        req = _session.create_request(language, limits, call_limits, files, request_id)
        req.priority = cast("pb.Priority", convert.priority_value(priority if priority is not None else self.priority))
        t = timeout if timeout is not None else self.timeout
        deadline = _deadline(t)
        resp, _ = self._call(
            lambda stub: stub.CreateSession(req, timeout=self._left(deadline), metadata=self._metadata),
            lambda m: 1,
            t,
        )
        address = _session.route(self.target, resp.executor_address, route)
        channel = _session.own_channel(address) if address else None
        stub = pb_grpc.ExecutorStub(channel) if channel is not None else self.stub
        return Session(resp, stub, channel, self._metadata, t, self.stub)

    def evaluate_many(
        self,
        requests: Iterable[EvaluateRequest],
        *,
        concurrency: int = 64,
        streams: int = 4,
        timeout: Optional[float] = None,
    ) -> Iterator[EvaluateResult]:
        """Judges `requests` over EvaluateStream, `concurrency` in flight, yielding results as they finish.

        `requests` is read lazily. The work is spread over `streams` streams, at least one per executor
        the target names, each opened on the executor with the fewest open. A stream that breaks (any status but those refusing the call, see
        `retry.retryable_status`) hands its unanswered requests to the other streams and is reopened
        after a backoff; SANDBOX_ERROR results are resent. Every request yields exactly one result: one
        that used `max_attempts` on broken streams yields an error result (`accepted` False, `error`
        the last status), and so does every request left when all streams broke `max_attempts`
        times in a row. A refused call (UNAUTHENTICATED, INVALID_ARGUMENT, ...) raises `errors.RequestRejected`.
        `timeout` bounds each stream.
        """
        # At least one stream per executor the target names, as `sandpool eval` does.
        executors = len(self._spread.members()) if self._spread is not None else 0
        n = max(1, min(max(streams, executors), concurrency))
        source = Source((self._prioritised(r) for r in requests), self.retry, streams=n)
        per_stream = -(-concurrency // n)
        if n == 1:
            yield from self._stream(source, per_stream, timeout)
            _raise_for(source)
            return
        out: "queue.Queue[object]" = queue.Queue()
        stop = threading.Event()
        done = object()
        calls: list[grpc.Call] = []

        def work() -> None:
            try:
                for r in self._stream(source, per_stream, timeout, stop, calls):
                    out.put(r)
            except BaseException as e:  # handed to the caller's thread
                out.put(e)
            finally:
                out.put(done)

        threads = [threading.Thread(target=work, daemon=True) for _ in range(n)]
        for t in threads:
            t.start()
        try:
            finished = 0
            while finished < n:
                item = out.get()
                if item is done:
                    finished += 1
                elif isinstance(item, BaseException):
                    raise item
                else:
                    yield item  # type: ignore[misc]
        finally:
            stop.set()
            for call in list(calls):  # a caller that stopped early: end the streams now
                call.cancel()
        _raise_for(source)

    def _stream(
        self,
        source: Source,
        concurrency: int,
        timeout: Optional[float],
        cancel: Optional[threading.Event] = None,
        calls: Optional[list] = None,
    ) -> Iterator[EvaluateResult]:
        """One stream's results, reopening it when it breaks, until every request is answered or it gives up."""

        def cancelled() -> bool:
            return cancel is not None and cancel.is_set()

        failures = 0
        last = (grpc.StatusCode.UNAVAILABLE, "")
        while not source.done() and not cancelled():
            lane = Lane()

            def gen(lane: Lane = lane) -> Iterator[pb.EvaluateRequest]:
                while not cancelled():
                    what, msg = source.next_to_send(lane, concurrency)
                    if what == "done":
                        return
                    if msg is not None:  # "send"
                        yield msg
                    else:
                        time.sleep(_POLL_S)

            # Each (re)opened stream goes to the executor with the fewest outstanding (a stream counts
            # one), skipping one that refused a connection lately.
            member = self._pick([])
            refused = False
            call = (member.stub if member is not None else self.stub).EvaluateStream(  # type: ignore[attr-defined]
                gen(), timeout=timeout, compression=self._compression, metadata=self._metadata
            )
            if calls is not None:
                calls.append(call)
            try:
                for m in call:
                    failures = 0
                    r = source.on_response(lane, m)
                    if r is not None:
                        yield r
                if source.done():
                    break
                # The server ended the stream cleanly with requests unanswered (e.g. while draining).
                last = (grpc.StatusCode.UNAVAILABLE, "the stream ended with requests unanswered")
            except grpc.RpcError as e:
                refused = member is not None and refused_unrun(e)
                if cancelled():
                    return
                if not retryable_status(e.code()):
                    raise from_rpc(e) from e  # the call itself is refused: every retry would be too
                last = (e.code(), e.details() or "")
            finally:
                call.cancel()
                if member is not None and self._spread is not None:
                    self._spread.done(member, refused)
                if calls is not None and call in calls:
                    calls.remove(call)
            yield from source.close_lane(lane, *last)
            failures += 1
            if failures >= self.retry.max_attempts:
                break  # this stream gives up; the others take over what it held
            time.sleep(self.retry.backoff(failures))
        if not cancelled():
            yield from source.leave(*last)

    def evaluate_many_ordered(
        self,
        requests: Iterable[EvaluateRequest],
        *,
        concurrency: int = 64,
        streams: int = 4,
        timeout: Optional[float] = None,
    ) -> Iterator[EvaluateResult]:
        """As `evaluate_many`, but yields results in the order of `requests` (buffering early ones)."""
        results = self.evaluate_many(_tagged(requests), concurrency=concurrency, streams=streams, timeout=timeout)
        yield from _in_order(results)


def _raise_for(source: Source) -> None:
    """Re-raises an exception from the caller's request iterator."""
    if source.error is not None:
        raise source.error


def _deadline(timeout: Optional[float]) -> Optional[float]:
    return None if timeout is None else time.monotonic() + timeout


def _tagged(requests: Iterable[EvaluateRequest]) -> Iterator[EvaluateRequest]:
    """Requests whose id carries their position ("<pos>\\x00<id>"), for reordering (only client-side)."""
    for i, r in enumerate(requests):
        yield dataclasses.replace(r, id=f"{i}\x00{r.id}")


def _in_order(results: Iterable[EvaluateResult]) -> Iterator[EvaluateResult]:
    """Yields results tagged by `_tagged` in position order, restoring their ids."""
    buffered: dict[int, EvaluateResult] = {}
    want = 0
    for r in results:
        pos, _, rid = r.id.partition("\x00")
        r.id = rid
        buffered[int(pos)] = r
        while want in buffered:
            yield buffered.pop(want)
            want += 1
