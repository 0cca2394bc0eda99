"""Pieces that need no executor: pass@k, the verdict enum against the proto, record shapes."""

import itertools
import math

import grpc
import pytest
import sandpool
from sandpool import AssertTests, StdioTests, Verdict, pass_at_k
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
    assert sandpool.mean_pass_at_k(outcomes, 1) == pytest.approx(0.25)


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
    he = sandpool.record_request(
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
    mbpp = sandpool.record_request({"task_id": 2, "code": "x=1", "test_list": ["assert x == 1"]})
    assert isinstance(mbpp.tests, AssertTests) and "assert x == 1" in mbpp.tests.test_code and mbpp.id == "2"
    stdio = sandpool.record_request({"task_id": "s", "code": "print(1)", "inputs": ["a"], "outputs": ["1"]})
    assert isinstance(stdio.tests, StdioTests) and stdio.tests.cases[0].expected_stdout == "1"
    with pytest.raises(ValueError, match="tests"):
        sandpool.record_request({"task_id": "x", "code": "print(1)"})
