// scores.cu: the five block scorers of the QSA selection (spec section 2). All give identical bits.
//
// Arguments of every scorer:
//   pooled [max_blocks, QSA_IDX_DIM]  block keys          dead [QSA_IDX_DIM]  the tail block's key
//   q [nq, QSA_IDX_HEADS, QSA_IDX_DIM] queries           steps [nq, QSA_STEP_INTS] step records
//   scores [nq, max_blocks] (row stride max_blocks): blocks 0..n_bid of each query are written, no others.
// The arithmetic of record: lane l forms its partial of dims 4l..4l+3 with qsa_lane_partial, the 32
// partials are summed by the xor butterfly (offsets 16, 8, 4, 2, 1), and the relu'd heads are added in
// head order from 0. Warps per CTA and the grid are the launcher's choice (qsa_cli/launch/scores.py):
// the kernels read blockDim/gridDim, and no choice of them changes the bits. Subnormals must not be
// flushed: compile with -ftz=false (nvcc's default, the engine's build), or tiny partials change the sums.
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

}  // namespace

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

// New decode scorer, NQ = 1..QSA_HALVE_MAX_QUERIES queries (5-8 run as two launches). A warp per block,
// striding over the blocks like the old one, with the lane's query slices in registers. The lane's 4*NQ
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
namespace {

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

}  // namespace

namespace {

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

// `nq` is NQ: the launcher passes the sub-window's q, steps and scores.
template <int NQ>
__global__ void block_scores_halve_kernel(const float* __restrict__ pooled, const float* __restrict__ dead,
                                          const float* __restrict__ q, const int* __restrict__ steps,
                                          float* __restrict__ scores, int nq, int max_blocks) {
    const int warps_per_cta = blockDim.x / QSA_WARP;
    halve_warp<NQ>(pooled, dead, q, steps, scores, max_blocks, blockIdx.x * warps_per_cta + threadIdx.x / QSA_WARP,
                   gridDim.x * warps_per_cta);
}

// Paired decode scorer, NA + NB queries in one pass over the keys: the warps of a CTA go in pairs, and both
// warps of a pair score the same blocks in the same order, the even one queries 0..NA-1, the odd one
// NA..NA+NB-1 (none when NB is 0), each exactly as block_scores_halve_kernel scores its sub-window (hence its
// bits). A block's key comes from memory once: the pair's second read of it moments later hits the cache.
// 5-8 queries then take one pass over the keys where the halving scorer takes two calls, each a full read.
template <int NA, int NB>
__global__ void block_scores_paired_kernel(const float* __restrict__ pooled, const float* __restrict__ dead,
                                           const float* __restrict__ q, const int* __restrict__ steps,
                                           float* __restrict__ scores, int nq, int max_blocks) {
    const int pairs_per_cta = blockDim.x / (2 * QSA_WARP);
    const int pair = blockIdx.x * pairs_per_cta + threadIdx.x / (2 * QSA_WARP);
    const int pairs = gridDim.x * pairs_per_cta;
    if ((threadIdx.x / QSA_WARP) % 2 == 0) {
        halve_warp<NA>(pooled, dead, q, steps, scores, max_blocks, pair, pairs);
    } else if constexpr (NB > 0) {
        halve_warp<NB>(pooled, dead, q + NA * QSA_IDX_HEADS * QSA_IDX_DIM, steps + NA * QSA_STEP_INTS,
                       scores + (size_t)NA * max_blocks, max_blocks, pair, pairs);
    }
}

// Quarters decode scorer, NQ = 1..QSA_MAX_QUERIES queries in one launch that reads each key from memory once.
// A query takes L = QSA_QUERY_LANES (4) lanes. Lane t of a query's L forms, for each of its 4 heads, the partials
// of the butterfly's lanes t, t + L, t + 2L, ... (its 32 / L terms) and adds them by the butterfly's own pairs at
// the offsets 16 .. L, which join only lanes of the same residue mod L: in its registers, without a shuffle.
// The offsets below L pair lanes of the same query, which finish by recursive halving over the 4 heads as the
// halving scorer does, then the plain butterfly (lane t ends with head t / (L / 4)). Every addition is the
// butterfly's pair at its offset and float addition commutes, so every value is bitwise the butterfly's:
// a warp issues 6 shuffles a block for up to 8 queries, the halving scorer 19 for up to 4. A lane keeps its query's
// head slices of its terms in registers (128 floats); the keys pass through a ring of shared memory per warp
// (cp.async from sm_80), so the reads in flight take no registers. A warp of fewer than 32 / L queries scores
// several blocks at once, one a slot; every warp scores kStepBlocks blocks a step.
namespace {

constexpr int kKeyVectors = QSA_IDX_DIM / kDimsPerLane;  // float4s of a key: one per butterfly lane
constexpr int kQuartersWarps = QSA_QUARTERS_THREADS / QSA_WARP;
constexpr int kQueryLanes = QSA_QUERY_LANES;
constexpr int kStepBlocks = QSA_WARP / kQueryLanes;   // blocks a warp scores a step: a slot of one query each
constexpr int kRingBlocks = 16;  // keys a warp's ring holds (8 KB): kRingSteps steps, all but one in flight
constexpr int kRingSteps = kRingBlocks / kStepBlocks;
static_assert(kRingSteps >= 2, "a step in flight while the warp scores one");
static_assert(kQueryLanes >= QSA_IDX_HEADS && kQueryLanes % QSA_IDX_HEADS == 0, "the exchange ends in one head a lane");

// A 16-byte copy from global to shared memory that does not wait for the data (sm_80+), else a plain copy.
__device__ __forceinline__ void copy_async(float4* dst, const float4* src) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(static_cast<unsigned>(__cvta_generic_to_shared(dst))),
                 "l"(src) : "memory");
#else
    *dst = *src;
#endif
}

