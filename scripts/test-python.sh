#!/usr/bin/env bash
# The Python client's tests (clients/python/tests) against real executors the
# tests start: needs root and `cargo build --workspace` first. Makes (or reuses)
# the venv at $SANDPOOL_VENV (default .venv), installs the package with its
# test extras (the build generates the gRPC stubs from proto/), runs pytest.
# tests/test_package.py also type-checks the package (mypy, cache in the venv)
# and builds its sdist and wheel, installing each into a fresh venv under /tmp
# (pip fetches their dependencies and the sdist's build tools from PyPI).
# Debian packages: python3, python3-venv.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

venv="$(realpath -m "${SANDPOOL_VENV:-.venv}")"
if [ ! -x "$venv/bin/python" ]; then
  "${PYTHON:-python3}" -m venv "$venv"
fi
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check "./clients/python[test]"
export SANDPOOL_EXECUTOR_BIN="${SANDPOOL_EXECUTOR_BIN:-$PWD/target/debug/sandpool-executor}"
cd clients/python
exec "$venv/bin/python" -m pytest -q -p no:cacheprovider tests "$@"
