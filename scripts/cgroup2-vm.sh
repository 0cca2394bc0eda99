#!/usr/bin/env bash
# Runs a command inside a cgroup v2 "container" in a throwaway VM, so that the executor's
# cgroup v2 path runs on machines whose own cgroups are v1.
#
#   scripts/cgroup2-vm.sh OUT_DIR COMMAND [ARG...]
#
# The VM (QEMU, software emulation: KVM guests hang on some hosts) boots the newest kernel in
# /boot with a tiny initramfs built here into a temp dir (busybox + the 9p/virtio modules), and
# mounts the host's root read-only over 9p as its own root. Its init (this script, `guest`)
# mounts cgroup2, makes a Kubernetes-like cgroup for the container
# (/kubepods/pod-vm/executor: memory, pids and cpu enabled, limits set) and starts COMMAND in it
# the way a runtime starts a non-privileged container: new cgroup and mount namespaces, cgroup2
# mounted read-only (rooted at the container's cgroup), /sys read-only, capabilities bounded to
# the ones the operator grants the executor in namespaces mode, no_new_privs, a tmpfs /tmp (for work roots).
# There is no network device; loopback is up.
#
# OUT_DIR is shared writable with the guest (mounted at /run/out). What comes back in it:
#   status          COMMAND's exit status
#   command.log     COMMAND's stdout and stderr
#   cgroups-after   every cgroup directory (relative to the root) once COMMAND has exited
#   console.log     the guest's serial console (kernel messages, init's trace)
# The script exits with COMMAND's status, or 2 (set-up failure, missing QEMU or kernel) or
# 124 (no answer within SANDPOOL_VM_TIMEOUT seconds, default 900).
#
# Needs root (reading /boot/vmlinuz-*), qemu-system-x86, linux-image-amd64 and busybox-static
# (scripts/install-deps.sh installs them). SANDPOOL_VM_KERNEL picks another kernel image;
# SANDPOOL_VM_CAPABILITIES another capability list (comma-separated, lower case).
set -euo pipefail

# What the operator grants the executor's container in namespaces mode
# (NAMESPACES_CAPABILITIES in operator/src/build/deployment.rs; the test passes that list).
CAPABILITIES=${SANDPOOL_VM_CAPABILITIES:-sys_admin,sys_chroot,setuid,setgid,kill,chown,dac_override,fowner,net_admin}
CONTAINER_CGROUP=kubepods/pod-vm/executor
CONTROLLERS="+memory +pids +cpu"
SELF=$(readlink -f "${BASH_SOURCE[0]}")

die() { echo "cgroup2-vm: $*" >&2; exit 2; }
# In the guest: a line on the console, stamped with the seconds since boot.
say() { echo "[$(cut -d' ' -f1 /proc/uptime)] cgroup2-vm: $*" >/dev/console; }

