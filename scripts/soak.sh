#!/usr/bin/env bash
# The load half of the load and fault suite (docs in README, "Load and fault suite"):
# starts one 2-slot sandpool-executor (python, c) on a loopback port with its own
# work root, runs `sandpool soak` against it (N mixed requests at concurrency C,
# every verdict checked, the executor's threads/descriptors/mounts/children/cgroups
# compared after warm-up and at the end), then stops it (SIGTERM) and checks that
# it exited cleanly. Needs root and `cargo build` (or $SANDPOOL_BIN_DIR).
#   scripts/soak.sh [N=10000] [C=64] [extra `sandpool soak` flags, e.g. --json]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
n="${1:-10000}"; c="${2:-64}"; shift $(( $# < 2 ? $# : 2 ))
bin="${SANDPOOL_BIN_DIR:-target/debug}"
port="${SANDPOOL_SOAK_PORT:-57111}"
work="$(mktemp -d /tmp/sandpool-soak.XXXXXX)"
log="$work.log"
SANDPOOL_NAME=soak "$bin/sandpool-executor" --listen "127.0.0.1:$port" --work-root "$work" \
  --uid-base "${SANDPOOL_SOAK_UID_BASE:-61500}" --slots 2 --enable-languages python,c \
  --drain-timeout-ms 20000 >"$log" 2>&1 &
pid=$!
trap 'kill -TERM $pid 2>/dev/null || true; wait $pid 2>/dev/null || true; rm -rf "$work"' EXIT
for _ in $(seq 600); do
  grep -q "serving gRPC" "$log" && break
  kill -0 $pid 2>/dev/null || { cat "$log" >&2; exit 1; }
  sleep 0.2
done
rc=0
"$bin/sandpool" soak --endpoint "127.0.0.1:$port" --pid $pid --work-root "$work" -n "$n" -c "$c" "$@" || rc=$?
kill -0 $pid 2>/dev/null || { echo "the executor died during the soak:" >&2; tail -20 "$log" >&2; exit 1; }
kill -TERM $pid
status=0; wait $pid || status=$?
trap 'rm -rf "$work"' EXIT
echo "executor exit status after SIGTERM: $status (log: $log)"
[ "$status" -eq 0 ] || rc=1
exit $rc
