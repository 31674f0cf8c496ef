// qsa-min-arch: 90
// qsa-declares: waits-for-prior-grid
// topk_cluster.cu: block_topk_cluster_kernel, the Hopper decode top-k (spec section 3). A thread-block
// cluster of CTAS CTAs per query, grid (CTAS, nq): QSA_CLUSTER_CTAS, or QSA_CLUSTER_WIDE_CTAS in
// block_topk_cluster_wide_kernel where the launcher's rule takes it; the ids are the reference's at either:
//   - launched after the window's scorer as a programmatic dependent launch, it waits for that grid
//     (qsa_wait_prior_grid) before it reads the scores; launched plainly, the wait is a no-op. The
//     declaration above tells the launcher so (a copy of the kernels from before the wait is launched plainly);
//   - CTA r loads the order keys of a contiguous 1/CTAS of the query's blocks 0..n_bid into
//     dynamic shared memory once (the launcher sizes it, qsa_cli/launch/topk_cluster.py), adding pass 0's
//     histogram as it goes; the later passes and the emit read only shared memory;
//   - each pass, every CTA histograms its slice, the cluster syncs, and every CTA sums the same
//     CTAS histograms through distributed shared memory and applies the reference's digit
//     rule to the sum: a pure function of integer counts, so thr, above and the tie budget are the
//     reference's in every CTA;
//   - the select ends after fewer than four passes once the digits found decide it, from counts every
//     CTA shares: the keys the pass counted are all one key (thr is that key), or the cells at the
//     digits found are all needed or are one block's (thr's remaining digits cannot change which cells
//     are selected: keys then compare under the mask of the digits found); after pass 2 also from each
//     CTA's cells and least and greatest key at the digits found, when these tell each CTA's keys
//     there (one key, or two blocks), or the blocks are whole and the budget within one (thr is the
//     greatest);
//   - the histograms also give each CTA the cells above / at thr in the CTAs before it: a key is above
//     thr exactly when, at the first pass where its digit differs from thr's, its digit is higher (the
//     pass's histogram counts it there), and at thr when it matches all its digits. CTA r writes its
//     selected cells ascending from (cells above in CTAs < r) + min(cells at thr in CTAs < r, budget).
// The slice is read in chunks of 128 keys (4 consecutive keys a lane, one 16-byte read), chunk c by
// warp c % 32; the histograms have a column per lane, so every key adds with one plain shared atomic
// (no lane ever shares a word with another), and a lane's four keys, when equal, with one. The emit
// scans each chunk's cells above / at thr (counted by passes 2 and 3 where they can) for its first rank.
#include "qsa_common.cuh"

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < QSA_CLUSTER_MIN_CC * 10
#error "block_topk_cluster_kernel needs thread-block clusters (QSA_CLUSTER_MIN_CC)"
#endif

namespace {

// The cluster operations, as PTX (what cooperative_groups' cluster_group lowers to), so the kernel
// needs no toolkit header and compiles wherever NVRTC runs.
__device__ __forceinline__ unsigned cluster_cta_rank() {
    unsigned rank;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
    return rank;
}

// The cluster barrier: every thread of every CTA arrives, then waits (acquire) for all of them. The
// fences around the arrive are restricted to shared memory, all the cluster shares here: a plain
// (release) arrive fences every state space at GPU scope (MEMBAR.ALL.GPU in the SASS). The restricted
// fences need PTX 8.6 (CUDA 12.8); an older compiler gets the plain arrive: the same bits, slower.
#if defined(__CUDACC_VER_MAJOR__) && (__CUDACC_VER_MAJOR__ > 12 || (__CUDACC_VER_MAJOR__ == 12 && __CUDACC_VER_MINOR__ >= 8))
#define QSA_CLUSTER_SHARED_FENCES 1
#endif
__device__ __forceinline__ void cluster_wait() { asm volatile("barrier.cluster.wait.aligned;" ::: "memory"); }
// Arrive once this CTA's shared-memory writes (`writes`: before a round's reads) or its reads of the
// cluster's shared memory (before another CTA may leave) are ordered before the arrive.
__device__ __forceinline__ void cluster_arrive(bool writes) {
#ifdef QSA_CLUSTER_SHARED_FENCES
    if (writes) asm volatile("fence.release.sync_restrict::shared::cta.cluster;" ::: "memory");
    else asm volatile("fence.acquire.sync_restrict::shared::cluster.cluster;" ::: "memory");
    asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
#else
    asm volatile("barrier.cluster.arrive.aligned;" ::: "memory");
#endif
}
// This CTA's shared-memory writes before the barrier are visible to the cluster's reads after it.
__device__ __forceinline__ void cluster_sync() {
    cluster_arrive(true);
    cluster_wait();
}

// The gather path's exchange: a shared-memory address of this CTA, and the same place in CTA `rank`.
__device__ __forceinline__ unsigned shared_address(const void* p) { return static_cast<unsigned>(__cvta_generic_to_shared(p)); }
__device__ __forceinline__ unsigned cluster_address(const void* p, unsigned rank) {
    unsigned remote;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(shared_address(p)), "r"(rank));
    return remote;
}

// `bytes` (a multiple of 16) from this CTA's `from` to the same place in CTA `rank`, by the bulk copy unit,
// completing that many bytes of CTA rank's mbarrier `bar`.
__device__ __forceinline__ void bulk_copy_to(const void* from, unsigned bytes, unsigned rank, const void* bar) {
    asm volatile("cp.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                 :: "r"(cluster_address(from, rank)), "r"(shared_address(from)), "r"(bytes), "r"(cluster_address(bar, rank))
                 : "memory");
}

// The calling thread's arrival at `bar` (initialized for one), expecting `bytes` more of copies this phase.
__device__ __forceinline__ void arrive_expecting(const void* bar, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(shared_address(bar)), "r"(bytes) : "memory");
}

// Waits until `bar`'s phase of parity `parity` completes: the copies that completed it are then visible to
// the CTA (the mbarrier's transaction count; a cluster-scope acquire would also invalidate the L1 for nothing).
__device__ __forceinline__ void wait_phase(const void* bar, unsigned parity) {
    asm volatile("{\n .reg .pred done;\n WAIT_%=: mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
                 " @!done bra WAIT_%=;\n}" :: "r"(shared_address(bar)), "r"(parity) : "memory");
}

