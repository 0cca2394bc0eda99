#!/usr/bin/env bash
# A real S3-compatible server on loopback, for the session store's tests (store/tests/s3.rs).
#
# SeaweedFS's `weed`, built from the Go module pinned in tests/s3/ (go.mod's `tool`), runs
# `weed mini`-style as one process: master, volume, filer and S3 gateway, all on 127.0.0.1, with
# one access key (config written here) and its data in a throwaway directory.
#
#   scripts/s3.sh build   only build (or reuse) the binary; prints its path
#   scripts/s3.sh up      build (or reuse) and start the server; one already healthy is left as it is
#   scripts/s3.sh env     print the variables the tests need: eval "$(scripts/s3.sh env)"
#   scripts/s3.sh down    stop the server and delete its directory
#   scripts/s3.sh logs    print the tail of its log
#
# Knobs: SANDPOOL_S3_DIR (state: config, data, log, pid; default a directory under
# ${TMPDIR:-/tmp} named for this checkout), SANDPOOL_S3_CACHE (built binaries, keyed by the
# module's content and the Go version; default ~/.cache/sandpool-s3).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
MODULE="$ROOT/tests/s3"
KEY="$(printf %s "$ROOT" | sha256sum | cut -c1-8)"
STATE="${SANDPOOL_S3_DIR:-${TMPDIR:-/tmp}/sandpool-s3-$KEY}"
CACHE="${SANDPOOL_S3_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/sandpool-s3}"
GO="$(command -v /usr/local/go/bin/go || command -v go || true)"
ACCESS_KEY="sandpool-test"
SECRET_KEY="sandpool-test-secret-0123456789"
REGION="us-east-1"
BUCKET="sandpool-test"

log() { echo "s3: $*" >&2; }
die() { log "$*"; exit 1; }

bin_dir() {
  local key
  key="$(cat "$MODULE/go.mod" "$MODULE/go.sum" <("$GO" version) | sha256sum | cut -c1-16)"
  echo "$CACHE/$key"
}

build() {
  [[ -n "$GO" ]] || die "go is not on PATH (Go >= 1.26 is needed to build SeaweedFS)"
  local bin
  bin="$(bin_dir)"
  if [[ -f "$bin/.complete" ]]; then
    echo "$bin/weed"
    return
  fi
  local start=$SECONDS tmp
  log "building SeaweedFS into $bin (cold: minutes; cached afterwards)"
  mkdir -p "$CACHE"
  tmp="$(mktemp -d "$CACHE/.tmp.XXXXXX")"
  (cd "$MODULE" && "$GO" build -buildvcs=false -trimpath -ldflags="-s -w" -o "$tmp/weed" \
    github.com/seaweedfs/seaweedfs/weed) || { rm -rf "$tmp"; die "go build failed"; }
  touch "$tmp/.complete"
  rm -rf "$bin"
  mv "$tmp" "$bin"
  log "built in $((SECONDS - start)) s"
  echo "$bin/weed"
}

# COUNT free loopback ports P whose P + 10000 is free too (weed puts each gRPC port there).
free_ports() {
  local py
  py="$(command -v /usr/bin/python3 || command -v python3)"
  "$py" - "$1" << 'EOF'
import random, socket, sys
def free(p):
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", p))
        return True
    except OSError:
        return False
    finally:
        s.close()
got = []
while len(got) < int(sys.argv[1]):
    p = random.randrange(20000, 30000)
    if p not in got and free(p) and free(p + 10000):
        got.append(p)
print(" ".join(map(str, got)))
EOF
}

# Whether the S3 gateway accepts connections (bash's /dev/tcp: no curl needed).
healthy() {
  [[ -f "$STATE/s3.port" ]] || return 1
  timeout 2 bash -c "exec 3<>/dev/tcp/127.0.0.1/$(cat "$STATE/s3.port")" 2> /dev/null
}

up() {
  local weed
  weed="$(build)"
  if healthy; then
    log "already up at $(endpoint)"
    return
  fi
  down_quiet
  mkdir -p "$STATE/data"
  cat > "$STATE/s3.json" << EOF
{"identities": [{"name": "sandpool", "credentials": [{"accessKey": "$ACCESS_KEY", "secretKey": "$SECRET_KEY"}],
  "actions": ["Admin", "Read", "Write", "List", "Tagging"]}]}
EOF
  local master volume filer s3
  read -r master volume filer s3 < <(free_ports 4)
  echo "$s3" > "$STATE/s3.port"
  # One process: master, volume server, filer and S3 gateway, all on loopback.
  setsid "$weed" server -ip=127.0.0.1 -ip.bind=127.0.0.1 -dir="$STATE/data" \
    -master.port="$master" -volume.port="$volume" -filer -filer.port="$filer" \
    -s3 -s3.port="$s3" -s3.config="$STATE/s3.json" -volume.max=0 -master.volumeSizeLimitMB=64 \
    > "$STATE/weed.log" 2>&1 < /dev/null &
  echo $! > "$STATE/weed.pid"
  local start=$SECONDS
  until healthy; do
    kill -0 "$(cat "$STATE/weed.pid")" 2> /dev/null || { tail -30 "$STATE/weed.log" >&2; die "weed exited"; }
    (( SECONDS - start < 120 )) || { tail -30 "$STATE/weed.log" >&2; die "S3 gateway not up in 120 s"; }
    sleep 1
  done
  # The tests' bucket (object_store creates objects, not buckets).
  local tries=0
  until echo "s3.bucket.create -name $BUCKET" \
      | "$weed" shell -master="127.0.0.1:$master" -filer="127.0.0.1:$filer" >> "$STATE/shell.log" 2>&1 \
      && grep -q "$BUCKET" < <(echo "s3.bucket.list" | "$weed" shell -master="127.0.0.1:$master" \
        -filer="127.0.0.1:$filer" 2>&1); do
    (( ++tries < 30 )) || { tail -20 "$STATE/shell.log" >&2; die "could not create bucket $BUCKET"; }
    sleep 1
  done
  log "up at $(endpoint) in $((SECONDS - start)) s, bucket $BUCKET (log: $STATE/weed.log)"
}

endpoint() { echo "http://127.0.0.1:$(cat "$STATE/s3.port")"; }

env_vars() {
  healthy || die "not up (scripts/s3.sh up)"
  echo "export SANDPOOL_TEST_S3_ENDPOINT=$(endpoint)"
  echo "export SANDPOOL_TEST_S3_ACCESS_KEY=$ACCESS_KEY"
  echo "export SANDPOOL_TEST_S3_SECRET_KEY=$SECRET_KEY"
  echo "export SANDPOOL_TEST_S3_REGION=$REGION"
  echo "export SANDPOOL_TEST_S3_BUCKET=$BUCKET"
}

down_quiet() {
  if [[ -f "$STATE/weed.pid" ]]; then
    local pid
    pid="$(cat "$STATE/weed.pid")"
    # setsid made weed a process group leader: end it and anything it started.
    kill -- "-$pid" 2> /dev/null || true
    for _ in $(seq 30); do kill -0 "$pid" 2> /dev/null || break; sleep 0.5; done
    kill -9 -- "-$pid" 2> /dev/null || true
  fi
  rm -rf "$STATE"
}

case "${1:-}" in
  build) build ;;
  up) up ;;
  env) env_vars ;;
  down) down_quiet; log "down" ;;
  logs) tail -50 "$STATE/weed.log" ;;
  *) die "usage: $0 build|up|env|down|logs" ;;
esac
