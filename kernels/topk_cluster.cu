// qsa-min-arch: 90
// topk_cluster.cu: block_topk_cluster_kernel, the Hopper decode top-k (spec section 3). A thread-block
// cluster of QSA_CLUSTER_CTAS CTAs per query, grid (QSA_CLUSTER_CTAS, nq); the ids are the reference's:
//   - CTA r loads the order keys of a contiguous 1/QSA_CLUSTER_CTAS of the query's blocks 0..n_bid into
//     dynamic shared memory once (the launcher sizes it, qsa_cli/launch/topk_cluster.py), histogramming
//     pass 0's digit from the registers as it goes (pass 0 matches every block); passes 1-3 and the emit
//     read only shared memory, four keys a lane (16-byte loads);
//   - each pass, every CTA histograms its slice, the cluster syncs, and one warp of every CTA sums the
//     same QSA_CLUSTER_CTAS histograms through distributed shared memory and applies the reference's
//     digit rule to the sum: a pure function of integer counts, so thr, above and the tie budget are the
//     reference's in every CTA. A histogram's bins are only summed, in any order: integer adds, exact;
//   - the histograms also give each CTA the cells above / at thr in the CTAs before it: a key is above
//     thr exactly when, at the first pass where its digit differs from thr's, its digit is higher (the
//     pass's histogram counts it there), and at thr when it matches all four digits. CTA r writes its
//     selected cells ascending from (cells above in CTAs < r) + min(cells at thr in CTAs < r, budget);
//   - every pass has its own histogram array, so no pass overwrites what another CTA may still read; the
//     one hazard is a CTA leaving while another reads its last histogram: every thread arrives at a final
//     cluster barrier once its CTA has read the last pass's histograms, and waits on it only after its emit.
#include "qsa_common.cuh"

// Threads of a CTA; qsa_cli/launch/topk_cluster.py launches with the same and checks them against the
// compiled kernel's maximum (set by __launch_bounds__).
#define CLUSTER_THREADS 1024

namespace {

// The cluster operations, as PTX (what cooperative_groups' cluster_group lowers to), so the kernel
// needs no toolkit header and compiles wherever NVRTC runs.
__device__ __forceinline__ unsigned cluster_cta_rank() {
    unsigned rank;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
    return rank;
}

// Arrive (release: this thread's shared-memory accesses before it, reads included, are performed before
// any thread of the cluster passes the matching wait) and wait (acquire). Every thread of every CTA
// arrives once per phase; cluster_sync is the two back to back.
__device__ __forceinline__ void cluster_arrive() { asm volatile("barrier.cluster.arrive;" ::: "memory"); }
__device__ __forceinline__ void cluster_wait() { asm volatile("barrier.cluster.wait;" ::: "memory"); }
__device__ __forceinline__ void cluster_sync() {
    asm volatile("barrier.cluster.arrive;\n\tbarrier.cluster.wait;" ::: "memory");
}

// Words i..i+3 (i a multiple of 4, `own` 16-byte aligned) of the shared array `own` as they lie in CTA
// `rank` of the cluster (distributed shared memory).
__device__ __forceinline__ uint4 cluster_load4(const unsigned* own, unsigned rank, int i) {
    unsigned long long local;
    asm("cvta.to.shared.u64 %0, %1;" : "=l"(local) : "l"(own + i));
    unsigned remote;
    uint4 value;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(static_cast<unsigned>(local)), "r"(rank));
    asm volatile("ld.shared::cluster.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(value.x), "=r"(value.y), "=r"(value.z), "=r"(value.w)
                 : "r"(remote)
                 : "memory");
    return value;
}

constexpr unsigned kFullMask = 0xffffffffu;
constexpr unsigned kDigitMask = QSA_RADIX_BINS - 1u;
constexpr int kKeyBits = QSA_RADIX_BITS * QSA_RADIX_PASSES;
constexpr int kWarps = CLUSTER_THREADS / QSA_WARP;
constexpr int kVec = 4;                                 // keys a lane reads at once (one 16-byte load)
constexpr int kLaneBins = QSA_RADIX_BINS / QSA_WARP;    // the digit warp's lane l holds bins 8l..8l+7
constexpr int kLoadsInFlight = 8;                       // independent global loads a thread issues at once
// A chunk of 32 lanes x 4 blocks has at most 128 * R cells above and at thr: both fit one word's halves.
constexpr int kHalfBits = 16;
constexpr unsigned kHalfMask = (1u << kHalfBits) - 1u;
static_assert(QSA_WARP * kVec * QSA_BLOCK_CELLS <= kHalfMask, "a chunk's counts must fit 16 bits");
static_assert(kWarps == QSA_WARP, "one lane per warp reads the warps' counts");
static_assert(kLaneBins * QSA_WARP == QSA_RADIX_BINS && kLaneBins == 2 * kVec, "a lane's bins: two 16-byte loads");

