"""Conversion between the typed dataclasses and the generated protobuf messages."""

from __future__ import annotations

from typing import Optional, Union, cast

import grpc

from sandpool.v1 import executor_pb2 as pb

from .types import (
    AssertTests,
    CachePolicy,
    EvaluateRequest,
    EvaluateResult,
    ExecuteResult,
    ExecutorInfo,
    File,
    FunctionCallTests,
    Limits,
    PhaseResult,
    Priority,
    RequestError,
    StdioTests,
    TestResult,
    Verdict,
)


def _bytes(v: Union[str, bytes]) -> bytes:
    return v.encode() if isinstance(v, str) else v


def limits_pb(lim: Optional[Limits]) -> Optional[pb.Limits]:
    """Limits message, or None to leave the field unset."""
    if lim is None:
        return None
    return pb.Limits(
        wall_time_ms=lim.wall_time_ms,
        cpu_time_ms=lim.cpu_time_ms,
        memory_bytes=lim.memory_bytes,
        output_bytes=lim.output_bytes,
        processes=lim.processes,
        file_size_bytes=lim.file_size_bytes,
    )


def file_pb(f: File) -> pb.File:
    """File message."""
    return pb.File(path=f.path, content=_bytes(f.content), executable=f.executable)


def priority_value(p: Optional[Union[Priority, str]]) -> int:
    """The proto value of a priority given as a Priority, its name, or None (unspecified)."""
    if p is None:
        return 0
    if isinstance(p, str):
        name = p.strip().upper().removeprefix("PRIORITY_")
        if name not in Priority.__members__:
            raise ValueError(f"priority: {p!r} is not one of interactive, normal, batch")
        return int(Priority[name])
    return int(Priority(p))


def execute_request(
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
) -> pb.ExecuteRequest:
    """ExecuteRequest message from keyword arguments."""
    return pb.ExecuteRequest(
        language=language,
        code=code,
        stdin=_bytes(stdin),
        files=[file_pb(f) for f in files or []],
        limits=limits_pb(limits),
        compile_limits=limits_pb(compile_limits),
        args=args or [],
        fetch_files=fetch_files or [],
        request_id=request_id,
        cache=cast("pb.CachePolicy", int(cache)),
        cold_start=cold_start,
        priority=cast("pb.Priority", priority_value(priority)),
    )


def evaluate_request(r: EvaluateRequest, id: Optional[str] = None) -> pb.EvaluateRequest:
    """EvaluateRequest message; `id` overrides `r.id` (streams tag requests by index)."""
    m = pb.EvaluateRequest(
        id=r.id if id is None else id,
        language=r.language,
        completion=r.completion,
        cache=cast("pb.CachePolicy", int(r.cache)),
        priority=cast("pb.Priority", priority_value(r.priority)),
    )
    t = r.tests
    if isinstance(t, StdioTests):
        m.stdio.CopyFrom(
            pb.StdioTests(
                cases=[pb.StdioCase(stdin=_bytes(c.stdin), expected_stdout=_bytes(c.expected_stdout)) for c in t.cases]
            )
        )
        # Only a comparison that says something: an empty one is the judge's default anyway, and
        # leaving it unset sends what the CLI sends (the same bytes, the same result-cache key).
        if int(t.mode) or t.abs_tol or t.rel_tol:
            m.stdio.comparison.CopyFrom(
                pb.Comparison(mode=cast("pb.Comparison.Mode", int(t.mode)), abs_tol=t.abs_tol, rel_tol=t.rel_tol)
            )
    elif isinstance(t, FunctionCallTests):
        m.function_call.CopyFrom(
            pb.FunctionCallTests(
                fn_name=t.fn_name,
                cases=[
                    pb.FunctionCase(arguments_json=c.arguments_json, expected_json=c.expected_json) for c in t.cases
                ],
                json_input=t.json_input,
            )
        )
    elif isinstance(t, AssertTests):
        getattr(m, "assert").CopyFrom(
            pb.AssertTests(
                test_code=t.test_code, entry_point=t.entry_point, stop_tokens=t.stop_tokens, prompt=t.prompt
            )
        )
    else:
        raise TypeError(f"tests: expected StdioTests, FunctionCallTests or AssertTests, got {type(t).__name__}")
    if r.special_judge_code:
        m.special_judge.CopyFrom(pb.SpecialJudge(language=r.special_judge_language, code=r.special_judge_code))
    o = r.options
    if o is not None:
        m.options.CopyFrom(
            pb.EvaluateOptions(
                compile_limits=limits_pb(o.compile_limits),
                run_limits=limits_pb(o.run_limits),
                total_timeout_ms=o.total_timeout_ms,
                run_all_cases=o.run_all_cases,
                parallelism=o.parallelism,
                omit_test_io=o.omit_test_io,
                raw_code=o.raw_code,
                files=[file_pb(f) for f in o.files],
                prelude=cast("pb.EvaluateOptions.Prelude", {None: 0, True: 1, False: 2}[o.prelude]),
                cold_start=o.cold_start,
            )
        )
    return m


