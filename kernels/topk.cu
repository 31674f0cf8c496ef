// topk.cu: the top-k selection kernels (spec section 3): the reference, the old decode top-k (wide) and
// the new decode top-k (split). Every kernel's ids are the reference's, for three reasons shared by all:
//   - each radix pass's histogram is a sum of integer cell counts, which no order of addition changes,
//     however a kernel splits the blocks among threads, warps or CTAs;
//   - each pass's digit (and the cells that join `above`) comes from qsa_radix_digit, one function of
//     those counts, so thr and above are the same;
//   - every emit writes all cells with key > thr and the first budget = width - above cells with
//     key == thr, each at its rank among the selected cells in ascending cell order.
#include "qsa_common.cuh"

#define TOPK_DIGITS_PER_LANE (QSA_RADIX_BINS / QSA_WARP)
// The split's chunk sizes, as blocks a thread (BPT): 2, 4 or 8, a chunk of BPT * 256 blocks.
#define TOPK_SPLIT_MAX_BPT (QSA_SPLIT_CHUNK_BLOCKS / QSA_TOPK_SPLIT_THREADS)
#define TOPK_SPLIT_MIN_BPT (QSA_SPLIT_MIN_CHUNK_BLOCKS / QSA_TOPK_SPLIT_THREADS)
#define TOPK_SPLIT_HIST (QSA_RADIX_PASSES * QSA_RADIX_BINS)  // a query's global histograms, all passes
#define TOPK_SPLIT_SELECT (2 * (QSA_RADIX_PASSES - 1))         // a query's select slots: (digits, above), passes 0-2
#define TOPK_SPLIT_SUFFIX (QSA_RADIX_BINS + 1)  // a chunk's record of the last pass: cells at or above each digit
static_assert(QSA_TOPK_SPLIT_THREADS == QSA_RADIX_BINS, "the split's CTA sums its warps' histograms a thread a bin");

// Query q's histograms and select slots in the split's scratch.
template <typename T>
__device__ __forceinline__ T* topk_split_hist(T* hist, int q) {
    return hist + static_cast<size_t>(q) * TOPK_SPLIT_HIST;
}
template <typename T>
__device__ __forceinline__ T* topk_split_select(T* select, int q) {
    return select + static_cast<size_t>(q) * TOPK_SPLIT_SELECT;
}
// Chunk `chunk`'s suffix row of query q (the grid's width of rows a query).
template <typename T>
__device__ __forceinline__ T* topk_split_suffix(T* suffix, int q, int chunk) {
    return suffix + (static_cast<size_t>(q) * gridDim.x + chunk) * TOPK_SPLIT_SUFFIX;
}

// Cells above thr (high word) and at thr (low word) of a range of blocks: one 64-bit value, so a single
// scan or sum carries both; neither count can reach 2^32 (a query has under 2^31 cells).
typedef unsigned long long topk_counts;

__device__ __forceinline__ topk_counts topk_pack(unsigned above, unsigned at) {
    return (static_cast<topk_counts>(above) << 32) | at;
}
__device__ __forceinline__ unsigned topk_above(topk_counts c) { return static_cast<unsigned>(c >> 32); }
__device__ __forceinline__ unsigned topk_at(topk_counts c) { return static_cast<unsigned>(c); }

// A lane's share of one pass's histogram: lane l holds the counts of digits 255-8l down to 248-8l.
// Loaded apart from qsa_radix_digit so that a kernel can have every load in flight at once.
struct TopkLaneBins {
    unsigned cells[TOPK_DIGITS_PER_LANE];
};

__device__ __forceinline__ int topk_lane_top_digit() {
    return QSA_RADIX_BINS - 1 - static_cast<int>(threadIdx.x % QSA_WARP) * TOPK_DIGITS_PER_LANE;
}

// A lane's bins from a histogram in shared or global memory (16-byte aligned): its eight words in two
// 16-byte loads, so a warp reads 64 sectors instead of 256. Every CTA of the split reads its query's
// global histogram at the same moment, from a few L2 slices: word by word, those reads cost the split
// about as many sectors as its scores.
static_assert(TOPK_DIGITS_PER_LANE == 8, "a lane's bins are two uint4");
__device__ __forceinline__ TopkLaneBins topk_lane_bins(const unsigned* hist) {
    const uint4* hist4 = reinterpret_cast<const uint4*>(hist);
    const int low = (topk_lane_top_digit() + 1) / 4 - 2;  // the uint4 holding the lane's lowest digit
    const uint4 lo = hist4[low], hi = hist4[low + 1];
    return {{hi.w, hi.z, hi.y, hi.x, lo.w, lo.z, lo.y, lo.x}};
}