// Per-CTA values the digit warp hands to the CTA (indices into `sel`).
enum Sel { kDigit, kAbove, kAtBefore, kAboveBefore, kSelSlots };

__device__ __forceinline__ int key_shift(int pass) { return kKeyBits - QSA_RADIX_BITS * (pass + 1); }

// Keys 4v..4v+3 of the slice; those at n or past it read as 0 (their weight is 0 wherever they are used).
// The dynamic shared memory holds exactly the slice's words, so the last, partial group is read a word
// at a time.
__device__ __forceinline__ uint4 slice_keys(const unsigned* keys, int v, int n) {
    const int i = v * kVec;
    if (i + kVec <= n) return *reinterpret_cast<const uint4*>(keys + i);
    uint4 k;
    k.x = i < n ? keys[i] : 0u;
    k.y = i + 1 < n ? keys[i + 1] : 0u;
    k.z = i + 2 < n ? keys[i + 2] : 0u;
    k.w = i + 3 < n ? keys[i + 3] : 0u;
    return k;
}

// Adds R cells to bin `digit` of `h` for every lane with `complete`: the lanes of one digit add as one;
// a warp with no such lane skips the match. Called by whole warps.
__device__ __forceinline__ void hist_add_complete(unsigned* h, unsigned digit, bool complete, int lane) {
    if (!__any_sync(kFullMask, complete)) return;
    const unsigned peers = __match_any_sync(kFullMask, complete ? digit : QSA_RADIX_BINS);
    if (complete && lane == __ffs(peers) - 1) atomicAdd(&h[digit], __popc(peers) * QSA_BLOCK_CELLS);
}

}  // namespace

