"""Sandpool's Python clients: run and judge untrusted code on a Sandpool executor pool."""

from .aio import AsyncClient
from .client import Client
from .datasets import (
    detect_format,
    humaneval_path,
    humaneval_request,
    read_jsonl,
    read_problems,
    record_request,
    record_requests,
)
from .metrics import mean_pass_at_k, pass_at_k
from .retry import RetryPolicy
from .session import AsyncSession, Session, SessionLimits, SessionLost, SessionResult
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
    "Client",
    "ComparisonMode",
    "EvaluateOptions",
    "EvaluateRequest",
    "EvaluateResult",
    "ExecuteResult",
    "ExecutorInfo",
    "File",
    "FunctionCallTests",
    "FunctionCase",
    "Limits",
    "PhaseResult",
    "RequestError",
    "RetryPolicy",
    "Session",
    "SessionLimits",
    "SessionLost",
    "SessionResult",
    "StdioCase",
    "StdioTests",
    "TestResult",
    "Verdict",
    "default_target",
    "detect_format",
    "humaneval_path",
    "humaneval_request",
    "mean_pass_at_k",
    "pass_at_k",
    "pool_target",
    "read_jsonl",
    "read_problems",
    "record_request",
    "record_requests",
]
