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

# Addresses: all inside the namespaces this script creates.
NODE_NAME=sandpool-node
NODE_IP=10.250.0.1        # the node's end of the veth (its InternalIP)
OUTSIDE_IP=10.250.0.2     # the other end, in the "outside" namespace
POD_CIDR=10.244.0.0/24
CLUSTER_CIDR=10.244.0.0/16
DNS_IP=10.96.0.10         # the kube-dns Service (in the API server's 10.96.0.0/16)
PAUSE_IMAGE=sandpool.dev/pause:1
# Machine-wide sysctls the kubelet sets; their values are saved before it starts.
GLOBAL_SYSCTLS=(vm.overcommit_memory kernel.panic kernel.panic_on_oops)
# Host paths containerd, runc, CNI and iptables create outside the state directory; removed on
# `down` only if they did not exist before `up`.
HOST_PATHS=(/opt/containerd /run/containerd /run/nri /run/runc /run/xtables.lock /var/lib/cni /etc/cni
  /var/log/containers)
NODE_COMPONENTS=(containerd kubelet kube-proxy coredns kube-router)

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
  # No default route: an address outside these namespaces is unreachable by construction.
  # Forwarding between the bridge and the node's addresses, and bridged traffic through
  # iptables/nftables (Service NAT and NetworkPolicy between pods on the same bridge); both
  # sysctls are per network namespace.
  in_netns sysctl -q -w net.ipv4.ip_forward=1 net.bridge.bridge-nf-call-iptables=1
}

