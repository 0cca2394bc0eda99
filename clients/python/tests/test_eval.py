"""`sandpool.eval` holds the benchmark helpers; their old homes work, with a warning, for one release."""

from __future__ import annotations

import importlib
import sys
import warnings

import pytest
import sandpool
import sandpool.eval

#: The names `sandpool` exported before the move: each must still resolve there.
MOVED = (
    "detect_format humaneval_path humaneval_request mean_pass_at_k pass_at_k read_jsonl read_problems"
    " record_request record_requests"
).split()


@pytest.mark.parametrize("name", MOVED)
def test_a_top_level_name_still_works_and_warns(name: str) -> None:
    with pytest.warns(DeprecationWarning, match=f"sandpool.eval.{name}"):
        assert getattr(sandpool, name) is getattr(sandpool.eval, name)


@pytest.mark.parametrize("old", ["datasets", "metrics"])
def test_an_old_module_is_the_new_one_and_warns(monkeypatch: pytest.MonkeyPatch, old: str) -> None:
    new = importlib.import_module(f"sandpool.eval.{old}")
    monkeypatch.delitem(sys.modules, f"sandpool.{old}", raising=False)
    with pytest.warns(DeprecationWarning, match=f"sandpool.eval.{old}"):
        assert importlib.import_module(f"sandpool.{old}") is new
    # Every name resolves, private ones included.
    assert all(getattr(sys.modules[f"sandpool.{old}"], n) is getattr(new, n) for n in dir(new))


def test_the_package_imports_without_warnings() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ns: dict = {}
        exec("from sandpool import *", ns)
        assert "Client" in ns and "pass_at_k" not in ns
        from sandpool.eval import format_request, pass_at_k  # noqa: F401
    with pytest.raises(AttributeError):
        sandpool.no_such_name  # noqa: B018