__device__ __forceinline__ void commit_copies() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.commit_group;" ::: "memory");
#endif
}

// Wait until at most `pending` of this thread's committed copy groups are still in flight.
template <int pending>
__device__ __forceinline__ void wait_copies() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.wait_group %0;" ::"n"(pending) : "memory");
#endif
}

using KeyRing = float4[kRingSteps][kStepBlocks][kKeyVectors];

// A warp's lane of a sub-window of NQ queries (those of q, steps and scores).
template <int NQ>
struct QuarterLane {
    static_assert(NQ >= 1 && NQ * kQueryLanes <= QSA_WARP, "a warp holds the window's queries");
    static constexpr int kTerms = QSA_WARP / kQueryLanes;   // butterfly lanes a lane sums in registers
    static constexpr int kSlotLanes = kQueryLanes * NQ;     // lanes that score one block
    static constexpr int kSlots = QSA_WARP / kSlotLanes;    // blocks a warp scores at once
    static constexpr int kBatch = kStepBlocks / kSlots;     // blocks a slot scores a step
    static constexpr int kHalvings = log2_of(QSA_IDX_HEADS);
    static constexpr int kHeadShift = log2_of(kQueryLanes) - kHalvings;  // lane t ends with head t >> kHeadShift
    static_assert(kStepBlocks % kSlots == 0, "a step is whole batches of every slot");

    int lane, slot, term0;
    int last;           // the window's largest n_bid
    int nbid;           // the lane's query's n_bid
    bool writes, tail;  // the lane writes its query's scores (its lane 0 of a slot in use); its tail
    float4 qr[QSA_IDX_HEADS][kTerms];  // position p: term m of head p ^ (t >> kHeadShift) (the exchange's order)
    float* row;