# The cgroup parent of every pod: below this machine's own memory cgroup (the only controller
# that nests our processes below the root), created in every v1 hierarchy.
node_cgroups() {
  local base ctrl dir path parent
  base="$(awk -F: '$2 == "memory" { print $3 }' /proc/self/cgroup)"
  base="${base%/}"
  CGROUP_ROOT="$base/sandpool-node-$KEY"
  echo "$CGROUP_ROOT" > "$STATE/node/cgroup-root"
  for dir in /sys/fs/cgroup/*/; do
    ctrl="$(basename "$dir")"
    [[ -f "$dir/cgroup.procs" ]] || continue
    path="${dir%/}"
    if [[ $ctrl == unified ]]; then
      # runc mirrors every container's path in the (controller-less) v2 hierarchy: the levels
      # missing now are runc's to create and ours to remove.
      for part in ${CGROUP_ROOT//\// }; do
        path="$path/$part"
        [[ -d "$path" ]] || echo "$path" >> "$STATE/node/cgroups-created"
      done
      continue
    fi
    # Create each level, filling cpuset's cpus and mems from the parent (they start empty).
    for part in ${CGROUP_ROOT//\// }; do
      parent="$path"
      path="$path/$part"
      if [[ ! -d "$path" ]]; then
        mkdir "$path"
        echo "$path" >> "$STATE/node/cgroups-created"
        if [[ $ctrl == cpuset ]]; then
          cat "$parent/cpuset.cpus" > "$path/cpuset.cpus"
          cat "$parent/cpuset.mems" > "$path/cpuset.mems"
        fi
      fi
    done
  done
}

node_config() {
  local n="$STATE/node" pki="$STATE/pki"
  mkdir -p "$n/cni/net.d" "$n/cni/ipam" "$n/containerd" "$n/kubelet" "$n/pod-logs"
  # The node's credentials: a client certificate the Node authorizer accepts (no bootstrap),
  # and a serving certificate for kubectl logs/exec through the API server.
  cert kubelet "system:node:$NODE_NAME" system:nodes "basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=clientAuth"
  cert kubelet-serving "$NODE_NAME" "" "basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth
subjectAltName=IP:$NODE_IP,DNS:$NODE_NAME"
  local client='basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=clientAuth'
  cert kube-proxy system:kube-proxy "" "$client"
  # CoreDNS and kube-router read cluster-wide objects (and kube-router writes nothing); in a
  # throwaway cluster an admin certificate saves two ClusterRoles.
  cert coredns sandpool-coredns system:masters "$client"
  cert kube-router sandpool-kube-router system:masters "$client"
  for name in kubelet kube-proxy coredns kube-router; do
    kubeconfig "$name"
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
        "ranges": [[{"subnet": "$POD_CIDR"}]], "routes": [{"dst": "0.0.0.0/0"}]
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
tlsCertFile: $pki/kubelet-serving.crt
tlsPrivateKeyFile: $pki/kubelet-serving.key
address: $NODE_IP
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
hostnameOverride: $NODE_NAME
clusterCIDR: $CLUSTER_CIDR
clientConnection: {kubeconfig: $STATE/kube-proxy.kubeconfig}
# 0: leave the machine-wide conntrack table size (and the timeouts) alone.
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
metricsBindAddress: 127.0.0.1:10249
healthzBindAddress: 127.0.0.1:10256
EOF

  cat > "$n/Corefile" <<EOF
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

# Packs the pause binary as the sandbox image and imports it and each archive in
# SANDPOOL_NODE_IMAGES (a directory of *.oci.tar, default target/images from scripts/images.sh).
node_images() {
  local ctr=("$NODE_BIN/ctr" --address "$STATE/node/containerd/containerd.sock" -n k8s.io) work
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
  "${ctr[@]}" images import "$work/pause.tar" > /dev/null
  rm -rf "$work"
  local dir="${SANDPOOL_NODE_IMAGES:-$ROOT/target/images}" archive
  for archive in "$dir"/*.oci.tar; do
    [[ -f $archive ]] || die "no images in $dir: run scripts/images.sh first"
    "${ctr[@]}" images import "$archive" > /dev/null || die "importing $archive failed"
  done
  "${ctr[@]}" images ls -q | grep -v '^sha256:' | sed 's/^/cluster: image /' >&2
}

# --- up and down ---------------------------------------------------------------------------

# Starts the node's daemons, after the control plane is up in the namespace.
node_up() {
  local n="$STATE/node" s
  # Save the machine-wide sysctls the kubelet will change (restored by node_down).
  for s in "${GLOBAL_SYSCTLS[@]}"; do
    echo "$s=$(sysctl -n "$s")"
  done > "$n/sysctls.saved"
  start containerd "$NODE_BIN/containerd" --config "$n/containerd/config.toml"
  wait_until 60 "containerd" "$NODE_BIN/ctr" --address "$n/containerd/containerd.sock" version
  node_images

  start kubelet "$BIN/kubelet" --config="$n/kubelet/config.yaml" \
    --kubeconfig="$STATE/kubelet.kubeconfig" --root-dir="$n/kubelet/root" \
    --cert-dir="$n/kubelet/pki" --hostname-override="$NODE_NAME" --node-ip="$NODE_IP" \
    --node-labels="sandpool.dev/node=real"
  wait_until 120 "the node $NODE_NAME to register" kubectl get node "$NODE_NAME"
  # kube-router reads the node's pod CIDR (no controller allocates one here).
  kubectl patch node "$NODE_NAME" --type=merge \
    -p "{\"spec\":{\"podCIDR\":\"$POD_CIDR\",\"podCIDRs\":[\"$POD_CIDR\"]}}" > /dev/null
  start kube-proxy "$BIN/kube-proxy" --config="$n/kube-proxy.yaml"
  start kube-router "$NODE_BIN/kube-router" --kubeconfig="$STATE/kube-router.kubeconfig" \
    --run-firewall=true --run-router=false --run-service-proxy=false --enable-cni=false \
    --hostname-override="$NODE_NAME"
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
  wait_until 120 "the node $NODE_NAME to be Ready" \
    kubectl wait --for=condition=Ready "node/$NODE_NAME" --timeout=1s
}

# Stops the node and removes every trace of it: processes (pods, shims, daemons), mounts,
# cgroups, namespaces, host paths, and the machine-wide sysctls as they were.
node_down() {
  local n="$STATE/node" root dir pid exe mp
  [[ -d "$n" ]] || return 0
  # Pods' processes: every process in the pods' cgroups (memory hierarchy: the nesting one).
  if [[ -f "$n/cgroup-root" ]]; then
    root="/sys/fs/cgroup/memory$(cat "$n/cgroup-root")"
    if [[ -d "$root" ]]; then
      for _ in 1 2 3; do
        find "$root" -name cgroup.procs -exec cat {} + 2> /dev/null | xargs -r kill -KILL 2> /dev/null || true
        sleep 0.3
      done
    fi
  fi
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
  for ns in "$NETNS" "$OUTNS"; do
    [[ -e "/run/netns/$ns" ]] && ip netns del "$ns" 2> /dev/null || true
  done
  if [[ -f "$n/run-netns-created" ]] && [[ -z "$(ls -A /run/netns 2> /dev/null)" ]]; then
    umount /run/netns 2> /dev/null || true
    rmdir /run/netns 2> /dev/null || true
  fi
  # cgroups: the pods' first (deepest first), then the levels this script created.
  if [[ -f "$n/cgroup-root" ]]; then
    root="$(cat "$n/cgroup-root")"
    for _ in 1 2 3 4 5; do
      for dir in /sys/fs/cgroup/*/; do
        if [[ -d "$dir$root" ]]; then
          find "$dir$root" -mindepth 1 -depth -type d -exec rmdir {} + 2> /dev/null || true
        fi
      done
      sleep 0.2
    done
  fi
  if [[ -f "$n/cgroups-created" ]]; then
    sort -r "$n/cgroups-created" | while read -r dir; do
      if [[ -d $dir ]]; then
        rmdir "$dir" 2> /dev/null || log "could not remove cgroup $dir"
      fi
    done
  fi
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