// The reference's digit rule, warp-collective (all 32 lanes of a warp call it with their bins of the
// same histogram and the same above and width, and get the same digit and above): walk the digits
// from 255 down to 1 and stop at the first d where above + cells at digits >= d >= width (d = 0 when
// none); the cells at digits above d join above. A pure function of the 256 counts, so any kernel
// holding the same histogram picks the same digit. A scan across lanes gives the cells above each
// lane's digits, each lane walks its eight, and the first lane that stops (the highest digits)
// decides; digit 0 always stops, which is the walk's "d = 0 when none".
__device__ __forceinline__ unsigned qsa_radix_digit(const TopkLaneBins& bins, unsigned& above, unsigned width) {
    const int lane = threadIdx.x % QSA_WARP, top = topk_lane_top_digit();
    unsigned lane_cells = 0;
#pragma unroll
    for (int i = 0; i < TOPK_DIGITS_PER_LANE; ++i) lane_cells += bins.cells[i];
    unsigned through = lane_cells;  // cells at digits >= this lane's lowest
#pragma unroll
    for (int o = 1; o < QSA_WARP; o <<= 1) {
        const unsigned v = __shfl_up_sync(TOPK_FULL_MASK, through, o);
        if (lane >= o) through += v;
    }
    unsigned run = above + through - lane_cells;  // above + cells at digits above the one walked
    int stop = -1;
    unsigned stop_above = 0;
#pragma unroll
    for (int i = 0; i < TOPK_DIGITS_PER_LANE; ++i) {
        const int d = top - i;
        if (stop < 0 && (d == 0 || run + bins.cells[i] >= width)) {
            stop = d;
            stop_above = run;
        }
        run += bins.cells[i];
    }
    const int winner = __ffs(__ballot_sync(TOPK_FULL_MASK, stop >= 0)) - 1;
    above = __shfl_sync(TOPK_FULL_MASK, stop_above, winner);
    return static_cast<unsigned>(__shfl_sync(TOPK_FULL_MASK, stop, winner));
}

// CTA-collective, once the pass's histogram `hist` is complete: warp 0 applies the reference's digit
// rule and shares (digit, above) through `digit_above`; every thread adds the digit to thr and mask.
__device__ __forceinline__ void topk_take_digit(const unsigned* hist, unsigned* digit_above, int shift, unsigned width,
                                                unsigned& thr, unsigned& mask, unsigned& above) {
    if (threadIdx.x < QSA_WARP) {
        unsigned a = above;
        const unsigned d = qsa_radix_digit(topk_lane_bins(hist), a, width);
        if (threadIdx.x == 0) {
            digit_above[0] = d;
            digit_above[1] = a;
        }
    }
    __syncthreads();
    thr |= digit_above[0] << shift;
    mask |= TOPK_DIGIT_MASK << shift;
    above = digit_above[1];
}

// Block-wide exclusive scan of packed counts (THREADS a multiple of 32, at most 1,024); every thread
// also gets the CTA's total. warp_sums holds THREADS / 32 values and may be reused once it returns.
struct TopkScan {
    topk_counts before;
    topk_counts total;
};

template <int THREADS>
__device__ TopkScan topk_block_scan(topk_counts v, topk_counts* warp_sums) {
    const int lane = threadIdx.x % QSA_WARP, warp = threadIdx.x / QSA_WARP;
    topk_counts through = v;
#pragma unroll
    for (int o = 1; o < QSA_WARP; o <<= 1) {
        const topk_counts t = __shfl_up_sync(TOPK_FULL_MASK, through, o);
        if (lane >= o) through += t;
    }
    if (lane == QSA_WARP - 1) warp_sums[warp] = through;
    __syncthreads();
    TopkScan s = {through - v, 0};
#pragma unroll
    for (int w = 0; w < THREADS / QSA_WARP; ++w) {
        const topk_counts c = warp_sums[w];
        if (w < warp) s.before += c;
        s.total += c;
    }
    __syncthreads();
    return s;
}

__device__ __forceinline__ topk_counts topk_warp_sum(topk_counts v) {
#pragma unroll
    for (int o = QSA_WARP / 2; o > 0; o >>= 1) v += __shfl_xor_sync(TOPK_FULL_MASK, v, o);
    return v;
}

__device__ __forceinline__ unsigned topk_warp_sum(unsigned v) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    return __reduce_add_sync(TOPK_FULL_MASK, v);  // one instruction from sm_80; the same integer sum
#else
#pragma unroll
    for (int o = QSA_WARP / 2; o > 0; o >>= 1) v += __shfl_xor_sync(TOPK_FULL_MASK, v, o);
    return v;
#endif
}

// Writes block b's selected cells at row[pos..]: all w of them when key > thr; at thr, its first
// cells while the ties before it (at_before) leave budget. Returns the cells written.
__device__ __forceinline__ unsigned topk_emit_block(int* row, unsigned pos, int b, unsigned key, unsigned w,
                                                    unsigned thr, unsigned at_before, unsigned budget) {
    unsigned n = 0;
    if (key > thr) n = w;
    else if (key == thr && at_before < budget) n = min(w, budget - at_before);
    for (unsigned c = 0; c < n; ++c) row[pos + c] = b * QSA_BLOCK_CELLS + static_cast<int>(c);
    return n;
}

__device__ __forceinline__ void topk_identity(int* row, int n_kv, int threads) {
    for (int j = threadIdx.x; j < n_kv; j += threads) row[j] = j;
}

