"""The bearer token: `token=` or $SANDPOOL_TOKEN reaches the server on every call, sync and async."""

from __future__ import annotations

import asyncio

import grpc
import pytest
import sandpool
from fakes import FaultyExecutor
from sandpool import Client, EvaluateRequest, StdioCase, StdioTests


def req(i: int) -> EvaluateRequest:
    return EvaluateRequest(id=f"a{i}", language="python", completion="print(1)", tests=StdioTests([StdioCase("", "1\n")]))


def sync_calls(c: Client) -> None:
    c.execute("python", "print(1)")
    c.evaluate(req(0))
    c.capabilities()
    assert len(list(c.evaluate_many([req(i) for i in range(3)], concurrency=2, streams=2))) == 3


async def async_calls(c: sandpool.AsyncClient) -> None:
    await c.execute("python", "print(1)")
    await c.evaluate(req(0))
    assert len([r async for r in c.evaluate_many([req(i) for i in range(3)], concurrency=2, streams=2)]) == 3


def test_sync_token_argument_is_sent_on_every_call(serve, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SANDPOOL_TOKEN", "from-env")
    fake = FaultyExecutor(None)
    with Client(serve(fake), token="s3cret") as c:
        sync_calls(c)
    # Execute, Evaluate, GetCapabilities, and two streams.
    assert len(fake.metadata) == 5
    assert all(m.get("authorization") == "Bearer s3cret" for m in fake.metadata), fake.metadata


def test_sync_token_from_the_environment(serve, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SANDPOOL_TOKEN", "from-env\n")
    fake = FaultyExecutor(None)
    with Client(serve(fake)) as c:
        sync_calls(c)
    assert fake.metadata and all(m.get("authorization") == "Bearer from-env" for m in fake.metadata)


def test_no_token_sends_no_authorization(serve, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SANDPOOL_TOKEN", raising=False)
    fake = FaultyExecutor(None)
    with Client(serve(fake)) as c:
        sync_calls(c)
    assert fake.metadata and all("authorization" not in m for m in fake.metadata)


async def test_async_token_argument_and_environment(serve, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SANDPOOL_TOKEN", "from-env")
    fake = FaultyExecutor(None)
    target = serve(fake)
    async with sandpool.AsyncClient(target, token="s3cret") as c:
        await async_calls(c)
    async with sandpool.AsyncClient(target) as c:
        await async_calls(c)
    # Execute, Evaluate and two streams, per client.
    assert [m.get("authorization") for m in fake.metadata] == ["Bearer s3cret"] * 4 + ["Bearer from-env"] * 4


def test_a_token_that_is_no_header_value_is_refused_up_front() -> None:
    with pytest.raises(ValueError, match="token"):
        Client("127.0.0.1:1", token="two words")


def test_an_unauthenticated_stream_raises_not_retries(serve) -> None:
    # What the executor answers a wrong token with: the call is refused, never resent.
    fake = FaultyExecutor(grpc.StatusCode.UNAUTHENTICATED, breaks=100, answer=-1)
    with Client(serve(fake), token="wrong") as c, pytest.raises(grpc.RpcError) as e:
        list(c.evaluate_many([req(0)], concurrency=1, streams=1))
    assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED and fake.streams == 1


def test_a_real_executor_accepts_the_token_and_refuses_calls_without_it(make_executor, monkeypatch: pytest.MonkeyPatch) -> None:
    """Against the real executor's bearer-token check, sync and async: the right token runs,
    no token and a wrong one are UNAUTHENTICATED (a refusal, raised at once, not retried)."""
    monkeypatch.delenv("SANDPOOL_TOKEN", raising=False)
    e = make_executor("pytest-auth", env={"SANDPOOL_AUTH_TOKEN": "s3cret"})
    with Client(e.address, token="s3cret") as c:
        assert c.execute("python", "print(6*7)").run.stdout == b"42\n"
    for token in (None, "wrong"):
        with Client(e.address, token=token) as c:
            with pytest.raises(grpc.RpcError) as err:
                c.execute("python", "print(1)")
            assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED

    async def run() -> None:
        async with sandpool.AsyncClient(e.address, token="s3cret") as c:
            assert (await c.execute("python", "print(6*7)")).run.stdout == b"42\n"
        async with sandpool.AsyncClient(e.address) as c:
            with pytest.raises(grpc.RpcError) as err:
                await c.execute("python", "print(1)")
            assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED

    asyncio.run(run())
