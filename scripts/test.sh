#!/usr/bin/env bash
# Runs every test: unit tests, end-to-end tests against the real binaries
# (they need root: the executor creates namespaces, cgroups and mounts),
# the operator and chart end-to-end tests against a real Kubernetes control plane
# (scripts/cluster.sh), the manifest checks, the Python client's tests, and last the
# executor and operator images on a real node (scripts/images.sh, cluster.sh up --node,
# scripts/node-e2e.sh; docs/testing.md).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# Languages whose toolchains scripts/install-deps.sh installs: each must work.
export SANDPOOL_REQUIRED_LANGUAGES="${SANDPOOL_REQUIRED_LANGUAGES:-python,c,cpp,java,javascript,typescript,go,go_test,rust,rust_test,bash,ruby,php,perl,lua,r,scala,kotlin,csharp,d,racket,verilog,sql,pytest,junit,jest}"
export SANDPOOL_TEST_QUIET="${SANDPOOL_TEST_QUIET:-1}"

# The Kubernetes e2e tests (operator_e2e, chart_e2e) need a real control plane. Building or
# starting it fails the run; the tests themselves fail rather than skip without it.
# Disk is the limit CI has hit (a full build, the cluster's and the node's binaries, images):
# say what is free at each stage, so that a run that runs out says where.
disk() { echo "disk ($1): $(df -h --output=avail . | tail -1 | tr -d ' ') free in $(pwd)"; }
disk start
scripts/cluster.sh up
trap 'disk end; scripts/cluster.sh down; scripts/s3.sh down' EXIT
eval "$(scripts/cluster.sh env)"
unset SANDPOOL_E2E_SKIP
# A real S3-compatible server (SeaweedFS, built from tests/s3/ and cached) for the session
# store's tests (store/tests/store.rs); building or starting it fails the run.
scripts/s3.sh up
eval "$(scripts/s3.sh env)"
unset SANDPOOL_S3_SKIP

cargo fmt --all --check
# No import circle between the modules of any crate (a second; scripts/check-layers.py).
scripts/check-layers.py
cargo build --workspace --locked
cargo clippy --workspace --all-targets --locked -- -D warnings
scripts/check-manifests.sh
if [ -x scripts/test-python.sh ]; then scripts/test-python.sh; fi
# One cargo invocation: every crate's unit tests and every end-to-end test.
cargo test --workspace --locked --no-fail-fast
# The isolation and limits suites again with Python started cold (the run above is warm, the default).
SANDPOOL_WARM_STARTS=false cargo test -p sandpool-tests --locked --no-fail-fast --test executor_isolation --test executor_limits
# The isolation suite again with a network namespace per run (the default on this kernel is
# the seccomp filter with Landlock scoping, docs/performance.md): both variants are promised.
SANDPOOL_NETWORK_ISOLATION=namespace cargo test -p sandpool-tests --locked --no-fail-fast --test executor_isolation
# The operator at a small scale (100 pools, 1,000 pods on 12 kwok nodes; docs/scale.md): fails
# when its writes per pool or its writes at rest regress (bench/scale.py THRESHOLDS).
bench/scale.py --pools 100 --namespaces 10 --replicas 10 --nodes 12 --quiet 30 --check \
  --operator target/debug/sandpool-operator

disk "before the node"
# The real node: images of this build, the control plane again with a node that runs them, and
# the pods' e2e. An image or a node that cannot be built fails the run; nothing here skips.
scripts/cluster.sh down
scripts/images.sh
# Two real nodes: the e2e adds the checks only two show (spread, cross-node policy, a drain).
SANDPOOL_REAL_NODES=2 scripts/cluster.sh up --node
scripts/node-e2e.sh

echo "Kubernetes e2e: operator_e2e, chart_e2e and operator_policy_e2e ran against the real control plane" \
  "($("$(dirname "$SANDPOOL_E2E_KUBECTL")/kube-apiserver" --version), kwok nodes) and passed"
echo "Real nodes: node-e2e ran this build's executor and operator images as pods on two real nodes (kubelet, containerd, runc, kube-router) and passed"
echo "cgroup v2: executor_cgroup2_vm ran the executor in a QEMU guest on $(basename "$(ls /boot/vmlinuz-* | sort -V | tail -1)") and passed"