# ---------------------------------------------------------------- host side
host() {
  [ $# -ge 2 ] || die "usage: $0 OUT_DIR COMMAND [ARG...]"
  local out; out=$(readlink -f "$1"); shift
  [ -d "$out" ] || die "$out: not a directory"
  command -v qemu-system-x86_64 >/dev/null || die "qemu-system-x86_64 not found (apt-get install qemu-system-x86)"
  local bb; bb=$(command -v busybox || true)
  # ldd fails on a static binary: the initramfs has no libraries for a dynamic one.
  [ -n "$bb" ] && ! ldd "$bb" >/dev/null 2>&1 || die "a static busybox is needed (apt-get install busybox-static)"

  local kernel="${SANDPOOL_VM_KERNEL:-}" kver
  if [ -z "$kernel" ]; then
    kernel=$(ls -1 /boot/vmlinuz-* 2>/dev/null | sort -V | tail -n1 || true)
  fi
  [ -n "$kernel" ] && [ -r "$kernel" ] || die "no readable kernel in /boot (apt-get install linux-image-amd64)"
  kver=${kernel##*/vmlinuz-}
  [ -d "/lib/modules/$kver" ] || die "no modules for $kver in /lib/modules"

  local tmp; tmp=$(mktemp -d /tmp/cgroup2-vm.XXXXXX)
  trap 'rm -rf "$tmp"' EXIT
  build_initramfs "$tmp/initramfs" "$kver" > "$tmp/initrd.cpio"

  printf '%q ' "$@" > "$out/command"
  echo "$CAPABILITIES" > "$out/capabilities"
  rm -f "$out/status" "$out/cgroups-after" "$out/command.log" "$out/console.log" "$out/results"

  echo "cgroup2-vm: booting $kernel (TCG) for: $*" >&2
  local rc=0
  # 2 vCPUs: the executor's slots and supervision threads really run in parallel.
  timeout --kill-after=10 "${SANDPOOL_VM_TIMEOUT:-900}" qemu-system-x86_64 \
    -accel tcg -cpu max -smp 2 -m 2048 \
    -kernel "$kernel" -initrd "$tmp/initrd.cpio" \
    -append "console=ttyS0 panic=-1 loglevel=4 sandpool.self=$SELF" \
    -display none -monitor none -serial "file:$out/console.log" -no-reboot -nic none \
    -virtfs "local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap" \
    -virtfs "local,path=$out,mount_tag=out,security_model=none,multidevs=remap" \
    || rc=$?
  [ "$rc" = 124 ] && { echo "cgroup2-vm: the VM did not finish in time" >&2; exit 124; }
  [ "$rc" = 0 ] || die "qemu exited with $rc (see $out/console.log)"
  [ -s "$out/status" ] || die "the guest wrote no status (see $out/console.log)"
  exit "$(cat "$out/status")"
}

# Modules (and their dependencies, dependencies first) that mount a virtio 9p root.
module_files() {
  local kver=$1 seen=" "
  visit() {
    case "$seen" in *" $1 "*) return ;; esac
    seen="$seen$1 "
    local dep deps
    deps=$(modinfo -k "$kver" -F depends "$1") || die "module $1 not found for $kver"
    for dep in ${deps//,/ }; do visit "$dep"; done
    modinfo -k "$kver" -n "$1"
  }
  for m in virtio_pci 9pnet_virtio 9p; do visit "$m"; done
}

build_initramfs() {
  local dir=$1 kver=$2 f n=0
  mkdir -p "$dir"/{bin,dev,proc,sys,newroot,modules}
  cp "$(command -v busybox)" "$dir/bin/busybox"
  for f in $(module_files "$kver"); do
    n=$((n + 1))
    case "$f" in
      *.ko) cp "$f" "$dir/modules/$(printf %02d $n).ko" ;;
      *.ko.xz) xz -dc "$f" > "$dir/modules/$(printf %02d $n).ko" ;;
      *.ko.zst) zstd -qdc "$f" > "$dir/modules/$(printf %02d $n).ko" ;;
      *) die "cannot load module file $f" ;;
    esac
  done
  cat > "$dir/init" <<'EOF'
#!/bin/busybox sh
/bin/busybox mount -t proc proc /proc
/bin/busybox --install -s /bin
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
for m in /modules/*.ko; do insmod "$m" || echo "cgroup2-vm: insmod $m failed"; done
# The host's root, read-only, as a container image would be; cached: nothing changes it meanwhile.
mount -t 9p -o ro,trans=virtio,version=9p2000.L,msize=512000,cache=loose hostroot /newroot \
  || { echo "cgroup2-vm: cannot mount the host's root"; echo o > /proc/sysrq-trigger; }
self=$(sed -n 's/.*sandpool\.self=\([^ ]*\).*/\1/p' /proc/cmdline)
umount /proc /sys /dev
exec switch_root /newroot /bin/bash "$self" guest
EOF
  chmod +x "$dir/init"
  (cd "$dir" && find . | busybox cpio -o -H newc 2>/dev/null)
}