// The sum of `v` over this lane and the lanes below it (every lane of the warp calls it).
__device__ __forceinline__ unsigned warp_inclusive_sum(unsigned v) {
    const int lane = threadIdx.x % QSA_WARP;
#pragma unroll
    for (int o = 1; o < QSA_WARP; o <<= 1) {
        const unsigned below = __shfl_up_sync(TOPK_FULL_MASK, v, o);
        if (lane >= o) v += below;
    }
    return v;
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
constexpr int kLaneKeys = QSA_CLUSTER_LANE_KEYS;      // consecutive keys a lane reads at once (uint4)
constexpr int kChunkKeys = QSA_CLUSTER_CHUNK_KEYS;    // keys of a chunk: chunk c belongs to warp c % kWarps
constexpr int kBinBuffers = QSA_CLUSTER_HIST_BUFFERS;  // pass p's record in buffer p % 2 (see pass_record)
constexpr int kBinWords = QSA_RADIX_BINS * QSA_WARP;  // the histogram with a column per lane
constexpr int kSumThreads = QSA_TOPK_CLUSTER_THREADS / QSA_RADIX_BINS;  // threads that sum one bin's columns
// A chunk's cells above and at thr fit one word's halves.
constexpr int kHalfBits = 16;
constexpr unsigned kHalfMask = (1u << kHalfBits) - 1u;
static_assert(kChunkKeys * QSA_BLOCK_CELLS <= kHalfMask, "a chunk's counts must fit 16 bits");
static_assert(kWarps == QSA_WARP, "one lane per warp reads the warps' totals");
static_assert(kLaneKeys * sizeof(unsigned) == sizeof(uint4), "a lane's keys are one 16-byte read");
static_assert(kChunkKeys == QSA_WARP * kLaneKeys, "a chunk is what a warp reads at once");
static_assert(QSA_WARP / kSumThreads == 8, "a thread sums eight columns: two 16-byte reads");
static_assert(QSA_RADIX_BITS * (QSA_RADIX_PASSES - 1) == 24, "pass 0's digit is the key's top byte");

// Per-CTA values the digit rounds hand to every thread (indices into `sel`): the cells above thr,
// at and above thr in the CTAs before; whether the digits found decide the selection; the least and
// greatest key counted in the pass over the cluster (both thr's full key once pass 2's digit records
// give it).
enum Sel { kAbove, kAtBefore, kAboveBefore, kDone, kMin, kMax, kAtBlocks, kAtBlocksBefore, kDigit, kThr, kSelSlots };
// Words of a CTA's pass record: the histogram, then its least and greatest key counted.
constexpr int kMinWord = QSA_RADIX_BINS, kMaxWord = QSA_RADIX_BINS + 1, kPassWords = QSA_RADIX_BINS + 2;
// Pass 2 (the third) also keeps each digit's least and greatest key, which only the warp at the digit
// found reads from every CTA, only when they may spare pass 3 (its whole round).
constexpr int kTrackedPass = QSA_RADIX_PASSES - 2;
// The gather path: the blocks at pass 0's digit of the whole cluster, each CTA's share padded with blocks of
// weight 0, at most kGatherEntries of them. Every CTA holds them all in its lane histogram (free once pass 0's
// record is taken) as two arrays: their keys, then their slice index, weight and CTA (gather_meta); each
// thread then reads kThreadEntries of them into registers.
constexpr int kGatherEntries = QSA_CLUSTER_GATHER_BLOCKS;
constexpr int kGatherAlign = QSA_CLUSTER_GATHER_ALIGN;
constexpr int kThreadEntries = kGatherEntries / QSA_TOPK_CLUSTER_THREADS;
// ... and where the gathered keys at the digits found hold at most this many cells (a warp's worth of blocks),
// thr is found by ranking them instead of the digit rule's remaining passes (few_thr).
constexpr unsigned kFewCells = QSA_WARP * QSA_BLOCK_CELLS;
static_assert(2 * kGatherEntries <= kBinWords, "the gathered keys and their records fit the lane histogram");
static_assert(kGatherEntries % QSA_TOPK_CLUSTER_THREADS == 0, "a thread's entries: a whole number");
static_assert(kGatherAlign * sizeof(unsigned) % 16 == 0, "a CTA's share: whole 16-byte units (bulk copies)");
static_assert(QSA_CLUSTER_GATHER_CHUNKS * kLaneKeys == kWarps * 32, "a lane's hits over its warp's chunks: one word");

// A thread's place: its CTA's rank in the cluster, its index, lane and warp in the CTA.
struct ClusterThread {
    int rank, tid, lane, warp;
};

__device__ __forceinline__ ClusterThread cluster_thread() {
    const int rank = static_cast<int>(cluster_cta_rank()), tid = threadIdx.x;
    return {rank, tid, tid % QSA_WARP, tid / QSA_WARP};
}

// A CTA's slice of its query as one thread sees it: the shared memory of the phases below, the slice
// (blocks lo..lo+n-1 of the query, in n_chunks chunks) and the thread's place in a cluster of CTAS.
// The members are the kernel's phases in order; every one is called by every thread of the CTA.
template <int CTAS>
struct ClusterSlice : ClusterThread {
    static_assert(2 * CTAS <= QSA_WARP, "a warp holds two entries of every CTA (exact_key, digit_round)");
    // Dynamic: the slice's order keys (padded to 16 bytes), then each chunk's cells above and at thr
    // (one more entry each: the scan's end).
    uint4* slice_keys;
    unsigned* keys;  // slice_keys, a key a word
    unsigned* chunk_above;
    unsigned* chunk_at;
    // The pass's histogram of the slice, one column per lane (lane_hist_words as [bin][lane]).
    uint4* lane_hist_words;
    unsigned (*lane_hist)[QSA_WARP];
    unsigned (*hist)[kPassWords];  // the CTA's pass records, pass p's in buffer p % kBinBuffers, read by the cluster
    unsigned* key_min;             // the pass's least / greatest key counted
    unsigned* key_max;
    unsigned* bin_warp_cells;  // the digit round's suffix sums, a warp's
    unsigned* warp_above;      // the emit's scan, a warp's
    unsigned* warp_at;
    unsigned* sel;  // the digit round's results (Sel)
    unsigned* digit_least;  // pass 2's least / greatest key counted at each digit
    unsigned* digit_greatest;
    unsigned* gather_count;  // the gather path: this CTA's blocks gathered so far
    unsigned long long* gather_bar;  // ... the mbarrier the other CTAs' copies complete
    int* row;
    unsigned width, tail;  // tail: the tail block's cells
    int lo, n, n_chunks, tail_at;  // tail_at: the tail block's index in the slice, when 0 <= tail_at < n
    int slice_chunks;  // chunks of a whole slice (every CTA's but the last ones'): the same in every CTA

    // Block weight by slice index (i < n): the tail's own, R for the others (a weight-0 tail adds 0).
    __device__ __forceinline__ unsigned weight(int i) const {
        return i == tail_at ? tail : static_cast<unsigned>(QSA_BLOCK_CELLS);
    }

    // Round `base` of the aligned middle's 16-byte loads: a thread's kLaneKeys of them.
    __device__ __forceinline__ void load_round(const float4* srow4, int n4, int base, float4 (&v)[kLaneKeys]) const {
#pragma unroll
        for (int k = 0; k < kLaneKeys; ++k) {
            const int j = base + k * QSA_TOPK_CLUSTER_THREADS + tid;
            v[k] = j < n4 ? srow4[j] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        }
    }

    __device__ __forceinline__ void store_key(int i, float score) const {
        const unsigned key = qsa_order_key(score);
        keys[i] = key;
        atomicAdd(&lane_hist[key >> topk_shift(0)][lane], weight(i));
    }

    // The slice's keys, with pass 0's histogram (the top byte over every key): 16-byte loads of the
    // aligned middle of the scores row `query_srow`, the few floats before and after it one by one. The
    // first round's loads are in flight while the histogram, sel and the pass's least / greatest key
    // are reset; a barrier orders those before pass 0 adds.
    __device__ __forceinline__ void load(const float* query_srow) const {
        const float* srow = query_srow + lo;
        const int head = min(n, static_cast<int>((4u - static_cast<unsigned>(reinterpret_cast<size_t>(srow) / 4u % 4u)) % 4u));
        const int n4 = (n - head) / 4;
        const float4* srow4 = reinterpret_cast<const float4*>(srow + head);
        float4 v[kLaneKeys];
        load_round(srow4, n4, 0, v);
        for (int i = tid; i < kBinWords / 4; i += QSA_TOPK_CLUSTER_THREADS) lane_hist_words[i] = make_uint4(0, 0, 0, 0);
        if (tid < kSelSlots) sel[tid] = 0;
        if (tid == 0) {
            *gather_count = 0;
            asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(shared_address(gather_bar)) : "memory");
            asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");  // before pass 0's cluster barrier
        }
        if (tid == 0) *key_min = ~0u, *key_max = 0u;
        __syncthreads();  // the lanes' columns are zero before pass 0 adds into them

        for (int base = 0; base < n4;) {
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
            base += kLaneKeys * QSA_TOPK_CLUSTER_THREADS;
            if (base < n4) load_round(srow4, n4, base, v);
        }
        if (tid < head) store_key(tid, srow[tid]);
        for (int i = head + 4 * n4 + tid; i < n; i += QSA_TOPK_CLUSTER_THREADS) store_key(i, srow[i]);
    }

    // A lane's 4 keys of chunk c, their weights, and the index of the first in the slice; `whole`: a
    // chunk before the last (constant where called, so the checks fold away).
    __device__ __forceinline__ int chunk_keys(int c, bool whole, unsigned (&key)[kLaneKeys], unsigned (&w)[kLaneKeys]) const {
        const int i0 = c * kChunkKeys + kLaneKeys * lane;
        const uint4 k4 = whole || i0 < n ? slice_keys[i0 / kLaneKeys] : make_uint4(0, 0, 0, 0);
        key[0] = k4.x;
        key[1] = k4.y;
        key[2] = k4.z;
        key[3] = k4.w;
#pragma unroll
        for (int j = 0; j < kLaneKeys; ++j) w[j] = whole ? QSA_BLOCK_CELLS : i0 + j < n ? weight(i0 + j) : 0u;
        return i0;
    }

    // Whether chunk c held a key at the digits found when the last counting pass counted it (warp-uniform).
    // Every lane reads the word, then the warp syncs: lane 0 writes it again when the chunk is counted
    // (add_chunk, count_chunk), and no lane may read the new value in place of the old.
    __device__ __forceinline__ bool chunk_tied(int c) const {
        const bool tied = chunk_at[c] != 0;
        __syncwarp();
        return tied;
    }

    // Chunk c's keys at the digits found (thr under mask) add their cells at pass `pass`'s digit: a
    // whole chunk's blocks R each (the tail is in the last chunk), a lane's four keys, when equal (runs
    // of ties), as one; lane_min / lane_max take the keys counted. A pass after which the select may
    // end (`count_cells`) also counts each chunk's cells above the digits found before it (above thr,
    // whatever its later digits) and whether any key matches them (those chunks are counted in the emit).
    __device__ __forceinline__ void add_chunk(int c, bool whole, bool count_cells, int pass, int shift, unsigned thr,
                                              unsigned mask, unsigned& lane_min, unsigned& lane_max) const {
        unsigned key[kLaneKeys], w[kLaneKeys];
        chunk_keys(c, whole, key, w);
        bool hit[kLaneKeys];
        unsigned hi = 0;
#pragma unroll
        for (int j = 0; j < kLaneKeys; ++j) {
            hit[j] = w[j] != 0 && (key[j] & mask) == thr;
            if (count_cells && (key[j] & mask) > thr) hi += w[j];
        }
        const bool any = hit[0] || hit[1] || hit[2] || hit[3];
        if (any) {
            if (whole && key[0] == key[1] && key[1] == key[2] && key[2] == key[3]) {
                const unsigned digit = (key[0] >> shift) & TOPK_DIGIT_MASK;
                atomicAdd(&lane_hist[digit][lane], kLaneKeys * QSA_BLOCK_CELLS);
                lane_min = min(lane_min, key[0]);
                lane_max = max(lane_max, key[0]);
                if (count_cells && pass == kTrackedPass) {
                    atomicMin(&digit_least[digit], key[0]);
                    atomicMax(&digit_greatest[digit], key[0]);
                }
            } else {
#pragma unroll
                for (int j = 0; j < kLaneKeys; ++j)
                    if (hit[j]) {
                        const unsigned digit = (key[j] >> shift) & TOPK_DIGIT_MASK;
                        atomicAdd(&lane_hist[digit][lane], w[j]);
                        lane_min = min(lane_min, key[j]);
                        lane_max = max(lane_max, key[j]);
                        if (count_cells && pass == kTrackedPass) {
                            atomicMin(&digit_least[digit], key[j]);
                            atomicMax(&digit_greatest[digit], key[j]);
                        }
                    }
            }
        }
        if (count_cells) {
            hi = __reduce_add_sync(TOPK_FULL_MASK, hi);
            const bool tied = __any_sync(TOPK_FULL_MASK, any);
            if (lane == 0) {
                chunk_above[c] = hi;
                chunk_at[c] = tied;
            }
        }
    }

    // Pass `pass` (1-3; its digit at bit `shift`; `counting`: the select may end after it) histograms the
    // slice's keys at the digits found, chunk c by warp c % kWarps, and takes the least and greatest key
    // it counted.
    __device__ __forceinline__ void count_pass(int pass, int shift, bool counting, unsigned thr, unsigned mask) const {
        unsigned lane_min = ~0u, lane_max = 0u;  // of the keys this lane counts
        // `whole` and `count_cells` constant at each call: four specialised copies of the chunk's code
        if (counting) {
            for (int c = warp; c < n_chunks; c += kWarps) {
                // Pass 3 skips the chunks where pass 2 found no key at the digits found (warp-uniform):
                // none is at thr's first three digits, and pass 2's counts of them stand.
                if (pass == QSA_RADIX_PASSES - 1 && !chunk_tied(c)) continue;
                if (c + 1 < n_chunks) add_chunk(c, true, true, pass, shift, thr, mask, lane_min, lane_max);
                else add_chunk(c, false, true, pass, shift, thr, mask, lane_min, lane_max);
            }
        } else {
            for (int c = warp; c < n_chunks; c += kWarps) {
                if (c + 1 < n_chunks) add_chunk(c, true, false, pass, shift, thr, mask, lane_min, lane_max);
                else add_chunk(c, false, false, pass, shift, thr, mask, lane_min, lane_max);
            }
        }
        lane_min = __reduce_min_sync(TOPK_FULL_MASK, lane_min);
        lane_max = __reduce_max_sync(TOPK_FULL_MASK, lane_max);
        if (lane == 0 && lane_min <= lane_max) {
            atomicMin(key_min, lane_min);
            atomicMax(key_max, lane_max);
        }
    }

    // The CTA's record of pass `pass` (returned): threads 4b..4b+3 sum bin b's lane columns (eight each)
    // and clear them for the next pass; thread 0 adds the least and greatest key counted. Buffer
    // pass % 2: a CTA writes it again two passes on, after the next cluster barrier, which no CTA
    // reaches before its remote reads of this pass are done.
    __device__ __forceinline__ unsigned* pass_record(int pass) const {
        unsigned* own = hist[pass % kBinBuffers];
        {
            uint4* cols = &lane_hist_words[tid * 2];
            const uint4 a = cols[0], b = cols[1];
            unsigned cells = a.x + a.y + a.z + a.w + b.x + b.y + b.z + b.w;
            cols[0] = cols[1] = make_uint4(0, 0, 0, 0);
#pragma unroll
            for (int o = 1; o < kSumThreads; o <<= 1) cells += __shfl_xor_sync(TOPK_FULL_MASK, cells, o);
            if (tid % kSumThreads == 0) own[tid / kSumThreads] = cells;
        }
        if (tid == 0) {  // pass 0 counts every key: no single key unless all are (found a pass later)
            own[kMinWord] = pass > 0 ? *key_min : 1u;
            own[kMaxWord] = pass > 0 ? *key_max : 0u;
            *key_min = ~0u, *key_max = 0u;
        }
        return own;
    }

    // Pass 2's round may give thr's full key, sparing pass 3 and its round, when the select would go
    // on: the warp holding bin d (its lanes' `total` and suffix `cells`) reads, lane r from CTA r, its
    // cells at thr's digits and their least and greatest key (pass 3 does not write these: they are
    // still pass 2's), and sets sel to thr's full key where these tell it.
    __device__ __forceinline__ void exact_key(const unsigned* own, unsigned d, unsigned total, unsigned cells,
                                              unsigned above) const {
        const int at = static_cast<int>(d) % QSA_WARP;
        const unsigned at_cells = __shfl_sync(TOPK_FULL_MASK, total, at);
        const unsigned new_above = above + __shfl_sync(TOPK_FULL_MASK, cells, at) - at_cells;
        if (new_above + at_cells != width && at_cells > QSA_BLOCK_CELLS && sel[kMin] != sel[kMax]) {
            const int r = lane % CTAS;
            // CTA r's cells there and their least and greatest key (~0 and 0 when it holds none)
            unsigned held = 0, least = ~0u, greatest = 0u;
            if (lane < CTAS) {
                held = cluster_load(own, r, d);
                least = cluster_load(digit_least, r, d);
                greatest = cluster_load(digit_greatest, r, d);
            }
            held = __shfl_sync(TOPK_FULL_MASK, held, r);
            least = __shfl_sync(TOPK_FULL_MASK, least, r);
            greatest = __shfl_sync(TOPK_FULL_MASK, greatest, r);
            // CTA r's keys there as entries (key, cells), lane r its first and lane CTAS + r its
            // second: one key (its cells), or two blocks of R cells (2R cells hold no tail);
            // any other mix leaves them unknown.
            const bool one_key = held != 0 && least == greatest;
            const bool two_blocks = held == 2 * QSA_BLOCK_CELLS && least != greatest;
            const bool known = __all_sync(TOPK_FULL_MASK, held == 0 || one_key || two_blocks);
            unsigned key = 0, count = 0;
            if (lane < CTAS && one_key) {
                key = least, count = held;
            } else if (lane < 2 * CTAS && two_blocks) {
                key = lane < CTAS ? least : greatest, count = QSA_BLOCK_CELLS;
            }
            const unsigned budget = width - new_above;
            unsigned exact = ~0u, gain = 0, at_before = 0, above_before = 0;
            if (known) {  // thr: the key whose cells, after those of the greater keys, reach the budget
                unsigned greater = 0, same = 0;
#pragma unroll
                for (int j = 0; j < 2 * CTAS; ++j) {
                    const unsigned kj = __shfl_sync(TOPK_FULL_MASK, key, j);
                    const unsigned cj = __shfl_sync(TOPK_FULL_MASK, count, j);
                    greater += kj > key ? cj : 0u;
                    same += kj == key ? cj : 0u;
                }
                const bool reaches = count != 0 && greater < budget && budget <= greater + same;
                const int src = __ffs(__ballot_sync(TOPK_FULL_MASK, reaches)) - 1;
                exact = __shfl_sync(TOPK_FULL_MASK, key, src);
                gain = __shfl_sync(TOPK_FULL_MASK, greater, src);  // its cells there join above
                const bool earlier = r < rank;
                at_before = __reduce_add_sync(TOPK_FULL_MASK, earlier && key == exact ? count : 0u);
                above_before = __reduce_add_sync(TOPK_FULL_MASK, earlier && key > exact ? count : 0u);
            } else if (at_cells % QSA_BLOCK_CELLS == 0 && budget <= QSA_BLOCK_CELLS) {
                // whole blocks, the budget within one: the first block of the greatest key takes it
                // all, and a CTA after one holding that key has at least the budget at thr before it
                exact = __reduce_max_sync(TOPK_FULL_MASK, greatest);
                const bool holds = r < rank && held != 0 && greatest == exact;
                at_before = __any_sync(TOPK_FULL_MASK, holds) ? QSA_BLOCK_CELLS : 0u;
            }
            __syncwarp();  // after the writes of the thread at d, in this warp
            if (exact != ~0u && lane == 0) {
                sel[kMin] = sel[kMax] = exact;  // every thread takes it
                sel[kAbove] = new_above + gain;
                sel[kAtBefore] = at_before;
                if (above_before != 0) atomicAdd(&sel[kAboveBefore], above_before);
            }
        }
    }

    // The digit round of pass `pass` over the cluster's records (`own`: this CTA's), with `above` the
    // cells above the digits found: returns the pass's digit d and leaves sel for the barrier after it.
    // Thread t < 256 sums bin t over the cluster (and over the CTAs before this one), then a suffix
    // scan gives the cells at digits >= t. The digit rule's d is the largest t in 1..255 with
    // above + cells >= width (the walk from 255 stops there; these t are exactly 1..d since the
    // suffix sums fall as t grows), 0 when none: the count of threads for which it holds.
    __device__ __forceinline__ unsigned digit_round(int pass, const unsigned* own, unsigned above) const {
        unsigned total = 0, before = 0, cells = 0, at_blocks = 0, at_blocks_before = 0;
        if (tid < QSA_RADIX_BINS) {
            unsigned blocks = 0, blocks_before = 0;  // their blocks (only a tail holds fewer than R cells), padded
#pragma unroll
            for (int r = 0; r < CTAS; ++r) {
                const unsigned h = cluster_load(own, r, tid);
                total += h;
                const unsigned padded = ((h + QSA_BLOCK_CELLS - 1) / QSA_BLOCK_CELLS + kGatherAlign - 1) / kGatherAlign * kGatherAlign;
                blocks += padded;
                if (r < rank) before += h, blocks_before += padded;
            }
            at_blocks = blocks, at_blocks_before = blocks_before;
            // Pass 2's digit records start empty (the cluster reads them in pass 2's round only).
            if (pass == 0) digit_least[tid] = ~0u, digit_greatest[tid] = 0u;
            cells = total;
#pragma unroll
            for (int o = 1; o < QSA_WARP; o <<= 1) {
                const unsigned v = __shfl_down_sync(TOPK_FULL_MASK, cells, o);
                if (lane + o < QSA_WARP) cells += v;
            }
            if (lane == 0) bin_warp_cells[warp] = cells;
        } else if (warp == kBinWarps) {  // lane r < CTAS: CTA r's least key, lane CTAS + r: its greatest
            const unsigned v = lane < 2 * CTAS ? cluster_load(own, lane % CTAS, lane < CTAS ? kMinWord : kMaxWord) : 0u;
            const unsigned lo_key = __reduce_min_sync(TOPK_FULL_MASK, lane < CTAS ? v : ~0u);
            const unsigned hi_key = __reduce_max_sync(TOPK_FULL_MASK, lane >= CTAS ? v : 0u);
            if (lane == 0) {
                sel[kMin] = lo_key;
                sel[kMax] = hi_key;
            }
        }
        __syncthreads();
        if (tid < QSA_RADIX_BINS)
            for (int w = warp + 1; w < kBinWarps; ++w) cells += bin_warp_cells[w];
        const unsigned d = __syncthreads_count(tid >= 1 && tid < QSA_RADIX_BINS && above + cells >= width);
        if (tid == static_cast<int>(d)) {
            sel[kAbove] = above + cells - total;  // the cells at digits above d join above
            sel[kAtBefore] = before;
            sel[kAtBlocks] = at_blocks;
            sel[kAtBlocksBefore] = at_blocks_before;
            // thr's digits decide: the cells at them are all needed, or they are one block's
            sel[kDone] = above + cells == width || total <= QSA_BLOCK_CELLS;
        }
        if (tid < QSA_RADIX_BINS) {  // whole warps: the CTAs before this one gain their cells above d
            const unsigned v = __reduce_add_sync(TOPK_FULL_MASK, tid > static_cast<int>(d) ? before : 0u);
            if (lane == 0 && v != 0) atomicAdd(&sel[kAboveBefore], v);
            if (pass == kTrackedPass && warp == static_cast<int>(d) / QSA_WARP) exact_key(own, d, total, cells, above);  // warp-uniform
        }
        return d;
    }

    // ---- The gather path: after pass 0, when the cluster's blocks at its digit fit kGatherEntries (the
    // same decision in every CTA, from the round's sums), every CTA gathers them all and finds thr's last
    // three digits alone, by the rounds' digit rule on the same counts, with no further round.

    __device__ __forceinline__ unsigned* gather_key() const { return reinterpret_cast<unsigned*>(lane_hist_words); }
    __device__ __forceinline__ unsigned* gather_meta() const { return gather_key() + kGatherEntries; }
    // An entry's record: its slice index, its cells (0: padding) and its CTA, 24, 4 and 4 bits.
    __device__ __forceinline__ static unsigned gather_entry(int i, unsigned w, unsigned rank) {
        static_assert(QSA_CLUSTER_WIDE_CTAS <= 16 && QSA_BLOCK_CELLS < 16, "a CTA and a block's cells: 4 bits each");
        return static_cast<unsigned>(i) << 8 | w << 4 | rank;
    }
    __device__ __forceinline__ static int entry_index(unsigned meta) { return static_cast<int>(meta >> 8); }
    __device__ __forceinline__ static unsigned entry_cells(unsigned meta) { return meta >> 4 & 15u; }
    __device__ __forceinline__ static unsigned entry_cta(unsigned meta) { return meta & 15u; }

    // Whether this call takes the gather path (after pass 0's round: sel holds the cluster's blocks at d).
    __device__ __forceinline__ bool gathers() const {
        return sel[kAtBlocks] <= kGatherEntries && slice_chunks <= QSA_CLUSTER_GATHER_CHUNKS;
    }

    // Chunk c's keys at thr under mask (pass 0's digit; weight 0 excluded) as this lane's bits 4k..4k+3 (k:
    // the chunk's turn in its warp), and its cells above the digit into chunk_above (chunk_at 0). `whole`
    // is a constant at each call, so that a whole chunk's weights fold away.
    __device__ __forceinline__ void gather_chunk(int c, int k, bool whole, unsigned thr, unsigned mask, unsigned& bits) const {
        unsigned key[kLaneKeys], w[kLaneKeys], hi = 0;
        chunk_keys(c, whole, key, w);
#pragma unroll
        for (int j = 0; j < kLaneKeys; ++j) {
            const unsigned top = key[j] & mask;
            if (top == thr && w[j] != 0) bits |= 1u << (kLaneKeys * k + j);
            hi += top > thr ? w[j] : 0u;
        }
        hi = __reduce_add_sync(TOPK_FULL_MASK, hi);
        if (lane == 0) chunk_above[c] = hi, chunk_at[c] = 0;
    }

    // This CTA's blocks at thr under mask into its own gather entries from sel[kAtBlocksBefore] on (a lane's
    // hits as bits over its warp's chunks, placed after those of the warps and lanes before it: only sums
    // are taken over them), and each chunk's cells above the digit, from which the emit's counts follow once
    // thr is known.
    __device__ __forceinline__ void gather_own(unsigned thr, unsigned mask) const {
        unsigned bits = 0;
        int k = 0;
        for (int c = warp; c + 1 < n_chunks; c += kWarps, ++k) gather_chunk(c, k, true, thr, mask, bits);
        if ((n_chunks - 1) % kWarps == warp) gather_chunk(n_chunks - 1, (n_chunks - 1) / kWarps, false, thr, mask, bits);
        const unsigned mine = __popc(bits), through = warp_inclusive_sum(mine);
        unsigned base = 0;
        if (lane == QSA_WARP - 1) base = atomicAdd(gather_count, through);
        int at = static_cast<int>(sel[kAtBlocksBefore] + __shfl_sync(TOPK_FULL_MASK, base, QSA_WARP - 1) + through - mine);
        for (; bits != 0; bits &= bits - 1, ++at) {
            const int b = __ffs(bits) - 1;
            const int i = (warp + kWarps * (b / kLaneKeys)) * kChunkKeys + kLaneKeys * lane + b % kLaneKeys;
            gather_key()[at] = keys[i];
            gather_meta()[at] = gather_entry(i, weight(i), static_cast<unsigned>(rank));
        }
    }

    // The exchange: this CTA's entries (padded with weight 0) copied into every other CTA by the bulk copy
    // unit, each completing the receiver's mbarrier; then the wait for the others' copies into this CTA.
    // No CTA leaves before every copy into it is complete (the kernel's last cluster barrier follows the
    // waits), so no copy's source leaves before it is read.
    __device__ __forceinline__ void gather_exchange() const {
        __syncthreads();  // gather_count
        const unsigned own = *gather_count, padded = (own + kGatherAlign - 1) / kGatherAlign * kGatherAlign;
        const unsigned first = sel[kAtBlocksBefore];
        if (tid < static_cast<int>(padded - own)) gather_key()[first + own + tid] = 0, gather_meta()[first + own + tid] = 0;
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // the entries, visible to the bulk copies
        __syncthreads();
        if (tid == 0) {
            arrive_expecting(gather_bar, (sel[kAtBlocks] - padded) * 2 * sizeof(unsigned));
            if (padded != 0)
                for (int r = 0; r < CTAS; ++r)
                    if (r != rank) {
                        bulk_copy_to(gather_key() + first, padded * sizeof(unsigned), r, gather_bar);
                        bulk_copy_to(gather_meta() + first, padded * sizeof(unsigned), r, gather_bar);
                    }
        }
        wait_phase(gather_bar, 0);
    }

    // The digit rule of the rounds (digit_round) on this CTA's histogram `bins` alone, by warp 0 (a lane
    // 8 bins): sel[kDigit] = d, sel[kAbove] = the cells above thr's digits once d joins them. (The split's
    // qsa_radix_digit walks the same rule; called here instead, it made the kernel 0.3-0.5 us slower on the
    // H200, even on calls that never reach it: docs/benchmarks.md.)
    __device__ __forceinline__ void local_digit(const unsigned* bins, unsigned above) const {
        constexpr int kLaneBins = QSA_RADIX_BINS / QSA_WARP;
        unsigned v[kLaneBins], lane_cells = 0;
#pragma unroll
        for (int k = 0; k < kLaneBins; ++k) lane_cells += v[k] = bins[kLaneBins * lane + k];
        unsigned suffix = lane_cells;  // the cells in this lane's bins and every later lane's
#pragma unroll
        for (int o = 1; o < QSA_WARP; o <<= 1) {
            const unsigned later = __shfl_down_sync(TOPK_FULL_MASK, suffix, o);
            if (lane + o < QSA_WARP) suffix += later;
        }
        unsigned cells = suffix - lane_cells, qualifying = 0;  // d: the count of t in 1..255 the rule holds at
#pragma unroll
        for (int k = kLaneBins - 1; k >= 0; --k) {
            cells += v[k];
            qualifying += kLaneBins * lane + k >= 1 && above + cells >= width;
        }
        const unsigned d = __reduce_add_sync(TOPK_FULL_MASK, qualifying);
        unsigned above_d = 0;
#pragma unroll
        for (int k = 0; k < kLaneBins; ++k) above_d += kLaneBins * lane + k > static_cast<int>(d) ? v[k] : 0u;
        above_d = __reduce_add_sync(TOPK_FULL_MASK, above_d);
        if (lane == 0) sel[kDigit] = d, sel[kAbove] = above + above_d;
    }

    // thr's full key (returned) where the gathered keys at thr under mask hold at most kFewCells cells: they are
    // listed in `list` (the next pass's histogram, free), and warp 0 ranks each against the others: thr is the
    // greatest key with at least the cells still needed at or above it, the key the digit rule's remaining
    // passes would find. Leaves sel[kAbove] as they would.
    __device__ __forceinline__ unsigned few_thr(const unsigned (&key)[kThreadEntries], const unsigned (&meta)[kThreadEntries],
                                                unsigned thr, unsigned mask, unsigned above, unsigned* list) const {
#pragma unroll
        for (int j = 0; j < kThreadEntries; ++j) {
            const unsigned w = entry_cells(meta[j]);
            if (w != 0 && (key[j] & mask) == thr) {
                const unsigned slot = atomicAdd(gather_count, 1u);
                list[slot] = key[j], list[QSA_WARP + slot] = w;
            }
        }
        __syncthreads();  // the list
        if (warp == 0) {
            const unsigned listed = *gather_count;
            const unsigned k = lane < listed ? list[lane] : 0u, w = lane < listed ? list[QSA_WARP + lane] : 0u;
            unsigned at_or_above = 0, at = 0;  // the listed cells at or above k, and at it
#pragma unroll
            for (int other = 0; other < QSA_WARP; ++other) {
                const unsigned k2 = __shfl_sync(TOPK_FULL_MASK, k, other), w2 = __shfl_sync(TOPK_FULL_MASK, w, other);
                at_or_above += k2 >= k ? w2 : 0u;
                at += k2 == k ? w2 : 0u;
            }
            const bool enough = w != 0 && above + at_or_above >= width;
            const unsigned found = __reduce_max_sync(TOPK_FULL_MASK, enough ? k : 0u);
            const unsigned holders = __ballot_sync(TOPK_FULL_MASK, enough && k == found);
            if (lane == __ffs(holders) - 1) sel[kThr] = found, sel[kAbove] = above + at_or_above - at;
        }
        __syncthreads();  // sel[kThr], sel[kAbove]
        return sel[kThr];
    }

    // thr (returned, its full key) from the gathered keys at its first digit (thr under mask, `above` the
    // cells above it): three passes of the digit rule over histograms of them in this CTA (two buffers,
    // one cleared while the other is read), a warp's keys at one digit added with one atomic (runs of
    // ties). Leaves sel[kAbove], sel[kAtBefore] and sel[kAboveBefore] (which holds the cells above the first
    // digit in the CTAs before this one) as the rounds would, and adds this CTA's entries above / at thr to
    // their chunks' counts.
    __device__ __forceinline__ unsigned gathered_thr(unsigned thr, unsigned mask, unsigned above) const {
        const int gathered = static_cast<int>(sel[kAtBlocks]);
        unsigned key[kThreadEntries], meta[kThreadEntries];  // entry tid + j * threads (0: none, weight 0)
#pragma unroll
        for (int j = 0; j < kThreadEntries; ++j) {
            const int e = tid + j * QSA_TOPK_CLUSTER_THREADS;
            key[j] = e < gathered ? gather_key()[e] : 0u;
            meta[j] = e < gathered ? gather_meta()[e] : 0u;
        }
        // pass 2's records, free on this path: pass p counts into digit_least for even p, else digit_greatest
        if (tid < QSA_RADIX_BINS) digit_greatest[tid] = 0;
        if (tid == 0) *gather_count = 0;  // few_thr's count (the exchange has read this CTA's)
        __syncthreads();
        for (int pass = 1; pass < QSA_RADIX_PASSES; ++pass) {
            const int shift = topk_shift(pass);
            unsigned* counted = pass % 2 == 0 ? digit_least : digit_greatest;
            unsigned* next = pass % 2 == 0 ? digit_greatest : digit_least;
#pragma unroll
            for (int j = 0; j < kThreadEntries; ++j) {
                const unsigned cells_j = entry_cells(meta[j]);
                const bool hit = cells_j != 0 && (key[j] & mask) == thr;
                const unsigned digit = (key[j] >> shift) & TOPK_DIGIT_MASK, w = hit ? cells_j : 0u;
                const unsigned hits = __ballot_sync(TOPK_FULL_MASK, hit);
                if (hits == 0) continue;
                const int first = __ffs(hits) - 1;
                const unsigned first_digit = __shfl_sync(TOPK_FULL_MASK, digit, first);
                if (__all_sync(TOPK_FULL_MASK, !hit || digit == first_digit)) {
                    const unsigned cells = __reduce_add_sync(TOPK_FULL_MASK, w);
                    if (lane == first) atomicAdd(&counted[first_digit], cells);
                } else if (hit) {
                    atomicAdd(&counted[digit], w);
                }
            }
            __syncthreads();  // the histogram
            if (warp == 0) local_digit(counted, above);
            else if (tid - QSA_WARP < QSA_RADIX_BINS) next[tid - QSA_WARP] = 0;  // the next pass's
            __syncthreads();  // sel[kDigit], sel[kAbove]
            above = sel[kAbove];
            thr |= sel[kDigit] << shift;
            mask |= TOPK_DIGIT_MASK << shift;
            if (pass + 1 < QSA_RADIX_PASSES && counted[sel[kDigit]] <= kFewCells) {  // the same in every thread
                thr = few_thr(key, meta, thr, mask, above, next);
                above = sel[kAbove];
                break;
            }
        }
        if (tid == 0) sel[kAtBefore] = 0;
        unsigned at_before = 0, above_before = 0;
#pragma unroll
        for (int j = 0; j < kThreadEntries; ++j) {
            const unsigned w = entry_cells(meta[j]), from = entry_cta(meta[j]);
            if (w == 0) continue;
            if (from < static_cast<unsigned>(rank)) {
                if (key[j] > thr) above_before += w;
                else if (key[j] == thr) at_before += w;
            } else if (from == static_cast<unsigned>(rank)) {
                const int c = entry_index(meta[j]) / kChunkKeys;
                if (key[j] > thr) atomicAdd(&chunk_above[c], w);
                else if (key[j] == thr) atomicAdd(&chunk_at[c], w);
            }
        }
        at_before = __reduce_add_sync(TOPK_FULL_MASK, at_before);
        above_before = __reduce_add_sync(TOPK_FULL_MASK, above_before);
        __syncthreads();  // sel[kAtBefore] is 0
        if (lane == 0 && at_before != 0) atomicAdd(&sel[kAtBefore], at_before);
        if (lane == 0 && above_before != 0) atomicAdd(&sel[kAboveBefore], above_before);
        __syncthreads();
        return thr;
    }

    // Chunk c's cells above / at thr (the keys under mask), into chunk_above / chunk_at.
    __device__ __forceinline__ void count_chunk(int c, bool whole, unsigned thr, unsigned mask) const {
        unsigned key[kLaneKeys], w[kLaneKeys];
        chunk_keys(c, whole, key, w);
        unsigned a = 0, t = 0;
#pragma unroll
        for (int j = 0; j < kLaneKeys; ++j) {
            if ((key[j] & mask) > thr) a += w[j];
            else if ((key[j] & mask) == thr) t += w[j];
        }
        a = __reduce_add_sync(TOPK_FULL_MASK, a);
        t = __reduce_add_sync(TOPK_FULL_MASK, t);
        if (lane == 0) {
            chunk_above[c] = a;
            chunk_at[c] = t;
        }
    }

    // Each chunk's cells above / at thr: the final pass (2 or 3: `chunks_counted`) counted those of the
    // chunks with no key at the digits found before it; the others are counted now.
    __device__ __forceinline__ void count_chunks(bool chunks_counted, unsigned thr, unsigned mask) const {
        for (int c = warp; c < n_chunks; c += kWarps) {
            if (chunks_counted && !chunk_tied(c)) continue;
            if (c + 1 < n_chunks) count_chunk(c, true, thr, mask);
            else count_chunk(c, false, thr, mask);
        }
    }

    // A scan over the chunks' counts, in slice order, from the CTAs before: entry c of chunk_above /
    // chunk_at becomes the cells above / at thr before chunk c, entry n_chunks the CTA's end. Thread c
    // scans chunk c (a CTA holds at most QSA_TOPK_CLUSTER_THREADS chunks: the launcher).
    __device__ __forceinline__ void scan_chunks() const {
        const unsigned a = tid < n_chunks ? chunk_above[tid] : 0u, t = tid < n_chunks ? chunk_at[tid] : 0u;
        unsigned a_through = a, t_through = t;
#pragma unroll
        for (int o = 1; o < QSA_WARP; o <<= 1) {
            const unsigned va = __shfl_up_sync(TOPK_FULL_MASK, a_through, o);
            const unsigned vt = __shfl_up_sync(TOPK_FULL_MASK, t_through, o);
            if (lane >= o) {
                a_through += va;
                t_through += vt;
            }
        }
        if (lane == QSA_WARP - 1) {
            warp_above[warp] = a_through;
            warp_at[warp] = t_through;
        }
        __syncthreads();
        a_through += sel[kAboveBefore] + __reduce_add_sync(TOPK_FULL_MASK, lane < warp ? warp_above[lane] : 0u);
        t_through += sel[kAtBefore] + __reduce_add_sync(TOPK_FULL_MASK, lane < warp ? warp_at[lane] : 0u);
        if (tid < n_chunks) {
            chunk_above[tid + 1] = a_through;
            chunk_at[tid + 1] = t_through;
        }
        if (tid == 0) {
            chunk_above[0] = sel[kAboveBefore];
            chunk_at[0] = sel[kAtBefore];
        }
    }

    // Chunk c's selected cells into the row: from the chunk's first ranks, a warp scan (lanes in order,
    // each lane's 4 keys in order); `budget`: the cells at thr the selection takes.
    __device__ __forceinline__ void emit_chunk(int c, bool whole, unsigned thr, unsigned mask, unsigned budget) const {
        unsigned key[kLaneKeys], w[kLaneKeys];
        const int i0 = chunk_keys(c, whole, key, w);
        unsigned mine = 0, above_keys = 0, at_keys = 0;  // bit j: key j is above / at thr
#pragma unroll
        for (int j = 0; j < kLaneKeys; ++j) {
            key[j] &= mask;  // thr's bits: a key matching them all is at thr
            if (key[j] > thr) {
                mine += w[j];
                above_keys |= 1u << j;
            } else if (key[j] == thr) {
                mine += w[j] << kHalfBits;
                at_keys |= 1u << j;
            }
        }
        const unsigned ahead = warp_inclusive_sum(mine) - mine;
        unsigned ab = chunk_above[c] + (ahead & kHalfMask), tb = chunk_at[c] + (ahead >> kHalfBits);
        // the lane's keys above / at thr in order (most lanes hold none or one: one round, not four)
        for (unsigned todo = above_keys | at_keys; todo != 0; todo &= todo - 1) {
            const int j = __ffs(todo) - 1;
            const unsigned wj = j == 0 ? w[0] : j == 1 ? w[1] : j == 2 ? w[2] : w[3];
            const bool is_above = above_keys >> j & 1u;
            const unsigned count = is_above ? wj : tb < budget ? min(wj, budget - tb) : 0u;
            int* out = row + (ab + min(tb, budget));
            const int cell = (lo + i0 + j) * QSA_BLOCK_CELLS;
#pragma unroll
            for (int k = 0; k < QSA_BLOCK_CELLS; ++k)
                if (k < static_cast<int>(count)) out[k] = cell + k;
            if (is_above) ab += wj;
            else tb += wj;
        }
    }

    // The slice's selected cells into the row, chunk c by warp c % kWarps. Chunks that select nothing
    // are skipped; once the cells before a chunk reach width, it and every later chunk select nothing.
    __device__ __forceinline__ void emit(unsigned thr, unsigned mask, unsigned budget) const {
        for (int c = warp; c < n_chunks && chunk_above[c] + min(chunk_at[c], budget) < width; c += kWarps) {
            if (chunk_above[c + 1] == chunk_above[c] && (chunk_at[c + 1] == chunk_at[c] || chunk_at[c] >= budget)) continue;
            if (c + 1 < n_chunks) emit_chunk(c, true, thr, mask, budget);
            else emit_chunk(c, false, thr, mask, budget);
        }
    }
};