// block_topk_kernel (the reference): one CTA of 256 threads per query, grid nq. Each radix pass adds
// the cells of the blocks matching the prefix into one shared histogram with plain atomics and picks
// the digit. The emit cuts blocks 0..n_bid into contiguous per-thread ranges, scans the ranges'
// (above, at) cells across the CTA, and each thread writes its range's selected cells from its rank.
__global__ void __launch_bounds__(QSA_TOPK_REF_THREADS)
block_topk_kernel(const float* __restrict__ scores, const int* __restrict__ steps, int* __restrict__ ids,
                  int /*nq: the grid*/, int max_blocks, int /*active_blocks: each CTA reads its own n_bid*/) {
    __shared__ __align__(16) unsigned hist[QSA_RADIX_BINS];  // topk_lane_bins reads it 16 bytes at once
    __shared__ unsigned digit_above[2];
    __shared__ topk_counts warp_sums[QSA_TOPK_REF_THREADS / QSA_WARP];
    const int tid = threadIdx.x;
    const auto [n_kv, n_bid, width, row, srow] = topk_query(blockIdx.x, scores, steps, ids, max_blocks);
    if (n_kv <= static_cast<int>(width)) {
        topk_identity(row, n_kv, QSA_TOPK_REF_THREADS);
        return;
    }

    unsigned thr = 0, mask = 0, above = 0;  // thr holds the digits found so far
    for (int pass = 0; pass < QSA_RADIX_PASSES; ++pass) {
        const int shift = topk_shift(pass);
        for (int i = tid; i < QSA_RADIX_BINS; i += QSA_TOPK_REF_THREADS) hist[i] = 0;
        __syncthreads();
        for (int b = tid; b <= n_bid; b += QSA_TOPK_REF_THREADS) {
            const unsigned w = qsa_block_weight(b, n_kv, n_bid);
            if (w == 0) continue;
            const unsigned key = qsa_order_key(srow[b]);
            if ((key & mask) == thr) atomicAdd(&hist[(key >> shift) & TOPK_DIGIT_MASK], w);
        }
        __syncthreads();
        topk_take_digit(hist, digit_above, shift, width, thr, mask, above);
    }

    const unsigned budget = width - above;
    const int blocks = n_bid + 1, per = (blocks + QSA_TOPK_REF_THREADS - 1) / QSA_TOPK_REF_THREADS;
    const int b0 = min(tid * per, blocks), b1 = min(b0 + per, blocks);
    unsigned a = 0, t = 0;
    for (int b = b0; b < b1; ++b) {
        const unsigned w = qsa_block_weight(b, n_kv, n_bid);
        if (w == 0) continue;
        const unsigned key = qsa_order_key(srow[b]);
        if (key > thr) a += w;
        else if (key == thr) t += w;
    }
    const topk_counts before = topk_block_scan<QSA_TOPK_REF_THREADS>(topk_pack(a, t), warp_sums).before;
    unsigned at_before = topk_at(before);
    unsigned pos = topk_above(before) + min(at_before, budget);
    for (int b = b0; b < b1; ++b) {
        const unsigned w = qsa_block_weight(b, n_kv, n_bid);
        if (w == 0) continue;
        const unsigned key = qsa_order_key(srow[b]);
        pos += topk_emit_block(row, pos, b, key, w, thr, at_before, budget);
        if (key == thr) at_before += w;
    }
}

