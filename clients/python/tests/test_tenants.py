"""Tenants and priorities from the client (docs/tenants.md), against real executors with a
tenants file: the priority reaches the executor, a refused one is PermissionDenied, and one
tenant's requests spread evenly over every executor of a pool, so that per-pod fairness
adds up across pods."""

from __future__ import annotations

import re
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from sandpool import Client, EvaluateRequest, Priority, StdioCase, StdioTests
from sandpool.errors import PermissionDenied

from conftest import free_port

RL = "rl-token-0123456789abcdef"
SWEEPS = "sweeps-token-0123456789abcdef"


def tenants_file(tmp_path: Path) -> Path:
    f = tmp_path / "tenants.toml"
    f.write_text(
        f'[[tenant]]\nname = "rl"\ntoken = "{RL}"\nweight = 3\n\n'
        f'[[tenant]]\nname = "sweeps"\ntoken = "{SWEEPS}"\nmax_priority = "batch"\n'
    )
    return f


def admitted(metrics_port: int, tenant: str, priority: str) -> float:
    """`sandpool_tenant_admitted_total{tenant, priority}` on one executor."""
    body = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10).read().decode()
    total = 0.0
    for line in body.splitlines():
        if line.startswith("sandpool_tenant_admitted_total{") and f'tenant="{tenant}"' in line:
            if f'priority="{priority}"' in line:
                total += float(line.rsplit(" ", 1)[1])
    return total


def start(make_executor, name: str, tmp_path: Path) -> tuple:
    port = free_port()
    e = make_executor(
        name,
        env={"SANDPOOL_TENANTS_FILE": str(tenants_file(tmp_path))},
        args=["--metrics-listen", f"127.0.0.1:{port}"],
    )
    return e, port


def test_priorities_reach_the_executor_and_a_refused_one_is_permission_denied(make_executor, tmp_path) -> None:
    e, metrics = start(make_executor, "tenants-one", tmp_path)
    with Client(e.address, token=RL, priority="interactive") as c:
        assert c.execute("python", "print(1)").stdout == "1\n"
        assert c.capabilities().tenant.name == "rl"
        req = EvaluateRequest(
            language="python", completion="print(input())", tests=StdioTests([StdioCase("7\n", "7\n")])
        )
        assert c.evaluate(req).accepted
        assert c.execute("python", "print(2)", priority=Priority.BATCH).stdout == "2\n"
    assert admitted(metrics, "rl", "interactive") == 2.0
    assert admitted(metrics, "rl", "batch") == 1.0
    with Client(e.address, token=SWEEPS) as c:
        # Unset: the tenant's default, here its highest, batch.
        assert c.execute("python", "print(3)").stdout == "3\n"
        with pytest.raises(PermissionDenied, match="sweeps"):
            c.execute("python", "print(4)", priority="normal")
    assert admitted(metrics, "sweeps", "batch") == 1.0
    with pytest.raises(ValueError, match="priority"):
        Client(e.address, priority="urgent")


def test_one_tenants_requests_spread_evenly_over_every_executor(make_executor, tmp_path) -> None:
    pool = [start(make_executor, f"tenants-{i}", tmp_path) for i in range(3)]
    target = "ipv4:" + ",".join(e.address for e, _ in pool)
    n = 60
    with Client(target, token=RL, priority="batch") as c:
        # Warm every subchannel first: round_robin picks only connected ones, so a burst sent
        # while one still connects leans on the others (a loaded run saw [18, 17, 25]).
        for _ in range(30):
            if all(admitted(port, "rl", "batch") > 0 for _, port in pool):
                break
            assert c.execute("python", "print(0)").stdout == "0\n"
        else:
            pytest.fail("an executor of the pool was never picked")
        before = [admitted(port, "rl", "batch") for _, port in pool]
        # Then a burst from several threads, as a sweep would send it.
        with ThreadPoolExecutor(8) as ex:
            outs = list(ex.map(lambda i: c.execute("python", f"print({i})").stdout, range(n)))
    assert sorted(int(o) for o in outs) == list(range(n))
    per_pod = [admitted(port, "rl", "batch") - b for (_, port), b in zip(pool, before)]
    assert sum(per_pod) == n
    # round_robin per call: each executor gets its third, give or take a few.
    assert all(abs(k - n / 3) <= 4 for k in per_pod), per_pod
    assert re.fullmatch(r"ipv4:[0-9.:,]+", target)
