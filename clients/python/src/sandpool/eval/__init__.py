"""Benchmark helpers: dataset rows into requests, and pass@k of the results.

They sit apart from the clients because only benchmark harnesses need them: the clients judge
any request; these know HumanEval, MBPP, MultiPL-E, LiveCodeBench and the like
(docs/benchmarks.md), by the same rules as `sandpool eval`.

Until the next release `sandpool.datasets`, `sandpool.metrics` and the names at the package's
top level (`sandpool.pass_at_k`, ...) still work, with a DeprecationWarning.
"""

from .datasets import (
    FORMATS,
    HUMANEVAL_X,
    Record,
    completions,
    detect_format,
    format_request,
    humaneval_path,
    humaneval_request,
    python_check_uncalled,
    read_jsonl,
    read_problems,
    record_request,
    record_requests,
)
from .metrics import mean_pass_at_k, pass_at_k

__all__ = [
    "FORMATS",
    "HUMANEVAL_X",
    "Record",
    "completions",
    "detect_format",
    "format_request",
    "humaneval_path",
    "humaneval_request",
    "mean_pass_at_k",
    "pass_at_k",
    "python_check_uncalled",
    "read_jsonl",
    "read_problems",
    "record_request",
    "record_requests",
]