# ---------------------------------------------------------------- guest side (PID 1)
guest() {
  # PID 1: an error must not end it (the kernel panics), the status file says what failed.
  set +e
  export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
  mount -t proc proc /proc
  mount -t sysfs sysfs /sys
  mount -t devtmpfs devtmpfs /dev
  mkdir -p /dev/shm /dev/pts
  mount -t tmpfs -o nosuid,nodev tmpfs /dev/shm
  mount -t tmpfs tmpfs /run
  # A checkout under /tmp (CI's clone may be there) must stay visible under the guest's own
  # /tmp: its binaries and this script are read from it.
  local repo; repo=$(dirname "$(dirname "$SELF")")
  mkdir -p /run/host-tmp && mount --bind /tmp /run/host-tmp
  mount -t tmpfs tmpfs /tmp
  case "$repo" in
    /tmp/*) mkdir -p "$repo" && mount --bind "/run/host-tmp/${repo#/tmp/}" "$repo" ;;
  esac
  mkdir -p /run/out
  mount -t 9p -o trans=virtio,version=9p2000.L,msize=512000 out /run/out
  busybox ip link set lo up
  local status=2
  if runtime_cgroups; then
    say "running the container"
    status=0
    local caps; caps=$(cat /run/out/capabilities)
    # A container: its own cgroup (joined before unsharing, so it is the namespace's root)
    # and mount namespace; capabilities bounded as Kubernetes would.
    /bin/bash -c 'echo $$ > "$1/cgroup.procs" && shift && exec "$@"' _ "/sys/fs/cgroup/$CONTAINER_CGROUP" \
      unshare --cgroup --mount --propagation private -- \
      setpriv --no-new-privs --inh-caps=-all --bounding-set="-all,+${caps//,/,+}" -- \
      /bin/bash "$SELF" container > /run/out/command.log 2>&1 || status=$?
    # Every process of the container is gone once its cgroup holds none.
    local i
    for i in $(seq 100); do
      [ -z "$(cat "/sys/fs/cgroup/$CONTAINER_CGROUP/cgroup.procs")" ] && \
        [ -z "$(find "/sys/fs/cgroup/$CONTAINER_CGROUP" -mindepth 2 -name cgroup.procs -exec cat {} +)" ] && break
      sleep 0.1
    done
    (cd /sys/fs/cgroup && find . -mindepth 1 -type d | sed 's|^\./||' | sort) > /run/out/cgroups-after
  fi
  echo "$status" > /run/out/status
  sync
  say "container exited with $status"
  umount /run/out
  echo o > /proc/sysrq-trigger
  sleep 60
}

# What the node's runtime (systemd, containerd) sets up before it starts a container.
runtime_cgroups() {
  mount -t cgroup2 -o nosuid,nodev,noexec cgroup2 /sys/fs/cgroup || return 1
  local dir=/sys/fs/cgroup part
  for part in ${CONTAINER_CGROUP//\// }; do
    echo "$CONTROLLERS" > "$dir/cgroup.subtree_control" || return 1
    dir="$dir/$part"
    mkdir "$dir" || return 1
  done
  # A pod's limits; the executor's slots live below them.
  echo 1536M > "$dir/memory.max"
  echo 4096 > "$dir/pids.max"
}

# Inside the container's namespaces: the mounts a runtime gives a non-privileged container.
container() {
  set +e
  umount /sys/fs/cgroup
  mount -o remount,bind,ro,nosuid,nodev,noexec /sys
  mount -t cgroup2 -o ro,nosuid,nodev,noexec,relatime cgroup2 /sys/fs/cgroup
  echo "cgroup2-vm: in the container: cgroup $(cat /proc/self/cgroup), capabilities $(grep CapEff /proc/self/status)"
  local command; command=$(cat /run/out/command)
  eval "exec $command"
}

case "${1:-}" in
  guest) guest ;;
  container) container ;;
  *) host "$@" ;;
esac
