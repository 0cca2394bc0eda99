"""Bookkeeping for `evaluate_many`, shared by the sync and asyncio clients.

Requests are tagged with their index on the wire. An evaluate_many call opens
several streams (each on the executor with the fewest, see spread.py) that share one `Source`:
the caller's requests, the *pending* ones (taken, not yet finally answered),
their attempt counts and one resend queue. Each call on a stream is a `Lane`
holding the requests sent on it and not yet answered.

When a call breaks, whatever status it reports, its lane is closed and its
requests go back to the shared resend queue, where any live stream picks them
up (after a backoff). A transport that breaks says nothing about the requests:
grpc reports a dead peer as UNAVAILABLE, as INTERNAL ("Internal error from
Core", when a send fails first: grpc.aio then hides the real status), CANCELLED
or UNKNOWN. Only statuses that refuse the call itself (`refused_status`) end
the whole evaluate_many with an exception. A request that has used its
attempts is answered with an error result instead of being dropped; a response
that arrives for a request no longer on that lane is ignored, so nothing is
answered twice.
"""

from __future__ import annotations

import heapq
import threading
import time
from typing import Iterator, Optional

import grpc

from sandpool.v1 import executor_pb2 as pb

from . import convert
from .retry import RetryPolicy, retryable_item_error, retryable_verdict
from .types import EvaluateRequest, EvaluateResult, ExecutorInfo, RequestError, Verdict


class Lane:
    """One call on one stream: the request indices sent on it and not yet answered."""

    def __init__(self) -> None:
        self.in_flight: set[int] = set()
        self.closed = False


class Source:
    """The requests of one evaluate_many call and their state, shared by its streams."""

    def __init__(self, requests: Iterator[EvaluateRequest], policy: RetryPolicy, streams: int = 1):
        self.requests = iter(requests)
        self.policy = policy
        self.next_index = 0
        self.exhausted = False
        # An exception raised by the caller's iterator, re-raised to the caller (not lost in gRPC's thread).
        self.error: Optional[BaseException] = None
        self.pending: dict[int, EvaluateRequest] = {}
        self.attempts: dict[int, int] = {}
        self.resend: list[tuple[float, int]] = []  # (ready time, index), a heap
        self.live_streams = streams
        self.lock = threading.Lock()

    def _take(self) -> Optional[int]:
        """Reads the caller's next request into `pending`; its index, or None when there are no more."""
        if self.exhausted:
            return None
        try:
            r = next(self.requests)
        except StopIteration:
            self.exhausted = True
            return None
        except Exception as e:
            self.error = e
            self.exhausted = True
            return None
        i = self.next_index
        self.next_index += 1
        self.pending[i] = r
        return i

    def _finished(self) -> bool:
        return self.exhausted and not self.pending

    def done(self) -> bool:
        """Every request was read from the caller and answered."""
        with self.lock:
            return self._finished()

    def next_to_send(self, lane: Lane, concurrency: int) -> tuple[str, Optional[pb.EvaluateRequest]]:
        """("send", msg), ("wait", None) or ("done", None: every request answered, or the lane closed)."""
        with self.lock:
            if lane.closed or self._finished():
                return "done", None
            if len(lane.in_flight) >= concurrency:
                return "wait", None
            if self.resend and self.resend[0][0] <= time.monotonic():
                _, i = heapq.heappop(self.resend)
            else:
                taken = self._take()
                if taken is None:
                    return ("done", None) if self._finished() else ("wait", None)
                i = taken
            self.attempts[i] = self.attempts.get(i, 0) + 1
            lane.in_flight.add(i)
            return "send", convert.evaluate_request(self.pending[i], id=str(i))

    def on_response(self, lane: Lane, m: pb.EvaluateResponse) -> Optional[EvaluateResult]:
        """The final result for this response, or None when it was queued again (or is not this lane's)."""
        with self.lock:
            try:
                i = int(m.id)
            except ValueError:
                return None
            if i not in lane.in_flight or i not in self.pending:
                return None
            lane.in_flight.discard(i)
            n = self.attempts[i]
            retry = retryable_verdict(convert._verdict(m.verdict)) or (
                m.HasField("error") and retryable_item_error(m.error.code)
            )
            if retry and n < self.policy.max_attempts:
                heapq.heappush(self.resend, (time.monotonic() + self.policy.backoff(n), i))
                return None
            r = self.pending.pop(i)
            return convert.evaluate_result(m, attempts=n, id=r.id)

    def close_lane(self, lane: Lane, code: grpc.StatusCode, details: str) -> list[EvaluateResult]:
        """The lane's call ended: its unanswered requests go back to every stream's resend queue.

        Returns error results for those that used all their attempts (answered, never dropped).
        """
        with self.lock:
            lane.closed = True
            out = []
            now = time.monotonic()
            for i in sorted(lane.in_flight):
                n = self.attempts[i]
                if n >= self.policy.max_attempts:
                    out.append(self._fail(i, code, f"stream broke on all {n} attempts, last: {details}"))
                else:
                    heapq.heappush(self.resend, (now + self.policy.backoff(n), i))
            lane.in_flight.clear()
            return out

    def leave(self, code: grpc.StatusCode, details: str) -> list[EvaluateResult]:
        """A stream stops (done, or gave up). The last one answers every request not yet answered
        (pending, or still unread from the caller) with an error result, so none is lost silently."""
        with self.lock:
            self.live_streams -= 1
            if self.live_streams > 0:
                return []
            while self._take() is not None:
                pass
            out = [self._fail(i, code, f"every stream gave up, last: {details}") for i in sorted(self.pending)]
            self.resend.clear()
            return out

    def _fail(self, i: int, code: grpc.StatusCode, message: str) -> EvaluateResult:
        r = self.pending.pop(i)
        return EvaluateResult(
            id=r.id,
            accepted=False,
            verdict=Verdict.VERDICT_UNSPECIFIED,
            tests=[],
            extracted_code="",
            full_code="",
            compile=None,
            message="",
            executor=ExecutorInfo(),
            error=RequestError(code=code.name, message=message),
            attempts=self.attempts.get(i, 0),
        )
