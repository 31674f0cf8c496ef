// qsa_common.cuh: the constants and helpers every QSA selection kernel shares (spec sections 1-3).
// Every constant is named once, here; qsa_cli/geometry.py restates them and a test checks they agree.
#pragma once

#define QSA_IDX_DIM 128          // floats per indexer key / query head
#define QSA_IDX_HEADS 4          // indexer query heads per query
#define QSA_BLOCK_CELLS 4        // R: cells per block, one pooled key per block
#define QSA_TOP_K 2048           // cell budget
#define QSA_SELECT_CAP 2051      // TOP_K + R - 1: widest selection, and the row stride of ids
#define QSA_MAX_QUERIES 8        // queries of one decode call (a verify window)
#define QSA_HALVE_MAX_QUERIES 4  // queries one block_scores_halve_kernel call keeps in registers
#define QSA_QUERY_LANES 4        // lanes of block_scores_quarters_kernel a query: a quarter of the butterfly each
#define QSA_SPLIT_CHUNK_BLOCKS 2048  // blocks per CTA of the split top-k, at most (a call's chunk: this, a half or a quarter)
#define QSA_SPLIT_MIN_CHUNK_BLOCKS 512  // ... at least
#define QSA_CLUSTER_CTAS 8       // CTAs per query of the cluster top-k (the portable cluster size)
#define QSA_CLUSTER_WIDE_CTAS 16  // ... in a wide call (a non-portable cluster size: the launcher's rule)
#define QSA_CLUSTER_LANE_KEYS 4  // order keys a lane of the cluster top-k reads at once (one 16-byte read)
#define QSA_CLUSTER_CHUNK_KEYS 128  // WARP * CLUSTER_LANE_KEYS: keys a warp reads at once, a chunk of the emit
#define QSA_CLUSTER_HIST_BUFFERS 2  // a CTA's pass records of the cluster top-k: pass p's in buffer p % 2
#define QSA_CLUSTER_GATHER_BLOCKS 4096  // the cluster top-k's gather path: at most this many blocks at pass 0's digit
#define QSA_CLUSTER_GATHER_ALIGN 4  // ... a CTA's share padded to a multiple of this many (16 bytes: its bulk copies)
#define QSA_CLUSTER_GATHER_CHUNKS 256  // ... and a slice of at most this many chunks (a lane's hit bits: 4 a chunk)
#define QSA_RADIX_BITS 8         // digit width of the radix select
#define QSA_RADIX_BINS 256
#define QSA_RADIX_PASSES 4
#define QSA_TAIL_BONUS 1e9f      // added to an incomplete tail block's score: always selected

#define QSA_WARP 32

// The oldest cards (major * 10 + minor) whose instructions some kernels use.
#define QSA_PDL_MIN_CC 90      // programmatic dependent launch (griddepcontrol)
#define QSA_CLUSTER_MIN_CC 90  // thread-block clusters and distributed shared memory

// Threads a CTA of each top-k kernel (their __launch_bounds__; the launchers read geometry.py's copy).
#define QSA_TOPK_REF_THREADS 256
#define QSA_TOPK_WIDE_THREADS 1024
#define QSA_TOPK_SPLIT_THREADS 256
#define QSA_TOPK_CLUSTER_THREADS 1024
// Threads a CTA of the quarters scorer: its per-warp rings of keys are static shared memory.
#define QSA_QUARTERS_THREADS 128

// A step record: four int32 per query, in this order.
#define QSA_STEP_POS 0
#define QSA_STEP_NKV 1
#define QSA_STEP_NBID 2
#define QSA_STEP_WIDTH 3
#define QSA_STEP_INTS 4

// The scorer's lane partial: lane l holds dims 4l..4l+3 of the key and of one query head.
// Explicit round-to-nearest intrinsics, in the order nvcc's default contraction emits
// k.x*q.x + k.y*q.y + k.z*q.z + k.w*q.w (mul of the second product, then three fma), so the
// bits do not depend on compiler flags and the CPU model reproduces them.
__device__ __forceinline__ float qsa_lane_partial(float4 k, float4 q) {
    float p = __fmul_rn(k.y, q.y);
    p = __fmaf_rn(k.x, q.x, p);
    p = __fmaf_rn(k.z, q.z, p);
    p = __fmaf_rn(k.w, q.w, p);
    return p;
}

// Programmatic dependent launch (sm_90 and newer). A launch made with programmatic stream serialization
// may start once every CTA of the launch before it in the stream has called qsa_allow_next_grid (or
// exited), so its prologue (the step records, the scores: read-only inputs) overlaps the tail of that
// launch; qsa_wait_prior_grid then blocks until that launch has ended and its writes are visible, so
// a kernel calls it before it reads or writes anything another launch of its call writes or reads (the
// cluster top-k: the scores, when it follows the window's scorer).
// Launched plainly, or built for an older card, both are no-ops: the bits cannot depend on them.
__device__ __forceinline__ void qsa_allow_next_grid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= QSA_PDL_MIN_CC * 10
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

__device__ __forceinline__ void qsa_wait_prior_grid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= QSA_PDL_MIN_CC * 10
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ float qsa_relu(float x) { return x > 0.0f ? x : 0.0f; }

// The top-k's ranking key: a larger key is a larger score. +0.0f makes -0 equal +0; NaN ranks lowest.
__device__ __forceinline__ unsigned qsa_order_key(float score) {
    const float v = score + 0.0f;
    if (v != v) return 0u;
    const unsigned u = __float_as_uint(v);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// Cells block b holds for a query with n_kv cells and n_bid complete blocks (the tail holds 0-3).
__device__ __forceinline__ int qsa_block_weight(int b, int n_kv, int n_bid) {
    return b < n_bid ? QSA_BLOCK_CELLS : n_kv - n_bid * QSA_BLOCK_CELLS;
}

// Query q of a top-k call: its step record (n_kv cells, n_bid complete blocks, width cells to select),
// its row of ids and its row of scores.
struct TopkQuery {
    int n_kv, n_bid;
    unsigned width;
    int* row;
    const float* srow;
};

__device__ __forceinline__ TopkQuery topk_query(int q, const float* scores, const int* steps, int* ids,
                                                int max_blocks) {
    const int* st = steps + q * QSA_STEP_INTS;
    return {st[QSA_STEP_NKV], st[QSA_STEP_NBID], static_cast<unsigned>(st[QSA_STEP_WIDTH]),
            ids + static_cast<size_t>(q) * QSA_SELECT_CAP, scores + static_cast<size_t>(q) * max_blocks};
}

// The top-k's radix select (topk.cu, topk_cluster.cu): digits of QSA_RADIX_BITS from the key's top.
#define TOPK_FULL_MASK 0xffffffffu
#define TOPK_DIGIT_MASK (QSA_RADIX_BINS - 1u)
#define TOPK_KEY_BITS (QSA_RADIX_BITS * QSA_RADIX_PASSES)
// The split's histograms: a row of a warp's blocks with at most this many matching lanes adds with
// plain atomics without checking whether they share a digit (few lanes: few serialized adds).
#define TOPK_SPLIT_FEW_HITS 4

// Bit position of pass p's digit: 8 bits a pass from the top of the key.
__device__ __forceinline__ int topk_shift(int pass) { return TOPK_KEY_BITS - QSA_RADIX_BITS * (pass + 1); }
