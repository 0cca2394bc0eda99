"""What is safe to retry, and how long to wait between attempts."""

from __future__ import annotations

import random
from dataclasses import dataclass

import grpc

from .types import Verdict

#: What a call reports when its connection broke under it: the executor died or restarted, a proxy
#: reset the stream, or (grpc.aio) a send failed first and hid the real status behind INTERNAL
#: "Internal error from Core". The executor itself never answers with these, so they say nothing
#: about the request; judging has no side effects, so resending it is safe.
BROKEN_TRANSPORT_CODES = frozenset(
    {
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.INTERNAL,
        grpc.StatusCode.UNKNOWN,
        grpc.StatusCode.CANCELLED,
        grpc.StatusCode.ABORTED,
        grpc.StatusCode.DATA_LOSS,
    }
)

#: Back-pressure: the executor's queue was full, or it held its --max-inflight-bytes for others.
BACK_PRESSURE_CODES = frozenset({grpc.StatusCode.RESOURCE_EXHAUSTED})

#: Statuses that say nothing about the code: the executor was away, full, or the transport broke.
RETRYABLE_CODES = BROKEN_TRANSPORT_CODES | BACK_PRESSURE_CODES

#: Per-request errors inside a stream (`EvaluateResponse.error`) are the executor's own answers:
#: only "draining" and "queue full" are worth another try; the rest are about the request.
RETRYABLE_ITEM_CODES = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.RESOURCE_EXHAUSTED})


@dataclass
class RetryPolicy:
    """Exponential backoff with jitter; `max_attempts` counts the first call."""

    max_attempts: int = 6
    initial_backoff_s: float = 0.2
    max_backoff_s: float = 5.0
    multiplier: float = 2.0

    def backoff(self, attempt: int) -> float:
        """Seconds to wait after failed attempt number `attempt` (1-based): half fixed, half random."""
        d = min(self.max_backoff_s, self.initial_backoff_s * self.multiplier ** (attempt - 1))
        return d / 2 + random.uniform(0, d / 2)


def retryable_status(code: grpc.StatusCode) -> bool:
    """True when a call's status says its transport broke or the executor was full (`RETRYABLE_CODES`).

    Everything else refuses the call itself (INVALID_ARGUMENT, UNAUTHENTICATED, PERMISSION_DENIED,
    UNIMPLEMENTED, FAILED_PRECONDITION, ...) or is the caller's own deadline: retrying cannot help.
    """
    return code in RETRYABLE_CODES


def retryable_item_error(code: int) -> bool:
    """True for a stream item's `error` that is back-pressure or draining (UNAVAILABLE, RESOURCE_EXHAUSTED)."""
    return any(c.value[0] == code for c in RETRYABLE_ITEM_CODES)


def retryable_verdict(v: Verdict) -> bool:
    """True only for SANDBOX_ERROR: the executor failed, not the program. Verdicts about the code never retry."""
    return v == Verdict.SANDBOX_ERROR
