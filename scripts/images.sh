#!/usr/bin/env bash
# Builds the executor and operator images as OCI archives, with no registry and no Docker:
# a Debian bookworm root from Debian's packages (debootstrap --variant=minbase, then apt-get in
# a chroot for docker/executor-packages.txt), our binaries on top, packed by Debian's umoci.
# docker/*.Dockerfile stay the published recipe; both read the same package list.
#
#   scripts/images.sh [--full] [--release] [--out DIR]
#
#   --full     the executor image with every tier of docker/executor-packages.txt (the whole
#              language table); default: the `slim` tier only (Python + its runtime, C, C++),
#              which is what the node e2e test and CI use
#   --release  build the binaries with `cargo build --release` (default: debug, which
#              scripts/test.sh builds anyway)
#   --out DIR  where the archives go (default target/images)
#
# Output: DIR/executor.oci.tar and DIR/operator.oci.tar, OCI image layouts whose index entries
# carry io.containerd.image.name (ghcr.io/sandpool/{executor,operator}:<chart appVersion>, the
# chart's defaults), so `ctr -n k8s.io images import FILE` names them. The executor image also
# carries the `sandpool` CLI, so the e2e test's eval Job runs from it.
#
# Knobs: SANDPOOL_IMAGE_CACHE (unpacked roots, keyed by their package list; default
# ~/.cache/sandpool-images), SANDPOOL_IMAGE_BINARIES (a directory holding already built
# sandpool-executor, sandpool, sandpool-operator and sandpool-gateway: skips cargo),
# DEBIAN_MIRROR. The operator image also carries /sandpool-gateway: the operator runs it,
# from its own image, as each HTTP pool's gateway.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${SANDPOOL_IMAGE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/sandpool-images}"
# The Debian mirror: DEBIAN_MIRROR, else the one this machine's apt uses for the main archive.
MIRROR="${DEBIAN_MIRROR:-$(awk '/^URIs:/ && $2 !~ /security/ { print $2; exit }' \
  /etc/apt/sources.list.d/*.sources 2> /dev/null)}"
MIRROR="${MIRROR:-$(awk '$1 == "deb" && $3 == "bookworm" { print $2; exit }' /etc/apt/sources.list 2> /dev/null)}"
SUITE=bookworm
PACKAGES="$ROOT/docker/executor-packages.txt"
VERSION="$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' "$ROOT/charts/sandpool/Chart.yaml")"
# The unprivileged identity of both images (docker/*.Dockerfile): restricted pools run as it.
UID_NONROOT=65532

FULL=false
PROFILE=debug
OUT="$ROOT/target/images"
while (($#)); do
  case "$1" in
    --full) FULL=true ;;
    --release) PROFILE=release ;;
    --out) OUT="$2"; shift ;;
    *) echo "usage: $0 [--full] [--release] [--out DIR]" >&2; exit 2 ;;
  esac
  shift
done

log() { echo "images: $*" >&2; }
die() { log "$*"; exit 1; }

[[ -n $MIRROR ]] || die "no Debian mirror in /etc/apt: set DEBIAN_MIRROR"
for tool in debootstrap umoci jq; do
  command -v "$tool" > /dev/null || die "$tool is not on PATH (scripts/install-deps.sh installs it)"
done
[[ $(id -u) == 0 ]] || die "needs root (debootstrap and chroot)"

# The packages of the tiers asked for, in file order.
packages() {
  local tiers=slim
  $FULL && tiers="slim full"
  awk -v tiers=" $tiers " '!/^#/ && NF && index(tiers, " " $1 " ") { for (i = 2; i <= NF; i++) print $i }' "$PACKAGES"
}