    __device__ __forceinline__ QuarterLane(const float* q, const int* steps, float* scores, int max_blocks)
        : lane(lane_id()) {
        const bool used = lane / kSlotLanes < kSlots;  // lanes past the last slot score slot 0 and write nothing
        slot = used ? lane / kSlotLanes : 0;
        const int query = lane % kSlotLanes / kQueryLanes;
        const int t = lane % kQueryLanes;
        const int perm = t >> kHeadShift;
        term0 = t;
        const float4* q4 = reinterpret_cast<const float4*>(q);
#pragma unroll
        for (int p = 0; p < QSA_IDX_HEADS; ++p)
#pragma unroll
            for (int m = 0; m < kTerms; ++m)
                qr[p][m] = q4[(query * QSA_IDX_HEADS + (p ^ perm)) * kKeyVectors + t + kQueryLanes * m];
        last = max_nbid(steps, NQ);
        nbid = steps[query * QSA_STEP_INTS + QSA_STEP_NBID];
        tail = has_tail(steps[query * QSA_STEP_INTS + QSA_STEP_NKV]);
        writes = used && t == 0;
        row = scores + (size_t)query * max_blocks;
    }

    // The value of head p ^ perm summed over the lane's terms: the butterfly at offsets 16 .. kQueryLanes.
    __device__ __forceinline__ float lane_sum(const float4* key, int p) const {
        float v[kTerms];
#pragma unroll
        for (int m = 0; m < kTerms; ++m) v[m] = qsa_lane_partial(key[term0 + kQueryLanes * m], qr[p][m]);
#pragma unroll
        for (int half = kTerms / 2; half > 0; half /= 2)  // term m is butterfly lane t + L m: offset L half pairs m, m + half
#pragma unroll
            for (int m = 0; m < half; ++m) v[m] += v[m + half];
        return v[0];
    }

    // Block b of the slot from `key` (the ring's copy, or the dead key at the query's n_bid).
    __device__ __forceinline__ void score(const float4* key, int b) const {
        float d[QSA_IDX_HEADS];
#pragma unroll
        for (int p = 0; p < QSA_IDX_HEADS; ++p) d[p] = lane_sum(key, p);
        // The offsets below L: each halving keeps the lower half of the positions and adds the partner's
        // upper half (its copies of the same heads); then one value is left, summed by the plain butterfly.
#pragma unroll
        for (int s = 0; s < kHalvings; ++s) {
            const int o = (kQueryLanes / 2) >> s;
            const int half = (QSA_IDX_HEADS / 2) >> s;
#pragma unroll
            for (int i = 0; i < QSA_IDX_HEADS / 2; ++i) {
                if (i >= half) break;
                d[i] += __shfl_xor_sync(kFullWarp, d[i + half], o);
            }
        }
        const float r = qsa_relu(butterfly_from(d[0], (kQueryLanes / 2) >> kHalvings));
        float score = 0.0f;
        score += r;  // a writer is its query's lane 0: head 0
#pragma unroll
        for (int h = 1; h < QSA_IDX_HEADS; ++h) score += __shfl_sync(kFullWarp, r, h << kHeadShift, kQueryLanes);
        if (b == nbid && tail) score += QSA_TAIL_BONUS;
        if (writes && b <= nbid) row[b] = score;
    }

    // The step's blocks b0 + slot + kSlots * u from `stage`.
    __device__ __forceinline__ void score_step(const float4 (&stage)[kStepBlocks][kKeyVectors], const float4* dead_key,
                                               int b0) const {
#pragma unroll
        for (int u = 0; u < kBatch; ++u) {
            const int b = b0 + slot + kSlots * u;
            score(b == nbid ? dead_key : stage[slot + kSlots * u], b);
        }
    }
};

// Queue the keys of blocks b0..b0+kStepBlocks-1 (clamped to `last`: every read valid) into `stage`, as one
// commit group; only the (empty) group once b0 is past `last`, as the loop ends before that step.
__device__ __forceinline__ void fill_step(float4 (&stage)[kStepBlocks][kKeyVectors], const float* pooled, int b0,
                                          int last) {
    const int lane = lane_id();
    if (b0 <= last) {
#pragma unroll
        for (int j = 0; j < kStepBlocks; ++j)
            copy_async(&stage[j][lane], reinterpret_cast<const float4*>(pooled + (size_t)min(b0 + j, last) * QSA_IDX_DIM) + lane);
    }
    commit_copies();
}

}  // namespace

