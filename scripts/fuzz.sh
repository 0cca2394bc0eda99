#!/usr/bin/env bash
# Runs each cargo-fuzz target in fuzz/ for a while, one at a time (NOT in CI: it
# needs nightly and cargo-fuzz, and burns CPU). Findings land in
# fuzz/artifacts/<target>/; reproduce one with
#   cargo +nightly fuzz run <target> fuzz/artifacts/<target>/<file>
# Committed reproducers of fixed findings live in fuzz/regressions/<target>/ and
# are replayed first.
#   scripts/fuzz.sh [seconds per target, default 180] [target ...]
# Needs: rustup toolchain install nightly; cargo install cargo-fuzz.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../fuzz"
secs="${1:-180}"; shift $(( $# > 0 ? 1 : 0 ))
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(request_decode extract compare http_shapes)
# Safe Rust: libFuzzer's coverage without AddressSanitizer runs several times faster.
sanitizer="${SANDPOOL_FUZZ_SANITIZER:-none}"
for t in "${targets[@]}"; do cargo +nightly fuzz build -s "$sanitizer" -O "$t"; done
status=0
for t in "${targets[@]}"; do
  mkdir -p "corpus/$t" "artifacts/$t"
  if [ -d "regressions/$t" ] && [ -n "$(ls -A "regressions/$t")" ]; then
    echo "== $t: replaying regressions"
    cargo +nightly fuzz run -s "$sanitizer" -O "$t" regressions/"$t"/* -- -runs=0 || status=1
  fi
  echo "== $t: ${secs} s"
  # -timeout: one input taking over 10 s is a finding (a superlinear path), not patience.
  cargo +nightly fuzz run -s "$sanitizer" -O "$t" "corpus/$t" -- \
    -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -max_len=65536 -print_final_stats=1 || status=1
done
exit $status
