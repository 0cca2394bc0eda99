# A real Kubernetes node for the test cluster: sourced by scripts/cluster.sh (`up --node`),
# not run on its own. docs/testing.md describes the layout and why each setting is there.
#
# The node runs containerd v2 + runc, the kubelet and kube-proxy (the control plane's version,
# from tests/cluster/go.mod), the CNI bridge, CoreDNS and kube-router (NetworkPolicy only), all
# built from pinned Go modules and cached by content. The whole cluster, control plane
# included, lives in a network namespace of its own whose only links are loopback, the pods'
# bridge and a veth to a second namespace playing "outside": nothing in it can reach the
# machine's network, even if a policy failed. Daemons enter it with `nsenter --net` (not
# `ip netns exec`, which remounts /sys and hides the cgroup filesystems runc needs).
#
# The kubelet runs on the host's cgroup v1 (failCgroupV1: false): controllers cannot be moved
# to v2 on these machines. It changes three machine-wide sysctls; `node_down` restores them.

# Pinned versions of everything the node adds to the control plane.
RUNC_MODULE=github.com/opencontainers/runc@v1.5.3
CONTAINERD_VERSION=v2.4.2
CNI_VERSION=v1.10.0
COREDNS_MODULE=github.com/coredns/coredns@v1.15.0
KUBE_ROUTER_VERSION=v2.1.0

# Addresses: all inside the namespaces this script creates. The first node's; node I (2, 3,
# ...) has its own namespace, 10.250.(I-1).2 on a veth whose other end (10.250.(I-1).1) is in
# the first node's namespace, and pods in 10.244.(I-1).0/24 (node_vars).
NODE_NAME=sandpool-node
NODE_IP=10.250.0.1        # the node's end of the veth (its InternalIP)
OUTSIDE_IP=10.250.0.2     # the other end, in the "outside" namespace
POD_CIDR=10.244.0.0/24
CLUSTER_CIDR=10.244.0.0/16
SERVICE_CIDR=10.96.0.0/16
# Real nodes (SANDPOOL_REAL_NODES, `up --node`; 1 by default, at most 9).
REAL_NODES=1
DNS_IP=10.96.0.10         # the kube-dns Service (in the API server's 10.96.0.0/16)
PAUSE_IMAGE=sandpool.dev/pause:1
# Machine-wide sysctls the kubelet sets; their values are saved before it starts.
GLOBAL_SYSCTLS=(vm.overcommit_memory kernel.panic kernel.panic_on_oops)
# Host paths containerd, runc, CNI and iptables create outside the state directory; removed on
# `down` only if they did not exist before `up`.
HOST_PATHS=(/opt/containerd /run/containerd /run/nri /run/runc /run/xtables.lock /var/lib/cni /etc/cni
  /var/log/containers /var/lib/kubelet)
NODE_COMPONENTS=(containerd kubelet kube-proxy coredns kube-router)
# The daemons of each further node (their names take the suffix -I).
NODE_EXTRA_COMPONENTS=(containerd kubelet kube-proxy kube-router)

# node_vars I: the names, addresses and paths of real node I (1 is the first), as N_* globals.
# The first node keeps the names a one-node cluster always had.
node_vars() {
  N_I="$1"
  if (($1 == 1)); then
    N_NAME="$NODE_NAME" N_IP="$NODE_IP" N_CIDR="$POD_CIDR" N_DIR="$STATE/node" N_NS="$NETNS" N_SUF=""
    N_API=127.0.0.1
  else
    N_NAME="$NODE_NAME-$1" N_IP="10.250.$(($1 - 1)).2" N_CIDR="10.244.$(($1 - 1)).0/24"
    N_DIR="$STATE/node-$1" N_NS="$NETNS-n$1" N_SUF="-$1"
    # Its daemons reach the API server over the routed veth, at the first node's address.
    N_API="$NODE_IP"
  fi
}

