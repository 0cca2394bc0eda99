"""Where to dial and how: the pool's DNS name, round_robin, compression."""

from __future__ import annotations

import json
import os
from typing import Optional

import grpc


def pool_target(pool: str, namespace: str = "default", port: int = 50051) -> str:
    """gRPC target of a SandboxPool's headless Service: one A record per ready pod."""
    return f"dns:///{pool}.{namespace}.svc.cluster.local:{port}"


def default_target() -> str:
    """$SANDPOOL_TARGET, else the pool $SANDPOOL_POOL (sandpool) in $SANDPOOL_NAMESPACE (default)."""
    return os.environ.get("SANDPOOL_TARGET") or pool_target(
        os.environ.get("SANDPOOL_POOL", "sandpool"), os.environ.get("SANDPOOL_NAMESPACE", "default")
    )


def auth_metadata(token: Optional[str]) -> tuple[tuple[str, str], ...]:
    """`authorization: Bearer <token>` for every call: `token`, else $SANDPOOL_TOKEN; none when both are empty.

    The token is a shared secret: it is sent as is (over TLS only if the channel is), never logged.
    """
    t = token if token is not None else os.environ.get("SANDPOOL_TOKEN", "")
    t = t.strip()
    if not t:
        return ()
    if any(not (0x21 <= ord(ch) <= 0x7E) for ch in t):
        raise ValueError("token: printable ASCII without spaces only (an HTTP/2 header value)")
    return (("authorization", f"Bearer {t}"),)


def compression(name: Optional[str]) -> grpc.Compression:
    """grpc.Compression for "gzip" or None/"none".

    The executor accepts gzip and zstd; grpcio offers gzip and deflate. gzip is the only common one,
    so "zstd" and "deflate" are refused here rather than failing on every call.
    """
    n = (name or "none").lower()
    if n == "gzip":
        return grpc.Compression.Gzip
    if n in ("none", ""):
        return grpc.Compression.NoCompression
    if n == "zstd":
        raise ValueError("compression: grpcio has no zstd (use gzip)")
    if n == "deflate":
        raise ValueError("compression: the executor does not accept deflate (use gzip)")
    raise ValueError(f"compression: unknown {name!r} (gzip or none)")


def default_authority(target: str) -> Optional[str]:
    """An :authority for address-list targets: gRPC would send the whole list, which HTTP/2 servers reject."""
    if target.startswith(("ipv4:", "ipv6:")) and "," in target:
        first = target.split(":", 1)[1].split(",")[0]
        return first.lstrip("/")
    return None


def channel_options(
    target: str, load_balancing: str = "round_robin", max_message_bytes: int = 256 << 20
) -> list[tuple[str, object]]:
    """Channel options: the load-balancing policy (spreads calls over every resolved address) and message caps."""
    config: dict[str, object] = {"loadBalancingConfig": [{load_balancing: {}}]}
    authority = default_authority(target)
    extra: list[tuple[str, object]] = [("grpc.default_authority", authority)] if authority else []
    return extra + [
        ("grpc.service_config", json.dumps(config)),
        ("grpc.max_receive_message_length", max_message_bytes),
        ("grpc.max_send_message_length", max_message_bytes),
        # The client retries itself (with its own rules), so gRPC's built-in retries stay off.
        ("grpc.enable_retries", 0),
    ]
