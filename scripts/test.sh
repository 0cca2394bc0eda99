#!/usr/bin/env bash
# Runs every test: unit tests, end-to-end tests against the real binaries
# (they need root: the executor creates namespaces, cgroups and mounts),
# the manifest checks, and the Python client's tests.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# Languages whose toolchains scripts/install-deps.sh installs: each must work.
export SANDPOOL_REQUIRED_LANGUAGES="${SANDPOOL_REQUIRED_LANGUAGES:-python,c,cpp,java,javascript,typescript,go,go_test,rust,rust_test,bash,ruby,php,perl,lua,r,scala,kotlin,csharp,d,racket,verilog,sql,pytest,junit,jest}"
export SANDPOOL_TEST_QUIET="${SANDPOOL_TEST_QUIET:-1}"

cargo build --workspace --locked
scripts/check-manifests.sh
if [ -x scripts/test-python.sh ]; then scripts/test-python.sh; fi
# One cargo invocation: every crate's unit tests and every end-to-end test.
cargo test --workspace --locked --no-fail-fast
