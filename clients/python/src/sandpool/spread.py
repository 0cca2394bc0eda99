"""Unary calls spread per call over every executor a target names, to the one with the fewest outstanding.

gRPC's `round_robin` sends every pod its turn: a slow or stuck pod gets as many calls as a fast one, and a
client with a fixed number of workers ends up with most of them waiting on it. Here each executor has a
channel of its own and a count of the calls sent to it and not yet answered; a call goes to the lowest
count (ties in turn), so a slow pod holds only what it can serve. A `dns:///` target is resolved again
every few seconds and at once when an executor refuses a connection: pods that came are used, pods that
went are dropped (their channels closed once their calls are answered). An address that refused a
connection is skipped for a while, and the call that met the refusal goes to another at once: it never
ran. Sessions do not go through here: they go to the executor that holds them (`session.route`).
"""

from __future__ import annotations

import socket
import threading
import time
from typing import Callable, Generic, Optional, TypeVar

import grpc

from .target import channel_options

C = TypeVar("C")

#: How often a `dns:` target is resolved again (seconds).
RESOLVE_EVERY_S = 5.0

#: How long an address that refused a connection is skipped (seconds), unless nothing else is left.
DOWN_S = 2.0


def member_options(address: str) -> list[tuple[str, object]]:
    """Options of one executor's channel: pick_first, and a short reconnect backoff, so a pod that comes
    back (or an address whose pod starts late) is used within seconds, not after gRPC's two minutes."""
    return channel_options(address, "pick_first") + [
        ("grpc.initial_reconnect_backoff_ms", 250),
        ("grpc.max_reconnect_backoff_ms", 2000),
    ]


def addresses(target: str) -> Optional[list[str]]:
    """The executors' `host:port`s a target names; None when it names one host (gRPC's own channel serves it).

    `dns:///name:port` (every address the name resolves to, e.g. a headless Service's pods; an empty list
    when it resolves to nothing yet), `ipv4:a:p,b:p` / `ipv6:...`, or `a:p,b:p`.
    """
    t = target.strip()
    if t.startswith("dns:"):
        rest = t[4:]
        name = rest[3:] if rest.startswith("///") else (rest if not rest.startswith("/") else "")
        if not name or ":" not in name:
            raise ValueError(f"target {target!r}: expected dns:///host:port")
        host, port = name.rsplit(":", 1)
        try:
            infos = socket.getaddrinfo(host.strip("[]"), int(port), type=socket.SOCK_STREAM)
        except (socket.gaierror, UnicodeError):
            return []
        found = set()
        for family, _, _, _, sockaddr in infos:
            ip, p = str(sockaddr[0]), int(sockaddr[1])
            found.add(f"[{ip}]:{p}" if family == socket.AF_INET6 else f"{ip}:{p}")
        return sorted(found)
    for scheme in ("ipv4:", "ipv6:"):
        if t.startswith(scheme):
            t = t[len(scheme) :]
    if "," not in t:
        return None
    return [a.strip() for a in t.split(",") if a.strip()]


def refused_unrun(e: grpc.RpcError) -> bool:
    """True when the call never reached an executor that could have run it: no connection could be made.

    A queue-full RESOURCE_EXHAUSTED also ran nothing, but the client's retry policy already resends those
    after a pause; an UNAVAILABLE from a broken connection may come after the run started.
    """
    if e.code() != grpc.StatusCode.UNAVAILABLE:
        return False
    details = (e.details() or "").lower()
    return any(s in details for s in ("failed to connect", "connection refused", "connect failed", "no route"))


class Member(Generic[C]):
    """One executor: its channel, stub and outstanding calls."""

    def __init__(self, address: str, channel: C, stub: object):
        self.address = address
        self.channel = channel
        self.stub = stub
        self.outstanding = 0
        self.down_until = 0.0
        self.gone = False


class Spread(Generic[C]):
    """The executors of one target, with their outstanding calls; thread-safe.

    `open_channel(address)` makes a channel, `make_stub(channel)` its stub, `close_channel(channel)` ends one
    (for grpc.aio, a coroutine function is fine: its result is handed to `on_close`). `resolve` is
    `addresses` by default (tests give their own).
    """

    def __init__(
        self,
        target: str,
        open_channel: Callable[[str], C],
        make_stub: Callable[[C], object],
        close_channel: Callable[[C], object],
        resolve: Callable[[str], Optional[list[str]]] = addresses,
        resolve_every_s: float = RESOLVE_EVERY_S,
    ):
        self.target = target
        self._open = open_channel
        self._stub = make_stub
        self._close = close_channel
        self._resolve = resolve
        self._every = resolve_every_s if target.strip().startswith("dns:") else float("inf")
        self._lock = threading.Lock()
        self._members: dict[str, Member[C]] = {}
        self._turn = 0
        self._resolved_at = 0.0
        self.refresh(force=True)

    def members(self) -> list[Member[C]]:
        with self._lock:
            return list(self._members.values())

    def due(self) -> bool:
        """Whether a `dns:` target should be resolved again now."""
        return time.monotonic() - self._resolved_at >= self._every or (
            self._every != float("inf") and not self._members
        )

    def refresh(self, force: bool = False) -> bool:
        """Resolves the target again (when due, or `force`); True when the executors changed.

        A failed or empty lookup keeps the executors there are: a resolver's hiccup is not a pool gone.
        """
        if not force and not self.due():
            return False
        self._resolved_at = time.monotonic()
        found = self._resolve(self.target)
        if not found:
            return False
        closing: list[C] = []
        with self._lock:
            if list(self._members) == found:
                return False
            kept = {a: m for a, m in self._members.items() if a in found}
            for a, m in self._members.items():
                if a not in kept:
                    m.gone = True
                    if m.outstanding == 0:
                        closing.append(m.channel)
            for a in found:
                if a not in kept:
                    ch = self._open(a)
                    kept[a] = Member(a, ch, self._stub(ch))
            self._members = {a: kept[a] for a in found}
        for ch in closing:
            self._close(ch)
        return True

    def pick(self, tried: Optional[list[Member[C]]] = None) -> Optional[Member[C]]:
        """The executor for the next call: fewest outstanding among those not `tried`, skipping ones that
        refused a connection lately unless every other did too; ties in turn. Counted until `done`."""
        now = time.monotonic()
        with self._lock:
            ms = list(self._members.values())
            if not ms:
                return None
            self._turn += 1
            best: Optional[tuple[bool, int, Member[C]]] = None
            for i in range(len(ms)):
                m = ms[(self._turn + i) % len(ms)]
                if tried and any(m is t for t in tried):
                    continue
                key = (m.down_until > now, m.outstanding)
                if best is None or key < best[:2]:
                    best = (key[0], key[1], m)
            if best is None:
                return None
            best[2].outstanding += 1
            return best[2]

    def done(self, m: Member[C], refused: bool = False) -> None:
        """The call sent to `m` has its answer; `refused`: `m` refused the connection (skipped a while)."""
        close = False
        with self._lock:
            m.outstanding -= 1
            if refused:
                m.down_until = time.monotonic() + DOWN_S
            close = m.gone and m.outstanding == 0
        if close:
            self._close(m.channel)
        if refused and self._every != float("inf"):
            # The pod may be gone: look again now rather than at the next tick.
            self._resolved_at = 0.0

    def close(self) -> list[object]:
        """Closes every channel; returns what the close function gave (coroutines, for grpc.aio)."""
        with self._lock:
            ms, self._members = list(self._members.values()), {}
        return [self._close(m.channel) for m in ms]