// Fills in s, which holds the thread's place, for `query` (which selects: n_kv > width): CTA s.rank's
// slice of the query's blocks and the kernel's shared memory. (Set before the early exit, the place
// stays computed where the kernel starts, as the ptxas schedule it was measured with has it.)
template <int CTAS>
__device__ __forceinline__ void cut_slice(ClusterSlice<CTAS>& s, const TopkQuery& query) {
    extern __shared__ uint4 slice_keys[];
    __shared__ uint4 lane_hist_words[kBinWords / 4];
    __shared__ unsigned hist[kBinBuffers][kPassWords];
    __shared__ unsigned key_min, key_max;
    __shared__ unsigned bin_warp_cells[kBinWarps];
    __shared__ unsigned warp_above[kWarps], warp_at[kWarps];
    __shared__ unsigned sel[kSelSlots];
    __shared__ unsigned digit_least[QSA_RADIX_BINS], digit_greatest[QSA_RADIX_BINS];
    __shared__ unsigned gather_count;
    __shared__ alignas(8) unsigned long long gather_bar;

    const int blocks = query.n_bid + 1, per = (blocks + CTAS - 1) / CTAS;
    const int lo = min(s.rank * per, blocks), n = min(lo + per, blocks) - lo;
    // Chunks of kChunkKeys keys; all but the last are whole and hold no tail block (the tail is the
    // query's last block), so their keys weigh R each and need no bounds.
    const int n_chunks = (n + kChunkKeys - 1) / kChunkKeys;
    unsigned* keys = reinterpret_cast<unsigned*>(slice_keys);
    unsigned* chunk_above = keys + (per + kLaneKeys - 1) / kLaneKeys * kLaneKeys;
    unsigned* chunk_at = chunk_above + (per + kChunkKeys - 1) / kChunkKeys + 1;
    s.slice_keys = slice_keys;
    s.keys = keys;
    s.chunk_above = chunk_above;
    s.chunk_at = chunk_at;
    s.lane_hist_words = lane_hist_words;
    s.lane_hist = reinterpret_cast<unsigned(*)[QSA_WARP]>(lane_hist_words);
    s.hist = hist;
    s.key_min = &key_min;
    s.key_max = &key_max;
    s.bin_warp_cells = bin_warp_cells;
    s.warp_above = warp_above;
    s.warp_at = warp_at;
    s.sel = sel;
    s.digit_least = digit_least;
    s.digit_greatest = digit_greatest;
    s.gather_count = &gather_count;
    s.gather_bar = &gather_bar;
    s.row = query.row;
    s.width = query.width;
    s.lo = lo;
    s.n = n;
    s.n_chunks = n_chunks;
    s.slice_chunks = (per + kChunkKeys - 1) / kChunkKeys;
    s.tail_at = query.n_bid - lo;
    s.tail = qsa_block_weight(query.n_bid, query.n_kv, query.n_bid);
}

