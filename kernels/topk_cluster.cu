// qsa-min-arch: 90
// topk_cluster.cu: block_topk_cluster_kernel, the Hopper decode top-k (spec section 3). A thread-block
// cluster of QSA_CLUSTER_CTAS CTAs per query, grid (QSA_CLUSTER_CTAS, nq); the ids are the reference's:
//   - CTA r loads the order keys of a contiguous 1/QSA_CLUSTER_CTAS of the query's blocks 0..n_bid into
//     dynamic shared memory once (the launcher sizes it, qsa_cli/launch/topk_cluster.py); the four radix
//     passes and the emit read only shared memory;
//   - each pass, every CTA histograms its slice, the cluster syncs, and every CTA sums the same
//     QSA_CLUSTER_CTAS histograms through distributed shared memory and applies the reference's digit
//     rule to the sum: a pure function of integer counts, so thr, above and the tie budget are the
//     reference's in every CTA;
//   - the histograms also give each CTA the cells above / at thr in the CTAs before it: a key is above
//     thr exactly when, at the first pass where its digit differs from thr's, its digit is higher (the
//     pass's histogram counts it there), and at thr when it matches all four digits. CTA r writes its
//     selected cells ascending from (cells above in CTAs < r) + min(cells at thr in CTAs < r, budget).
#include "qsa_common.cuh"

