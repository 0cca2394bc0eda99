"""Pieces that need no executor: pass@k, the verdict enum against the proto, record shapes."""

import itertools
import math

import grpc
import pytest
import sandpool
from sandpool import AssertTests, FunctionCallTests, StdioTests, Verdict
from sandpool.convert import evaluate_request as evaluate_request_pb
from sandpool.eval import pass_at_k
from sandpool.v1 import executor_pb2 as pb


def brute_pass_at_k(n: int, c: int, k: int) -> float:
    """Fraction of k-subsets of n samples (c correct) holding at least one correct one."""
    samples = [True] * c + [False] * (n - c)
    subsets = list(itertools.combinations(range(n), k))
    return sum(any(samples[i] for i in s) for s in subsets) / len(subsets)


@pytest.mark.parametrize("n,c,k", [(5, 0, 1), (5, 1, 1), (5, 2, 3), (6, 3, 2), (7, 7, 4), (8, 1, 8), (10, 4, 5)])
def test_pass_at_k_matches_counting_subsets(n: int, c: int, k: int) -> None:
    assert pass_at_k(n, c, k) == pytest.approx(brute_pass_at_k(n, c, k))


def test_pass_at_k_large_n_matches_binomials() -> None:
    assert pass_at_k(200, 13, 10) == pytest.approx(1 - math.comb(187, 10) / math.comb(200, 10))


def test_pass_at_k_rejects_bad_arguments_naming_them() -> None:
    with pytest.raises(ValueError, match="^c:"):
        pass_at_k(3, 4, 1)
    with pytest.raises(ValueError, match="^k:"):
        pass_at_k(3, 1, 4)


def test_mean_pass_at_k_averages_tasks() -> None:
    outcomes = [("a", True), ("a", False), ("b", False), ("b", False)]
    assert sandpool.eval.mean_pass_at_k(outcomes, 1) == pytest.approx(0.25)


def test_verdict_enum_matches_the_proto() -> None:
    proto = {v.name: v.number for v in pb.Verdict.DESCRIPTOR.values}
    assert {v.name: v.value for v in Verdict} == proto


def test_zstd_is_refused_rather_than_faked() -> None:
    with pytest.raises(ValueError, match="zstd"):
        sandpool.Client("127.0.0.1:1", compression="zstd")
    with pytest.raises(ValueError, match="deflate"):
        sandpool.Client("127.0.0.1:1", compression="deflate")
    assert sandpool.target.compression("gzip") == grpc.Compression.Gzip


def test_pool_target_is_the_headless_service(monkeypatch: pytest.MonkeyPatch) -> None:
    assert sandpool.pool_target("gpu", "evals") == "dns:///gpu.evals.svc.cluster.local:50051"
    monkeypatch.delenv("SANDPOOL_TARGET", raising=False)
    monkeypatch.setenv("SANDPOOL_NAMESPACE", "rl")
    with sandpool.Client() as c:
        assert c.target == "dns:///sandpool.rl.svc.cluster.local:50051"
    monkeypatch.setenv("SANDPOOL_TARGET", "ipv4:127.0.0.1:1")
    assert sandpool.Client().target == "ipv4:127.0.0.1:1"


def test_record_shapes() -> None:
    he = sandpool.eval.record_request(
        {
            "task_id": "T/0",
            "prompt": "def f():\n",
            "test": "def check(c): pass",
            "entry_point": "f",
            "completion": "  return 1",
        }
    )
    assert isinstance(he.tests, AssertTests) and he.tests.entry_point == "f"
    assert he.completion == "def f():\n  return 1"
    mbpp = sandpool.eval.record_request({"task_id": 2, "code": "x=1", "test_list": ["assert x == 1"]})
    assert isinstance(mbpp.tests, AssertTests) and "assert x == 1" in mbpp.tests.test_code and mbpp.id == "2"
    stdio = sandpool.eval.record_request({"task_id": "s", "code": "print(1)", "inputs": ["a"], "outputs": ["1"]})
    assert isinstance(stdio.tests, StdioTests) and stdio.tests.cases[0].expected_stdout == "1"
    with pytest.raises(ValueError, match="tests"):
        sandpool.eval.record_request({"task_id": "x", "code": "print(1)"})


