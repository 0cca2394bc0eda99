"""Typed requests and results: plain dataclasses, independent of the protobuf classes."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Optional, Union


class Verdict(enum.IntEnum):
    """What happened to a run or a judged completion (mirrors `sandpool.v1.Verdict`)."""

    VERDICT_UNSPECIFIED = 0
    OK = 1
    COMPILE_ERROR = 2
    RUNTIME_ERROR = 3
    TIME_LIMIT_EXCEEDED = 4
    WALL_TIME_LIMIT_EXCEEDED = 5
    MEMORY_LIMIT_EXCEEDED = 6
    OUTPUT_LIMIT_EXCEEDED = 7
    SANDBOX_ERROR = 8
    WRONG_ANSWER = 9
    SKIPPED = 10


class ComparisonMode(enum.IntEnum):
    """How stdio tests compare stdout (mirrors `sandpool.v1.Comparison.Mode`)."""

    MODE_UNSPECIFIED = 0
    EXACT = 1
    IGNORE_TRAILING_WHITESPACE = 2
    TOKENS = 3
    FLOAT = 4


class CachePolicy(enum.IntEnum):
    """How a request uses the executor's result cache (mirrors `sandpool.v1.CachePolicy`).

    The cache is off unless the executor enables it (`--result-cache-entries`).
    """

    # Answer from the cache when it holds the request; store the response when the rules allow.
    DEFAULT = 0
    # Always run; neither read nor store.
    BYPASS = 1
    # Like DEFAULT, and TIME/WALL_TIME/MEMORY_LIMIT_EXCEEDED are stored and answered too.
    INCLUDE_LIMITS = 2


@dataclass
class Limits:
    """Resource limits for one phase; 0 means the executor's default."""

    wall_time_ms: int = 0
    cpu_time_ms: int = 0
    memory_bytes: int = 0
    output_bytes: int = 0
    processes: int = 0
    file_size_bytes: int = 0


@dataclass
class File:
    """A file in the run's work dir (relative path)."""

    path: str
    content: bytes
    executable: bool = False


@dataclass
class ExecutorInfo:
    """Which executor ran the code, and with what."""

    name: str = ""
    version: str = ""
    isolation: str = ""
    toolchain: str = ""


@dataclass
class PhaseResult:
    """Outcome of one phase (compile or run)."""

    verdict: Verdict
    exit_code: int = 0
    signal: int = 0
    stdout: bytes = b""
    stderr: bytes = b""
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    wall_time_us: int = 0
    cpu_time_us: int = 0
    peak_memory_bytes: int = 0
    # Forked from the slot's pre-initialised interpreter (a warm start), not a fresh one.
    warm: bool = False


@dataclass
class ExecuteResult:
    """Response to `execute`; `attempts` counts the calls the client made (1 = no retry)."""

    verdict: Verdict
    compile: Optional[PhaseResult]
    run: Optional[PhaseResult]
    files: list[File]
    message: str
    executor: ExecutorInfo
    attempts: int = 1
    # Answered from the executor's result cache: nothing ran (times are those of the run that filled it).
    cached: bool = False

    @property
    def stdout(self) -> str:
        """The run's stdout, decoded (empty when it did not run)."""
        return self.run.stdout.decode("utf-8", "replace") if self.run else ""


@dataclass
class StdioCase:
    """One stdin / expected-stdout pair."""

    stdin: Union[str, bytes]
    expected_stdout: Union[str, bytes]


@dataclass
class StdioTests:
    """Tests that feed stdin and compare stdout."""

    cases: list[StdioCase]
    mode: ComparisonMode = ComparisonMode.MODE_UNSPECIFIED
    abs_tol: float = 0.0
    rel_tol: float = 0.0


@dataclass
class FunctionCase:
    """One call: JSON array of arguments, JSON of the expected return value."""

    arguments_json: str
    expected_json: str


@dataclass
class FunctionCallTests:
    """Tests that call `fn_name` and compare its JSON result."""

    fn_name: str
    cases: list[FunctionCase]
    json_input: bool = False


@dataclass
class AssertTests:
    """HumanEval (`entry_point`) or MultiPL-E (`stop_tokens`) style test code."""

    test_code: str
    entry_point: str = ""
    stop_tokens: list[str] = field(default_factory=list)
    # Put before the completion and never cut by stop_tokens (MultiPL-E's prompt).
    prompt: str = ""


Tests = Union[StdioTests, FunctionCallTests, AssertTests]


@dataclass
class EvaluateOptions:
    """Judging options; defaults are the executor's."""

    compile_limits: Optional[Limits] = None
    run_limits: Optional[Limits] = None
    total_timeout_ms: int = 0
    run_all_cases: bool = False
    parallelism: int = 0
    omit_test_io: bool = False
    raw_code: bool = False
    files: list[File] = field(default_factory=list)
    # The language prelude for assert tests: None = the executor's default (--assert-prelude),
    # False = none (reference-harness parity), True = always.
    prelude: Optional[bool] = None
    # Run every test from a fresh interpreter even where the language has warm starts.
    cold_start: bool = False


class Priority(enum.IntEnum):
    """How soon a request is served beside others waiting on an executor (mirrors
    `sandpool.v1.Priority`; docs/tenants.md). Priorities share slots 16 : 4 : 1.
    A string ("interactive", "normal", "batch") is accepted wherever a Priority is."""

    # The tenant's default: normal, or its highest allowed priority if that is lower.
    UNSPECIFIED = 0
    # Someone waits on the answer now: RL reward calls, agent turns.
    INTERACTIVE = 1
    NORMAL = 2
    # Sweeps and nightly benchmarks.
    BATCH = 3


@dataclass
class EvaluateRequest:
    """One completion to judge against `tests`."""

    language: str
    completion: str
    tests: Tests
    id: str = ""
    special_judge_language: str = ""
    special_judge_code: str = ""
    options: Optional[EvaluateOptions] = None
    cache: CachePolicy = CachePolicy.DEFAULT
    # Where its runs wait for a slot; None: the client's default (Client(priority=...)).
    priority: Optional[Union[Priority, str]] = None


@dataclass
class TestResult:
    """Outcome of one test of a judged completion."""

    __test__ = False  # not a pytest test class

    index: int
    passed: bool
    verdict: Verdict
    run: Optional[PhaseResult]
    input: bytes
    expected: bytes
    message: str
    #: A limit decided this test (skipped at total_timeout, a special judge at its limits),
    #: not the program's output alone: it may differ under other limits.
    limit_ended: bool = False


@dataclass
class EvaluateResult:
    """Response to `evaluate`; `error` is set (and `verdict` unspecified) when the request was rejected."""

    id: str
    accepted: bool
    verdict: Verdict
    tests: list[TestResult]
    extracted_code: str
    full_code: str
    compile: Optional[PhaseResult]
    message: str
    executor: ExecutorInfo
    error: Optional["RequestError"] = None
    attempts: int = 1
    # Answered from the executor's result cache: nothing ran.
    cached: bool = False


@dataclass
class RequestError:
    """Why the executor rejected a request: a gRPC status code (name) and message."""

    code: str
    message: str