// block_topk_wide_kernel (the old decode top-k): one CTA of 1,024 threads per query, grid nq. Thread t
// reads blocks t, t + 1024, ... (coalesced). Each warp has its own histogram; the lanes of one digit
// add as one (__match_any_sync): a complete block weighs R cells, so they add popc(lanes) * R, and the
// tail block, whose weight differs, adds its own. The warps' histograms are summed per bin (the same
// integers as the reference's). The emit walks tiles of 1,024 blocks: a block-wide scan of the
// blocks' (above, at) cells plus the totals of the tiles before gives each block's rank.
__global__ void __launch_bounds__(QSA_TOPK_WIDE_THREADS)
block_topk_wide_kernel(const float* __restrict__ scores, const int* __restrict__ steps, int* __restrict__ ids,
                       int /*nq: the grid*/, int max_blocks, int /*active_blocks: each CTA reads its own n_bid*/) {
    constexpr int WARPS = QSA_TOPK_WIDE_THREADS / QSA_WARP;
    __shared__ unsigned warp_hist[WARPS][QSA_RADIX_BINS];
    __shared__ __align__(16) unsigned hist[QSA_RADIX_BINS];  // topk_lane_bins reads it 16 bytes at once
    __shared__ unsigned digit_above[2];
    __shared__ topk_counts warp_sums[WARPS];
    const int tid = threadIdx.x, lane = tid % QSA_WARP, warp = tid / QSA_WARP;
    const auto [n_kv, n_bid, width, row, srow] = topk_query(blockIdx.x, scores, steps, ids, max_blocks);
    if (n_kv <= static_cast<int>(width)) {
        topk_identity(row, n_kv, QSA_TOPK_WIDE_THREADS);
        return;
    }
    const unsigned tail = qsa_block_weight(n_bid, n_kv, n_bid);

    unsigned thr = 0, mask = 0, above = 0;
    unsigned* own = warp_hist[warp];
    for (int pass = 0; pass < QSA_RADIX_PASSES; ++pass) {
        const int shift = topk_shift(pass);
        for (int i = lane; i < QSA_RADIX_BINS; i += QSA_WARP) own[i] = 0;
        __syncwarp();
        for (int base = 0; base < n_bid; base += QSA_TOPK_WIDE_THREADS) {  // complete blocks
            const int b = base + tid;
            bool hit = false;
            unsigned digit = QSA_RADIX_BINS;  // no bin: lanes without a matching block group apart
            if (b < n_bid) {
                const unsigned key = qsa_order_key(srow[b]);
                hit = (key & mask) == thr;
                digit = (key >> shift) & TOPK_DIGIT_MASK;
            }
            const unsigned peers = __match_any_sync(TOPK_FULL_MASK, hit ? digit : QSA_RADIX_BINS);
            if (hit && lane == __ffs(peers) - 1) atomicAdd(&own[digit], __popc(peers) * QSA_BLOCK_CELLS);
        }
        if (tid == 0 && tail != 0) {
            const unsigned key = qsa_order_key(srow[n_bid]);
            if ((key & mask) == thr) atomicAdd(&own[(key >> shift) & TOPK_DIGIT_MASK], tail);
        }
        __syncthreads();
        if (tid < QSA_RADIX_BINS) {
            unsigned sum = 0;
            for (int w = 0; w < WARPS; ++w) sum += warp_hist[w][tid];
            hist[tid] = sum;
        }
        __syncthreads();
        topk_take_digit(hist, digit_above, shift, width, thr, mask, above);
    }

    const unsigned budget = width - above;
    topk_counts carry = 0;  // cells above / at thr in the tiles before
    for (int base = 0; base <= n_bid; base += QSA_TOPK_WIDE_THREADS) {
        const int b = base + tid;
        const unsigned w = b <= n_bid ? qsa_block_weight(b, n_kv, n_bid) : 0;
        const unsigned key = w != 0 ? qsa_order_key(srow[b]) : 0;
        const topk_counts mine = key > thr ? topk_pack(w, 0) : key == thr ? topk_pack(0, w) : 0;
        const TopkScan s = topk_block_scan<QSA_TOPK_WIDE_THREADS>(mine, warp_sums);
        const topk_counts before = carry + s.before;
        carry += s.total;
        const unsigned at_before = topk_at(before);
        topk_emit_block(row, topk_above(before) + min(at_before, budget), b, key, w, thr, at_before, budget);
    }
}

// ---- qsa_block_topk_split: chunks of 512, 1,024 or 2,048 blocks (BPT = 2, 4 or 8 a thread; the launcher
// picks one a call), one CTA a chunk, grid (chunks, nq), five launches ----
// Scratch: hist [nq][passes][256] (the queries' global histograms: zero between calls, accumulated by
// the passes, zeroed again by the emit); select [nq][passes - 1][2] (slot p: the key's digits 0..p,
// lower digits 0, and the cells above them, written by chunk 0 of launch p + 2 and read by launch
// p + 3); suffix [nq][chunks][257] (written by the last pass: entry d holds the chunk's cells whose key
// is above the 3-digit prefix or on it with digit 3 >= d, so entry d + 1 is its cells above thr and
// entry d minus entry d + 1 its cells at thr, once digit 3 is d; the row stride is the grid's width);
// arrivals [nq] (the emit's CTAs of a query that have read its last histogram: zero between calls).
// A query with n_kv <= width, or a chunk past its n_bid, takes no part in the passes; the emit writes
// the identity. Chunk 0 (first block 0 <= n_bid) takes part in every launch of a query that selects,
// so every slot a launch reads was written in this call, and no slot needs clearing.
// On sm_90 and newer, launches 2-5 are programmatic dependent launches (qsa_cli/launch/driver.py): each
// starts while the launch before it ends, loads its step record and scores, and waits
// (qsa_wait_prior_grid) before it reads or writes any scratch; every kernel lets the next one start
// at once (qsa_allow_next_grid). The waits order every scratch access as plain launches would.

// thr's digits so far (lower digits 0) and the cells above them.
struct TopkThrAbove {
    unsigned thr, above;
};

// Pass k (k = 1..3), and the emit as k = 4, derives digit k - 1 with the reference's rule from the
// query's complete histogram k - 1 (its launch has ended) and the digits 0..k-2 and the cells above
// them that pass k - 1 derived the same way and left in select slot k - 2 (none when k = 1): the
// reference's recursion, each step computed once per launch and passed on, so thr and above are the
// reference's by induction. Warp-collective (every lane gets the result); the bins and the slot are
// loaded at once.
template <int DIGIT>
__device__ __forceinline__ TopkThrAbove topk_split_next_digit(const unsigned* query_hist, const unsigned* query_select,
                                                              unsigned width) {
    const TopkLaneBins bins = topk_lane_bins(query_hist + DIGIT * QSA_RADIX_BINS);
    TopkThrAbove t = {0, 0};
    if constexpr (DIGIT > 0) t = {query_select[2 * (DIGIT - 1)], query_select[2 * (DIGIT - 1) + 1]};
    t.thr |= qsa_radix_digit(bins, t.above, width) << topk_shift(DIGIT);
    return t;
}

