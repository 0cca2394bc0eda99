"""What the clients raise when a call fails, in place of gRPC's own errors.

A caller wants to know which of three things happened, not which status code came back:
its request was refused (`RequestRejected`: fix the request or the credentials, retrying
cannot help), the pool could not take it (`Unavailable`: away, draining or full, after the
client's own retries ran out), or a session it held is gone (`SessionLost`: start a new one)
or lost its interpreter's state (`SessionReset`: its files are kept, set the state up again).
`DeadlineExceeded` is the caller's own timeout. The gRPC error that caused one is its
`__cause__`.

Per-request errors inside `evaluate_many` stay data (`EvaluateResult.error`): one bad record
must not end a run.

Compatibility, for one release: `CallError` also derives from `grpc.aio.AioRpcError` (a
`grpc.RpcError`), so code written against the raw errors (`except grpc.RpcError`,
`except grpc.aio.AioRpcError`, `e.code()`, `e.details()`) keeps working with both clients.
The next release drops those bases: catch these classes.
"""

from __future__ import annotations

from typing import Any, Optional

import grpc
import grpc.aio

from .retry import RETRYABLE_CODES


class SandpoolError(Exception):
    """Base of every error the clients raise about a call or a session."""


class CallError(SandpoolError, grpc.aio.AioRpcError):
    """A call failed with a gRPC status: `status` (also `code()`) and `message` (the details) say why.

    Not raised itself for the statuses below; a status none of them names (none the executor
    answers with today) raises this class.
    """

    def __init__(
        self,
        code: grpc.StatusCode,
        message: str = "",
        initial_metadata: Any = None,
        trailing_metadata: Any = None,
        debug_error_string: Optional[str] = None,
    ) -> None:
        grpc.aio.AioRpcError.__init__(self, code, initial_metadata, trailing_metadata, message, debug_error_string)
        self.status = code
        #: The status details: for INVALID_ARGUMENT, the field and what is wrong with it.
        self.message = message
        self._debug = debug_error_string

    # Defined here, not only inherited, so they outlive the grpc base classes.
    def code(self) -> grpc.StatusCode:
        """The gRPC status code the call ended with (also `status`)."""
        return self.status

    def details(self) -> str:
        """The status details (the same as `message`)."""
        return self.message

    def __str__(self) -> str:
        return f"{self.status.name}: {self.message}" if self.message else self.status.name

    def __reduce__(self) -> Any:
        # Pickles (e.g. across multiprocessing) with this class's own constructor arguments.
        return (type(self), (self.status, self.message, None, None, self._debug))


class RequestRejected(CallError):
    """The executor (or a proxy before it) refused the request itself; sending it again cannot help.

    Its own subclasses name the common statuses; others (UNIMPLEMENTED, FAILED_PRECONDITION,
    NOT_FOUND, ...) raise this class.
    """


class InvalidArgument(RequestRejected):
    """INVALID_ARGUMENT: the request is malformed or over a limit; `message` names the field."""


class PermissionDenied(RequestRejected):
    """PERMISSION_DENIED: the caller is known but may not make this call."""


class Unauthenticated(RequestRejected):
    """UNAUTHENTICATED: no bearer token, or the wrong one (see the `token` argument)."""


class Unavailable(CallError):
    """The executor could not take the call: away, restarting, draining, its queue full, or the
    connection broke under the call (UNAVAILABLE, RESOURCE_EXHAUSTED, and the statuses gRPC
    reports for a dead transport). Raised once the client's `RetryPolicy` is used up."""


class DeadlineExceeded(CallError):
    """DEADLINE_EXCEEDED: the call's `timeout` passed (the executor kills a run it outlives)."""


class SessionReset(CallError):
    """FAILED_PRECONDITION `session reset: ...`: the session's interpreter died since its last call
    (it reached its share of the sessions' memory ceiling, or was killed), so its variables,
    functions and imports are gone; its files in `/work` are kept. The call was not run: the
    executor has started a fresh interpreter, and sending the call again runs it on that empty
    state (re-run your setup first). Never retried by the client, since the state it needs is gone.
    """


#: How the executor begins the message of a session reset (executor/src/session/mod.rs).
SESSION_RESET_PREFIX = "session reset:"


class SessionLost(SandpoolError):
    """The session is gone: closed, expired (idle or lifetime), or its executor died or restarted.

    Its files and state are lost with it; create a new session to go on.
    """

    def __init__(self, session_id: str, why: str):
        super().__init__(f"session {session_id[:8]}... is lost: {why}")
        self.session_id = session_id
        self.why = why

    def __reduce__(self) -> Any:
        return (type(self), (self.session_id, self.why))


_REJECTED: dict[grpc.StatusCode, type[RequestRejected]] = {
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgument,
    grpc.StatusCode.PERMISSION_DENIED: PermissionDenied,
    grpc.StatusCode.UNAUTHENTICATED: Unauthenticated,
}


def error_class(code: grpc.StatusCode) -> type[CallError]:
    """The class a failed call with status `code` raises."""
    if code in _REJECTED:
        return _REJECTED[code]
    if code in RETRYABLE_CODES:
        return Unavailable
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return DeadlineExceeded
    if code == grpc.StatusCode.OK:  # never a failure: only a broken peer would report it so
        return CallError
    return RequestRejected


def from_rpc(e: grpc.RpcError) -> CallError:
    """The `CallError` for a raw gRPC error; raise it `from e`. One already converted is returned as is."""
    if isinstance(e, CallError):
        return e
    # grpc.RpcError itself promises no methods; the errors grpc raises are also grpc.Call.
    code = _ask(e, "code") or grpc.StatusCode.UNKNOWN
    details = _ask(e, "details") or ""
    cls = error_class(code)
    if code == grpc.StatusCode.FAILED_PRECONDITION and details.startswith(SESSION_RESET_PREFIX):
        cls = SessionReset
    return cls(
        code,
        details,
        _ask(e, "initial_metadata"),
        _ask(e, "trailing_metadata"),
        _ask(e, "debug_error_string"),
    )


def _ask(e: grpc.RpcError, method: str) -> Any:
    fn = getattr(e, method, None)
    return fn() if callable(fn) else None


__all__ = [
    "CallError",
    "DeadlineExceeded",
    "InvalidArgument",
    "PermissionDenied",
    "RequestRejected",
    "SandpoolError",
    "SessionLost",
    "SessionReset",
    "Unauthenticated",
    "Unavailable",
    "error_class",
    "from_rpc",
]