# Every component of REAL_NODES nodes.
node_components() {
  local i c
  echo "${NODE_COMPONENTS[@]}"
  for ((i = 2; i <= REAL_NODES; i++)); do
    for c in "${NODE_EXTRA_COMPONENTS[@]}"; do
      echo "$c-$i"
    done
  done
}

# --- binaries ------------------------------------------------------------------------------

# The directory of node binaries built from the pins above (and this function, and Go).
node_bin_dir() {
  local key
  key="$( (declare -f node_build; echo "$RUNC_MODULE $CONTAINERD_VERSION $CNI_VERSION $COREDNS_MODULE" \
    "$KUBE_ROUTER_VERSION"; cat "$MODULE/pause/main.go"; "$GO" version) | sha256sum | cut -c1-16)"
  echo "$CACHE/node-$key"
}

node_build() {
  local bin
  bin="$(node_bin_dir)"
  if [[ -f "$bin/.complete" ]]; then
    echo "$bin"
    return
  fi
  local start=$SECONDS tmp
  log "building the node (containerd, runc, CNI, CoreDNS, kube-router) into $bin (cold: minutes)"
  mkdir -p "$CACHE"
  tmp="$(mktemp -d "$CACHE/.tmp.XXXXXX")"
  # Each module on its own (`go install PKG@VERSION`: its own go.mod, no shared resolution).
  local cd=github.com/containerd/containerd/v2/cmd cni=github.com/containernetworking/plugins/plugins
  (
    set -e
    export GOBIN="$tmp" GOFLAGS=-buildvcs=false
    # runc needs cgo for libseccomp (RuntimeDefault seccomp profiles); Debian's libseccomp-dev.
    CGO_ENABLED=1 "$GO" install -trimpath -ldflags="-s -w" -tags seccomp "$RUNC_MODULE"
    CGO_ENABLED=0 "$GO" install -trimpath -ldflags="-s -w" -tags "no_btrfs no_devmapper" \
      "$cd/containerd@$CONTAINERD_VERSION" "$cd/ctr@$CONTAINERD_VERSION" \
      "$cd/containerd-shim-runc-v2@$CONTAINERD_VERSION"
    mkdir -p "$tmp/cni"
    GOBIN="$tmp/cni" CGO_ENABLED=0 "$GO" install -trimpath -ldflags="-s -w" \
      "$cni/main/bridge@$CNI_VERSION" "$cni/main/loopback@$CNI_VERSION" \
      "$cni/ipam/host-local@$CNI_VERSION" "$cni/meta/portmap@$CNI_VERSION"
    CGO_ENABLED=0 "$GO" install -trimpath -ldflags="-s -w" "$COREDNS_MODULE"
    CGO_ENABLED=0 "$GO" install -trimpath -ldflags="-s -w" \
      "github.com/cloudnativelabs/kube-router/v2/cmd/kube-router@$KUBE_ROUTER_VERSION"
    # The sandbox image's process: static, as the image holds nothing else.
    (cd "$MODULE" && CGO_ENABLED=0 "$GO" build -trimpath -ldflags="-s -w" -o "$tmp/pause" ./pause)
  ) >&2 || { rm -rf "$tmp"; die "building the node failed"; }
  touch "$tmp/.complete"
  rm -rf "$bin"
  mv "$tmp" "$bin"
  log "node built in $((SECONDS - start)) s"
  echo "$bin"
}

# --- namespaces, cgroups, configuration -----------------------------------------------------

# Runs a command in the cluster's network namespace.
in_netns() { nsenter --net="/run/netns/$NETNS" "$@"; }

