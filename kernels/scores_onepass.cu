// scores_onepass.cu: qsa's two decode scorers that take a verify window of up to 8 queries in one pass over
// the keys (spec section 2), where the engine's halving scorer (scores.cu) takes 5-8 queries in two launches:
// paired (two halving warps on the same blocks) and quarters (a query on 4 lanes). Both give the reference's bits.
// Their arguments are scores.cu's scorers'.
#include "scores_common.cuh"

// Paired decode scorer, NA + NB queries in one pass over the keys: the warps of a CTA go in pairs, and both
// warps of a pair score the same blocks in the same order, the even one queries 0..NA-1, the odd one
// NA..NA+NB-1 (none when NB is 0), each exactly as block_scores_halve_kernel scores its sub-window (hence its
// bits). A block's key comes from memory once: the pair's second read of it moments later hits the cache.
// 5-8 queries then take one pass over the keys where the halving scorer takes two calls, each a full read.
template <int NA, int NB>
__global__ void block_scores_paired_kernel(const float* __restrict__ pooled, const float* __restrict__ dead,
                                           const float* __restrict__ q, const int* __restrict__ steps,
                                           float* __restrict__ scores, int nq, int max_blocks) {
    qsa_allow_next_grid();  // the window's top-k may start (it waits for this grid before reading the scores)
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
// (cp.async from sm_80), so the reads in flight take no registers. A warp of fewer than 32 / L queries (padded to
// a power of two) scores several blocks at once, one a slot; every warp scores kStepBlocks blocks a step, every
// block on its pooled key.
// Each query's tail block (its n_bid, on the dead key) is scored apart, by one warp of the grid in one call for
// the whole window, so the loop over the blocks picks no key per block and holds no tail case.
namespace {

constexpr int kKeyVectors = QSA_IDX_DIM / kDimsPerLane;  // float4s of a key: one per butterfly lane
constexpr int kQuartersWarps = QSA_QUARTERS_THREADS / QSA_WARP;
constexpr int kQueryLanes = QSA_QUERY_LANES;
constexpr int kStepBlocks = QSA_WARP / kQueryLanes;   // blocks a warp scores a step: a slot of one query each
constexpr int kRingBlocks = 16;  // keys a warp's ring holds (8 KB): kRingSteps steps, all but one in flight
constexpr int kRingSteps = kRingBlocks / kStepBlocks;
static_assert(kRingSteps >= 2, "a step in flight while the warp scores one");
static_assert(kQueryLanes >= QSA_IDX_HEADS && kQueryLanes % QSA_IDX_HEADS == 0, "the exchange ends in one head a lane");

// A 16-byte copy from global memory to the shared-memory address `dst` that does not wait for the data (sm_80+),
// else a plain copy.
__device__ __forceinline__ void copy_async(unsigned dst, const float4* src) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(src) : "memory");
#else
    const float4 v = *src;
    asm volatile("st.shared.v4.f32 [%0], {%1, %2, %3, %4};" ::"r"(dst), "f"(v.x), "f"(v.y), "f"(v.z), "f"(v.w) : "memory");
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
    // Lanes that score one block: the queries padded to a power of two (zero queries that write nothing), so that
    // the slots fill the warp and 3 queries cost what 4 do.
    static constexpr int kSlotLanes = kQueryLanes * pow2_at_least(NQ);
    static constexpr int kSlots = QSA_WARP / kSlotLanes;    // blocks a warp scores at once
    static constexpr int kBatch = kStepBlocks / kSlots;     // blocks a slot scores a step
    static constexpr int kHalvings = log2_of(QSA_IDX_HEADS);
    static constexpr int kHeadShift = log2_of(kQueryLanes) - kHalvings;  // lane t ends with head t >> kHeadShift
    static_assert(kStepBlocks % kSlots == 0, "a step is whole batches of every slot");

    int slot;
    int t;              // the lane's place among its query's kQueryLanes: butterfly lanes t, t + L, ... are its terms
    int last;           // the window's largest n_bid
    int nbid;           // the lane's query's n_bid
    bool writes, tail;  // the lane writes its query's scores (its lane 0, a real query); its tail
    float4 qr[QSA_IDX_HEADS][kTerms];  // position p: term m of head p ^ (t >> kHeadShift) (the exchange's order)
    float* row;

    __device__ __forceinline__ QuarterLane(const float* q, const int* steps, float* scores, int max_blocks) {
        const int lane = lane_id();
        slot = lane / kSlotLanes;
        const int query = lane % kSlotLanes / kQueryLanes;
        const bool real = query < NQ;  // else a padding query: zero slices, nothing written
        t = lane % kQueryLanes;
        const int perm = t >> kHeadShift;
        const float4* q4 = reinterpret_cast<const float4*>(q);
#pragma unroll
        for (int p = 0; p < QSA_IDX_HEADS; ++p)
#pragma unroll
            for (int m = 0; m < kTerms; ++m)
                qr[p][m] = real ? q4[(query * QSA_IDX_HEADS + (p ^ perm)) * kKeyVectors + t + kQueryLanes * m] : float4{};
        last = max_nbid(steps, NQ);
        nbid = real ? steps[query * QSA_STEP_INTS + QSA_STEP_NBID] : -1;
        tail = real && has_tail(steps[query * QSA_STEP_INTS + QSA_STEP_NKV]);
        writes = real && t == 0;
        row = scores + (size_t)(real ? query : 0) * max_blocks;
    }

    // The value of head p ^ perm summed over the lane's terms: the butterfly at offsets 16 .. kQueryLanes.
    __device__ __forceinline__ float lane_sum(const float4* key, int p) const {
        float v[kTerms];
#pragma unroll
        for (int m = 0; m < kTerms; ++m) v[m] = qsa_lane_partial(key[t + kQueryLanes * m], qr[p][m]);
#pragma unroll
        for (int half = kTerms / 2; half > 0; half /= 2)  // term m is butterfly lane t + L m: offset L half pairs m, m + half
#pragma unroll
            for (int m = 0; m < half; ++m) v[m] += v[m + half];
        return v[0];
    }

    // The score of `key` for a writer's query: the relu'd heads added in head order (no tail bonus).
    __device__ __forceinline__ float score(const float4* key) const {
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
        return score;
    }

    // The step's blocks b0 + slot + kSlots * u from `stage`, each written below its query's n_bid.
    __device__ __forceinline__ void score_step(const float4 (&stage)[kStepBlocks][kKeyVectors], int b0) const {
#pragma unroll
        for (int u = 0; u < kBatch; ++u) {
            const int b = b0 + slot + kSlots * u;
            const float s = score(stage[slot + kSlots * u]);
            if (writes && b < nbid) row[b] = s;
        }
    }

    // Every query's block n_bid on the dead key, the tail bonus added where its block is incomplete.
    __device__ __forceinline__ void score_tails(const float4* dead_key) const {
        const float s = score(dead_key);
        if (writes && slot == 0) row[nbid] = tail ? s + QSA_TAIL_BONUS : s;
    }
};

