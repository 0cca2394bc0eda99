"""Unary calls spread per call by least outstanding (sandpool/spread.py), and follow executors that come and go.

The rule itself is checked on a `Spread` with stand-in channels and a resolver the test moves; the rest on
real executors: one stopped and one added while calls are in flight, with no call failed.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

from sandpool import Client, RetryPolicy, Verdict
from sandpool.spread import Spread, addresses


class Chan:
    def __init__(self, address: str):
        self.address = address
        self.closed = False


def spread(found: list, target: str = "dns:///pool:1") -> Spread:
    def close(ch: Chan) -> None:
        ch.closed = True

    return Spread(target, Chan, lambda ch: ch, close, resolve=lambda t: list(found), resolve_every_s=0.0)


def test_fewest_outstanding_wins_and_ties_take_turns() -> None:
    s = spread(["a:1", "b:1", "c:1"])
    first = [s.pick() for _ in range(3)]
    assert sorted(m.address for m in first if m) == ["a:1", "b:1", "c:1"], "ties in turn: each once"
    for m in first[1:]:
        s.done(m)  # type: ignore[arg-type]
    # first[0] still holds a call: the next two go to the others.
    nxt = [s.pick() for _ in range(2)]
    assert all(m is not None and m is not first[0] for m in nxt)


def test_a_slow_executor_holds_only_what_it_serves() -> None:
    s = spread(["fast:1", "slow:1"])
    held = []
    for _ in range(200):
        m = s.pick()
        assert m is not None
        if m.address == "slow:1":
            held.append(m)  # never answers
        else:
            s.done(m)
    # round_robin would have given it 100; least outstanding gives it one.
    assert len(held) == 1


def test_refused_addresses_are_skipped_and_calls_go_elsewhere() -> None:
    s = spread(["a:1", "b:1"], target="ipv4:a:1,b:1")
    a, b = sorted(s.members(), key=lambda m: m.address)
    assert s.pick(tried=[b]) is a
    s.done(a, refused=True)
    for _ in range(5):
        m = s.pick()
        assert m is b
        s.done(m)
    # With every other tried, the refused one is still offered rather than nothing.
    assert s.pick(tried=[b]) is a


def test_dns_targets_follow_executors_that_come_and_go() -> None:
    found = ["a:1", "b:1"]
    s = spread(found)
    a = next(m for m in s.members() if m.address == "a:1")
    held = s.pick(tried=[next(m for m in s.members() if m.address == "b:1")])
    assert held is a
    found[:] = ["b:1", "c:1"]
    assert s.refresh()
    assert sorted(m.address for m in s.members()) == ["b:1", "c:1"]
    assert not a.channel.closed, "a call is still outstanding on the executor that went"
    s.done(a)
    assert a.channel.closed, "closed once its last call was answered"
    found[:] = []
    assert not s.refresh(), "an empty lookup keeps the executors there are"
    assert len(s.members()) == 2


def test_targets_that_name_several_executors() -> None:
    assert addresses("127.0.0.1:5") is None
    assert addresses("ipv4:127.0.0.1:1,127.0.0.2:2") == ["127.0.0.1:1", "127.0.0.2:2"]
    assert addresses("dns:///127.0.0.3:7") == ["127.0.0.3:7"]
    assert addresses("dns:///no-such-name.invalid:7") == []


PATIENT = RetryPolicy(max_attempts=8, initial_backoff_s=0.05, max_backoff_s=0.5)


def test_an_executor_stopped_and_one_added_mid_run_fail_no_call(make_executor) -> None:
    a = make_executor("spread-a", slots=1)
    b = make_executor("spread-b", slots=1)
    from conftest import Executor

    c = Executor("spread-c", slots=1)  # its address is in the list; it starts mid-run
    results: list = []
    lock = threading.Lock()
    stop_at, start_at = 15, 30
    changed = threading.Event()

    def one(i: int) -> None:
        r = client.execute("python", f"print({i})", timeout=120)
        with lock:
            results.append((i, r))

    def churn() -> None:
        deadline = time.monotonic() + 120
        while len(results) < stop_at and time.monotonic() < deadline:
            time.sleep(0.01)
        a.stop()  # drains: what it holds is answered, then it refuses connections
        while len(results) < start_at and time.monotonic() < deadline:
            time.sleep(0.01)
        c.start()
        changed.set()

    try:
        with Client(f"ipv4:{a.address},{b.address},{c.address}", retry=PATIENT) as client:
            t = threading.Thread(target=churn, daemon=True)
            t.start()
            i = 0
            with ThreadPoolExecutor(4) as pool:
                # Until c has answered a few (its channel reconnects after its backoff), at most 3 minutes.
                deadline = time.monotonic() + 180
                while time.monotonic() < deadline:
                    list(pool.map(one, range(i, i + 8)))
                    i += 8
                    by_c = sum(1 for _, r in results if r.executor.name == "spread-c")
                    if changed.is_set() and by_c >= 3:
                        break
            t.join()
    finally:
        c.close()
    bad = [(i, r.verdict, r.stdout) for i, r in results if r.verdict is not Verdict.OK or r.stdout != f"{i}\n"]
    assert not bad, bad
    assert len(results) == i, "every call answered"
    names = {r.executor.name for _, r in results}
    assert names == {"spread-a", "spread-b", "spread-c"}, names
    late = [r.executor.name for _, r in results[start_at + 8 :]]
    assert "spread-a" not in late, "nothing reached the stopped executor once it was gone"


def test_a_session_stays_on_its_executor(make_executor) -> None:
    a = make_executor("spread-s-a", slots=1)
    b = make_executor("spread-s-b", slots=1)
    with Client(f"ipv4:{a.address},{b.address}") as client:
        names = {client.execute("python", "pass").executor.name for _ in range(6)}
        assert names == {"spread-s-a", "spread-s-b"}, "stateless calls reach both"
        with client.session() as s:
            s.run("x = 41")
            r = s.run("print(x + 1)")
            assert r.stdout == "42\n", (r.verdict, r.message)
