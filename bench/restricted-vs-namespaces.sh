#!/usr/bin/env bash
# HumanEval-X canonical solutions judged by `sandpool eval` in both isolation modes, back to
# back per language, at the executor's default limits: judging time (eval's own figure, without
# the executor's start-up) and passes of each, and the
# restricted/namespaces ratio (issue 25 item 4: at most 1.5x).
#
#   bench/restricted-vs-namespaces.sh [LANG...]     (default: all six)
#
# Environment: LIMIT (rows per language, default all 164), SLOTS (default 2), DATASETS
# (default /work/shared/datasets), SANDPOOL (the CLI, default target/release/sandpool),
# POD_SECCOMP (default target/{release,debug}/sandpool-pod-seccomp), RUN_UID (the restricted
# executor's uid, default 42000), OUT (results directory, default a fresh temporary one).
#
# Must run as root: namespaces mode needs it, and restricted mode is started as a Pod Security
# `restricted` pod would run it (as the tests do): a uid of its own, no capabilities,
# `no_new_privs`, under `sandpool-pod-seccomp`'s stand-in for the runtime's seccomp profile.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
target=${CARGO_TARGET_DIR:-$root/target}
sandpool=${SANDPOOL:-$target/release/sandpool}
pod_seccomp=${POD_SECCOMP:-}
if [ -z "$pod_seccomp" ]; then
  for p in "$target/release/sandpool-pod-seccomp" "$target/debug/sandpool-pod-seccomp"; do
    [ -x "$p" ] && pod_seccomp=$p && break
  done
fi
datasets=${DATASETS:-/work/shared/datasets}/humaneval-x
slots=${SLOTS:-2}
run_uid=${RUN_UID:-42000}
limit=${LIMIT:-164}
out=${OUT:-$(mktemp -d /tmp/sandpool-bench-restricted.XXXXXX)}

[ "$(id -u)" = 0 ] || { echo "run as root (namespaces mode needs it)" >&2; exit 2; }
[ -x "$sandpool" ] || { echo "no $sandpool: cargo build --release -p sandpool-cli" >&2; exit 2; }
[ -x "${pod_seccomp:-}" ] || { echo "no sandpool-pod-seccomp: cargo build -p sandpool-sandbox --bin sandpool-pod-seccomp" >&2; exit 2; }
mkdir -p "$out"
chmod 0755 "$out"

# file stem and the table's language name, per HumanEval-X language
declare -A file=([python]=python [cpp]=cpp [java]=java [javascript]=js [go]=go [rust]=rust)
declare -A lang=([python]=python [cpp]=cpp [java]=java [javascript]=javascript [go]=go_test [rust]=rust_test)
langs=("$@")
[ ${#langs[@]} -gt 0 ] || langs=(python cpp java javascript go rust)

# eval MODE LANG: judges LIMIT rows; prints "seconds passed total"
eval_one() {
  local mode=$1 l=$2 wr res pre=()
  wr=$(mktemp -d "$out/work-root.XXXXXX")
  res="$out/$mode-$l.jsonl"
  if [ "$mode" = restricted ]; then
    chown "$run_uid:$run_uid" "$wr" "$out"
    pre=("$pod_seccomp" setpriv "--reuid=$run_uid" "--regid=$run_uid" --clear-groups
      --inh-caps=-all --bounding-set=-all --no-new-privs --)
  fi
  "${pre[@]}" "$sandpool" eval "$datasets/humaneval_${file[$l]}.jsonl.gz" --quiet --limit "$limit" \
    --isolation "$mode" --slots "$slots" --uid-base "$run_uid" --work-root "$wr" \
    --enable-languages "${lang[$l]}" -o "$res" >"$out/$mode-$l.log" 2>&1 || true
  rm -rf "$wr"
  # The judging time eval reports ("N records in X s"): the executor's start-up, paid once per
  # pod, is left out.
  python3 - "$res" "$out/$mode-$l.log" <<'PY'
import json, re, sys
res, log = sys.argv[1], sys.argv[2]
try:
    rows = [json.loads(l) for l in open(res)]
except OSError:
    rows = []
m = re.search(r"records in ([0-9.]+) s", open(log).read())
print(f"{m.group(1) if m else 'nan'} {sum(1 for r in rows if r.get('accepted'))} {len(rows)}")
PY
}

printf '%-11s %6s %14s %14s %15s %15s %7s\n' language rows "namespaces s" "restricted s" "passed (ns)" "passed (restr)" ratio
for l in "${langs[@]}"; do
  [ -n "${file[$l]:-}" ] || { echo "unknown language $l (python cpp java javascript go rust)" >&2; exit 2; }
  read -r ns_s ns_ok ns_n < <(eval_one namespaces "$l")
  read -r r_s r_ok r_n < <(eval_one restricted "$l")
  ratio=$(python3 -c "print(f'{$r_s / $ns_s:.2f}x')")
  printf '%-11s %6s %14s %14s %15s %15s %7s\n' "$l" "$ns_n" "$ns_s" "$r_s" "$ns_ok/$ns_n" "$r_ok/$r_n" "$ratio"
done
echo "results and logs: $out"
