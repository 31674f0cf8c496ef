// scores_common.cuh: what the block scorers of scores.cu and scores_onepass.cu share (spec section 2): the
// arithmetic of record's helpers (a lane's slice of a key, the xor butterfly) and the halving scorer's warp, which
// block_scores_halve_kernel runs once and block_scores_paired_kernel twice, on two sub-windows.
//
// The arithmetic of record: lane l forms its partial of dims 4l..4l+3 with qsa_lane_partial, the 32
// partials are summed by the xor butterfly (offsets 16, 8, 4, 2, 1), and the relu'd heads are added in
// head order from 0. Subnormals must not be flushed: compile with -ftz=false (nvcc's default, the engine's
// build), or tiny partials change the sums.
#pragma once

#include "qsa_common.cuh"

namespace {

constexpr unsigned kFullWarp = 0xffffffffu;
constexpr int kDimsPerLane = QSA_IDX_DIM / QSA_WARP;
static_assert(kDimsPerLane == 4, "a lane's slice of a key is one float4");

__host__ __device__ constexpr int log2_of(int x) { return x <= 1 ? 0 : 1 + log2_of(x / 2); }
__host__ __device__ constexpr int pow2_at_least(int x) { return x <= 1 ? 1 : 2 * pow2_at_least((x + 1) / 2); }

__device__ __forceinline__ int lane_id() { return threadIdx.x % QSA_WARP; }

// The butterfly of record from offset `first` down to 1: d += shfl_xor(d, o).
__device__ __forceinline__ float butterfly_from(float d, int first) {
#pragma unroll
    for (int o = first; o > 0; o >>= 1) d += __shfl_xor_sync(kFullWarp, d, o);
    return d;
}

__device__ __forceinline__ float4 lane_slice(const float* row, int lane) {
    return reinterpret_cast<const float4*>(row)[lane];
}

__device__ __forceinline__ bool has_tail(int n_kv) { return n_kv % QSA_BLOCK_CELLS != 0; }

// One (query, block) score from the query's 4 head slices in `qh` (a row of QSA_IDX_DIM floats per
// head, global or shared), every lane returning the same value.
__device__ __forceinline__ float warp_score(float4 key, const float* qh, int lane) {
    float score = 0.0f;
#pragma unroll
    for (int h = 0; h < QSA_IDX_HEADS; ++h) {
        const float d = butterfly_from(qsa_lane_partial(key, lane_slice(qh + h * QSA_IDX_DIM, lane)), QSA_WARP / 2);
        score += qsa_relu(d);
    }
    return score;
}

__device__ __forceinline__ int max_nbid(const int* steps, int nq) {
    int m = steps[QSA_STEP_NBID];
    for (int i = 1; i < nq; ++i) m = max(m, steps[i * QSA_STEP_INTS + QSA_STEP_NBID]);
    return m;
}

// The halving scorer's lane (the engine's new decode scorer), NQ = 1..QSA_HALVE_MAX_QUERIES queries. A warp
// per block, striding over the blocks like the old one, with the lane's query slices in registers. The lane's 4*NQ
// values (value j = 4 * query + head, padded to M, a power of two) are reduced together by recursive
// halving: at offset o (16, 8, ... the butterfly's order) a lane keeps the half of its values chosen by
// lane & o, sends the other half to lane ^ o, and adds the partner's copy of each value it keeps. The
// partner shares every lane bit above o, so it holds the same values: each addition is the butterfly's
// own pair (lane, lane ^ o) at the same offset, in the same order, and float addition commutes, so every
// value is bitwise the butterfly's. Once one value is left the remaining offsets are the plain butterfly.
//
// No select picks the half: a lane stores value j at position j ^ perm, perm = (lane >> kShift) & (M - 1),
// whose bit for offset o is the lane's bit o. The half a lane keeps at o is then always positions
// [0, half), the half it sends [half, 2 half), and the partner's position p + half holds the value at the
// lane's own position p. Lane l ends holding value perm at position 0; the relu'd heads of a query are
// gathered to the lane holding its head 0 and added in head order, and that lane writes.
template <int NQ>
struct HalveLane {
    static_assert(NQ >= 1 && NQ <= QSA_HALVE_MAX_QUERIES, "one launch holds 1..QSA_HALVE_MAX_QUERIES queries");
    static_assert((QSA_IDX_HEADS & (QSA_IDX_HEADS - 1)) == 0, "a query's heads are aligned groups of positions");
    static constexpr int kValues = NQ * QSA_IDX_HEADS;
    static constexpr int M = pow2_at_least(kValues);
    static constexpr int kHalvings = log2_of(M);
    static constexpr int kShift = log2_of(QSA_WARP) - kHalvings;
    static constexpr int kGroups = M / QSA_IDX_HEADS;  // queries' worth of positions, padding included
    static_assert(M <= QSA_WARP, "at most one value per lane after halving");
    // Blocks a warp scores per step. Their keys are loaded a step ahead, so a warp keeps up to 2 * kBatch
    // keys in flight while it computes, and the step's blocks give the scheduler independent chains of
    // shuffles. 4 was the fastest of 1, 2, 4 on an H200 for 2-4 queries (and within 2 % for 1).
    static constexpr int kBatch = 4;

