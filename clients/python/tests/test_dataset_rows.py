"""The dataset rows of tests/data/dataset_rows.json become the requests written there.

One file for the client's rules (`sandpool.datasets`) and the CLI's (`sandpool eval`, whose
test cli/src/eval/shared_rows.rs reads it too), so the two cannot drift apart unseen. Requests
are compared in the proto3 JSON mapping (`MessageToDict`), without `id` (the client names tasks,
the CLI numbers lines). A row whose `divergent.side` is "python" pins what the client sends
today instead, with the reason.
"""

import json
from pathlib import Path
from typing import Any

import pytest
from google.protobuf.json_format import MessageToDict
from sandpool.convert import evaluate_request as evaluate_request_pb
from sandpool.datasets import record_requests

ROWS = json.loads((Path(__file__).resolve().parents[3] / "tests" / "data" / "dataset_rows.json").read_text(encoding="utf-8"))


def expected(row: dict[str, Any]) -> dict[str, Any]:
    divergent = row.get("divergent")
    return divergent["request"] if divergent and divergent["side"] == "python" else row["request"]


@pytest.mark.parametrize("row", ROWS, ids=[r["name"] for r in ROWS])
def test_row_becomes_its_request(row: dict[str, Any]) -> None:
    reqs = record_requests(row["row"], format=row.get("format", "auto"))
    assert len(reqs) == 1, "one completion per shared row"
    got = MessageToDict(evaluate_request_pb(reqs[0]))
    got.pop("id", None)
    assert got == expected(row)


def test_every_dataset_shape_is_covered() -> None:
    shapes = {r["name"].split(":")[0] for r in ROWS}
    assert shapes >= {"humaneval", "mbxp", "humaneval-x", "multipl-e", "mbpp", "livecodebench", "stdio"}
