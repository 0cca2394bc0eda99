"""What is safe to retry, and how long to wait between attempts."""

from __future__ import annotations

import random
from dataclasses import dataclass

import grpc

from .types import Verdict

#: Statuses that say nothing about the code: the executor was away or full.
RETRYABLE_CODES = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.RESOURCE_EXHAUSTED})


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
    """True for UNAVAILABLE and RESOURCE_EXHAUSTED."""
    return code in RETRYABLE_CODES


def retryable_verdict(v: Verdict) -> bool:
    """True only for SANDBOX_ERROR: the executor failed, not the program. Verdicts about the code never retry."""
    return v == Verdict.SANDBOX_ERROR