def test_benchmark_shapes_become_the_right_request_per_language() -> None:
    check = "def check(candidate):\n    assert candidate(1, 2) == 3\n"
    rows = {
        "humaneval": {"task_id": "HumanEval/0", "prompt": "def add(a, b):\n", "test": check, "entry_point": "add"},
        "mbxp-java": {"task_id": "MBJP/1", "language": "java", "prompt": "class A {\n", "test": "class Main {}", "entry_point": "add"},
        "mbxp-go": {"task_id": "MBGP/1", "language": "go", "prompt": "package main\n", "test": "func TestA(t *testing.T) {}", "entry_point": "Add"},
        "humaneval-x": {"task_id": "Rust/0", "prompt": "/* add */", "declaration": "use rand::Rng;\nfn add() -> i32 {\n", "test": "#[test] fn t() {}"},
        "multipl-e": {"name": "HumanEval_0_add", "language": "js", "prompt": "function add(a, b){\n", "tests": "test();", "stop_tokens": ["\nfunction "]},
        "lcb": {"question_id": "q", "public_test_cases": '[{"input": "1\\n2", "output": "3", "testtype": "functional"}]', "metadata": '{"func_name": "addTwo"}'},
    }
    formats = {k: sandpool.eval.detect_format(r) for k, r in rows.items()}
    assert formats == {
        "humaneval": "humaneval",
        "mbxp-java": "humaneval",
        "mbxp-go": "humaneval",
        "humaneval-x": "humaneval-x",
        "multipl-e": "multipl-e",
        "lcb": "livecodebench",
    }
    he = sandpool.eval.record_request({**rows["humaneval"], "completion": "    return a + b\n"})
    assert he.tests.entry_point == "add" and he.language == "python"
    # The test calls check itself: no second call.
    called = sandpool.eval.record_request({**rows["humaneval"], "test": check + "check(add)\n", "completion": "x"})
    assert called.tests.entry_point == ""
    java = sandpool.eval.record_request({**rows["mbxp-java"], "completion": "}"})
    assert (java.language, java.tests.entry_point, java.completion) == ("java", "", "class A {\n}")
    assert sandpool.eval.record_request({**rows["mbxp-go"], "completion": "}"}).language == "go_test"
    rust = sandpool.eval.record_request({**rows["humaneval-x"], "completion": "    1\n}\n"})
    assert (rust.language, rust.completion) == ("rust_test", "fn add() -> i32 {\n\n    1\n}\n")
    mpe = sandpool.eval.record_requests({**rows["multipl-e"], "completions": ["  return a + b;\n}\n", "  return 0;\n}\n"]})
    assert [r.id for r in mpe] == ["HumanEval_0_add.0", "HumanEval_0_add.1"]
    assert mpe[0].language == "js" and mpe[0].tests.prompt == "function add(a, b){\n"
    assert mpe[0].tests.stop_tokens == ["\nfunction "] and mpe[0].completion == "  return a + b;\n}\n"
    lcb = sandpool.eval.record_request({**rows["lcb"], "completion": "class Solution: ..."}, prelude=False)
    assert isinstance(lcb.tests, FunctionCallTests) and lcb.tests.fn_name == "addTwo" and lcb.tests.json_input
    # The typed fields reach the protobuf (whose oneof member `assert` is a Python keyword).
    m = evaluate_request_pb(mpe[0])
    assert getattr(m, "assert").prompt == "function add(a, b){\n"
    assert evaluate_request_pb(lcb).options.prelude == 2
    assert sandpool.eval.record_request({**rows["humaneval"], "completion": "x"}, prelude=True).options.prelude is True
    with pytest.raises(ValueError, match="use record_requests"):
        sandpool.eval.record_request({**rows["multipl-e"], "completions": ["a", "b"]})


def test_livecodebench_private_cases_are_decoded() -> None:
    import base64
    import json
    import pickle
    import zlib

    private = base64.b64encode(zlib.compress(pickle.dumps(json.dumps([{"input": "5\n", "output": "10\n", "testtype": "stdin"}])))).decode()
    r = sandpool.eval.record_request(
        {"question_id": "q", "public_test_cases": '[{"input": "2\\n", "output": "4\\n", "testtype": "stdin"}]', "private_test_cases": private, "completion": "x"}
    )
    assert isinstance(r.tests, StdioTests) and [c.stdin for c in r.tests.cases] == ["2\n", "5\n"]