// A split CTA's chunk of its query (grid (chunks, nq)): the query, its index and the chunk's first
// block. `active`: the query selects (n_kv > width) and the chunk holds blocks of 0..n_bid; an inactive
// CTA takes no part in the passes, and in the emit only writes the identity (chunk 0) and clears
// scratch.
struct TopkSplitChunk : TopkQuery {
    int q, first;
    bool selects, active;
};

template <int BPT>
__device__ __forceinline__ TopkSplitChunk topk_split_chunk(const float* scores, const int* steps, int* ids,
                                                           int max_blocks) {
    const int q = blockIdx.y, first = blockIdx.x * BPT * QSA_TOPK_SPLIT_THREADS;
    const TopkQuery query = topk_query(q, scores, steps, ids, max_blocks);
    const bool selects = query.n_kv > static_cast<int>(query.width);
    return {query, q, first, selects, selects && first <= query.n_bid};
}

// Block i of thread tid's share of the chunk (coalesced: consecutive threads, consecutive blocks).
__device__ __forceinline__ int topk_split_block(const TopkSplitChunk& c, int i) {
    return c.first + i * QSA_TOPK_SPLIT_THREADS + static_cast<int>(threadIdx.x);
}

// The order keys of the thread's blocks of the chunk, every score load in flight before the first
// conversion; a block past n_bid is not read (key 0: every use checks b <= n_bid). Scores are a
// read-only input, so every launch loads them before it waits for the launch before it.
template <int BPT>
__device__ __forceinline__ void topk_split_load(const TopkSplitChunk& c, unsigned (&key)[BPT]) {
    float s[BPT];
#pragma unroll
    for (int i = 0; i < BPT; ++i) {
        const int b = topk_split_block(c, i);
        s[i] = b <= c.n_bid ? c.srow[b] : 0.0f;
    }
#pragma unroll
    for (int i = 0; i < BPT; ++i) key[i] = qsa_order_key(s[i]);
}

// Adds one row of a warp's blocks (lane: whether its block matches the prefix, its digit and cells) to
// the warp's histogram with plain shared atomics, which the hardware serializes where lanes share a bin
// (measured faster than grouping the lanes with __match_any_sync as the wide kernel does). Where more
// than TOPK_SPLIT_FEW_HITS lanes match and all share one digit (runs of ties), they add as one atomic
// instead of a serialized row of them.
__device__ __forceinline__ void topk_split_add_row(unsigned* own, bool hit, unsigned digit, unsigned w) {
    const unsigned hits = __ballot_sync(TOPK_FULL_MASK, hit);
    if (hits == 0) return;  // warp-uniform
    if (__popc(hits) > TOPK_SPLIT_FEW_HITS) {  // warp-uniform
        const int leader = __ffs(hits) - 1;
        const unsigned lead_digit = __shfl_sync(TOPK_FULL_MASK, digit, leader);  // every lane: not in a || operand
        if (__all_sync(TOPK_FULL_MASK, !hit || digit == lead_digit)) {
            const unsigned complete = __ballot_sync(TOPK_FULL_MASK, w == QSA_BLOCK_CELLS);
            if (threadIdx.x % QSA_WARP == static_cast<unsigned>(leader)) atomicAdd(&own[digit], __popc(complete) * QSA_BLOCK_CELLS);
            if (w != 0 && w != QSA_BLOCK_CELLS) atomicAdd(&own[digit], w);  // the tail block
            return;
        }
    }
    if (w != 0) atomicAdd(&own[digit], w);
}

// The last pass's record of the chunk for the emit (suffix row: TOPK_SPLIT_SUFFIX words): entry d, the
// chunk's cells above the 3-digit prefix (`above_prefix`, summed over the CTA) plus those on it with
// digit 3 >= d; entry 256, those above the prefix. Thread t holds the chunk's bin 255 - t (`cells`), so
// an inclusive scan in thread order is the sum over the digits >= 255 - t. Integer sums: exact.
__device__ __forceinline__ void topk_split_write_suffix(unsigned* row, unsigned cells, unsigned above_prefix,
                                                        topk_counts* warp_sums) {
    const topk_counts mine = topk_pack(above_prefix, cells);
    const TopkScan scan = topk_block_scan<QSA_TOPK_SPLIT_THREADS>(mine, warp_sums);
    const unsigned chunk_above_prefix = topk_above(scan.total);
    row[QSA_RADIX_BINS - 1 - threadIdx.x] = chunk_above_prefix + topk_at(scan.before + mine);
    if (threadIdx.x == 0) row[QSA_RADIX_BINS] = chunk_above_prefix;
}

