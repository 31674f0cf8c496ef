// scores.cu: the engine's three block scorers of the QSA selection (spec section 2): the reference, the old
// decode scorer (multi) and the new one (halve). qsa's one-pass scorers of 5-8 queries are in scores_onepass.cu.
// All give identical bits.
//
// Arguments of every scorer:
//   pooled [max_blocks, QSA_IDX_DIM]  block keys          dead [QSA_IDX_DIM]  the tail block's key
//   q [nq, QSA_IDX_HEADS, QSA_IDX_DIM] queries           steps [nq, QSA_STEP_INTS] step records
//   scores [nq, max_blocks] (row stride max_blocks): blocks 0..n_bid of each query are written, no others.
// The arithmetic of record is scores_common.cuh's. Warps per CTA and the grid are the launcher's choice
// (qsa_cli/launch/scores.py): the kernels read blockDim/gridDim, and no choice of them changes the bits.
#include "scores_common.cuh"

// Reference: one warp per (query, block), grid (ceil(max_blocks / warps), nq). Every key is re-read
// per query; slow, but it is the arithmetic of record that the other two reproduce.
extern "C" __global__ void block_scores_kernel(const float* __restrict__ pooled, const float* __restrict__ dead,
                                               const float* __restrict__ q, const int* __restrict__ steps,
                                               float* __restrict__ scores, int nq, int max_blocks) {
    const int lane = lane_id();
    const int b = blockIdx.x * (blockDim.x / QSA_WARP) + threadIdx.x / QSA_WARP;
    const int qi = blockIdx.y;
    const int n_kv = steps[qi * QSA_STEP_INTS + QSA_STEP_NKV];
    const int n_bid = steps[qi * QSA_STEP_INTS + QSA_STEP_NBID];
    if (b > n_bid) return;  // warp-uniform: the whole warp leaves before any shuffle
    const float4 key = lane_slice(b == n_bid ? dead : pooled + (size_t)b * QSA_IDX_DIM, lane);
    float score = warp_score(key, q + (size_t)qi * QSA_IDX_HEADS * QSA_IDX_DIM, lane);
    if (b == n_bid && has_tail(n_kv)) score += QSA_TAIL_BONUS;
    if (lane == 0) scores[(size_t)qi * max_blocks + b] = score;
}

// Old decode scorer: a fixed grid strides over the blocks, a warp loads its block's key once and loops
// over the call's queries (staged in shared memory), each (query, head) value summed by its own
// 5-shuffle butterfly. The same operations per value as the reference, hence the same bits.
extern "C" __global__ void block_scores_multi_kernel(const float* __restrict__ pooled, const float* __restrict__ dead,
                                                     const float* __restrict__ q, const int* __restrict__ steps,
                                                     float* __restrict__ scores, int nq, int max_blocks) {
    __shared__ float4 sq[QSA_MAX_QUERIES * QSA_IDX_HEADS * QSA_IDX_DIM / kDimsPerLane];
    __shared__ int ssteps[QSA_MAX_QUERIES * QSA_STEP_INTS];
    const float4* q4 = reinterpret_cast<const float4*>(q);
    for (int i = threadIdx.x; i < nq * QSA_IDX_HEADS * QSA_IDX_DIM / kDimsPerLane; i += blockDim.x) sq[i] = q4[i];
    for (int i = threadIdx.x; i < nq * QSA_STEP_INTS; i += blockDim.x) ssteps[i] = steps[i];
    __syncthreads();

    const int lane = lane_id();
    const int warps = blockDim.x / QSA_WARP;
    const int last = max_nbid(ssteps, nq);
    const float4 dk = lane_slice(dead, lane);
    for (int b = blockIdx.x * warps + threadIdx.x / QSA_WARP; b <= last; b += gridDim.x * warps) {
        const float4 kp = b < last ? lane_slice(pooled + (size_t)b * QSA_IDX_DIM, lane) : dk;
        for (int qi = 0; qi < nq; ++qi) {
            const int n_bid = ssteps[qi * QSA_STEP_INTS + QSA_STEP_NBID];
            if (b > n_bid) continue;
            const float* qh = reinterpret_cast<const float*>(sq) + qi * QSA_IDX_HEADS * QSA_IDX_DIM;
            float score = warp_score(b == n_bid ? dk : kp, qh, lane);
            if (b == n_bid && has_tail(ssteps[qi * QSA_STEP_INTS + QSA_STEP_NKV])) score += QSA_TAIL_BONUS;
            if (lane == 0) scores[(size_t)qi * max_blocks + b] = score;
        }
    }
}

// New decode scorer, NQ = 1..QSA_HALVE_MAX_QUERIES queries (5-8 run as two launches): a warp per block, its
// query slices in registers, its values reduced by recursive halving (scores_common.cuh says why that is the
// butterfly's bits). `nq` is NQ: the launcher passes the sub-window's q, steps and scores.
template <int NQ>
__global__ void block_scores_halve_kernel(const float* __restrict__ pooled, const float* __restrict__ dead,
                                          const float* __restrict__ q, const int* __restrict__ steps,
                                          float* __restrict__ scores, int nq, int max_blocks) {
    const int warps_per_cta = blockDim.x / QSA_WARP;
    halve_warp<NQ>(pooled, dead, q, steps, scores, max_blocks, blockIdx.x * warps_per_cta + threadIdx.x / QSA_WARP,
                   gridDim.x * warps_per_cta);
}

template __global__ void block_scores_halve_kernel<1>(const float*, const float*, const float*, const int*, float*, int, int);
template __global__ void block_scores_halve_kernel<2>(const float*, const float*, const float*, const int*, float*, int, int);
template __global__ void block_scores_halve_kernel<3>(const float*, const float*, const float*, const int*, float*, int, int);
template __global__ void block_scores_halve_kernel<4>(const float*, const float*, const float*, const int*, float*, int, int);
