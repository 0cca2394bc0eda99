"""An Inspect (`inspect-ai`) sandbox provider: `sandbox="sandpool"` runs each sample in a Sandpool session.

Installed with `pip install "sandpool[inspect]"`; Inspect finds it through the `inspect_ai` entry
point group (pyproject.toml), so an unmodified task runs with `sandbox="sandpool"` or
`sandbox=("sandpool", "sandpool.yaml")`. docs/clients.md ("Inspect") says what holds and what differs
from Inspect's `docker` sandbox.

Each sample gets a session of its own (`sample_init`), closed in `sample_cleanup` whatever happened.
Every `exec`, `read_file` and `write_file` is one call of that session: a bash script, run in a
fresh sandboxed process tree in the session's `/work` (the argv quoted with `shlex`), so only
`/work` carries from one call to the next; `/tmp` and background processes end with each call.
"""

from __future__ import annotations

import logging
import os
import re
import shlex
from typing import Any, Literal, Mapping, Optional, Union, overload

import yaml  # type: ignore[import-untyped]  # a dependency of inspect-ai; no stubs needed here
from inspect_ai.util import (
    ExecResult,
    OutputLimitExceededError,
    SandboxConnection,
    SandboxEnvironment,
    SandboxEnvironmentConfigType,
    SandboxEnvironmentLimits,
    sandboxenv,
)
from inspect_ai.util._sandbox.environment import SandboxUnavailableError, SandboxUserUnsupportedError
from pydantic import BaseModel, field_validator

from .aio import AsyncClient
from .errors import SandpoolError
from .session import AsyncSession, SessionLimits
from .target import default_target
from .types import Limits, Verdict

logger = logging.getLogger(__name__)

#: The session's working directory: relative paths resolve against it, and only it outlives a call.
WORKDIR = "/work"

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

# Exit codes the file scripts use to say why they failed (read back as Python's exceptions).
_IS_DIR, _NOT_FOUND, _DENIED, _TOO_BIG = 91, 92, 93, 94


class SandpoolSandboxConfig(BaseModel, frozen=True):
    """Configuration of the `sandpool` sandbox (a model, or a YAML/JSON file with these keys)."""

    #: gRPC target: "host:port", "dns:///svc.ns:50051" (a pool's Service), or a gateway's address.
    #: Default: $SANDPOOL_TARGET, else 127.0.0.1:50051.
    target: Optional[str] = None
    #: Bearer token (the executor's --auth-token-file); default: the variable `token_env` names.
    token: Optional[str] = None
    token_env: str = "SANDPOOL_TOKEN"
    #: The session's language: "bash" (each call a fresh process tree) or "python" (calls run from one
    #: long-lived interpreter). Commands are bash in both.
    language: Literal["bash", "python"] = "bash"
    #: Files put in /work when the session is created (path relative to /work -> text); a mapping in
    #: YAML, kept as pairs so the config stays hashable (Inspect keys its caches on it).
    files: tuple[tuple[str, str], ...] = ()
    #: Session totals (0: the executor's default; see docs/sessions.md, "Limits and lifetimes").
    lifetime_ms: int = 0
    idle_timeout_ms: int = 0
    max_calls: int = 0
    memory_bytes: int = 0
    cpu_time_ms: int = 0
    #: Per call: memory and processes (0: the executor's default).
    call_memory_bytes: int = 0
    call_processes: int = 0
    #: Seconds an exec without a timeout may run; None: the executor's --max-wall-time-ms.
    default_timeout: Optional[float] = None
    #: Seconds to wait for the executor to answer at task start and at session create.
    connect_timeout: float = 60.0

    @field_validator("files", mode="before")
    @classmethod
    def _files_mapping(cls, v: Any) -> Any:
        return tuple(v.items()) if isinstance(v, Mapping) else v


