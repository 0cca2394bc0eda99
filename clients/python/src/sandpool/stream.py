"""Bookkeeping for `evaluate_many`, shared by the sync and asyncio clients.

Requests are tagged with their index on the wire. An evaluate_many call may
open several streams (round_robin puts each on another pod); they share one
`Source`, each with its own `StreamState`. A request is *pending*
from when it is taken from the source until a final response arrives. When a
stream breaks with a retryable status, every pending request is queued again;
a SANDBOX_ERROR response queues that one request again. Both wait a backoff.
"""

from __future__ import annotations

import heapq
import threading
import time
from typing import Iterator, Optional

from sandpool.v1 import executor_pb2 as pb

from . import convert
from .retry import RetryPolicy, retryable_status, retryable_verdict
from .types import EvaluateRequest, EvaluateResult


class Source:
    """The requests of one evaluate_many call, numbered, shared by its streams."""

    def __init__(self, requests: Iterator[EvaluateRequest]):
        self.requests = iter(requests)
        self.next_index = 0
        self.exhausted = False
        # An exception raised by the caller's iterator, re-raised to the caller (not lost in gRPC's thread).
        self.error: Optional[BaseException] = None
        self.lock = threading.Lock()

    def take(self) -> Optional[tuple[int, EvaluateRequest]]:
        """The next request and its index, or None when there are no more."""
        with self.lock:
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
            return i, r


class StreamState:
    """Pending requests, the resend queue and attempt counts of one stream of an evaluate_many call."""

    def __init__(self, source: Source, policy: RetryPolicy):
        self.source = source
        self.policy = policy
        self.pending: dict[int, EvaluateRequest] = {}
        self.in_flight: set[int] = set()
        self.attempts: dict[int, int] = {}
        self.resend: list[tuple[float, int]] = []  # (ready time, index), a heap
        self.lock = threading.Lock()

    def next_to_send(self, concurrency: int) -> tuple[str, Optional[pb.EvaluateRequest]]:
        """("send", msg), ("wait", None) or ("done", None: every request was answered)."""
        with self.lock:
            now = time.monotonic()
            if len(self.in_flight) >= concurrency:
                return ("done", None) if self.source.exhausted and not self.pending else ("wait", None)
            if self.resend and self.resend[0][0] <= now:
                _, i = heapq.heappop(self.resend)
            elif not self.source.exhausted:
                taken = self.source.take()
                if taken is None:
                    return ("done", None) if not self.pending else ("wait", None)
                i, r = taken
                self.pending[i] = r
            elif not self.pending:
                return "done", None
            else:
                return "wait", None
            self.attempts[i] = self.attempts.get(i, 0) + 1
            self.in_flight.add(i)
            return "send", convert.evaluate_request(self.pending[i], id=str(i))

    def on_response(self, m: pb.EvaluateResponse) -> Optional[EvaluateResult]:
        """The final result for this response, or None when it was queued again (or unknown)."""
        with self.lock:
            try:
                i = int(m.id)
            except ValueError:
                return None
            if i not in self.pending or i not in self.in_flight:
                return None
            self.in_flight.discard(i)
            n = self.attempts[i]
            retry = retryable_verdict(convert._verdict(m.verdict)) or (
                m.HasField("error") and _retryable_code(m.error.code)
            )
            if retry and n < self.policy.max_attempts:
                heapq.heappush(self.resend, (time.monotonic() + self.policy.backoff(n), i))
                return None
            r = self.pending.pop(i)
            return convert.evaluate_result(m, attempts=n, id=r.id)

    def on_stream_error(self, code) -> bool:
        """Queues every in-flight request again; False when the error or attempts forbid a retry."""
        if not retryable_status(code):
            return False
        return self.requeue_in_flight()

    def requeue_in_flight(self) -> bool:
        """Queues every in-flight request again (its stream ended); False when one ran out of attempts."""
        with self.lock:
            for i in sorted(self.in_flight):
                n = self.attempts[i]
                if n >= self.policy.max_attempts:
                    return False
                heapq.heappush(self.resend, (time.monotonic() + self.policy.backoff(n), i))
            self.in_flight.clear()
            return True

    def done(self) -> bool:
        """Every request was taken from the source and answered."""
        with self.lock:
            return self.source.exhausted and not self.pending


def _retryable_code(code: int) -> bool:
    c = convert.grpc_code(code)
    return c is not None and retryable_status(c)