node_netns() {
  ip netns add "$NETNS"
  ip netns add "$OUTNS"
  # The veth is created inside the cluster's namespace and its peer moved straight into the
  # outside one: it never has an end in the machine's namespace.
  ip -n "$NETNS" link add eth0 type veth peer name eth0 netns "$OUTNS"
  ip -n "$NETNS" link set lo up
  ip -n "$NETNS" addr add "$NODE_IP/24" dev eth0
  ip -n "$NETNS" link set eth0 up
  ip -n "$OUTNS" link set lo up
  ip -n "$OUTNS" addr add "$OUTSIDE_IP/24" dev eth0
  ip -n "$OUTNS" link set eth0 up
  # The outside answers pods directly (no masquerading), so it routes their range back.
  ip -n "$OUTNS" route add "$CLUSTER_CIDR" via "$NODE_IP"
  # ... and the further nodes' addresses (10.250.I.0/24, behind the first node).
  ip -n "$OUTNS" route add 10.250.0.0/16 via "$NODE_IP"
  # No default route: an address outside these namespaces is unreachable by construction.
  # Forwarding between the bridge and the node's addresses, and bridged traffic through
  # iptables/nftables (Service NAT and NetworkPolicy between pods on the same bridge); both
  # sysctls are per network namespace.
  in_netns sysctl -q -w net.ipv4.ip_forward=1 net.bridge.bridge-nf-call-iptables=1
  echo "$NETNS" > "$STATE/node/netns-created"
  echo "$OUTNS" >> "$STATE/node/netns-created"
  local i gw
  for ((i = 2; i <= REAL_NODES; i++)); do
    node_vars "$i"
    gw="10.250.$((i - 1)).1"
    ip netns add "$N_NS"
    echo "$N_NS" >> "$STATE/node/netns-created"
    # A veth between the first node's namespace (nI) and this node's (eth0): the only link
    # this node has, so it too reaches nothing outside these namespaces.
    ip -n "$NETNS" link add "n$i" type veth peer name eth0 netns "$N_NS"
    ip -n "$NETNS" addr add "$gw/24" dev "n$i"
    ip -n "$NETNS" link set "n$i" up
    ip -n "$N_NS" link set lo up
    ip -n "$N_NS" addr add "$N_IP/24" dev eth0
    ip -n "$N_NS" link set eth0 up
    # Pod CIDRs per node, routed (no overlay): the first node's namespace is the hub.
    ip -n "$NETNS" route add "$N_CIDR" via "$N_IP"
    local net
    for net in "$CLUSTER_CIDR" 10.250.0.0/16 "$SERVICE_CIDR"; do
      ip -n "$N_NS" route add "$net" via "$gw"
    done
    nsenter --net="/run/netns/$N_NS" sysctl -q -w net.ipv4.ip_forward=1 net.bridge.bridge-nf-call-iptables=1
  done
}