// Launches 1-4: pass PASS. Before the wait (nothing of it touches scratch): the step record, the chunk's
// keys, the warps' histograms zeroed. Then warp 0 derives digit PASS - 1 (topk_split_next_digit; chunk
// 0 leaves it in select slot PASS - 1) and one barrier shares it. Each warp histograms its blocks
// matching the prefix row by row (topk_split_add_row); in passes 1-3, where few blocks match or the
// matching ones are ties, a warp whose matching blocks all share one digit adds them all with one
// atomic instead (measured: the rows of ties cost all-equal scores 4 us at 8 queries). The CTA adds its
// nonzero bins into the query's histogram; the last pass also writes the chunk's suffix row, which
// gives the emit the chunk's cells above and at thr whatever digit 3 turns out to be (no count launch).
template <int PASS, int BPT>
__global__ void __launch_bounds__(QSA_TOPK_SPLIT_THREADS)
block_topk_split_pass_kernel(const float* __restrict__ scores, const int* __restrict__ steps, int* ids,
                             int /*nq: the grid*/, int max_blocks, int /*active_blocks: the grid*/,
                             unsigned* __restrict__ hist, unsigned* __restrict__ select,
                             unsigned* __restrict__ suffix) {
    constexpr int WARPS = QSA_TOPK_SPLIT_THREADS / QSA_WARP;
    constexpr bool LAST = PASS == QSA_RADIX_PASSES - 1;
    __shared__ unsigned warp_hist[WARPS][QSA_RADIX_BINS];
    __shared__ unsigned thr_above[2];
    __shared__ topk_counts warp_sums[WARPS];
    qsa_allow_next_grid();
    const TopkSplitChunk c = topk_split_chunk<BPT>(scores, steps, ids, max_blocks);
    if (!c.active) return;
    const int tid = threadIdx.x, lane = tid % QSA_WARP, warp = tid / QSA_WARP;
    unsigned key[BPT];
    topk_split_load(c, key);
    unsigned* own = warp_hist[warp];
    for (int i = lane; i < QSA_RADIX_BINS; i += QSA_WARP) own[i] = 0;
    qsa_wait_prior_grid();  // the launch before has ended: its histogram and select slot are complete
    unsigned* query_hist = topk_split_hist(hist, c.q);

    unsigned thr = 0, mask = 0;  // digits 0..PASS-1 and their bits
    if constexpr (PASS > 0) {
        if (warp == 0) {
            unsigned* query_select = topk_split_select(select, c.q);
            const TopkThrAbove t = topk_split_next_digit<PASS - 1>(query_hist, query_select, c.width);
            if (lane == 0) {
                thr_above[0] = t.thr;
                if (blockIdx.x == 0) {
                    query_select[2 * (PASS - 1)] = t.thr;
                    query_select[2 * (PASS - 1) + 1] = t.above;
                }
            }
        }
        __syncthreads();  // thr_above, and every warp's zeroed histogram
        thr = thr_above[0];
        mask = TOPK_FULL_MASK << topk_shift(PASS - 1);
    } else {
        __syncwarp();
    }
    const int shift = topk_shift(PASS);
    unsigned above_prefix = 0;  // the last pass: the thread's cells whose key is above the prefix
    if constexpr (PASS == 0) {  // every block matches, digits spread: row by row
#pragma unroll
        for (int i = 0; i < BPT; ++i) {
            const int b = topk_split_block(c, i);
            const bool hit = b <= c.n_bid;
            topk_split_add_row(own, hit, key[i] >> shift, hit ? qsa_block_weight(b, c.n_kv, c.n_bid) : 0u);
        }
    } else {
        bool hit[BPT];
        unsigned digit[BPT], w[BPT];
        unsigned one_digit = QSA_RADIX_BINS, cells = 0;  // the digit of all the thread's hits (BINS: none yet)
        bool single = true;
#pragma unroll
        for (int i = 0; i < BPT; ++i) {
            const int b = topk_split_block(c, i);
            hit[i] = b <= c.n_bid && (key[i] & mask) == thr;
            digit[i] = (key[i] >> shift) & TOPK_DIGIT_MASK;
            w[i] = hit[i] ? qsa_block_weight(b, c.n_kv, c.n_bid) : 0u;
            if (hit[i]) {
                if (one_digit == QSA_RADIX_BINS) one_digit = digit[i];
                single = single && digit[i] == one_digit;
                cells += w[i];
            }
            if constexpr (LAST)
                if (b <= c.n_bid && (key[i] & mask) > thr) above_prefix += qsa_block_weight(b, c.n_kv, c.n_bid);
        }
        const unsigned hitting = __ballot_sync(TOPK_FULL_MASK, one_digit != QSA_RADIX_BINS);
        if (hitting != 0) {  // warp-uniform
            const unsigned lead = __shfl_sync(TOPK_FULL_MASK, one_digit, __ffs(hitting) - 1);
            if (__all_sync(TOPK_FULL_MASK, one_digit == QSA_RADIX_BINS || (single && one_digit == lead))) {
                cells = topk_warp_sum(cells);
                if (lane == 0) atomicAdd(&own[lead], cells);
            } else {
#pragma unroll
                for (int i = 0; i < BPT; ++i) topk_split_add_row(own, hit[i], digit[i], w[i]);
            }
        }
    }
    __syncthreads();
    const int bin = QSA_RADIX_BINS - 1 - tid;  // descending: the suffix row is a scan in thread order
    unsigned sum = 0;
#pragma unroll
    for (int v = 0; v < WARPS; ++v) sum += warp_hist[v][bin];
    if (sum != 0) atomicAdd(&query_hist[PASS * QSA_RADIX_BINS + bin], sum);
    if constexpr (LAST)
        topk_split_write_suffix(topk_split_suffix(suffix, c.q, blockIdx.x), sum, above_prefix, warp_sums);
}