def _verdict(v: int) -> Verdict:
    try:
        return Verdict(v)
    except ValueError:  # a newer executor's verdict: keep the value visible as unspecified
        return Verdict.VERDICT_UNSPECIFIED


def phase(m: pb.PhaseResult) -> PhaseResult:
    """PhaseResult from its message."""
    return PhaseResult(
        verdict=_verdict(m.verdict),
        exit_code=m.exit_code,
        signal=m.signal,
        stdout=m.stdout,
        stderr=m.stderr,
        stdout_truncated=m.stdout_truncated,
        stderr_truncated=m.stderr_truncated,
        wall_time_us=m.wall_time_us,
        cpu_time_us=m.cpu_time_us,
        peak_memory_bytes=m.peak_memory_bytes,
        warm=m.warm,
    )


def info(m: pb.ExecutorInfo) -> ExecutorInfo:
    """ExecutorInfo from its message."""
    return ExecutorInfo(name=m.name, version=m.version, isolation=m.isolation, toolchain=m.toolchain)


def execute_result(m: pb.ExecuteResponse, attempts: int = 1) -> ExecuteResult:
    """ExecuteResult from its message."""
    return ExecuteResult(
        verdict=_verdict(m.verdict),
        compile=phase(m.compile) if m.HasField("compile") else None,
        run=phase(m.run) if m.HasField("run") else None,
        files=[File(path=f.path, content=f.content, executable=f.executable) for f in m.files],
        message=m.message,
        executor=info(m.executor),
        attempts=attempts,
        cached=m.cached,
    )


def evaluate_result(m: pb.EvaluateResponse, attempts: int = 1, id: Optional[str] = None) -> EvaluateResult:
    """EvaluateResult from its message; `id` replaces the echoed id (streams tag by index)."""
    error = None
    if m.HasField("error"):
        error = RequestError(code=grpc_code_name(m.error.code), message=m.error.message)
    return EvaluateResult(
        id=m.id if id is None else id,
        accepted=m.accepted,
        verdict=_verdict(m.verdict),
        tests=[
            TestResult(
                index=t.index,
                passed=t.passed,
                verdict=_verdict(t.verdict),
                run=phase(t.run) if t.HasField("run") else None,
                input=t.input,
                expected=t.expected,
                message=t.message,
                limit_ended=t.limit_ended,
            )
            for t in m.tests
        ],
        extracted_code=m.extracted_code,
        full_code=m.full_code,
        compile=phase(m.compile) if m.HasField("compile") else None,
        message=m.message,
        executor=info(m.executor),
        error=error,
        attempts=attempts,
        cached=m.cached,
    )


def grpc_code_name(code: int) -> str:
    """Name of a numeric gRPC status code, e.g. 3 -> "INVALID_ARGUMENT"."""
    for c in grpc.StatusCode:
        if c.value[0] == code:
            return c.name
    return str(code)


def grpc_code(code: int) -> Optional[grpc.StatusCode]:
    """grpc.StatusCode for a numeric code, None when unknown."""
    for c in grpc.StatusCode:
        if c.value[0] == code:
            return c
    return None