// The kernel's body for a cluster of CTAS CTAs a query (below: one kernel a size).
template <int CTAS>
__device__ __forceinline__ void cluster_topk(const float* __restrict__ scores, const int* __restrict__ steps,
                                             int* __restrict__ ids, int max_blocks) {
    ClusterSlice<CTAS> s;  // the thread's place now (used by the identity), the slice once the query selects
    static_cast<ClusterThread&>(s) = cluster_thread();
    const TopkQuery query = topk_query(blockIdx.y, scores, steps, ids, max_blocks);
    if (query.n_kv <= static_cast<int>(query.width)) {  // the whole cluster leaves here: no CTA reads another's memory
        for (int j = s.rank * QSA_TOPK_CLUSTER_THREADS + s.tid; j < query.n_kv; j += CTAS * QSA_TOPK_CLUSTER_THREADS) query.row[j] = j;
        return;
    }
    cut_slice(s, query);
    qsa_wait_prior_grid();  // launched programmatically after the window's scorer: that grid has ended
    s.load(query.srow);  // the slice's keys into shared memory, with pass 0's histogram

    // thr holds the digits found so far (mask: their bits). The select ends early once they decide it:
    // when the keys a pass counted are all one key (thr is that key); when the cells at the digits
    // found are exactly the cells still needed (every key matching thr under mask is selected); or
    // when those cells are one block's (the only key at thr under mask that holds cells; the budget
    // takes its first cells, as it would at its full key).
    unsigned thr = 0, mask = 0, above = 0;
    bool chunks_counted = false;  // the final pass counted each chunk's cells above (see add_chunk)
    bool gathered = false;  // the gather path counted every chunk's cells above / at thr
    for (int pass = 0; pass < QSA_RADIX_PASSES; ++pass) {
        const int shift = topk_shift(pass);
        const bool counting = pass >= QSA_RADIX_PASSES - 2;  // the select may end after this pass
        if (pass > 0) {  // pass 0 was added as the keys were stored
            s.count_pass(pass, shift, counting, thr, mask);
            chunks_counted = counting;
        }
        __syncthreads();  // the pass's histogram is complete
        const unsigned* own = s.pass_record(pass);
        cluster_sync();  // every CTA's pass record is complete and visible
        const unsigned d = s.digit_round(pass, own, above);  // the digit rule on the cluster's sums
        __syncthreads();  // sel
        above = s.sel[kAbove];
        thr |= d << shift;
        mask |= TOPK_DIGIT_MASK << shift;
        if (s.sel[kMin] == s.sel[kMax]) {  // every key counted is this one: thr
            thr = s.sel[kMin];
            mask = ~0u;
            break;
        }
        if (s.sel[kDone]) break;
        if (pass == 0 && s.gathers()) {  // the same in every CTA
            s.gather_own(thr, mask);
            s.gather_exchange();  // every CTA's blocks at d are in every CTA
            thr = s.gathered_thr(thr, mask, above);
            mask = ~0u;
            above = s.sel[kAbove];
            gathered = true;
            break;
        }
    }
    cluster_arrive(false);  // the last remote read is done: another CTA may leave after its wait

    // Emit: each chunk's cells above / at thr, their scan for each chunk's first rank, the cells.
    if (!gathered) s.count_chunks(chunks_counted, thr, mask);
    __syncthreads();  // every chunk's counts
    s.scan_chunks();
    __syncthreads();  // every chunk's first ranks
    s.emit(thr, mask, query.width - above);
    cluster_wait();  // no CTA leaves while another may still read its histograms
}

}  // namespace

