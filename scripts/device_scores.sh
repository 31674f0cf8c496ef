#!/usr/bin/env bash
# One device run for the scorer kernels: the nvcc register/spill report for the card, the GPU scorer
# tests, and a quick timing (cold L2, CUDA events) of every scorer at 420K cells against the plain read
# of the same key bytes, with a sweep of the halving kernel's blocks per step and CTA size. Logs go to
# $OUT (the device tool's folder) or ./device_out. Usage: bash scripts/device_scores.sh
set -uo pipefail
out="${OUT:-device_out}"
mkdir -p "$out"
export PYTHONPATH=. PYTHONUNBUFFERED=1

arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d .)
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv \
  | tee "$out/gpu.txt"
nvcc -std=c++17 "-arch=sm_${arch}" -cubin -Xptxas -v -o /tmp/scores.cubin kernels/scores.cu -I kernels 2>&1 | tee "$out/ptxas.txt"
cuobjdump -sass /tmp/scores.cubin >/tmp/scores.sass 2>&1 \
  && awk '/Function :/ {f=$3} /^ +\/\*[0-9a-f]+\*\// {op = ($2 ~ /^@/) ? $3 : $2; split(op, a, "."); n[f" "a[1]]++} END {for (k in n) print k, n[k]}' \
     /tmp/scores.sass | sort -k1,1 -k3,3nr >"$out/sass_mix.txt"

python3 -m pytest -m gpu -v -rs tests/test_gpu_scores.py 2>&1 | tee "$out/pytest_gpu.txt"

python3 - <<'EOF' 2>&1 | tee "$out/timing.txt"
import statistics

import cupy
import numpy as np

from qsa_cli.geometry import Call
from qsa_cli.inputs import ScorerInputs, score_poison, synthetic_scorer_inputs
from qsa_cli.kernels import COMPILE_OPTIONS, source_text
from qsa_cli.launch import scores as ls
from qsa_cli.timing import DeviceTimer

ITERS = 20
CTX, CAP = 420_000, 524_288
full = synthetic_scorer_inputs(Call(CTX, 8, CAP), 1)
dev_full = ls.DeviceScorerInputs.from_host(full)
mod = ls.module()
for name in ls._ALL_NAMES:
    print(mod.info(name))


def window(nq):
    sub = ScorerInputs(full.pooled, full.dead, full.q[-nq:], full.steps[-nq:])
    return sub, ls.DeviceScorerInputs(dev_full.pooled, dev_full.dead, dev_full.q[-nq:], dev_full.steps[-nq:])


def med(samples):
    return statistics.median(samples)


for l2 in ("cold", "warm"):
    timer = DeviceTimer(l2=l2)
    print(f"\n== {l2} L2, {CTX} cells, capacity {CAP}, median of {ITERS} (us) ==")
    print("nq  floor  reference  multi  halve  halve/floor  multi/halve")
    for nq in (1, 2, 3, 4, 6, 8):
        sub, dev = window(nq)
        floor = med(timer.measure(timer.read_launcher(dev.pooled, sub.key_bytes()), ITERS))
        t = {}
        for v in ls.SCORER_VARIANTS:
            if v == "reference" and l2 == "warm":
                continue
            out = cupy.asarray(score_poison((nq, dev.max_blocks)))
            t[v] = med(timer.measure(ls.scorer_launcher(v, dev, out), ITERS))
        ref = f"{t['reference']:9.1f}" if "reference" in t else "        -"
        print(f"{nq:2d} {floor:6.1f} {ref} {t['multi']:6.1f} {t['halve']:6.1f} {t['halve'] / floor:11.2f} "
              f"{t['multi'] / t['halve']:11.2f}")

# The halving kernel's knobs: blocks per step (source constant) and CTA size; the bits must not move.
print("\n== halve sweep, cold L2 (us): blocks per step x threads per CTA (grid: resident CTAs) ==")
timer = DeviceTimer(l2="cold")
sms = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)["multiProcessorCount"]
names = ls.KERNEL_NAMES["halve"]
base = source_text(ls.SOURCE)
knob = "static constexpr int kBatch = 4;"
assert knob in base
for batch in (1, 2, 4):
    src = base.replace(knob, f"static constexpr int kBatch = {batch};")
    raw = cupy.RawModule(code=src, options=COMPILE_OPTIONS, name_expressions=names)
    for nq in (1, 2, 3, 4):
        sub, dev = window(nq)
        want = cupy.asarray(score_poison((nq, dev.max_blocks)))
        ls.scorer_launcher("halve", dev, want)()
        fn = raw.get_function(names[nq - 1])
        for threads in (64, 128, 256):
            occ = cupy.cuda.driver.occupancyMaxActiveBlocksPerMultiprocessor(fn.kernel.ptr, threads, 0)
            grid = (sms * occ,)
            out = cupy.asarray(score_poison((nq, dev.max_blocks)))
            args = (dev.pooled, dev.dead, dev.q, dev.steps, out, np.int32(nq), np.int32(dev.max_blocks))
            us = med(timer.measure(lambda: fn(grid, (threads,), args), ITERS))
            same = out.get().tobytes() == want.get().tobytes()
            print(f"batch {batch} nq {nq} threads {threads:3d} regs {fn.attributes['num_regs']:3d} ctas/sm {occ:2d}: "
                  f"{us:6.1f}  {'same bits' if same else 'BITS DIFFER'}")
EOF
nvidia-smi --query-gpu=clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv \
  | tee -a "$out/gpu.txt"