# Mounts made for apt-get in a chroot; always undone, even when the build fails.
MOUNTED=()
unmount_all() {
  local i
  for ((i = ${#MOUNTED[@]} - 1; i >= 0; i--)); do
    umount "${MOUNTED[i]}" 2> /dev/null || umount -l "${MOUNTED[i]}" 2> /dev/null || true
  done
  MOUNTED=()
}
trap unmount_all EXIT

# The executor's root filesystem, cached under a key of everything that decides its content:
# the package list, the mirror and suite, and this function. A second run reuses it as is
# (rebuild by deleting the cache directory; Debian's point releases then come in).
executor_rootfs() {
  local key dir tmp
  key="$( (packages; echo "$MIRROR $SUITE"; declare -f executor_rootfs) | sha256sum | cut -c1-16)"
  $FULL && dir="$CACHE/executor-full-$key" || dir="$CACHE/executor-slim-$key"
  if [[ -f "$dir/.complete" ]]; then
    log "reusing the root filesystem $dir"
    echo "$dir/rootfs"
    return
  fi
  mkdir -p "$CACHE"
  tmp="$(mktemp -d "$CACHE/.tmp.XXXXXX")"
  log "debootstrap $SUITE (minbase) into $tmp"
  debootstrap --variant=minbase "$SUITE" "$tmp/rootfs" "$MIRROR" > "$tmp/debootstrap.log" 2>&1 \
    || { tail -n 20 "$tmp/debootstrap.log" >&2; rm -rf "$tmp"; die "debootstrap failed"; }
  local r="$tmp/rootfs"
  # apt-get in the chroot: it needs /proc, and the host's resolver to reach the mirror.
  mount -t proc proc "$r/proc" && MOUNTED+=("$r/proc")
  cp /etc/resolv.conf "$r/etc/resolv.conf"
  # No service may start inside the chroot (policy-rc.d), and no documentation is kept.
  printf '#!/bin/sh\nexit 101\n' > "$r/usr/sbin/policy-rc.d"
  chmod 755 "$r/usr/sbin/policy-rc.d"
  cat > "$r/etc/dpkg/dpkg.cfg.d/sandpool-nodoc" <<'EOF'
path-exclude=/usr/share/doc/*
path-include=/usr/share/doc/*/copyright
path-exclude=/usr/share/man/*
path-exclude=/usr/share/info/*
path-exclude=/usr/share/locale/*
EOF
  # shellcheck disable=SC2046 # one word per package
  chroot "$r" /usr/bin/env DEBIAN_FRONTEND=noninteractive LC_ALL=C \
    apt-get install -y -q --no-install-recommends $(packages) > "$tmp/apt.log" 2>&1 \
    || { tail -n 30 "$tmp/apt.log" >&2; unmount_all; rm -rf "$tmp"; die "apt-get in the image root failed"; }
  if $FULL; then
    # npm packages benchmark harnesses require (as docker/executor.Dockerfile installs them):
    # plain JavaScript, installed by the machine's npm, whose TLS setup reaches the registry
    # (the image's own CA bundle may not trust what is between here and the registry).
    command -v npm > /dev/null || die "npm is not on PATH (needed for --full)"
    npm install --prefix "$r/opt/sandpool/node" --no-audit --no-fund --omit=dev \
      lodash@4 js-md5@0.8 >> "$tmp/apt.log" 2>&1 \
      || { tail -n 30 "$tmp/apt.log" >&2; unmount_all; rm -rf "$tmp"; die "npm in the image root failed"; }
    rm -rf "$r/root/.npm"
  fi
  unmount_all
  chroot "$r" apt-get clean
  rm -rf "$r"/var/lib/apt/lists/* "$r/usr/sbin/policy-rc.d" "$r"/var/log/*.log "$r"/var/cache/debconf/*-old
  : > "$r/etc/resolv.conf"
  # The image's identity and work root, as in docker/executor.Dockerfile.
  chroot "$r" groupadd --gid "$UID_NONROOT" sandpool
  chroot "$r" useradd --uid "$UID_NONROOT" --gid "$UID_NONROOT" --home-dir /nonexistent \
    --no-create-home --shell /usr/sbin/nologin sandpool
  install -d -o "$UID_NONROOT" -g "$UID_NONROOT" -m 0750 "$r/var/lib/sandpool"
  touch "$tmp/.complete"
  rm -rf "$dir"
  mv "$tmp" "$dir"
  echo "$dir/rootfs"
}

# The binaries: SANDPOOL_IMAGE_BINARIES, or this checkout's cargo build.
binaries() {
  if [[ -n "${SANDPOOL_IMAGE_BINARIES:-}" ]]; then
    echo "$SANDPOOL_IMAGE_BINARIES"
    return
  fi
  local flags=(--locked -p sandpool-executor -p sandpool-cli -p sandpool-operator -p sandpool-gateway)
  [[ $PROFILE == release ]] && flags+=(--release)
  log "cargo build ${flags[*]}"
  (cd "$ROOT" && cargo build "${flags[@]}" >&2) || die "cargo build failed"
  echo "${CARGO_TARGET_DIR:-$ROOT/target}/$PROFILE"
}

# layout DIR ROOTFS CONFIG...: an OCI image layout at DIR, tag $VERSION, with ROOTFS as one
# layer and `umoci config` flags CONFIG.
layout() {
  local dir="$1" rootfs="$2" bundle
  shift 2
  bundle="$(mktemp -d "${TMPDIR:-/tmp}/sandpool-bundle.XXXXXX")"
  umoci init --layout "$dir"
  umoci new --image "$dir:$VERSION"
  rmdir "$bundle"
  umoci unpack --image "$dir:$VERSION" "$bundle" > /dev/null
  # The root's content as is (owners, modes, hard links).
  cp -a "$rootfs/." "$bundle/rootfs/"
  umoci repack --image "$dir:$VERSION" "$bundle"
  rm -rf "$bundle"
  umoci config --image "$dir:$VERSION" --os linux --architecture amd64 "$@"
}

# archive NAME DIR: writes the layout DIR as OUT/NAME.oci.tar, named
# ghcr.io/sandpool/NAME:VERSION for containerd.
archive() {
  local name="$1" dir="$2" ref="ghcr.io/sandpool/$1:$VERSION"
  umoci gc --layout "$dir"
  # containerd names what it imports from this annotation of each index entry (the OCI
  # ref.name alone is only a tag).
  jq --arg ref "$ref" '.manifests |= map(.annotations["io.containerd.image.name"] = $ref)' \
    "$dir/index.json" > "$dir/index.json.new"
  mv "$dir/index.json.new" "$dir/index.json"
  mkdir -p "$OUT"
  tar -C "$dir" -cf "$OUT/$name.oci.tar.tmp" .
  mv "$OUT/$name.oci.tar.tmp" "$OUT/$name.oci.tar"
  log "$ref: $OUT/$name.oci.tar ($(du -m "$OUT/$name.oci.tar" | cut -f1) MiB)"
}

# The executor's base image (the Debian root, its identity, entrypoint and ports), packed once
# per root: packing a gigabyte takes minutes, so a build only adds a layer of binaries to it.
executor_base() {
  local rootfs="$1" dir tmp
  dir="$(dirname "$rootfs")/oci"
  if [[ -f "$dir.complete" ]]; then
    echo "$dir"
    return
  fi
  rm -rf "$dir"
  tmp="$dir.tmp"
  rm -rf "$tmp"
  log "packing the executor's base layer (once per root filesystem)"
  layout "$tmp" "$rootfs" \
    --config.user "$UID_NONROOT:$UID_NONROOT" \
    --config.env SANDPOOL_WORK_ROOT=/var/lib/sandpool \
    --config.env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --config.entrypoint /usr/bin/tini --config.entrypoint -- \
    --config.entrypoint /usr/local/bin/sandpool-executor \
    --config.exposedports 50051/tcp --config.exposedports 8080/tcp --config.exposedports 9090/tcp \
    >&2
  mv "$tmp" "$dir"
  touch "$dir.complete"
  echo "$dir"
}

# A file's dynamic libraries (as ldd resolves them on this host), for the operator's
# minimal root.
libraries() {
  ldd "$1" | awk '/=> \// { print $3 } /^\t\/lib/ { print $1 }'
}

start=$SECONDS
rootfs="$(executor_rootfs)"
rooted=$SECONDS
bin="$(binaries)"
for b in sandpool-executor sandpool sandpool-operator sandpool-gateway; do
  [[ -x "$bin/$b" ]] || die "$bin/$b is missing"
done
built=$SECONDS

# Executor: the cached base plus a layer with the two binaries.
base="$(executor_base "$rootfs")"
stage="$(mktemp -d "${TMPDIR:-/tmp}/sandpool-stage.XXXXXX")"
trap 'unmount_all; rm -rf "$stage"' EXIT
mkdir -p "$stage/bin"
# Debug information is most of a debug build's size (symbols stay, for backtraces).
for b in sandpool-executor sandpool; do
  strip --strip-debug -o "$stage/bin/$b" "$bin/$b"
done
# Every library the binaries link must be in the image (the host is bookworm too, so the
# same paths): fail here, not in a pod.
for lib in $(libraries "$bin/sandpool-executor") $(libraries "$bin/sandpool"); do
  [[ -e "$rootfs$lib" ]] || die "the executor image lacks $lib"
done
cp -a "$base" "$stage/executor"
umoci insert --image "$stage/executor:$VERSION" "$stage/bin" /usr/local/bin
archive executor "$stage/executor"
log "executor: $(du -sm "$rootfs" | cut -f1) MiB unpacked"

# Operator: the operator and gateway binaries and the libraries they link, nothing else (the
# published image is a static musl build on distroless; this one needs no musl toolchain).
mkdir -p "$stage/operator/etc" "$stage/operator/tmp"
chmod 1777 "$stage/operator/tmp"
for b in sandpool-operator sandpool-gateway; do
  strip --strip-debug -o "$stage/operator/$b" "$bin/$b"
  for lib in $(libraries "$bin/$b"); do
    install -D -m 0755 "$lib" "$stage/operator$lib"
  done
done
printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:%s:%s:nonroot:/home/nonroot:/sbin/nologin\n' \
  "$UID_NONROOT" "$UID_NONROOT" > "$stage/operator/etc/passwd"
printf 'root:x:0:\nnonroot:x:%s:\n' "$UID_NONROOT" > "$stage/operator/etc/group"
for b in sandpool-operator sandpool-gateway; do
  missing="$(chroot "$stage/operator" /lib64/ld-linux-x86-64.so.2 --list "/$b" | grep 'not found' || true)"
  [[ -z "$missing" ]] || die "the operator image lacks libraries for $b: $missing"
done
layout "$stage/operator-oci" "$stage/operator" \
  --config.user "$UID_NONROOT:$UID_NONROOT" \
  --config.entrypoint /sandpool-operator --config.cmd run \
  --config.exposedports 8081/tcp
archive operator "$stage/operator-oci"

log "done in $((SECONDS - start)) s (root filesystem $((rooted - start)) s, binaries $((built - rooted)) s," \
  "packing $((SECONDS - built)) s); $($FULL && echo full || echo slim) executor, $PROFILE binaries"
