"""Sandpool's Python clients: run and judge untrusted code on a Sandpool executor pool.

The map: `Client` (client.py) and `AsyncClient` (aio.py) make the calls, `Session` (session.py)
holds a stateful sandbox, `types` are the requests and results, `errors` what a failed call
raises, `retry` what is resent; `eval` holds the benchmark helpers (datasets, pass@k).
"""

from __future__ import annotations

import importlib
import warnings
from typing import Any

from . import errors, eval
from .aio import AsyncClient
from .client import Client
from .errors import (
    CallError,
    DeadlineExceeded,
    InvalidArgument,
    PermissionDenied,
    RequestRejected,
    SandpoolError,
    SessionLost,
    SessionReset,
    Unauthenticated,
    Unavailable,
)
from .retry import RetryPolicy
from .session import AsyncSession, Session, SessionLimits, SessionResult
from .target import default_target, pool_target
from .types import (
    AssertTests,
    CachePolicy,
    ComparisonMode,
    EvaluateOptions,
    EvaluateRequest,
    EvaluateResult,
    ExecuteResult,
    ExecutorInfo,
    File,
    FunctionCallTests,
    FunctionCase,
    Limits,
    PhaseResult,
    Priority,
    RequestError,
    StdioCase,
    StdioTests,
    TestResult,
    Verdict,
)

__all__ = [
    "AssertTests",
    "AsyncClient",
    "AsyncSession",
    "CachePolicy",
    "Priority",
    "CallError",
    "Client",
    "ComparisonMode",
    "DeadlineExceeded",
    "EvaluateOptions",
    "EvaluateRequest",
    "EvaluateResult",
    "ExecuteResult",
    "ExecutorInfo",
    "File",
    "FunctionCallTests",
    "FunctionCase",
    "InvalidArgument",
    "Limits",
    "PermissionDenied",
    "PhaseResult",
    "RequestError",
    "RequestRejected",
    "RetryPolicy",
    "SandpoolError",
    "Session",
    "SessionLimits",
    "SessionLost",
    "SessionReset",
    "SessionResult",
    "StdioCase",
    "StdioTests",
    "TestResult",
    "Unauthenticated",
    "Unavailable",
    "Verdict",
    "default_target",
    "errors",
    "pool_target",
]

#: Names that moved to `sandpool.eval`; `sandpool.<name>` still works, with a warning, for one release.
_MOVED_TO_EVAL = frozenset(
    {
        "detect_format",
        "humaneval_path",
        "humaneval_request",
        "mean_pass_at_k",
        "pass_at_k",
        "read_jsonl",
        "read_problems",
        "record_request",
        "record_requests",
    }
)


def __getattr__(name: str) -> Any:
    if name in _MOVED_TO_EVAL:
        warnings.warn(
            f"sandpool.{name} moved to sandpool.eval.{name}; the old name goes in the next release",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(eval, name)
    if name in ("datasets", "metrics"):  # the old modules, imported on first use (they warn)
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