__global__ void __cluster_dims__(QSA_CLUSTER_CTAS, 1, 1) __launch_bounds__(CLUSTER_THREADS)
block_topk_cluster_kernel(const float* __restrict__ scores, const int* __restrict__ steps, int* __restrict__ ids,
                          int /*nq: the grid*/, int max_blocks,
                          int /*active_blocks: the launcher sizes shared memory by it; each CTA reads n_bid*/) {
    extern __shared__ __align__(16) unsigned keys[];  // this CTA's slice of order keys
    // One per pass: read remotely after it (16-byte aligned for the digit warp's vector reads).
    __shared__ __align__(16) unsigned hist[QSA_RADIX_PASSES][QSA_RADIX_BINS];
    __shared__ unsigned warp_above[kWarps], warp_at[kWarps];
    __shared__ unsigned sel[kSelSlots];

    const int rank = static_cast<int>(cluster_cta_rank()), q = blockIdx.y;
    const int tid = threadIdx.x, lane = tid % QSA_WARP, warp = tid / QSA_WARP;
    const int* st = steps + q * QSA_STEP_INTS;
    const int n_kv = st[QSA_STEP_NKV], n_bid = st[QSA_STEP_NBID];
    const unsigned width = st[QSA_STEP_WIDTH];
    int* row = ids + static_cast<size_t>(q) * QSA_SELECT_CAP;
    if (n_kv <= static_cast<int>(width)) {  // the whole cluster leaves here: no CTA reads another's memory
        for (int j = rank * CLUSTER_THREADS + tid; j < n_kv; j += QSA_CLUSTER_CTAS * CLUSTER_THREADS) row[j] = j;
        return;
    }
    const int blocks = n_bid + 1, per = (blocks + QSA_CLUSTER_CTAS - 1) / QSA_CLUSTER_CTAS;
    const int lo = min(rank * per, blocks), n = min(lo + per, blocks) - lo;  // slice: blocks lo..lo+n-1
    const int tail_at = n_bid - lo;  // the tail block's index in the slice, when 0 <= tail_at < n
    const unsigned tail = qsa_block_weight(n_bid, n_kv, n_bid);
    const int groups = (n + kVec - 1) / kVec;  // groups of four keys: group v holds keys 4v..4v+3

    for (int i = tid; i < QSA_RADIX_PASSES * QSA_RADIX_BINS; i += CLUSTER_THREADS) (&hist[0][0])[i] = 0;
    if (tid < kSelSlots) sel[tid] = 0;
    __syncthreads();  // the histograms are zero before pass 0's adds below

    // The keys, and pass 0's histogram from the registers (every block matches the empty prefix; the
    // tail block, which may weigh less than R, is added on its own below).
    const float* srow = scores + static_cast<size_t>(q) * max_blocks + lo;
    for (int base = 0; base < n; base += kLoadsInFlight * CLUSTER_THREADS) {
        float v[kLoadsInFlight];
#pragma unroll
        for (int k = 0; k < kLoadsInFlight; ++k) {
            const int i = base + k * CLUSTER_THREADS + tid;
            v[k] = i < n ? srow[i] : 0.0f;
        }
#pragma unroll
        for (int k = 0; k < kLoadsInFlight; ++k) {
            const int i = base + k * CLUSTER_THREADS + tid;
            const unsigned key = qsa_order_key(v[k]);
            if (i < n) keys[i] = key;
            hist_add_complete(hist[0], key >> key_shift(0), i < n && i != tail_at, lane);
        }
    }
    if (tid == 0 && tail != 0 && 0 <= tail_at && tail_at < n)
        atomicAdd(&hist[0][qsa_order_key(srow[tail_at]) >> key_shift(0)], tail);

    unsigned thr = 0, mask = 0, above = 0, above_before = 0;  // thr holds the digits found so far
    for (int pass = 0; pass < QSA_RADIX_PASSES; ++pass) {
        const int shift = key_shift(pass);
        unsigned* own = hist[pass];
        if (pass > 0) {
            // The slice's histogram, four keys a lane; a warp with no matching key skips its group.
            for (int base = warp * QSA_WARP; base < groups; base += CLUSTER_THREADS) {
                const int v = base + lane, i = v * kVec;
                const uint4 k4 = slice_keys(keys, v, n);
                const unsigned k[kVec] = {k4.x, k4.y, k4.z, k4.w};
                bool complete[kVec], any = false;
#pragma unroll
                for (int j = 0; j < kVec; ++j) {
                    complete[j] = i + j < n && i + j != tail_at && (k[j] & mask) == thr;
                    any = any || complete[j];
                }
                if (!__any_sync(kFullMask, any)) continue;
#pragma unroll
                for (int j = 0; j < kVec; ++j) hist_add_complete(own, (k[j] >> shift) & kDigitMask, complete[j], lane);
            }
            if (tid == 0 && tail != 0 && 0 <= tail_at && tail_at < n && (keys[tail_at] & mask) == thr)
                atomicAdd(&own[(keys[tail_at] >> shift) & kDigitMask], tail);
        }
        cluster_sync();  // every CTA's histogram of this pass is complete and visible (and the keys, CTA-wide)

        // Warp 0 applies the digit rule: lane l sums bins 8l..8l+7 over the cluster (and over the CTAs
        // before this one); a suffix scan in the lane and over the lanes gives the cells at digits >= t.
        // The digit rule's d is the largest t in 1..255 with above + cells >= width (the walk from 255 stops
        // there; these t are exactly 1..d since the suffix sums fall as t grows), 0 when none: the count of
        // the t for which it holds.
        if (warp == 0) {
            unsigned total[kLaneBins], before[kLaneBins];
#pragma unroll
            for (int j = 0; j < kLaneBins; ++j) total[j] = before[j] = 0;
#pragma unroll
            for (int r = 0; r < QSA_CLUSTER_CTAS; ++r) {
                const uint4 x = cluster_load4(own, r, kLaneBins * lane);
                const uint4 y = cluster_load4(own, r, kLaneBins * lane + kVec);
                const unsigned h[kLaneBins] = {x.x, x.y, x.z, x.w, y.x, y.y, y.z, y.w};
#pragma unroll
                for (int j = 0; j < kLaneBins; ++j) {
                    total[j] += h[j];
                    if (r < rank) before[j] += h[j];
                }
            }
            unsigned cells[kLaneBins];  // cells at digits >= 8 lane + j
            cells[kLaneBins - 1] = total[kLaneBins - 1];
#pragma unroll
            for (int j = kLaneBins - 2; j >= 0; --j) cells[j] = cells[j + 1] + total[j];
            unsigned higher = cells[0];  // then: the cells at the digits of the lanes above this one
#pragma unroll
            for (int o = 1; o < QSA_WARP; o <<= 1) {
                const unsigned v = __shfl_down_sync(kFullMask, higher, o);
                if (lane + o < QSA_WARP) higher += v;
            }
            higher -= cells[0];
            unsigned hits = 0;
#pragma unroll
            for (int j = 0; j < kLaneBins; ++j) {
                cells[j] += higher;
                const int t = kLaneBins * lane + j;
                hits += t >= 1 && above + cells[j] >= width;
            }
            const unsigned d = __reduce_add_sync(kFullMask, hits);
            unsigned gained = 0;  // the CTAs before this one: their cells at digits above d
#pragma unroll
            for (int j = 0; j < kLaneBins; ++j) {
                const unsigned t = kLaneBins * lane + j;
                if (t > d) gained += before[j];
                if (t == d) {
                    sel[kAbove] = above + cells[j] - total[j];  // the cells at digits above d join above
                    sel[kAtBefore] = before[j];                   // read after the last pass only
                }
            }
            above_before += __reduce_add_sync(kFullMask, gained);
            if (lane == 0) {
                sel[kDigit] = d;
                sel[kAboveBefore] = above_before;
            }
        }
        __syncthreads();  // sel holds this pass's digit; the next write to sel follows the next cluster_sync
        above = sel[kAbove];
        thr |= sel[kDigit] << shift;
        mask |= kDigitMask << shift;
    }
    // This CTA has read the last histograms of every CTA (warp 0, before the __syncthreads above): arrive at
    // the final cluster barrier now, wait on it before leaving, so the emit runs while the others catch up.
    cluster_arrive();

    // Emit: warp w takes a contiguous run of the slice's groups of four keys; its cells above / at thr,
    // scanned over the warps, and the CTAs before give its first rank; inside, a warp scan per 32 groups
    // (lane l's four keys follow lane l-1's: ascending), then a running count over the lane's four keys.
    const unsigned budget = width - above;
    const int span = (groups + kWarps - 1) / kWarps;
    const int vlo = min(warp * span, groups), vhi = min(vlo + span, groups);
    unsigned a = 0, t = 0;
    for (int v = vlo + lane; v < vhi; v += QSA_WARP) {
        const uint4 k4 = slice_keys(keys, v, n);
        const unsigned k[kVec] = {k4.x, k4.y, k4.z, k4.w};
#pragma unroll
        for (int j = 0; j < kVec; ++j) {
            const int i = v * kVec + j;
            const unsigned w = i < n ? qsa_block_weight(lo + i, n_kv, n_bid) : 0u;
            if (k[j] > thr) a += w;
            else if (k[j] == thr) t += w;
        }
    }
    a = __reduce_add_sync(kFullMask, a);
    t = __reduce_add_sync(kFullMask, t);
    if (lane == 0) {
        warp_above[warp] = a;
        warp_at[warp] = t;
    }
    __syncthreads();
    above_before = sel[kAboveBefore] + __reduce_add_sync(kFullMask, lane < warp ? warp_above[lane] : 0u);
    unsigned at_before = sel[kAtBefore] + __reduce_add_sync(kFullMask, lane < warp ? warp_at[lane] : 0u);
    // Once the cells before reach width, everything selected is written.
    for (int base = vlo; base < vhi && above_before + min(at_before, budget) < width; base += QSA_WARP) {
        const int v = base + lane;
        const uint4 k4 = slice_keys(keys, v, n);  // past vhi: weight 0 below
        const unsigned k[kVec] = {k4.x, k4.y, k4.z, k4.w};
        unsigned w[kVec], own_cells[kVec], mine = 0;  // own_cells: above in the low half, at thr in the high
#pragma unroll
        for (int j = 0; j < kVec; ++j) {
            const int i = v * kVec + j;
            w[j] = v < vhi && i < n ? qsa_block_weight(lo + i, n_kv, n_bid) : 0u;
            own_cells[j] = k[j] > thr ? w[j] : k[j] == thr ? w[j] << kHalfBits : 0u;
            mine += own_cells[j];
        }
        if (!__any_sync(kFullMask, mine != 0)) continue;
        unsigned through = mine;
#pragma unroll
        for (int o = 1; o < QSA_WARP; o <<= 1) {
            const unsigned x = __shfl_up_sync(kFullMask, through, o);
            if (lane >= o) through += x;
        }
        unsigned ahead = through - mine;
#pragma unroll
        for (int j = 0; j < kVec; ++j) {
            const int b = lo + v * kVec + j;
            const unsigned ab = above_before + (ahead & kHalfMask), tb = at_before + (ahead >> kHalfBits);
            unsigned count = 0;
            if (k[j] > thr) count = w[j];
            else if (k[j] == thr && tb < budget) count = min(w[j], budget - tb);
            const unsigned pos = ab + min(tb, budget);
            for (unsigned c = 0; c < count; ++c) row[pos + c] = b * QSA_BLOCK_CELLS + static_cast<int>(c);
            ahead += own_cells[j];
        }
        const unsigned chunk = __shfl_sync(kFullMask, through, QSA_WARP - 1);
        above_before += chunk & kHalfMask;
        at_before += chunk >> kHalfBits;
    }
    cluster_wait();  // no CTA leaves while another may still read its histograms
}
