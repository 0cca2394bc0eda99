# Sourced by the real node's e2e scripts (node-e2e.sh, node-e2e-full.sh): the cluster's
# variables, kubectl and helm through the node's network namespace, the chart's version and
# the executor image it names. Fails, never skips, when the cluster has no real node.
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
eval "$("$ROOT/scripts/cluster.sh" env)"
[[ -n "${SANDPOOL_E2E_NODE:-}" ]] ||
  { echo "$(basename "$0"): the cluster has no real node: run scripts/cluster.sh up --node" >&2; exit 1; }
K="$SANDPOOL_E2E_KUBECTL"
H="$SANDPOOL_E2E_HELM"
VERSION="$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' "$ROOT/charts/sandpool/Chart.yaml")"
EXECUTOR_IMAGE="ghcr.io/sandpool/executor:$VERSION"
RELEASE_NS=sandpool-system
