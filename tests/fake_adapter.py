"""A user's own adapter for the tests (qsa_cli/qsa_adapter.h): the example docs/engine.md shows, over the
engine's host API, so it builds with the fake engine (tests/fake_engine.py) and with a real checkout.

Its entries: ``scores-all``, the engine's per-block scorer over every block (qsa_block_scores with an active
count of max_blocks: exact); ``topk-staged``, the engine's reference top-k staged through the entry's scratch
(exact, with scratch, following ``scores-all`` in a window); ``scores-bf16``, the engine's scores truncated to
bfloat16 (declared not exact: its bits differ from the reference's almost everywhere).
"""

from __future__ import annotations

from pathlib import Path

ENTRIES = ("scores-all", "topk-staged", "scores-bf16")

ADAPTER = r"""// my_adapter.cu: host paths of the engine that qsa does not know, in qsa's variant ABI.
#include <cuda_runtime.h>

#include <cstdint>

#include "qsa_adapter.h"
#include "strata/kernels/qsa_select.hpp"

namespace {

namespace sk = strata::kernels;

const sk::QsaShapes& shapes() {
    static const sk::QsaShapes s = sk::qsa_real_shapes();
    return s;
}

// Truncates query q's scores of blocks 0..n_bid to bfloat16 (a NaN stays one), the other entries untouched.
__global__ void truncate_to_bf16(float* scores, const int32_t* steps, int64_t max_blocks) {
    const int64_t q = blockIdx.y;
    const int64_t n_bid = steps[q * sk::kStepCount + sk::kStepNBid];
    for (int64_t b = blockIdx.x * blockDim.x + threadIdx.x; b <= n_bid; b += gridDim.x * blockDim.x) {
        unsigned* bits = reinterpret_cast<unsigned*>(scores + q * max_blocks + b);
        *bits &= 0xFFFF0000u;
    }
}

}  // namespace

extern "C" {

// The engine's per-block scorer over every block: an active count of max_blocks.
int scores_all(const float* pooled, const float* dead, const float* q_idx, const int32_t* steps, int64_t nq,
               int64_t max_blocks, float* scores, void* stream) {
    try {
        sk::qsa_block_scores(pooled, dead, q_idx, steps, nq, max_blocks, shapes(), scores, stream, max_blocks);
        return QSA_ADAPTER_LAUNCHED;
    } catch (...) {
        return QSA_ADAPTER_FAILED;
    }
}

// The same scores, truncated to bfloat16: an approximation, so its entry says it is not exact.
int scores_bf16(const float* pooled, const float* dead, const float* q_idx, const int32_t* steps, int64_t nq,
                int64_t max_blocks, float* scores, void* stream) {
    if (scores_all(pooled, dead, q_idx, steps, nq, max_blocks, scores, stream) != QSA_ADAPTER_LAUNCHED)
        return QSA_ADAPTER_FAILED;
    const dim3 grid(static_cast<unsigned>((max_blocks + 255) / 256), static_cast<unsigned>(nq));
    truncate_to_bf16<<<grid, 256, 0, static_cast<cudaStream_t>(stream)>>>(scores, steps, max_blocks);
    return QSA_ADAPTER_LAUNCHED;
}

// A row of ids for every query.
int64_t staged_bytes(int64_t nq) { return nq * 2051 * static_cast<int64_t>(sizeof(int32_t)); }

// The engine's reference top-k into the scratch, then copied to ids; the scratch is left zero as it came.
// The ids' other entries travel through the scratch untouched.
int topk_staged(const float* scores, const int32_t* steps, int64_t nq, int64_t max_blocks, int64_t cap, int32_t* ids,
                void* scratch, void* stream) {
    if (cap != 2051) return QSA_ADAPTER_REFUSED;  // the scratch holds rows of 2,051 ids
    cudaStream_t s = static_cast<cudaStream_t>(stream);
    int32_t* staged = static_cast<int32_t*>(scratch);
    const size_t bytes = static_cast<size_t>(staged_bytes(nq));
    try {
        cudaMemcpyAsync(staged, ids, bytes, cudaMemcpyDeviceToDevice, s);
        sk::qsa_block_topk_ref(scores, steps, nq, max_blocks, cap, shapes(), staged, stream);
        cudaMemcpyAsync(ids, staged, bytes, cudaMemcpyDeviceToDevice, s);
        cudaMemsetAsync(staged, 0, bytes, s);
        return QSA_ADAPTER_LAUNCHED;
    } catch (...) {
        return QSA_ADAPTER_FAILED;
    }
}

// name, kind, exact, needs_scratch, scorer, topk, scratch_bytes, window_scorer; a null name ends it.
const QsaAdapterEntry qsa_adapter_entries[] = {
    {"scores-all", QSA_ADAPTER_SCORES, 1, 0, scores_all, nullptr, nullptr, nullptr},
    {"topk-staged", QSA_ADAPTER_TOPK, 1, 1, nullptr, topk_staged, staged_bytes, "scores-all"},
    {"scores-bf16", QSA_ADAPTER_SCORES, 0, 0, scores_bf16, nullptr, nullptr, nullptr},
    {nullptr, nullptr, 0, 0, nullptr, nullptr, nullptr, nullptr},
};

}  // extern "C"
"""


def write_adapter(path: Path, text: str = ADAPTER) -> Path:
    """The example adapter (or ``text``) at ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path
