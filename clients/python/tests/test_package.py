"""The package as its users get it: typed (PEP 561), and built into an sdist and a wheel that
install and work away from this checkout (the sdist carries the .proto the stubs come from)."""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from conftest import REPO, Executor

PACKAGE = REPO / "clients" / "python"

#: What a user's code sees through the shipped annotations: the last line must be refused.
USER_CODE = """
import sandpool
from sandpool import errors

def run(c: sandpool.Client) -> str:
    try:
        return c.execute("python", "print(1)").stdout
    except errors.RequestRejected as e:
        return e.message + e.code().name

wrong: int = sandpool.pool_target("evals")
"""

#: Run in each fresh venv (`-I`: nothing from this checkout or PYTHONPATH on the path).
ONE_REQUEST = """
import sys, pathlib, sandpool
root = pathlib.Path(sandpool.__file__).resolve().parent
assert root.is_relative_to(pathlib.Path(sys.prefix).resolve()), root
assert (root / "py.typed").is_file() and (root / "v1" / "executor_pb2.pyi").is_file()
with sandpool.Client(sys.argv[1]) as c:
    r = c.execute("python", "print(6 * 7)")
assert r.verdict is sandpool.Verdict.OK and r.stdout == "42\\n", r
"""


def clean_env() -> dict[str, str]:
    """This environment without what would point a build or an import back at the checkout."""
    drop = {"PYTHONPATH", "SANDPOOL_PROTO_DIR", "VIRTUAL_ENV", "PYTHONHOME"}
    return {k: v for k, v in os.environ.items() if k not in drop}


def run(cmd: list, cwd: Path) -> str:
    p = subprocess.run([str(c) for c in cmd], cwd=cwd, env=clean_env(), capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, f"{cmd} exited {p.returncode}:\n{p.stdout[-4000:]}\n{p.stderr[-4000:]}"
    return p.stdout


def test_the_package_and_a_users_code_type_check(tmp_path: Path) -> None:
    user = tmp_path / "user.py"
    user.write_text(USER_CODE)
    mypy = [sys.executable, "-m", "mypy", "--cache-dir", Path(sys.prefix) / "mypy-cache", "--no-error-summary"]
    run([*mypy, "-p", "sandpool"], tmp_path)
    p = subprocess.run([str(c) for c in [*mypy, user.name]], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    # Only the planted mistake: so sandpool's annotations reach the user (py.typed), and they hold.
    assert p.stdout.strip().splitlines() == [
        f'{user.name}:11: error: Incompatible types in assignment (expression has type "str", variable has type "int")'
        "  [assignment]"
    ], p.stdout + p.stderr


def test_sdist_and_wheel_install_and_run_away_from_the_checkout(executor: Executor, tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    build = [sys.executable, "-m", "build", "--no-isolation", "--outdir", dist]
    run([*build, "--sdist", PACKAGE], tmp_path)
    [sdist] = dist.glob("*.tar.gz")
    with tarfile.open(sdist) as t:
        names = t.getnames()
        assert any(n.endswith("/proto/sandpool/v1/executor.proto") for n in names), names
        assert any(n.endswith("/src/sandpool/py.typed") for n in names), names
        t.extractall(tmp_path / "unpacked", **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
    # The wheel is built from the unpacked sdist, in the temp dir: nothing of the checkout is reachable.
    [unpacked] = (tmp_path / "unpacked").iterdir()
    run([*build, "--wheel", unpacked], tmp_path)
    [wheel] = dist.glob("*.whl")

    # Both at once: each is mostly waiting on pip (the sdist's build environment dominates).
    def install_and_call(artifact: Path) -> str:
        venv = tmp_path / f"venv-{artifact.suffix.lstrip('.')}"
        run([sys.executable, "-m", "venv", "--without-pip", venv], tmp_path)
        py = venv / "bin" / "python"
        # The sdist is built again by pip, in its own isolated build environment (grpcio-tools from PyPI).
        run([sys.executable, "-m", "pip", "--python", py, "install", "--quiet", "--no-compile", artifact], tmp_path)
        return run([py, "-I", "-c", ONE_REQUEST, executor.address], tmp_path)

    with ThreadPoolExecutor(2) as pool:
        list(pool.map(install_and_call, [wheel, sdist]))