def _config(config: Optional[SandboxEnvironmentConfigType]) -> SandpoolSandboxConfig:
    if config is None:
        return SandpoolSandboxConfig()
    if isinstance(config, SandpoolSandboxConfig):
        return config
    if isinstance(config, str):
        with open(config, encoding="utf-8") as f:
            data = yaml.safe_load(f) or {}  # YAML is a superset of JSON: both load here
        if not isinstance(data, dict):
            raise ValueError(f"{config}: a sandpool sandbox config is a mapping of keys, got {type(data).__name__}")
        return SandpoolSandboxConfig(**data)
    if isinstance(config, BaseModel):
        return SandpoolSandboxConfig(**config.model_dump())
    raise TypeError(f"unsupported sandpool sandbox config: {config!r}")


def _client(cfg: SandpoolSandboxConfig) -> AsyncClient:
    token = cfg.token if cfg.token is not None else os.environ.get(cfg.token_env) or None
    return AsyncClient(cfg.target or default_target(), token=token, timeout=cfg.connect_timeout)


def _resolve(path: str) -> str:
    """An absolute path in the sandbox: relative ones are under /work."""
    return path if path.startswith("/") else f"{WORKDIR}/{path}"


@sandboxenv(name="sandpool")
class SandpoolSandboxEnvironment(SandboxEnvironment):
    """One sample's Sandpool session."""

    #: Sessions open per task, so task_cleanup can end any a sample left (a crash between init and cleanup).
    _open: dict[str, dict[str, "SandpoolSandboxEnvironment"]] = {}

    def __init__(self, client: AsyncClient, session: AsyncSession, cfg: SandpoolSandboxConfig, max_limits: Limits):
        super().__init__()
        self.client = client
        self.session = session
        self.config = cfg
        self.max_limits = max_limits

    @classmethod
    def config_files(cls) -> list[str]:
        return ["sandpool.yaml", "sandpool.yml", "sandpool.json"]

    @classmethod
    def config_deserialize(cls, config: dict[str, Any]) -> BaseModel:
        return SandpoolSandboxConfig(**config)

    @classmethod
    async def task_init(cls, task_name: str, config: Optional[SandboxEnvironmentConfigType]) -> None:
        cfg = _config(config)
        client = _client(cfg)
        try:
            caps = await client.capabilities(timeout=cfg.connect_timeout)
        except SandpoolError as e:
            raise RuntimeError(
                f"sandpool sandbox: the pool at {client.target} cannot be reached or refused us ({e}); "
                "set `target` (and `token`) in the sandbox config, or $SANDPOOL_TARGET"
            ) from e
        finally:
            await client.close()
        languages = {lang.name for lang in caps.languages}
        if "bash" not in languages or cfg.language not in languages:
            raise RuntimeError(
                f"sandpool sandbox: the pool at {client.target} offers {sorted(languages)}; "
                f"this sandbox needs bash and {cfg.language} (--enable-languages)"
            )

    @classmethod
    async def sample_init(
        cls, task_name: str, config: Optional[SandboxEnvironmentConfigType], metadata: dict[str, str]
    ) -> dict[str, SandboxEnvironment]:
        cfg = _config(config)
        client = _client(cfg)
        try:
            caps = await client.capabilities(timeout=cfg.connect_timeout)
            m = caps.max_limits
            session = await client.session(
                cfg.language,
                limits=SessionLimits(
                    lifetime_ms=cfg.lifetime_ms,
                    idle_timeout_ms=cfg.idle_timeout_ms,
                    max_calls=cfg.max_calls,
                    memory_bytes=cfg.memory_bytes,
                    cpu_time_ms=cfg.cpu_time_ms,
                ),
                call_limits=Limits(memory_bytes=cfg.call_memory_bytes, processes=cfg.call_processes),
                files=dict(cfg.files),
                timeout=cfg.connect_timeout,
            )
        except BaseException:
            await client.close()
            raise
        max_limits = Limits(wall_time_ms=m.wall_time_ms, cpu_time_ms=m.cpu_time_ms, output_bytes=m.output_bytes)
        env = cls(client, session, cfg, max_limits)
        cls._open.setdefault(task_name, {})[session.id] = env
        return {"default": env}

    @classmethod
    async def sample_cleanup(
        cls,
        task_name: str,
        config: Optional[SandboxEnvironmentConfigType],
        environments: dict[str, SandboxEnvironment],
        interrupted: bool,
    ) -> None:
        # Closed whether or not the sample was interrupted: a session holds a seat until it ends.
        for env in environments.values():
            if isinstance(env, SandpoolSandboxEnvironment):
                await env._close()

    @classmethod
    async def task_cleanup(cls, task_name: str, config: Optional[SandboxEnvironmentConfigType], cleanup: bool) -> None:
        left = cls._open.pop(task_name, {})
        if not cleanup:
            if left:
                logger.info(
                    "sandpool sandbox: %d sessions left open (--no-sandbox-cleanup); they end at their idle timeout: %s",
                    len(left),
                    ", ".join(left),
                )
            return
        for env in list(left.values()):
            await env._close()

    async def _close(self) -> None:
        try:
            await self.session.close()
        except Exception as e:  # the session may be gone with its executor; nothing to release then
            logger.warning("sandpool sandbox: closing session %s: %s", self.session.id, e)
        finally:
            await self.client.close()
            for sessions in type(self)._open.values():
                sessions.pop(self.session.id, None)

    # -- calls -----------------------------------------------------------------------------------

    def _limits(self, timeout: Optional[float], output_bytes: int) -> Limits:
        t = timeout if timeout is not None else self.config.default_timeout
        wall = self.max_limits.wall_time_ms if t is None else int(t * 1000)
        wall = max(1, min(wall, self.max_limits.wall_time_ms or wall))
        cpu = min(wall, self.max_limits.cpu_time_ms or wall)
        out = min(output_bytes, self.max_limits.output_bytes or output_bytes)
        return Limits(
            wall_time_ms=wall,
            cpu_time_ms=cpu,
            output_bytes=out,
            memory_bytes=self.config.call_memory_bytes,
            processes=self.config.call_processes,
        )

    async def _run(self, script: str, stdin: bytes, limits: Limits) -> Any:
        try:
            # The RPC's own deadline leaves the executor time to report the wall-time verdict.
            r = await self.session.run(
                command=script, stdin=stdin, limits=limits, timeout=limits.wall_time_ms / 1000 + 60
            )
        except SandpoolError as e:
            raise SandboxUnavailableError(f"sandpool session {self.session.id}: {e}") from e
        if r.verdict in (Verdict.WALL_TIME_LIMIT_EXCEEDED, Verdict.TIME_LIMIT_EXCEEDED):
            raise TimeoutError(f"the command ran past its {limits.wall_time_ms / 1000:g} s ({r.verdict.name})")
        if r.verdict is Verdict.SANDBOX_ERROR:
            raise SandboxUnavailableError(f"sandpool session {self.session.id}: the executor failed: {r.message}")
        return r

    async def exec(
        self,
        cmd: list[str],
        input: Union[str, bytes, None] = None,
        cwd: Optional[str] = None,
        env: Optional[dict[str, str]] = None,
        user: Optional[str] = None,
        timeout: Optional[int] = None,
        timeout_retry: bool = True,
        concurrency: bool = True,
    ) -> ExecResult[str]:
        if user is not None:
            raise SandboxUserUnsupportedError(
                f"the sandpool sandbox runs every command as its session's own unprivileged user; cannot run as {user!r}"
            )
        if not cmd:
            raise ValueError("cmd is empty")
        lines = [f"cd -- {shlex.quote(_resolve(cwd or '.'))} || exit 1"]
        for k, v in (env or {}).items():
            if not _ENV_NAME.fullmatch(k):
                raise ValueError(f"env: {k!r} is not a valid variable name")
            lines.append(f"export {k}={shlex.quote(v)}")
        lines.append(f"exec {shlex.join(cmd)}")
        # A subshell: the session's EXIT trap saves exports and cwd for the next call; these are this call's.
        script = "(\n" + "\n".join(lines) + "\n)\n"
        data = input.encode("utf-8") if isinstance(input, str) else (input or b"")
        limit = SandboxEnvironmentLimits.MAX_EXEC_OUTPUT_SIZE
        r = await self._run(script, data, self._limits(timeout, limit))
        res = r.result
        stdout = res.stdout.decode("utf-8", "replace") if res else ""
        stderr = res.stderr.decode("utf-8", "replace") if res else ""
        if r.verdict is Verdict.OUTPUT_LIMIT_EXCEEDED:
            raise OutputLimitExceededError(SandboxEnvironmentLimits.MAX_EXEC_OUTPUT_SIZE_STR, stdout)
        code = 0
        if res is not None:
            code = res.exit_code if res.signal == 0 else 128 + res.signal
        if code == 126 and "permission denied" in stderr.lower():
            raise PermissionError(f"{cmd[0]}: permission denied ({stderr.strip()})")
        return ExecResult(success=r.verdict is Verdict.OK and code == 0, returncode=code, stdout=stdout, stderr=stderr)

    async def write_file(self, file: str, contents: Union[str, bytes]) -> None:
        path = _resolve(file)
        q = shlex.quote(path)
        script = (
            f"[ -d {q} ] && exit {_IS_DIR}\n"
            f'mkdir -p -- "$(dirname -- {q})" 2>/dev/null\n'
            f"[ -e {q} ] && [ ! -w {q} ] && exit {_DENIED}\n"
            f"cat > {q}\n"
        )
        data = contents.encode("utf-8") if isinstance(contents, str) else contents
        r = await self._run(script, data, self._limits(None, 64 * 1024))
        self._file_error(file, r)

    @overload
    async def read_file(self, file: str, text: Literal[True] = True) -> str: ...

    @overload
    async def read_file(self, file: str, text: Literal[False]) -> bytes: ...

    async def read_file(self, file: str, text: bool = True) -> Union[str, bytes]:
        path = _resolve(file)
        q = shlex.quote(path)
        limit = SandboxEnvironmentLimits.MAX_READ_FILE_SIZE
        script = (
            f"[ -d {q} ] && exit {_IS_DIR}\n"
            f"[ -e {q} ] || exit {_NOT_FOUND}\n"
            f"[ -r {q} ] || exit {_DENIED}\n"
            f'[ "$(wc -c < {q})" -gt {limit} ] && exit {_TOO_BIG}\n'
            f"exec cat -- {q}\n"
        )
        r = await self._run(script, b"", self._limits(None, limit))
        if r.verdict is Verdict.OUTPUT_LIMIT_EXCEEDED:
            # The executor's --max-output-bytes is below Inspect's read limit: that is the limit that held.
            raise OutputLimitExceededError(f"{self.max_limits.output_bytes} bytes", None)
        self._file_error(file, r)
        data: bytes = r.result.stdout if r.result else b""
        return data.decode("utf-8") if text else data

    def _file_error(self, file: str, r: Any) -> None:
        code = r.result.exit_code if r.result else 0
        if r.verdict is Verdict.OK and code == 0:
            return
        err = r.result.stderr.decode("utf-8", "replace").strip() if r.result else r.message
        if code == _IS_DIR:
            raise IsADirectoryError(f"{file}: is a directory")
        if code == _NOT_FOUND:
            raise FileNotFoundError(f"{file}: no such file")
        if code == _DENIED or "permission denied" in err.lower():
            raise PermissionError(f"{file}: permission denied")
        if code == _TOO_BIG:
            raise OutputLimitExceededError(SandboxEnvironmentLimits.MAX_READ_FILE_SIZE_STR, None)
        raise RuntimeError(f"{file}: {r.verdict.name}, exit {code}: {err}")

    async def connection(self, *, user: Optional[str] = None) -> SandboxConnection:
        # A session has no terminal to attach to: every call is a request, not a shell.
        raise NotImplementedError("the sandpool sandbox has no interactive connection (each exec is a request)")


__all__ = ["SandpoolSandboxConfig", "SandpoolSandboxEnvironment", "WORKDIR"]
