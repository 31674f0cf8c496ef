// qsa-min-arch: 90
// topk_cluster.cu: block_topk_cluster_kernel, the Hopper decode top-k (spec section 3). A thread-block
// cluster of QSA_CLUSTER_CTAS CTAs per query, grid (QSA_CLUSTER_CTAS, nq); the ids are the reference's:
//   - CTA r loads the order keys of a contiguous 1/QSA_CLUSTER_CTAS of the query's blocks 0..n_bid into
//     dynamic shared memory once (the launcher sizes it, qsa_cli/launch/topk_cluster.py), adding pass 0's
//     histogram as it goes; the later passes and the emit read only shared memory;
//   - each pass, every CTA histograms its slice, the cluster syncs, and every CTA sums the same
//     QSA_CLUSTER_CTAS histograms through distributed shared memory and applies the reference's digit
//     rule to the sum: a pure function of integer counts, so thr, above and the tie budget are the
//     reference's in every CTA;
//   - the histograms also give each CTA the cells above / at thr in the CTAs before it: a key is above
//     thr exactly when, at the first pass where its digit differs from thr's, its digit is higher (the
//     pass's histogram counts it there), and at thr when it matches all four digits. CTA r writes its
//     selected cells ascending from (cells above in CTAs < r) + min(cells at thr in CTAs < r, budget).
// Warp w owns a contiguous span of the slice, read in chunks of 128 keys (4 consecutive keys a lane,
// one 16-byte read); the histograms have a column per lane, so every key adds with one plain shared
// atomic (no lane ever shares a word with another), and a lane's four keys, when equal, with one.
#include "qsa_common.cuh"

namespace {

// The cluster operations, as PTX (what cooperative_groups' cluster_group lowers to), so the kernel
// needs no toolkit header and compiles wherever NVRTC runs.
__device__ __forceinline__ unsigned cluster_cta_rank() {
    unsigned rank;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
    return rank;
}

// Every thread of every CTA of the cluster arrives (release: its shared-memory writes before it become
// visible to the cluster) and later waits (acquire) for all of them. Split so that a CTA can arrive
// after its last remote read and wait only before it exits.
__device__ __forceinline__ void cluster_arrive() { asm volatile("barrier.cluster.arrive.aligned;" ::: "memory"); }
__device__ __forceinline__ void cluster_wait() { asm volatile("barrier.cluster.wait.aligned;" ::: "memory"); }
__device__ __forceinline__ void cluster_sync() {
    cluster_arrive();
    cluster_wait();
}

// Word `i` of the shared array `own` as it lies in CTA `rank` of the cluster (distributed shared memory).
__device__ __forceinline__ unsigned cluster_load(const unsigned* own, unsigned rank, int i) {
    unsigned long long local;
    asm("cvta.to.shared.u64 %0, %1;" : "=l"(local) : "l"(own + i));
    unsigned remote, value;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(static_cast<unsigned>(local)), "r"(rank));
    asm volatile("ld.shared::cluster.u32 %0, [%1];" : "=r"(value) : "r"(remote) : "memory");
    return value;
}

constexpr int kWarps = QSA_TOPK_CLUSTER_THREADS / QSA_WARP;
constexpr int kBinWarps = QSA_RADIX_BINS / QSA_WARP;  // warps 0..7 hold one histogram bin a thread
constexpr int kBinsPerWarp = QSA_RADIX_BINS / kWarps; // bins each warp sums over the lanes' columns
constexpr int kLaneKeys = 4;                          // consecutive keys a lane reads at once (uint4)
constexpr int kChunkKeys = QSA_WARP * kLaneKeys;      // keys of a warp's chunk
// A chunk's cells above and at thr fit one word's halves.
constexpr int kHalfBits = 16;
constexpr unsigned kHalfMask = (1u << kHalfBits) - 1u;
static_assert(kChunkKeys * QSA_BLOCK_CELLS <= kHalfMask, "a chunk's counts must fit 16 bits");
static_assert(kWarps == QSA_WARP, "one lane per warp reads the warps' counts");
static_assert(QSA_TOPK_CLUSTER_THREADS >= QSA_RADIX_BINS && QSA_RADIX_BINS % kWarps == 0, "bins over threads and warps");
static_assert(QSA_RADIX_BITS * (QSA_RADIX_PASSES - 1) == 24, "pass 0's digit is the key's top byte");

// Per-CTA values the passes hand to the emit (indices into `sel`).
enum Sel { kAbove, kAtBefore, kAboveBefore, kSelSlots };

}  // namespace