# The cgroup parent of every pod: below this machine's own memory cgroup (the only controller
# that nests our processes below the root), created in every v1 hierarchy.
node_cgroups() {
  local base ctrl dir path parent
  base="$(awk -F: '$2 == "memory" { print $3 }' /proc/self/cgroup)"
  base="${base%/}"
  # Each node its own cgroupRoot, so two kubelets never manage the same tree.
  CGROUP_ROOT="$base/sandpool-node-$KEY$N_SUF"
  mkdir -p "$N_DIR"
  echo "$CGROUP_ROOT" > "$N_DIR/cgroup-root"
  for dir in /sys/fs/cgroup/*/; do
    ctrl="$(basename "$dir")"
    [[ -f "$dir/cgroup.procs" ]] || continue
    path="${dir%/}"
    if [[ $ctrl == unified ]]; then
      # runc mirrors every container's path in the (controller-less) v2 hierarchy: the levels
      # missing now are runc's to create and ours to remove.
      for part in ${CGROUP_ROOT//\// }; do
        path="$path/$part"
        [[ -d "$path" ]] || echo "$path" >> "$N_DIR/cgroups-created"
      done
      continue
    fi
    # Create each level, filling cpuset's cpus and mems from the parent (they start empty).
    for part in ${CGROUP_ROOT//\// }; do
      parent="$path"
      path="$path/$part"
      if [[ ! -d "$path" ]]; then
        mkdir "$path"
        echo "$path" >> "$N_DIR/cgroups-created"
        if [[ $ctrl == cpuset ]]; then
          cat "$parent/cpuset.cpus" > "$path/cpuset.cpus"
          cat "$parent/cpuset.mems" > "$path/cpuset.mems"
        fi
      fi
    done
  done
}

# What every node shares: the client certificates of kube-proxy, kube-router and CoreDNS
# (one CoreDNS, on the first node) and CoreDNS's configuration.
node_config_common() {
  local client='basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=clientAuth'
  cert kube-proxy system:kube-proxy "" "$client"
  # CoreDNS and kube-router read cluster-wide objects (and kube-router writes nothing); in a
  # throwaway cluster an admin certificate saves two ClusterRoles.
  cert coredns sandpool-coredns system:masters "$client"
  cert kube-router sandpool-kube-router system:masters "$client"
  kubeconfig coredns
  cat > "$STATE/node/Corefile" <<EOF
.:53 {
  errors
  kubernetes cluster.local in-addr.arpa ip6.arpa {
    kubeconfig $STATE/coredns.kubeconfig sandpool-e2e
    pods insecure
    fallthrough in-addr.arpa ip6.arpa
  }
  cache 5
}
EOF
}

# The configuration of node N_I (node_vars): its credentials, CNI, containerd, kubelet and
# kube-proxy, every path its own, so several nodes run side by side on one machine.
node_config() {
  local n="$N_DIR" pki="$STATE/pki" name
  mkdir -p "$n/cni/net.d" "$n/cni/ipam" "$n/containerd" "$n/kubelet" "$n/pod-logs"
  # The node's credentials: a client certificate the Node authorizer accepts (no bootstrap),
  # and a serving certificate for kubectl logs/exec through the API server.
  cert "kubelet$N_SUF" "system:node:$N_NAME" system:nodes "basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=clientAuth"
  cert "kubelet-serving$N_SUF" "$N_NAME" "" "basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth
subjectAltName=IP:$N_IP,DNS:$N_NAME"
  kubeconfig "kubelet$N_SUF" "kubelet$N_SUF" "$N_API"
  for name in kube-proxy kube-router; do
    kubeconfig "$name" "$name$N_SUF" "$N_API"
  done

  cat > "$n/cni/net.d/10-sandpool.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "sandpool",
  "plugins": [
    {
      "type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": false, "hairpinMode": true,
      "ipam": {
        "type": "host-local", "dataDir": "$n/cni/ipam",
        "ranges": [[{"subnet": "$N_CIDR"}]], "routes": [{"dst": "0.0.0.0/0"}]
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
EOF

  # containerd 2 (config version 3). restrict_oom_score_adj: these machines deny
  # CAP_SYS_RESOURCE, and runc would fail every sandbox lowering oom_score_adj.
  cat > "$n/containerd/config.toml" <<EOF
version = 3
root = "$n/containerd/root"
state = "$n/containerd/state"
[grpc]
  address = "$n/containerd/containerd.sock"
[ttrpc]
  address = "$n/containerd/containerd.sock.ttrpc"
[debug]
  level = "warn"
[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = "$PAUSE_IMAGE"
[plugins.'io.containerd.cri.v1.runtime']
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  enable_selinux = false
  disable_apparmor = true
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = "runc"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        BinaryName = "$NODE_BIN/runc"
        SystemdCgroup = false
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ["$NODE_BIN/cni"]
    conf_dir = "$n/cni/net.d"
[plugins.'io.containerd.grpc.v1.cri']
  disable_tcp_service = true
[plugins.'io.containerd.internal.v1.opt']
  path = "$n/containerd/opt"
[plugins.'io.containerd.nri.v1.nri']
  disable = true
EOF

  cat > "$n/kubelet/config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# cgroup v1: the only hierarchy with controllers on these machines.
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupsPerQOS: true
cgroupRoot: $CGROUP_ROOT
# No CAP_SYS_RESOURCE: the kubelet must not lower its own oom_score_adj.
oomScoreAdj: 0
containerRuntimeEndpoint: unix://$n/containerd/containerd.sock
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $pki/ca.crt}
authorization: {mode: Webhook}
tlsCertFile: $pki/kubelet-serving$N_SUF.crt
tlsPrivateKeyFile: $pki/kubelet-serving$N_SUF.key
address: $N_IP
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
clusterDomain: cluster.local
clusterDNS: [$DNS_IP]
resolvConf: ""
podLogsDir: $n/pod-logs
volumePluginDir: $n/kubelet/volume-plugins
failSwapOn: false
staticPodPath: ""
# Disk and memory are shared with the machine's other work: evict only when nearly out, and
# never collect the imported images (there is no registry to pull them back from).
evictionHard: {memory.available: "200Mi", nodefs.available: "1%", imagefs.available: "1%", nodefs.inodesFree: "1%"}
# A test node: a pressure that has passed (the machine's disk filled for a moment) clears in
# seconds, not the default 5 minutes, so it does not fail the rest of a run.
evictionPressureTransitionPeriod: 10s
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
EOF

  cat > "$n/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: nftables
hostnameOverride: $N_NAME
clusterCIDR: $CLUSTER_CIDR
clientConnection: {kubeconfig: $STATE/kube-proxy$N_SUF.kubeconfig}
# 0: leave the machine-wide conntrack table size (and the timeouts) alone.
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
metricsBindAddress: 127.0.0.1:10249
healthzBindAddress: 127.0.0.1:10256
EOF
}

# Packs the pause binary as the sandbox image and imports it and each archive in
# SANDPOOL_NODE_IMAGES (a directory of *.oci.tar, default target/images from scripts/images.sh).
# Every node's containerd imports them at once (the executor image takes most of a minute).
node_images() {
  local work i pids=()
  work="$(mktemp -d "$STATE/node/pause.XXXXXX")"
  mkdir -p "$work/rootfs"
  install -m 0755 "$NODE_BIN/pause" "$work/rootfs/pause"
  umoci init --layout "$work/oci" > /dev/null
  umoci new --image "$work/oci:1" > /dev/null
  umoci unpack --image "$work/oci:1" "$work/bundle" > /dev/null
  cp -a "$work/rootfs/." "$work/bundle/rootfs/"
  umoci repack --image "$work/oci:1" "$work/bundle" > /dev/null
  umoci config --image "$work/oci:1" --os linux --architecture amd64 --config.entrypoint /pause \
    --config.user 65535:65535 > /dev/null
  jq --arg ref "$PAUSE_IMAGE" '.manifests |= map(.annotations["io.containerd.image.name"] = $ref)' \
    "$work/oci/index.json" > "$work/index.json"
  mv "$work/index.json" "$work/oci/index.json"
  tar -C "$work/oci" -cf "$work/pause.tar" .
  local dir="${SANDPOOL_NODE_IMAGES:-$ROOT/target/images}"
  compgen -G "$dir/*.oci.tar" > /dev/null || die "no images in $dir: run scripts/images.sh first"
  for ((i = 1; i <= REAL_NODES; i++)); do
    node_vars "$i"
    node_import "$N_DIR/containerd/containerd.sock" "$work/pause.tar" "$dir"/*.oci.tar &
    pids+=($!)
  done
  for i in "${pids[@]}"; do
    wait "$i" || die "importing the images failed"
  done
  rm -rf "$work"
  "$NODE_BIN/ctr" --address "$STATE/node/containerd/containerd.sock" -n k8s.io images ls -q |
    grep -v '^sha256:' | sed 's/^/cluster: image /' >&2
}

# node_import SOCKET ARCHIVE...: imports each archive into the containerd at SOCKET.
node_import() {
  local sock="$1" archive
  shift
  for archive in "$@"; do
    "$NODE_BIN/ctr" --address "$sock" -n k8s.io images import "$archive" > /dev/null ||
      { log "importing $archive into $sock failed"; return 1; }
  done
}

# --- up and down ---------------------------------------------------------------------------

# Starts the node's daemons, after the control plane is up in the namespace.
node_up() {
  local n="$STATE/node" s i
  # Save the machine-wide sysctls the kubelet will change (restored by node_down).
  for s in "${GLOBAL_SYSCTLS[@]}"; do
    echo "$s=$(sysctl -n "$s")"
  done > "$n/sysctls.saved"
  for ((i = 1; i <= REAL_NODES; i++)); do
    node_vars "$i"
    START_NETNS="$N_NS" start "containerd$N_SUF" "$NODE_BIN/containerd" --config "$N_DIR/containerd/config.toml"
  done
  for ((i = 1; i <= REAL_NODES; i++)); do
    node_vars "$i"
    wait_until 60 "containerd$N_SUF" "$NODE_BIN/ctr" --address "$N_DIR/containerd/containerd.sock" version
  done
  node_images

  for ((i = 1; i <= REAL_NODES; i++)); do
    node_vars "$i"
    START_NETNS="$N_NS" start "kubelet$N_SUF" "$BIN/kubelet" --config="$N_DIR/kubelet/config.yaml" \
      --kubeconfig="$STATE/kubelet$N_SUF.kubeconfig" --root-dir="$N_DIR/kubelet/root" \
      --cert-dir="$N_DIR/kubelet/pki" --hostname-override="$N_NAME" --node-ip="$N_IP" \
      --node-labels="sandpool.dev/node=real"
    # The kubelet's device-plugin socket has a fixed, machine-wide path: each kubelet empties
    # the directory, then binds it, so two starting together can collide (EADDRINUSE, and the
    # second exits). The next one starts once this one is registered and has bound it.
    if ((i < REAL_NODES)); then
      wait_until 120 "the node $N_NAME to register" kubectl get node "$N_NAME"
      wait_until 60 "$N_NAME's kubelet to bind its device-plugin socket" \
        test -S /var/lib/kubelet/device-plugins/kubelet.sock
    fi
  done
  for ((i = 1; i <= REAL_NODES; i++)); do
    node_vars "$i"
    wait_until 120 "the node $N_NAME to register" kubectl get node "$N_NAME"
    # kube-router reads the node's pod CIDR (no controller allocates one here).
    kubectl patch node "$N_NAME" --type=merge \
      -p "{\"spec\":{\"podCIDR\":\"$N_CIDR\",\"podCIDRs\":[\"$N_CIDR\"]}}" > /dev/null
    START_NETNS="$N_NS" start "kube-proxy$N_SUF" "$BIN/kube-proxy" --config="$N_DIR/kube-proxy.yaml"
    START_NETNS="$N_NS" start "kube-router$N_SUF" "$NODE_BIN/kube-router" \
      --kubeconfig="$STATE/kube-router$N_SUF.kubeconfig" \
      --run-firewall=true --run-router=false --run-service-proxy=false --enable-cni=false \
      --hostname-override="$N_NAME"
  done
  start coredns "$NODE_BIN/coredns" -conf "$n/Corefile"
  # The kubelet's clusterDNS: a Service without a selector, its endpoint CoreDNS on the node.
  kubectl apply -f - > /dev/null <<EOF
apiVersion: v1
kind: Service
metadata: {name: kube-dns, namespace: kube-system, labels: {k8s-app: kube-dns}}
spec:
  clusterIP: $DNS_IP
  ports:
    - {name: dns, port: 53, protocol: UDP, targetPort: 53}
    - {name: dns-tcp, port: 53, protocol: TCP, targetPort: 53}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: kube-dns-node
  namespace: kube-system
  labels: {kubernetes.io/service-name: kube-dns, endpointslice.kubernetes.io/managed-by: sandpool-node}
addressType: IPv4
endpoints:
  - addresses: ["$NODE_IP"]
    conditions: {ready: true}
    nodeName: $NODE_NAME
ports:
  - {name: dns, port: 53, protocol: UDP}
  - {name: dns-tcp, port: 53, protocol: TCP}
EOF
  for ((i = 1; i <= REAL_NODES; i++)); do
    node_vars "$i"
    wait_until 120 "the node $N_NAME to be Ready" kubectl wait --for=condition=Ready "node/$N_NAME" --timeout=1s
  done
}

# Stops the node and removes every trace of it: processes (pods, shims, daemons), mounts,
# cgroups, namespaces, host paths, and the machine-wide sysctls as they were.
node_down() {
  local n="$STATE/node" root dir pid exe mp nd ns
  [[ -d "$n" ]] || return 0
  # Every node's directory (node, node-2, ...): each has its own cgroup root.
  local dirs=("$STATE"/node "$STATE"/node-[0-9]*)
  # Pods' processes: every process in the pods' cgroups (memory hierarchy: the nesting one).
  for _ in 1 2 3; do
    for nd in "${dirs[@]}"; do
      [[ -f "$nd/cgroup-root" ]] || continue
      root="/sys/fs/cgroup/memory$(cat "$nd/cgroup-root")"
      if [[ -d "$root" ]]; then
        find "$root" -name cgroup.procs -exec cat {} + 2> /dev/null | xargs -r kill -KILL 2> /dev/null || true
      fi
    done
    sleep 0.3
  done
  # containerd's shims leave its process group: found by their executable.
  if [[ -f "$n/node-bin" ]]; then
    local shim
    shim="$(cat "$n/node-bin")/containerd-shim-runc-v2"
    for exe in /proc/[0-9]*/exe; do
      pid="${exe#/proc/}"
      pid="${pid%/exe}"
      [[ "$(readlink "$exe" 2> /dev/null)" == "$shim" ]] && kill -KILL "$pid" 2> /dev/null || true
    done
  fi
  # Mounts under the state directory (kubelet volumes, overlay roots, shm, sandbox netns),
  # deepest first, and the namespaces' own.
  for _ in 1 2 3; do
    while read -r mp; do
      umount "$mp" 2> /dev/null || umount -l "$mp" 2> /dev/null || true
    done < <(awk -v s="$STATE/" 'index($5, s) == 1 { print $5 }' /proc/self/mountinfo | sort -r)
  done
  for ns in "$NETNS" "$OUTNS" $(cat "$n/netns-created" 2> /dev/null); do
    [[ -e "/run/netns/$ns" ]] && ip netns del "$ns" 2> /dev/null || true
  done
  if [[ -f "$n/run-netns-created" ]] && [[ -z "$(ls -A /run/netns 2> /dev/null)" ]]; then
    umount /run/netns 2> /dev/null || true
    rmdir /run/netns 2> /dev/null || true
  fi
  # cgroups: the pods' first (deepest first), then the levels this script created.
  for nd in "${dirs[@]}"; do
    if [[ -f "$nd/cgroup-root" ]]; then
      root="$(cat "$nd/cgroup-root")"
      for _ in 1 2 3 4 5; do
        for dir in /sys/fs/cgroup/*/; do
          if [[ -d "$dir$root" ]]; then
            find "$dir$root" -mindepth 1 -depth -type d -exec rmdir {} + 2> /dev/null || true
          fi
        done
        sleep 0.2
      done
    fi
  done
  # The levels created, every node's together, deepest first: the first node created the
  # levels above the machine's own cgroup that the others then shared.
  cat "$STATE"/node*/cgroups-created 2> /dev/null | sort -r -u | while read -r dir; do
    if [[ -d $dir ]]; then
      rmdir "$dir" 2> /dev/null || log "could not remove cgroup $dir"
    fi
  done
  if [[ -f "$n/host-paths-absent" ]]; then
    while read -r p; do
      rm -rf "$p"
    done < "$n/host-paths-absent"
  fi
  if [[ -f "$n/sysctls.saved" ]]; then
    while read -r line; do
      sysctl -q -w "$line" || log "could not restore $line"
    done < "$n/sysctls.saved"
  fi
}

# Records which host paths do not exist yet (node_down removes only those).
node_record_host_paths() {
  local p
  mkdir -p "$STATE/node"
  for p in "${HOST_PATHS[@]}"; do
    [[ -e $p ]] || echo "$p"
  done > "$STATE/node/host-paths-absent"
  [[ -e /run/netns ]] || touch "$STATE/node/run-netns-created"
}