    int lane;
    int last;                 // the window's largest n_bid
    int group_nbid[kGroups];  // n_bid of the query at positions 4g..4g+3 (-1 for padding)
    float4 qr[M];             // position p: the lane's slice of value p ^ perm (zero for padding)
    float4 dk;
    int my_q;                 // the query of the value this lane ends with
    int my_nbid;              // -1 unless the lane writes (it holds head 0 of a real query)
    bool my_tail;
    float* my_row;

    __device__ __forceinline__ HalveLane(const float* dead, const float* q, const int* steps, float* scores,
                                         int max_blocks)
        : lane(lane_id()) {
        const int perm = (lane >> kShift) & (M - 1);
#pragma unroll
        for (int p = 0; p < M; ++p) {
            const int j = p ^ perm;
            qr[p] = j < kValues ? lane_slice(q + j * QSA_IDX_DIM, lane) : float4{};
        }
#pragma unroll
        for (int g = 0; g < kGroups; ++g) {
            const int query = g ^ (perm / QSA_IDX_HEADS);
            group_nbid[g] = query < NQ ? steps[query * QSA_STEP_INTS + QSA_STEP_NBID] : -1;
        }
        last = max_nbid(steps, NQ);
        my_q = perm / QSA_IDX_HEADS;
        const bool writer = my_q < NQ && perm % QSA_IDX_HEADS == 0;
        my_nbid = writer ? steps[my_q * QSA_STEP_INTS + QSA_STEP_NBID] : -1;
        my_tail = writer && has_tail(steps[my_q * QSA_STEP_INTS + QSA_STEP_NKV]);
        my_row = scores + (size_t)(writer ? my_q : 0) * max_blocks;
        dk = lane_slice(dead, lane);
    }

    // The keys of blocks b0..b0+kBatch-1, clamped to `last` so every load is valid and unconditional
    // (a block past `last` is scored on pooled[last] and not written).
    __device__ __forceinline__ void load_keys(const float* pooled, int b0, float4 (&kp)[kBatch]) const {
#pragma unroll
        for (int u = 0; u < kBatch; ++u) kp[u] = lane_slice(pooled + (size_t)min(b0 + u, last) * QSA_IDX_DIM, lane);
    }

    // Blocks b0..b0+kBatch-1. kTails: a query's tail block may be among them, so each position picks its
    // query's key (dead at the query's n_bid); otherwise every position uses the pooled key.
    template <bool kTails>
    __device__ __forceinline__ void score_batch(const float4 (&kp)[kBatch], int b0) const {
#pragma unroll
        for (int u = 0; u < kBatch; ++u) {
            const int b = b0 + u;
            float v[M];
#pragma unroll
            for (int p = 0; p < M; ++p)
                v[p] = qsa_lane_partial(kTails && b == group_nbid[p / QSA_IDX_HEADS] ? dk : kp[u], qr[p]);
#pragma unroll
            for (int s = 0; s < kHalvings; ++s) {
                const int o = (QSA_WARP / 2) >> s;
                const int half = (M / 2) >> s;
#pragma unroll
                for (int p = 0; p < M / 2; ++p) {  // constant bounds, so it unrolls and v stays in registers
                    if (p >= half) break;
                    v[p] += __shfl_xor_sync(kFullWarp, v[p + half], o);
                }
            }
            const float r = qsa_relu(butterfly_from(v[0], (QSA_WARP / 2) >> kHalvings));
            float score = 0.0f;
            score += r;  // a writer holds its query's head 0
#pragma unroll
            for (int h = 1; h < QSA_IDX_HEADS; ++h)
                score += __shfl_sync(kFullWarp, r, (my_q * QSA_IDX_HEADS + h) << kShift);
            if (b == my_nbid && my_tail) score += QSA_TAIL_BONUS;
            if (b <= my_nbid) my_row[b] = score;
        }
    }
};

// The halving scorer's loop for one warp of `warps`: NQ queries (those of q, steps and scores), blocks
// warp * kBatch, + warps * kBatch, ... up to their largest n_bid.
template <int NQ>
__device__ __forceinline__ void halve_warp(const float* pooled, const float* dead, const float* q, const int* steps,
                                           float* scores, int max_blocks, int warp, int warps) {
    using Lane = HalveLane<NQ>;
    const Lane w(dead, q, steps, scores, max_blocks);
    int first_tail = steps[QSA_STEP_NBID];
#pragma unroll
    for (int i = 1; i < NQ; ++i) first_tail = min(first_tail, steps[i * QSA_STEP_INTS + QSA_STEP_NBID]);
    const int stride = warps * Lane::kBatch;
    float4 next[Lane::kBatch];
    w.load_keys(pooled, warp * Lane::kBatch, next);
    for (int b0 = warp * Lane::kBatch; b0 <= w.last; b0 += stride) {
        float4 kp[Lane::kBatch];
#pragma unroll
        for (int u = 0; u < Lane::kBatch; ++u) kp[u] = next[u];
        w.load_keys(pooled, b0 + stride, next);
        if (b0 + Lane::kBatch <= first_tail) w.template score_batch<false>(kp, b0);
        else w.template score_batch<true>(kp, b0);
    }
}

}  // namespace
