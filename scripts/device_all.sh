#!/usr/bin/env bash
# The full device run: GPU tests, selftests, qsa sanitize, every benchmark of docs/benchmarks.md, the CI
# gate round trip and the plot, with the card's clocks recorded. Never locks or changes the clocks.
# Results: $OUT/log.txt and $OUT/records.tar.gz (one JSON record per command).
# Usage: bash scripts/device_all.sh [quick | no-scores]   (quick: tests and selftests only)
set -uo pipefail
out="${OUT:-device_out}"
rec="$out/records"
mkdir -p "$rec"
export PYTHONPATH=. PYTHONUNBUFFERED=1 COLUMNS=200
qsa() { python3 -m qsa_cli "$@"; }
step() { echo; echo "=== $(date -u +%H:%M:%S) $*"; tar czf "$out/records.tar.gz" -C "$out" records; }  # a snapshot per step: a run cut short still returns its records
{
step "card"; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,clocks.max.sm,temperature.gpu,power.draw,power.limit --format=csv
step "info"; qsa info
step "GPU tests, quick"; python3 -m pytest -m "gpu and not slow" -q -rs -p no:cacheprovider --durations=15 tests 2>&1 | tail -45
step "GPU tests, slow"; python3 -m pytest -m "gpu and slow" -q -rs -p no:cacheprovider tests -k "not qsa_sanitize_reports" 2>&1 | tail -30  # qsa sanitize runs below
step "selftest"; qsa selftest --require-gpu --json "$rec/selftest.json"
step "topk-parity --selftest"; qsa topk-parity --selftest --json "$rec/topk-selftest.json"
step "sanitize"; qsa sanitize --jobs "$(nproc)" --json "$rec/sanitize.json" | tail -4
if [ "${1:-}" != quick ]; then
  [ "${1:-}" != no-scores ] && for ctx in 32768 131072 420000 524288; do for q in 1 3 4 6 8; do
    step "select-bench $ctx $q"; qsa select-bench $ctx $q 50 524288 --json "$rec/scores-$ctx-$q.json" | tail -8
  done; done
  for ctx in 9000 131072 420000 524288 1048576; do for q in 1 3 6 8; do
    cap=524288; [ $ctx -gt 524288 ] && cap=1048576
    step "topk-parity $ctx $q 50 $cap 0"; qsa topk-parity $ctx $q 50 $cap 0 --json "$rec/topk-$ctx-$q.json" | tail -10
  done; done
  for q in 1 3 8; do  # the engine's top-k reads scores the scorer has just written: warm L2 too
    step "topk-parity 524288 $q 50 524288 0 --l2 warm"; qsa topk-parity 524288 $q 50 524288 0 --l2 warm --json "$rec/topk-warm-524288-$q.json" | tail -10
  done
  for ctx in 131072 420000 524288; do for q in 1 4 8; do
    step "window-bench $ctx $q"; qsa window-bench $ctx $q 50 524288 --json "$rec/window-$ctx-$q.json" | tail -8
  done; done
fi
step "gate round trip"; qsa sweep ci --json "$rec/ci.json" | tail -5
qsa gate --baseline "$rec/ci.json" --results "$rec/ci.json" --junit "$rec/gate-same.xml" | tail -3; echo "gate same: rc=$?"
python3 - "$rec/ci.json" "$rec/ci-slowed.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
for m in r["measurements"]:
    if m["variant"] in ("halve", "split"):
        m["samples_us"] = [s * 0.5 for s in m["samples_us"]]  # a baseline twice as fast: the run must be SLOW
json.dump(r, open(sys.argv[2], "w"))
PY
qsa gate --baseline "$rec/ci-slowed.json" --results "$rec/ci.json" --junit "$rec/gate-slow.xml" | tail -12; echo "gate slowed baseline: rc=$? (1 expected)"
step "gate running ci.yaml against the first run"; qsa gate --baseline "$rec/ci.json" --json "$rec/ci-2.json" | tail -6; echo "rc=$?"
step "plot"; qsa plot "$rec/ci.json" -o "$out/ci.png"
step "clocks after"; nvidia-smi --query-gpu=clocks.sm,clocks.mem,temperature.gpu,power.draw,clocks_event_reasons.active --format=csv
} 2>&1 | tee "$out/log.txt"
step "done" >/dev/null && rm -rf "$rec"