__global__ void __cluster_dims__(QSA_CLUSTER_CTAS, 1, 1) __launch_bounds__(QSA_TOPK_CLUSTER_THREADS)
block_topk_cluster_kernel(const float* __restrict__ scores, const int* __restrict__ steps, int* __restrict__ ids,
                          int /*nq: the grid*/, int max_blocks,
                          int /*active_blocks: the launcher sizes shared memory by it; each CTA reads n_bid*/) {
    extern __shared__ uint4 slice_keys[];  // this CTA's slice of order keys, padded to 16 bytes
    unsigned* keys = reinterpret_cast<unsigned*>(slice_keys);
    // The pass's histogram of the slice, one column per lane: lanes never collide on a word (bank
    // = lane), so every key adds with one plain shared atomic.
    __shared__ uint4 lane_hist_words[QSA_RADIX_BINS * QSA_WARP / 4];
    unsigned(*lane_hist)[QSA_WARP] = reinterpret_cast<unsigned(*)[QSA_WARP]>(lane_hist_words);
    __shared__ unsigned hist[QSA_RADIX_PASSES][QSA_RADIX_BINS];  // one per pass: read remotely after it
    __shared__ unsigned bin_warp_cells[kBinWarps];
    __shared__ unsigned warp_above[kWarps], warp_at[kWarps];
    __shared__ unsigned sel[kSelSlots];

    const int rank = static_cast<int>(cluster_cta_rank()), q = blockIdx.y;
    const int tid = threadIdx.x, lane = tid % QSA_WARP, warp = tid / QSA_WARP;
    const int* st = steps + q * QSA_STEP_INTS;
    const int n_kv = st[QSA_STEP_NKV], n_bid = st[QSA_STEP_NBID];
    const unsigned width = st[QSA_STEP_WIDTH];
    int* row = ids + static_cast<size_t>(q) * QSA_SELECT_CAP;
    if (n_kv <= static_cast<int>(width)) {  // the whole cluster leaves here: no CTA reads another's memory
        for (int j = rank * QSA_TOPK_CLUSTER_THREADS + tid; j < n_kv; j += QSA_CLUSTER_CTAS * QSA_TOPK_CLUSTER_THREADS) row[j] = j;
        return;
    }
    const int blocks = n_bid + 1, per = (blocks + QSA_CLUSTER_CTAS - 1) / QSA_CLUSTER_CTAS;
    const int lo = min(rank * per, blocks), n = min(lo + per, blocks) - lo;  // slice: blocks lo..lo+n-1
    const int tail_at = n_bid - lo;  // the tail block's index in the slice, when 0 <= tail_at < n
    const unsigned tail = qsa_block_weight(n_bid, n_kv, n_bid);
    // Block weight by slice index (i < n): the tail's own, R for the others (a weight-0 tail adds 0).
    auto weight = [&](int i) { return i == tail_at ? tail : static_cast<unsigned>(QSA_BLOCK_CELLS); };
    // Warp w's span of the slice: whole chunks, so every lane's 16-byte read is aligned.
    const int span = (n + kWarps * kChunkKeys - 1) / (kWarps * kChunkKeys) * kChunkKeys;
    const int wlo = min(warp * span, n), whi = min(wlo + span, n);
    const int chunks = (whi - wlo + kChunkKeys - 1) / kChunkKeys;

    for (int i = tid; i < QSA_RADIX_BINS * QSA_WARP / 4; i += QSA_TOPK_CLUSTER_THREADS) lane_hist_words[i] = make_uint4(0, 0, 0, 0);
    for (int i = tid; i < QSA_RADIX_PASSES * QSA_RADIX_BINS; i += QSA_TOPK_CLUSTER_THREADS) (&hist[0][0])[i] = 0;
    if (tid < kSelSlots) sel[tid] = 0;
    __syncthreads();  // the lanes' columns are zero before pass 0 adds into them

    // The slice's keys, with pass 0's histogram (the top byte over every key): 16-byte loads of the
    // aligned middle of the scores row, the few floats before and after it one by one.
    const float* srow = scores + static_cast<size_t>(q) * max_blocks + lo;
    const int head = min(n, static_cast<int>((4u - static_cast<unsigned>(reinterpret_cast<size_t>(srow) / 4u % 4u)) % 4u));
    const int n4 = (n - head) / 4;
    const float4* srow4 = reinterpret_cast<const float4*>(srow + head);
    auto store_key = [&](int i, float score) {
        const unsigned key = qsa_order_key(score);
        keys[i] = key;
        atomicAdd(&lane_hist[key >> topk_shift(0)][lane], weight(i));
    };
    for (int base = 0; base < n4; base += kLaneKeys * QSA_TOPK_CLUSTER_THREADS) {
        float4 v[kLaneKeys];  // every load in flight before the first key is stored
#pragma unroll
        for (int k = 0; k < kLaneKeys; ++k) {
            const int j = base + k * QSA_TOPK_CLUSTER_THREADS + tid;
            v[k] = j < n4 ? srow4[j] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        }
#pragma unroll
        for (int k = 0; k < kLaneKeys; ++k) {
            const int j = base + k * QSA_TOPK_CLUSTER_THREADS + tid, i = head + 4 * j;
            if (j < n4) {
                store_key(i, v[k].x);
                store_key(i + 1, v[k].y);
                store_key(i + 2, v[k].z);
                store_key(i + 3, v[k].w);
            }
        }
    }
    if (tid < head) store_key(tid, srow[tid]);
    for (int i = head + 4 * n4 + tid; i < n; i += QSA_TOPK_CLUSTER_THREADS) store_key(i, srow[i]);
    __syncthreads();

    // A lane's 4 keys of chunk k of its warp's span, and whether each is in the slice.
    auto chunk_keys = [&](int k, unsigned (&key)[kLaneKeys]) {
        const int i0 = wlo + k * kChunkKeys + kLaneKeys * lane;
        const uint4 k4 = i0 < whi ? slice_keys[i0 / kLaneKeys] : make_uint4(0, 0, 0, 0);
        key[0] = k4.x;
        key[1] = k4.y;
        key[2] = k4.z;
        key[3] = k4.w;
        return i0;
    };

    unsigned thr = 0, mask = 0, above = 0;  // thr holds the digits found so far
    for (int pass = 0; pass < QSA_RADIX_PASSES; ++pass) {
        const int shift = topk_shift(pass);
        unsigned* own = hist[pass];
        if (pass > 0) {  // pass 0 was added as the keys were stored
            // Every block adds R cells, the tail too (corrected below); a lane's four keys, when equal
            // (runs of ties), add as one: a quarter of the atomics where every key matches.
            for (int k = 0; k < chunks; ++k) {
                unsigned key[kLaneKeys];
                const int i0 = chunk_keys(k, key);
                if (i0 + kLaneKeys <= whi && key[0] == key[1] && key[1] == key[2] && key[2] == key[3]) {
                    if ((key[0] & mask) == thr)
                        atomicAdd(&lane_hist[(key[0] >> shift) & TOPK_DIGIT_MASK][lane], kLaneKeys * QSA_BLOCK_CELLS);
                } else {
#pragma unroll
                    for (int j = 0; j < kLaneKeys; ++j)
                        if (i0 + j < whi && (key[j] & mask) == thr)
                            atomicAdd(&lane_hist[(key[j] >> shift) & TOPK_DIGIT_MASK][lane], QSA_BLOCK_CELLS);
                }
            }
            // The tail block's cells replace the R it added: tail - R wraps (unsigned) when the tail holds
            // fewer, and the bin's sum over the lanes' columns comes out exact all the same.
            if (tid == 0 && tail_at >= 0 && tail_at < n && (keys[tail_at] & mask) == thr)
                atomicAdd(&lane_hist[(keys[tail_at] >> shift) & TOPK_DIGIT_MASK][0], tail - QSA_BLOCK_CELLS);
            __syncthreads();
        }
        // Warp w sums its bins over the lanes' columns (and clears them for the next pass).
        for (int bin = warp * kBinsPerWarp; bin < (warp + 1) * kBinsPerWarp; ++bin) {
            const unsigned cells = __reduce_add_sync(TOPK_FULL_MASK, lane_hist[bin][lane]);
            lane_hist[bin][lane] = 0;
            if (lane == 0) own[bin] = cells;
        }
        cluster_sync();  // every CTA's histogram of this pass is complete and visible

        // Thread t < 256 sums bin t over the cluster (and over the CTAs before this one), then a suffix
        // scan gives the cells at digits >= t. The digit rule's d is the largest t in 1..255 with
        // above + cells >= width (the walk from 255 stops there; these t are exactly 1..d since the
        // suffix sums fall as t grows), 0 when none: the count of threads for which it holds.
        unsigned total = 0, before = 0, cells = 0;
        if (tid < QSA_RADIX_BINS) {
#pragma unroll
            for (int r = 0; r < QSA_CLUSTER_CTAS; ++r) {
                const unsigned h = cluster_load(own, r, tid);
                total += h;
                if (r < rank) before += h;
            }
            cells = total;
#pragma unroll
            for (int o = 1; o < QSA_WARP; o <<= 1) {
                const unsigned v = __shfl_down_sync(TOPK_FULL_MASK, cells, o);
                if (lane + o < QSA_WARP) cells += v;
            }
            if (lane == 0) bin_warp_cells[warp] = cells;
        }
        if (pass == QSA_RADIX_PASSES - 1) cluster_arrive();  // the last remote read is done
        __syncthreads();
        if (tid < QSA_RADIX_BINS)
            for (int w = warp + 1; w < kBinWarps; ++w) cells += bin_warp_cells[w];
        const unsigned d = __syncthreads_count(tid >= 1 && tid < QSA_RADIX_BINS && above + cells >= width);
        if (tid == static_cast<int>(d)) {
            sel[kAbove] = above + cells - total;  // the cells at digits above d join above
            if (pass == QSA_RADIX_PASSES - 1) sel[kAtBefore] = before;
        }
        if (tid < QSA_RADIX_BINS) {  // whole warps: the CTAs before this one gain their cells above d
            const unsigned v = __reduce_add_sync(TOPK_FULL_MASK, tid > static_cast<int>(d) ? before : 0u);
            if (lane == 0 && v != 0) atomicAdd(&sel[kAboveBefore], v);
        }
        __syncthreads();
        above = sel[kAbove];
        thr |= d << shift;
        mask |= TOPK_DIGIT_MASK << shift;
    }

    // Emit: warp w's cells above / at thr, scanned over the warps, and the CTAs before give its first
    // rank; inside, a warp scan per chunk (lanes in order, each lane's 4 keys in order).
    const unsigned budget = width - above;
    unsigned a = 0, t = 0;
    for (int k = 0; k < chunks; ++k) {
        unsigned key[kLaneKeys];
        const int i0 = chunk_keys(k, key);
#pragma unroll
        for (int j = 0; j < kLaneKeys; ++j) {
            if (i0 + j >= whi) continue;
            if (key[j] > thr) a += weight(i0 + j);
            else if (key[j] == thr) t += weight(i0 + j);
        }
    }
    a = __reduce_add_sync(TOPK_FULL_MASK, a);
    t = __reduce_add_sync(TOPK_FULL_MASK, t);
    if (lane == 0) {
        warp_above[warp] = a;
        warp_at[warp] = t;
    }
    __syncthreads();
    unsigned above_before = sel[kAboveBefore] + __reduce_add_sync(TOPK_FULL_MASK, lane < warp ? warp_above[lane] : 0u);
    unsigned at_before = sel[kAtBefore] + __reduce_add_sync(TOPK_FULL_MASK, lane < warp ? warp_at[lane] : 0u);
    // Once the cells before reach width, everything selected is written.
    for (int k = 0; k < chunks && above_before + min(at_before, budget) < width; ++k) {
        unsigned key[kLaneKeys], w[kLaneKeys];
        const int i0 = chunk_keys(k, key);
        unsigned mine = 0;
#pragma unroll
        for (int j = 0; j < kLaneKeys; ++j) {
            w[j] = i0 + j < whi ? weight(i0 + j) : 0u;
            if (key[j] > thr) mine += w[j];
            else if (key[j] == thr) mine += w[j] << kHalfBits;
        }
        if (!__any_sync(TOPK_FULL_MASK, mine != 0)) continue;
        unsigned through = mine;
#pragma unroll
        for (int o = 1; o < QSA_WARP; o <<= 1) {
            const unsigned v = __shfl_up_sync(TOPK_FULL_MASK, through, o);
            if (lane >= o) through += v;
        }
        const unsigned ahead = through - mine;
        unsigned ab = above_before + (ahead & kHalfMask), tb = at_before + (ahead >> kHalfBits);
#pragma unroll
        for (int j = 0; j < kLaneKeys; ++j) {
            unsigned count = 0;
            if (key[j] > thr) count = w[j];
            else if (key[j] == thr && tb < budget) count = min(w[j], budget - tb);
            const unsigned pos = ab + min(tb, budget);
            const int b = lo + i0 + j;
            for (unsigned c = 0; c < count; ++c) row[pos + c] = b * QSA_BLOCK_CELLS + static_cast<int>(c);
            if (key[j] > thr) ab += w[j];
            else if (key[j] == thr) tb += w[j];
        }
        const unsigned chunk = __shfl_sync(TOPK_FULL_MASK, through, QSA_WARP - 1);
        above_before += chunk & kHalfMask;
        at_before += chunk >> kHalfBits;
    }
    cluster_wait();  // no CTA leaves while another may still read its histograms
}