// Warp 0 of an emit CTA once it is done with its query's last histogram (`last_hist`): the CTA counts
// itself in the query's arrivals, and the last of its `ctas` to arrive, after every other has read
// the histogram, zeroes it and the count. At the end of the emit, off the path to the ids.
__device__ __forceinline__ void topk_split_arrive(unsigned* last_hist, unsigned* arrivals, unsigned ctas) {
    __threadfence();  // the warp's reads of the histogram come before its arrival
    __syncwarp();
    unsigned arrived = 0;
    if (threadIdx.x % QSA_WARP == 0) arrived = atomicAdd(arrivals, 1u);
    if (__shfl_sync(TOPK_FULL_MASK, arrived, 0) != ctas - 1) return;  // warp-uniform
    __threadfence();  // every other CTA's arrival, so its reads, come before the zeroes
    for (int i = threadIdx.x % QSA_WARP; i < QSA_RADIX_BINS; i += QSA_WARP) last_hist[i] = 0;
    if (threadIdx.x % QSA_WARP == 0) *arrivals = 0;
}

// Launch 5: the emit. After the wait, warp 0 derives digit 3, so thr and above (topk_split_next_digit:
// every CTA of the query the same), and sums over the chunks before this one entries d + 1 (cells above
// thr) and d minus d + 1 (cells at thr) of their suffix rows, d being digit 3 (all loads in flight at
// once). The chunk starts at the cells above thr in the chunks before it plus min(cells at thr before
// it, budget); inside it, thread t takes BPT consecutive blocks and a block-wide scan gives their rank,
// as in the reference's emit. Before the wait: the keys, moved through shared memory from the
// coalesced layout to the thread's range. The chunk's cells are ranked into shared memory, then written
// to the row by the whole CTA, consecutive threads at consecutive ids (a thread's own run would be a
// strided write per cell).
// The next call or graph replay starts from clean scratch: chunk 0 zeroes the query's histograms 0-2
// (their last readers, passes 1-3, have ended); every CTA reads histogram 3, and the last to be done
// with it zeroes it (topk_split_arrive).
template <int BPT>
__global__ void __launch_bounds__(QSA_TOPK_SPLIT_THREADS)
block_topk_split_emit_kernel(const float* __restrict__ scores, const int* __restrict__ steps,
                             int* __restrict__ ids, int /*nq: the grid*/, int max_blocks,
                             int /*active_blocks: the grid*/, unsigned* __restrict__ hist,
                             const unsigned* __restrict__ select, const unsigned* __restrict__ suffix,
                             unsigned* __restrict__ arrivals) {
    // The chunk's keys, a thread's BPT consecutive ones in distinct banks across a warp (a pad word per
    // 32); once every thread holds its own, the chunk's selected cells (at most width <= SELECT_CAP).
    constexpr int CHUNK = BPT * QSA_TOPK_SPLIT_THREADS, KEYS = CHUNK + CHUNK / QSA_WARP;
    __shared__ unsigned keys[KEYS > QSA_SELECT_CAP ? KEYS : QSA_SELECT_CAP];
    __shared__ topk_counts warp_sums[QSA_TOPK_SPLIT_THREADS / QSA_WARP];
    __shared__ topk_counts chunks_before;
    __shared__ unsigned thr_budget[2];
    const TopkSplitChunk c = topk_split_chunk<BPT>(scores, steps, ids, max_blocks);
    const int tid = threadIdx.x, lane = tid % QSA_WARP, warp = tid / QSA_WARP, chunk = blockIdx.x;
    unsigned key[BPT], w[BPT];
    if (c.active) {  // CTA-uniform
        unsigned loaded[BPT];
        topk_split_load(c, loaded);
#pragma unroll
        for (int i = 0; i < BPT; ++i) {
            const int j = i * QSA_TOPK_SPLIT_THREADS + tid;
            keys[j + j / QSA_WARP] = loaded[i];
        }
        __syncthreads();
#pragma unroll
        for (int i = 0; i < BPT; ++i) {
            const int j = tid * BPT + i, b = c.first + j;
            key[i] = keys[j + j / QSA_WARP];
            w[i] = b <= c.n_bid ? qsa_block_weight(b, c.n_kv, c.n_bid) : 0;
        }
    }
    qsa_wait_prior_grid();  // the last pass has ended: the histograms, select slot 2 and the suffix rows
    unsigned* query_hist = topk_split_hist(hist, c.q);
    if (chunk == 0)
        for (int i = tid; i < (QSA_RADIX_PASSES - 1) * QSA_RADIX_BINS; i += QSA_TOPK_SPLIT_THREADS) query_hist[i] = 0;
    if (!c.selects) {
        if (chunk == 0) topk_identity(c.row, c.n_kv, QSA_TOPK_SPLIT_THREADS);
        return;
    }
    if (!c.active) return;
    if (warp == 0) {
        constexpr int IN_FLIGHT = 4;  // a lane's rows at once: 128 chunks a round
        const TopkThrAbove t =
            topk_split_next_digit<QSA_RADIX_PASSES - 1>(query_hist, topk_split_select(select, c.q), c.width);
        const unsigned d = t.thr & TOPK_DIGIT_MASK;
        topk_counts sum = 0;
        for (int c0 = lane; c0 < chunk; c0 += IN_FLIGHT * QSA_WARP) {
            unsigned at_or_above[IN_FLIGHT], above[IN_FLIGHT];
#pragma unroll
            for (int k = 0; k < IN_FLIGHT; ++k) {
                const bool before = c0 + k * QSA_WARP < chunk;
                const unsigned* row = topk_split_suffix(suffix, c.q, before ? c0 + k * QSA_WARP : 0);
                at_or_above[k] = before ? row[d] : 0;
                above[k] = before ? row[d + 1] : 0;
            }
#pragma unroll
            for (int k = 0; k < IN_FLIGHT; ++k) sum += topk_pack(above[k], at_or_above[k] - above[k]);
        }
        sum = topk_warp_sum(sum);
        if (lane == 0) {
            chunks_before = sum;
            thr_budget[0] = t.thr;
            thr_budget[1] = c.width - t.above;
        }
    }
    __syncthreads();  // chunks_before and thr_budget
    const unsigned thr = thr_budget[0], budget = thr_budget[1];
    unsigned a = 0, t = 0;
#pragma unroll
    for (int i = 0; i < BPT; ++i) {
        if (key[i] > thr) a += w[i];
        else if (key[i] == thr) t += w[i];
    }
    const TopkScan scan = topk_block_scan<QSA_TOPK_SPLIT_THREADS>(topk_pack(a, t), warp_sums);
    const topk_counts before_chunk = chunks_before, after_chunk = before_chunk + scan.total;
    const unsigned chunk_pos = topk_above(before_chunk) + min(topk_at(before_chunk), budget);
    const unsigned chunk_end = topk_above(after_chunk) + min(topk_at(after_chunk), budget);
    const topk_counts before = before_chunk + scan.before;
    unsigned at_before = topk_at(before);
    unsigned pos = topk_above(before) + min(at_before, budget) - chunk_pos;
    int* staged = reinterpret_cast<int*>(keys);  // free: the scan's barrier follows every thread's key reads
#pragma unroll
    for (int i = 0; i < BPT; ++i) {
        const int b = c.first + tid * BPT + i;
        pos += topk_emit_block(staged, pos, b, key[i], w[i], thr, at_before, budget);
        if (key[i] == thr) at_before += w[i];
    }
    __syncthreads();
    for (unsigned j = tid; j < chunk_end - chunk_pos; j += QSA_TOPK_SPLIT_THREADS) c.row[chunk_pos + j] = staged[j];
    if (warp == 0) topk_split_arrive(query_hist + (QSA_RADIX_PASSES - 1) * QSA_RADIX_BINS, &arrivals[c.q],
                                     static_cast<unsigned>(c.n_bid / CHUNK + 1));
}

