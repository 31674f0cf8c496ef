#!/usr/bin/env bash
# One device run for the top-k kernels: the GPU tests, then a quick timing of every variant on a
# decode call (continuous scores, capacity 524288; the harness's DeviceTimer, warm and cold L2, and
# the split also as a replayed CUDA graph). Run from the repository root; logs go to $OUT (or /tmp).
set -uo pipefail
out=${OUT:-/tmp}
export PYTHONPATH=. PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv | tee "$out/topk_gpu.txt"
python3 -m pytest -m gpu tests/test_gpu_topk.py -q -s -rs --durations=8 2>&1 | tee "$out/topk_pytest.log"
status=${PIPESTATUS[0]}
python3 - <<'EOF' 2>&1 | tee "$out/topk_timing.txt"
import statistics

import cupy

from qsa_cli.geometry import SELECT_CAP, Call
from qsa_cli.inputs import id_poison, synthetic_scores
from qsa_cli.launch.topk import TOPK_VARIANTS, topk_launcher
from qsa_cli.model.topk import topk_ids
from qsa_cli.timing import DeviceTimer

ITERS, CAPACITY = 20, 524288
stream = cupy.cuda.Stream(non_blocking=True)
with stream:
    timers = {l2: DeviceTimer(l2=l2) for l2 in ("warm", "cold")}
    print(f"{'ctx':>7} {'q':>2} {'L2':>4} " + " ".join(f"{v:>9}" for v in TOPK_VARIANTS) + f" {'graph':>6} {'wide/split':>10}")
    for ctx in (420000, 524288):
        for nq in (1, 3, 8):
            inputs = synthetic_scores(Call(ctx, nq, CAPACITY), "continuous", 7)
            expected = topk_ids(inputs, "oracle")
            scores, steps = cupy.asarray(inputs.scores), cupy.asarray(inputs.steps)
            ids = cupy.asarray(id_poison((nq, SELECT_CAP)))
            launchers = {v: topk_launcher(v, scores, steps, ids) for v in TOPK_VARIANTS}
            launchers["split"]()
            stream.begin_capture()
            launchers["split"]()
            graph = stream.end_capture()
            launchers["graph"] = lambda: graph.launch(stream)
            for l2, timer in timers.items():
                us = {v: statistics.median(timer.measure(run, ITERS)) for v, run in launchers.items()}
                assert cupy.asnumpy(ids, stream=stream).tobytes() == expected.tobytes()
                print(f"{ctx:>7} {nq:>2} {l2:>4} " + " ".join(f"{us[v]:>9.1f}" for v in TOPK_VARIANTS)
                      + f" {us['graph']:>6.1f} {us['wide'] / us['split']:>10.1f}")
            # the host's own launch rate: 20 calls back to back, no hold (CuPy's per-launch cost shows)
            start, end = cupy.cuda.Event(), cupy.cuda.Event()
            start.record(stream)
            for _ in range(ITERS):
                launchers["split"]()
            end.record(stream)
            end.synchronize()
            print(f"{'':>15} split back-to-back from the host: {cupy.cuda.get_elapsed_time(start, end) * 1e3 / ITERS:.1f}")
print("median microseconds per decode call (qsa_cli.timing.DeviceTimer: stream held, 20 samples; cold = L2 flushed")
print("before each sample); graph = the split's six launches replayed as a CUDA graph; ids identical to the oracle")
EOF
exit $status