// Queue the keys of blocks b0..b0+kStepBlocks-1 (clamped to `last`: every read valid) into the stage at `stage`
// (this lane's shared-memory address in its first block), as one commit group; only the (empty) group once b0 is
// past `last`, as the loop ends before that step. `keys` is this lane's float4 of block 0.
__device__ __forceinline__ void fill_step(unsigned stage, const float4* keys, int b0, int last) {
    constexpr unsigned kBlockBytes = sizeof(float4) * kKeyVectors;
    const float4* src = keys + (size_t)min(b0, last) * kKeyVectors;  // no address past block `last`
    if (b0 + kStepBlocks - 1 <= last) {  // a whole step: the blocks at constant offsets from one address
#pragma unroll
        for (int j = 0; j < kStepBlocks; ++j) copy_async(stage + j * kBlockBytes, src + j * kKeyVectors);
    } else if (b0 <= last) {
#pragma unroll
        for (int j = 0; j < kStepBlocks; ++j) copy_async(stage + j * kBlockBytes, src + (min(b0 + j, last) - b0) * kKeyVectors);
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
    qsa_allow_next_grid();  // the window's top-k may start (it waits for this grid before reading the scores)
    if (threadIdx.x < kKeyVectors) dead_key[threadIdx.x] = reinterpret_cast<const float4*>(dead)[threadIdx.x];
    __syncthreads();

    const QuarterLane<NQ> w(q, steps, scores, max_blocks);
    // The tails are the last CTA's first warp's (the fewest blocks), before its loop; after it at one query. Either
    // place gives the same bits; each was the faster on the H200 at its query counts (docs/benchmarks.md).
    const bool tails = blockIdx.x == gridDim.x - 1 && threadIdx.x < QSA_WARP;
    if (NQ > 1 && tails) w.score_tails(dead_key);
    KeyRing& ring = rings[threadIdx.x / QSA_WARP];
    const float4* keys = reinterpret_cast<const float4*>(pooled) + lane_id();
    // The stages' shared-memory addresses, fixed before the loop, so a step's copies take one global address.
    const unsigned ring_at = static_cast<unsigned>(__cvta_generic_to_shared(&ring[0][0][lane_id()]));
    constexpr unsigned kStageBytes = sizeof(ring[0]);
    const int stride = gridDim.x * kQuartersWarps * kStepBlocks;
    const int first = (blockIdx.x * kQuartersWarps + threadIdx.x / QSA_WARP) * kStepBlocks;
#pragma unroll
    for (int i = 0; i < kRingSteps - 1; ++i) fill_step(ring_at + i * kStageBytes, keys, first + i * stride, w.last);
    unsigned stage = 0;
    for (int b0 = first; b0 <= w.last; b0 += stride) {
        const unsigned refill = (stage + kRingSteps - 1) % kRingSteps;
        fill_step(ring_at + refill * kStageBytes, keys, b0 + (kRingSteps - 1) * stride, w.last);
        wait_copies<kRingSteps - 1>();  // this step's group has landed (this lane's part of it) ...
        __syncwarp();                   // ... and every lane's
        w.score_step(ring[stage], b0);
        __syncwarp();  // every lane has read the stage before the next step refills it
        stage = (stage + 1) % kRingSteps;
    }
    if (NQ == 1 && tails) w.score_tails(dead_key);
}

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