// `nq` is NQ. Each warp strides over the blocks kStepBlocks at a time, its ring kRingSteps steps deep.
template <int NQ>
__global__ void __launch_bounds__(QSA_QUARTERS_THREADS)
block_scores_quarters_kernel(const float* __restrict__ pooled, const float* __restrict__ dead,
                             const float* __restrict__ q, const int* __restrict__ steps,
                             float* __restrict__ scores, int nq, int max_blocks) {
    __shared__ KeyRing rings[kQuartersWarps];
    __shared__ float4 dead_key[kKeyVectors];
    if (threadIdx.x < kKeyVectors) dead_key[threadIdx.x] = reinterpret_cast<const float4*>(dead)[threadIdx.x];
    __syncthreads();

    const QuarterLane<NQ> w(q, steps, scores, max_blocks);
    KeyRing& ring = rings[threadIdx.x / QSA_WARP];
    const int stride = gridDim.x * kQuartersWarps * kStepBlocks;
    const int first = (blockIdx.x * kQuartersWarps + threadIdx.x / QSA_WARP) * kStepBlocks;
#pragma unroll
    for (int i = 0; i < kRingSteps - 1; ++i) fill_step(ring[i], pooled, first + i * stride, w.last);
    int stage = 0;
    for (int b0 = first; b0 <= w.last; b0 += stride) {
        fill_step(ring[(stage + kRingSteps - 1) % kRingSteps], pooled, b0 + (kRingSteps - 1) * stride, w.last);
        wait_copies<kRingSteps - 1>();  // this step's group has landed (this lane's part of it) ...
        __syncwarp();                   // ... and every lane's
        w.score_step(ring[stage], dead_key, b0);
        __syncwarp();  // every lane has read the stage before the next step refills it
        stage = (stage + 1) % kRingSteps;
    }
}

template __global__ void block_scores_halve_kernel<1>(const float*, const float*, const float*, const int*, float*, int, int);
template __global__ void block_scores_halve_kernel<2>(const float*, const float*, const float*, const int*, float*, int, int);
template __global__ void block_scores_halve_kernel<3>(const float*, const float*, const float*, const int*, float*, int, int);
template __global__ void block_scores_halve_kernel<4>(const float*, const float*, const float*, const int*, float*, int, int);
#define QSA_PAIRED(NA, NB) \
    template __global__ void block_scores_paired_kernel<NA, NB>(const float*, const float*, const float*, const int*, \
                                                                float*, int, int)
QSA_PAIRED(1, 0);
QSA_PAIRED(1, 1);
QSA_PAIRED(2, 1);
QSA_PAIRED(2, 2);
QSA_PAIRED(4, 1);
QSA_PAIRED(4, 2);
QSA_PAIRED(4, 3);
QSA_PAIRED(4, 4);
template __global__ void block_scores_quarters_kernel<1>(const float*, const float*, const float*, const int*, float*, int, int);
template __global__ void block_scores_quarters_kernel<2>(const float*, const float*, const float*, const int*, float*, int, int);
template __global__ void block_scores_quarters_kernel<3>(const float*, const float*, const float*, const int*, float*, int, int);
template __global__ void block_scores_quarters_kernel<4>(const float*, const float*, const float*, const int*, float*, int, int);
template __global__ void block_scores_quarters_kernel<5>(const float*, const float*, const float*, const int*, float*, int, int);
template __global__ void block_scores_quarters_kernel<6>(const float*, const float*, const float*, const int*, float*, int, int);
template __global__ void block_scores_quarters_kernel<7>(const float*, const float*, const float*, const int*, float*, int, int);
template __global__ void block_scores_quarters_kernel<8>(const float*, const float*, const float*, const int*, float*, int, int);