// Every split kernel instantiated here, each pass and the emit at each chunk size, so that a plain nvcc
// build (tests/test_nvcc.py) compiles them too; CuPy finds them by their name expressions.
static_assert(QSA_RADIX_PASSES == 4, "one instantiation per radix pass");
static_assert(TOPK_SPLIT_MIN_BPT == 2 && TOPK_SPLIT_MAX_BPT == 8, "one instantiation per chunk size");
#define TOPK_SPLIT_PASS(P, BPT)                                                                                   \
    template __global__ void block_topk_split_pass_kernel<P, BPT>(const float* __restrict__, const int* __restrict__, \
                                                                  int*, int, int, int, unsigned* __restrict__,       \
                                                                  unsigned* __restrict__, unsigned* __restrict__);
#define TOPK_SPLIT_KERNELS(BPT)                                                                                 \
    TOPK_SPLIT_PASS(0, BPT)                                                                                     \
    TOPK_SPLIT_PASS(1, BPT)                                                                                     \
    TOPK_SPLIT_PASS(2, BPT)                                                                                     \
    TOPK_SPLIT_PASS(3, BPT)                                                                                     \
    template __global__ void block_topk_split_emit_kernel<BPT>(const float* __restrict__, const int* __restrict__, \
                                                               int* __restrict__, int, int, int, unsigned* __restrict__, \
                                                               const unsigned* __restrict__, const unsigned* __restrict__, \
                                                               unsigned* __restrict__);
TOPK_SPLIT_KERNELS(2)
TOPK_SPLIT_KERNELS(4)
TOPK_SPLIT_KERNELS(8)
#undef TOPK_SPLIT_KERNELS
#undef TOPK_SPLIT_PASS