namespace {

// The three cluster operations, as PTX (what cooperative_groups' cluster_group lowers to), so the
// kernel needs no toolkit header and compiles wherever NVRTC runs.
__device__ __forceinline__ unsigned cluster_cta_rank() {
    unsigned rank;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
    return rank;
}

// Every thread of every CTA of the cluster arrives (release) and waits (acquire): shared-memory
// writes before it are visible to all the cluster's CTAs after it.
__device__ __forceinline__ void cluster_sync() {
    asm volatile("barrier.cluster.arrive;\n\tbarrier.cluster.wait;" ::: "memory");
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

constexpr unsigned kFullMask = 0xffffffffu;
constexpr unsigned kDigitMask = QSA_RADIX_BINS - 1u;
constexpr int kKeyBits = QSA_RADIX_BITS * QSA_RADIX_PASSES;
constexpr int kWarps = QSA_TOPK_CLUSTER_THREADS / QSA_WARP;
constexpr int kBinWarps = QSA_RADIX_BINS / QSA_WARP;  // warps 0..7 hold one histogram bin a thread
constexpr int kLoadsInFlight = 8;                      // independent global loads a thread issues at once
// A chunk of 32 blocks has at most 32 * R cells above and at thr: both counts fit one word's halves.
constexpr int kHalfBits = 16;
constexpr unsigned kHalfMask = (1u << kHalfBits) - 1u;
static_assert(QSA_WARP * QSA_BLOCK_CELLS <= kHalfMask, "a chunk's counts must fit 16 bits");
static_assert(kWarps == QSA_WARP, "one lane per warp reads the warps' counts");
static_assert(QSA_TOPK_CLUSTER_THREADS >= QSA_RADIX_BINS, "a thread per histogram bin");

// Per-CTA values the passes hand to the emit (indices into `sel`).
enum Sel { kAbove, kAtBefore, kAboveBefore, kSelSlots };

__device__ __forceinline__ int key_shift(int pass) { return kKeyBits - QSA_RADIX_BITS * (pass + 1); }

}  // namespace

__global__ void __cluster_dims__(QSA_CLUSTER_CTAS, 1, 1) __launch_bounds__(QSA_TOPK_CLUSTER_THREADS)
block_topk_cluster_kernel(const float* __restrict__ scores, const int* __restrict__ steps, int* __restrict__ ids,
                          int /*nq: the grid*/, int max_blocks,
                          int /*active_blocks: the launcher sizes shared memory by it; each CTA reads n_bid*/) {
    extern __shared__ unsigned keys[];  // this CTA's slice of order keys
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

    for (int i = tid; i < QSA_RADIX_PASSES * QSA_RADIX_BINS; i += QSA_TOPK_CLUSTER_THREADS) (&hist[0][0])[i] = 0;
    if (tid < kSelSlots) sel[tid] = 0;
    const float* srow = scores + static_cast<size_t>(q) * max_blocks + lo;
    for (int base = 0; base < n; base += kLoadsInFlight * QSA_TOPK_CLUSTER_THREADS) {
        float v[kLoadsInFlight];
#pragma unroll
        for (int k = 0; k < kLoadsInFlight; ++k) {
            const int i = base + k * QSA_TOPK_CLUSTER_THREADS + tid;
            v[k] = i < n ? srow[i] : 0.0f;
        }
#pragma unroll
        for (int k = 0; k < kLoadsInFlight; ++k) {
            const int i = base + k * QSA_TOPK_CLUSTER_THREADS + tid;
            if (i < n) keys[i] = qsa_order_key(v[k]);
        }
    }
    __syncthreads();

    unsigned thr = 0, mask = 0, above = 0;  // thr holds the digits found so far
    for (int pass = 0; pass < QSA_RADIX_PASSES; ++pass) {
        const int shift = key_shift(pass);
        unsigned* own = hist[pass];
        // The slice's histogram: the lanes of one digit add as one (a complete block weighs R cells);
        // a warp with no matching block skips the match.
        for (int base = warp * QSA_WARP; base < n; base += QSA_TOPK_CLUSTER_THREADS) {
            const int i = base + lane;
            const unsigned key = i < n ? keys[i] : 0u;
            const bool complete = i < n && i != tail_at && (key & mask) == thr;
            if (!__any_sync(kFullMask, complete)) continue;
            const unsigned digit = (key >> shift) & kDigitMask;
            const unsigned peers = __match_any_sync(kFullMask, complete ? digit : QSA_RADIX_BINS);
            if (complete && lane == __ffs(peers) - 1) atomicAdd(&own[digit], __popc(peers) * QSA_BLOCK_CELLS);
        }
        if (tid == 0 && tail != 0 && 0 <= tail_at && tail_at < n && (keys[tail_at] & mask) == thr)
            atomicAdd(&own[(keys[tail_at] >> shift) & kDigitMask], tail);
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
                const unsigned v = __shfl_down_sync(kFullMask, cells, o);
                if (lane + o < QSA_WARP) cells += v;
            }
            if (lane == 0) bin_warp_cells[warp] = cells;
        }
        __syncthreads();
        if (tid < QSA_RADIX_BINS)
            for (int w = warp + 1; w < kBinWarps; ++w) cells += bin_warp_cells[w];
        const unsigned d = __syncthreads_count(tid >= 1 && tid < QSA_RADIX_BINS && above + cells >= width);
        if (tid == static_cast<int>(d)) {
            sel[kAbove] = above + cells - total;  // the cells at digits above d join above
            if (pass == QSA_RADIX_PASSES - 1) sel[kAtBefore] = before;
        }
        if (tid < QSA_RADIX_BINS) {  // whole warps: the CTAs before this one gain their cells above d
            const unsigned v = __reduce_add_sync(kFullMask, tid > static_cast<int>(d) ? before : 0u);
            if (lane == 0 && v != 0) atomicAdd(&sel[kAboveBefore], v);
        }
        __syncthreads();
        above = sel[kAbove];
        thr |= d << shift;
        mask |= kDigitMask << shift;
    }

    // Emit: warp w takes a run of whole 32-block chunks of the slice; its cells above / at thr, scanned
    // over the warps, and the CTAs before give its first rank; inside, a warp scan per chunk.
    const unsigned budget = width - above;
    const int span = (n + QSA_TOPK_CLUSTER_THREADS - 1) / QSA_TOPK_CLUSTER_THREADS * QSA_WARP;
    const int wlo = min(warp * span, n), whi = min(wlo + span, n);
    unsigned a = 0, t = 0;
    for (int i = wlo + lane; i < whi; i += QSA_WARP) {
        const unsigned w = qsa_block_weight(lo + i, n_kv, n_bid);
        if (keys[i] > thr) a += w;
        else if (keys[i] == thr) t += w;
    }
    a = __reduce_add_sync(kFullMask, a);
    t = __reduce_add_sync(kFullMask, t);
    if (lane == 0) {
        warp_above[warp] = a;
        warp_at[warp] = t;
    }
    __syncthreads();
    unsigned above_before = sel[kAboveBefore] + __reduce_add_sync(kFullMask, lane < warp ? warp_above[lane] : 0u);
    unsigned at_before = sel[kAtBefore] + __reduce_add_sync(kFullMask, lane < warp ? warp_at[lane] : 0u);
    // Once the cells before reach width, everything selected is written.
    for (int base = wlo; base < whi && above_before + min(at_before, budget) < width; base += QSA_WARP) {
        const int i = base + lane, b = lo + i;
        const unsigned key = i < whi ? keys[i] : 0u;
        const unsigned w = i < whi ? qsa_block_weight(b, n_kv, n_bid) : 0u;
        const unsigned mine = key > thr ? w : key == thr ? w << kHalfBits : 0u;
        if (!__any_sync(kFullMask, mine != 0)) continue;
        unsigned through = mine;
#pragma unroll
        for (int o = 1; o < QSA_WARP; o <<= 1) {
            const unsigned v = __shfl_up_sync(kFullMask, through, o);
            if (lane >= o) through += v;
        }
        const unsigned ahead = through - mine;
        const unsigned ab = above_before + (ahead & kHalfMask), tb = at_before + (ahead >> kHalfBits);
        unsigned count = 0;
        if (key > thr) count = w;
        else if (key == thr && tb < budget) count = min(w, budget - tb);
        const unsigned pos = ab + min(tb, budget);
        for (unsigned c = 0; c < count; ++c) row[pos + c] = b * QSA_BLOCK_CELLS + static_cast<int>(c);
        const unsigned chunk = __shfl_sync(kFullMask, through, QSA_WARP - 1);
        above_before += chunk & kHalfMask;
        at_before += chunk >> kHalfBits;
    }
    cluster_sync();  // no CTA leaves while another may still read its histograms
}