// One CTA an SM in any case (1,024 threads with over 32 registers each): the second bound lets ptxas
// use the registers that leaves. The arguments: nq is the grid's; active_blocks sizes the launcher's
// shared memory, and each CTA reads its query's n_bid.
__global__ void __cluster_dims__(QSA_CLUSTER_CTAS, 1, 1) __launch_bounds__(QSA_TOPK_CLUSTER_THREADS, 1)
block_topk_cluster_kernel(const float* __restrict__ scores, const int* __restrict__ steps, int* __restrict__ ids,
                          int /*nq*/, int max_blocks, int /*active_blocks*/) {
    cluster_topk<QSA_CLUSTER_CTAS>(scores, steps, ids, max_blocks);
}

// The same at QSA_CLUSTER_WIDE_CTAS CTAs a query, a non-portable cluster size (the launcher allows it).
__global__ void __cluster_dims__(QSA_CLUSTER_WIDE_CTAS, 1, 1) __launch_bounds__(QSA_TOPK_CLUSTER_THREADS, 1)
block_topk_cluster_wide_kernel(const float* __restrict__ scores, const int* __restrict__ steps, int* __restrict__ ids,
                               int /*nq*/, int max_blocks, int /*active_blocks*/) {
    cluster_topk<QSA_CLUSTER_WIDE_CTAS>(scores, steps, ids, max_blocks);
}
