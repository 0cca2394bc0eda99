"""An in-test Executor service that injects faults and records what it was sent (no real executor)."""

from __future__ import annotations

import threading
from collections import Counter
from concurrent import futures
from typing import Iterator, Optional

import grpc
from sandpool.v1 import executor_pb2 as pb
from sandpool.v1 import executor_pb2_grpc as pb_grpc


class FaultyExecutor(pb_grpc.ExecutorServicer):
    """EvaluateStream that answers `answer` requests, then ends its first `breaks` streams with `code`.

    `answer=-1` refuses the stream before reading any request, as an authenticating interceptor does.
    """

    def __init__(self, code: Optional[grpc.StatusCode], breaks: int = 1, answer: int = 2):
        self.code = code
        self.breaks = breaks
        self.answer = answer
        self.streams = 0
        self.received: Counter[str] = Counter()
        self.metadata: list[dict[str, str]] = []
        self.lock = threading.Lock()

    def EvaluateStream(self, request_iterator: Iterator[pb.EvaluateRequest], context):  # noqa: N802 (gRPC's name)
        with self.lock:
            self.streams += 1
            n = self.streams
            self.metadata.append(dict(context.invocation_metadata()))
        if self.code is not None and n <= self.breaks and self.answer < 0:
            context.abort(self.code, "injected fault")
        answered = 0
        for req in request_iterator:
            with self.lock:
                self.received[req.id] += 1
            if self.code is not None and n <= self.breaks and answered >= self.answer:
                context.abort(self.code, "injected fault")
            answered += 1
            if req.completion == "reject":
                err = pb.RequestError(code=grpc.StatusCode.INVALID_ARGUMENT.value[0], message="completion: rejected")
                yield pb.EvaluateResponse(id=req.id, accepted=False, error=err)
                continue
            yield pb.EvaluateResponse(
                id=req.id, accepted=True, verdict=pb.OK, executor=pb.ExecutorInfo(name=f"fake-{n}")
            )

    def Execute(self, request, context):  # noqa: N802
        with self.lock:
            self.metadata.append(dict(context.invocation_metadata()))
        return pb.ExecuteResponse(verdict=pb.OK, executor=pb.ExecutorInfo(name="fake"))

    def Evaluate(self, request, context):  # noqa: N802
        with self.lock:
            self.metadata.append(dict(context.invocation_metadata()))
        return pb.EvaluateResponse(id=request.id, accepted=True, verdict=pb.OK)

    def GetCapabilities(self, request, context):  # noqa: N802
        with self.lock:
            self.metadata.append(dict(context.invocation_metadata()))
        return pb.Capabilities()


def start_fake(servicer: FaultyExecutor) -> tuple[grpc.Server, str]:
    """Serves `servicer` on a free loopback port; the server and its address."""
    server = grpc.server(futures.ThreadPoolExecutor(16))
    pb_grpc.add_ExecutorServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    return server, f"127.0.0.1:{port}"


class RefusingExecutor(pb_grpc.ExecutorServicer):
    """Ends every unary call with `code` (as an executor or a proxy refusing it would); counts the calls."""

    def __init__(self, code: grpc.StatusCode):
        self.code = code
        self.calls = 0
        self.lock = threading.Lock()

    def _refuse(self, context) -> None:
        with self.lock:
            self.calls += 1
        context.abort(self.code, f"refused: {self.code.name}")

    def Execute(self, request, context):  # noqa: N802 (gRPC's name)
        self._refuse(context)

    def Evaluate(self, request, context):  # noqa: N802
        self._refuse(context)

    def GetCapabilities(self, request, context):  # noqa: N802
        self._refuse(context)

    def CreateSession(self, request, context):  # noqa: N802
        self._refuse(context)
