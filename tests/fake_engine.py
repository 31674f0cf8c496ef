"""A fake engine checkout for the engine adapter's tests: the engine's layout and host API (docs/spec.md
section 8) over qsa's own kernels.

``write_fake_engine(root)`` writes the four files a checkout must have. Its ``qsa_select.cu`` includes
qsa's ``kernels/*.cu`` by absolute path (the tree is generated at test time) and launches them with the
grids, blocks and shared memory of qsa's launchers (``qsa_cli/launch/*.py``), so each of its bitwise
variants must give qsa's bits. It reads its ``STRATA_*`` switches once per process, as the engine does.

Two API generations (``generation``), as the engine's lineages have them (docs/spec.md section 8):

- ``"seed"``: the seed's six host functions; a decode scorer that is qsa's halve kernel (the engine's
  reduce-scatter one; ``STRATA_SCORES_RS=0``: qsa's multi kernel, the older window-shared one).
- ``"newer"``: no split functions and no reduce-scatter scorer (the decode scorer is qsa's multi kernel);
  ``qsa_block_scores(..., bool decode_dx)``, whose dx path is qsa's halve kernel (the reference's bits)
  where ``STRATA_SCORES_DX`` lets it (0 off, 1 on, unset on for sm_6x only); ``qsa_block_topk(...,
  int32_t* multi_scratch)`` with ``qsa_topk_multi_scratch_ints``, whose multi-CTA path runs qsa's split
  kernels over that scratch (cleared by the call itself, so it needs no initial value, and all of it
  written, so a short one breaks a guard zone) where ``STRATA_TOPK_MULTI`` lets it (0 off, 1 on, unset on
  for sm_6x only) and the cluster kernel did not take the call; ``qsa_block_scores_tc``, deliberately NOT
  bitwise: the per-block reference's scores with the last mantissa bit of every TC_INEXACT_STRIDE-th block
  of each query flipped (sm_80 and newer, an active count given; false otherwise). It reads
  ``STRATA_TOPK_MULTI_N`` and ``STRATA_QSA_EARLY_EXIT`` as the engine does, to no effect here.

Options make a checkout that must fail a check: a variant slowed down, a variant with one bit flipped
(each on its own path: ``flip="scores-dx"`` flips only where the dx path ran), functions left out.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from qsa_cli.core.geometry import (
    BLOCK_CELLS,
    CLUSTER_CHUNK_KEYS,
    CLUSTER_LANE_KEYS,
    IDX_DIM,
    IDX_HEADS,
    MAX_CAPACITY,
    SPLIT_CHUNK_BLOCKS,
    TOP_K,
    max_blocks,
)
from qsa_cli.engine.checkout import ENGINE_FILES, HOST_FUNCTIONS, HOST_PARAMETERS
from qsa_cli.engine.kinds import ENGINE_KINDS
from qsa_cli.kernels import kernel_dir
from qsa_cli.launch.scores import HALVE_WARPS_PER_CTA, MULTI_CTAS, WARPS_PER_CTA
from qsa_cli.launch.topk_cluster import CHUNK_WORDS, MAX_CHUNKS, WORD_BYTES

SELECT_CU, SELECT_HPP, QSA_HPP, EMULATE_HPP = ENGINE_FILES
SLOW_NS = 20_000  # the slowed variant's busy wait before its kernels
FLIPPED_ENTRY = 5  # the flipped variant XORs 1 into query 0's score of block 5, or its id at position 5
# The split's scratch holds every chunk's counts of a query up to qsa's largest capacity.
SPLIT_MAX_CHUNKS = -(-max_blocks(MAX_CAPACITY) // SPLIT_CHUNK_BLOCKS)
TC_INEXACT_STRIDE = 7  # the tc scorer flips the last mantissa bit of blocks 0, 7, 14, ... of each query
# qsa's kernel files its source includes (_PRELUDE): test_engine's every-card compile of the fake is their
# compile for every card, which tests/test_nvcc.py leaves to it
QSA_KERNEL_FILES = ("scores.cu", "topk.cu", "bench.cu", "topk_cluster.cu")

SEED, NEWER = "seed", "newer"
GENERATIONS = (SEED, NEWER)
# the host functions each generation declares (HOST_FUNCTIONS' order)
FUNCTIONS = {SEED: HOST_FUNCTIONS[:6],
             NEWER: ("qsa_block_scores", "qsa_block_topk", "qsa_block_topk_cluster", "qsa_block_topk_ref",
                     "qsa_block_scores_tc", "qsa_topk_multi_scratch_ints")}
PARAMETERS = {SEED: (), NEWER: tuple(HOST_PARAMETERS)}  # the optional parameters each declares
# the switches each generation's sources read (STRATA_EMULATE_CC: emulate.hpp's), sorted
_READS = {SEED: ("STRATA_SCORES_MULTI", "STRATA_SCORES_RS", "STRATA_QSA_CLUSTER"),
          NEWER: ("STRATA_SCORES_MULTI", "STRATA_QSA_CLUSTER", "STRATA_SCORES_DX", "STRATA_TOPK_MULTI",
                  "STRATA_TOPK_MULTI_N", "STRATA_QSA_EARLY_EXIT")}
SWITCHES = {g: tuple(sorted((*names, "STRATA_EMULATE_CC"))) for g, names in _READS.items()}
# the Switches struct's fields, in order: the switch each holds
_SWITCH_FIELDS = ("STRATA_SCORES_MULTI", "STRATA_SCORES_RS", "STRATA_QSA_CLUSTER", "STRATA_SCORES_DX",
                  "STRATA_TOPK_MULTI", "STRATA_TOPK_MULTI_N", "STRATA_QSA_EARLY_EXIT")
# What differs in the text of qsa_block_scores and qsa_block_topk between the generations: the newer one's
# optional parameter (its declaration, with doc comments between the parameters as the engine's header has,
# its definition's parameter) and what the body passes on for it.
_GENERATION_TEXT = {
    SEED: {"@DX_DECL@": ");", "@DX_PARAM@": "", "@DX@": "false",
           "@MULTI_DECL@": ");", "@MULTI_PARAM@": "", "@MULTI@": "nullptr"},
    NEWER: {"@DX_DECL@": ",  ///< > 0: score only this many blocks (the call's largest n_bid + 1)\n"
                         "                      bool decode_dx = false);  ///< a decode call of 1-8 queries may take "
                         "the\n                                                ///< dx scorer (STRATA_SCORES_DX)",
            "@DX_PARAM@": ", bool decode_dx", "@DX@": "decode_dx",
            "@MULTI_DECL@": ",  ///< > 0: no query has more blocks\n"
                            "                    int32_t* multi_scratch = nullptr);  ///< qsa_topk_multi_scratch_ints(nq) "
                            "ints, or\n                                                        ///< null (no multi-CTA path)",
            "@MULTI_PARAM@": ", int32_t* multi_scratch", "@MULTI@": "multi_scratch"},
}

_EMULATE = """\
// Fake engine: the host side answers as the card STRATA_EMULATE_CC names (75, 80, 86, 89), read once.
#pragma once
#include <cstdlib>

namespace strata::core {

inline int emulated_cc() {
    static const int cc = [] {
        const char* v = std::getenv("STRATA_EMULATE_CC");
        return v && *v ? std::atoi(v) : 0;
    }();
    return cc;
}

}  // namespace strata::core
"""

_QSA = f"""\
// Fake engine: the QSA selection's shapes and step layout.
#pragma once
#include <cstdint>

namespace strata::kernels {{

struct QsaShapes {{
    int64_t n_head, n_head_kv, head_dim, n_rot, idx_n_head, idx_dim, idx_block, idx_top_k, page_size;
}};

inline QsaShapes qsa_real_shapes() {{ return {{64, 8, 128, 64, {IDX_HEADS}, {IDX_DIM}, {BLOCK_CELLS}, {TOP_K}, 64}}; }}

inline int64_t qsa_selection_width(int64_t n_kv, const QsaShapes& s) {{
    const int64_t cap = s.idx_top_k + s.idx_block - 1;
    return n_kv < cap ? n_kv : cap;
}}

constexpr int kStepPos = 0, kStepNKv = 1, kStepNBid = 2, kStepWidth = 3, kStepCount = 4;
constexpr int64_t kTopkMaxCells = 32768;

}}  // namespace strata::kernels
"""

# name -> (declaration in qsa_select.hpp, definition in qsa_select.cu)
_FUNCTIONS: dict[str, tuple[str, str]] = {
    "qsa_block_scores": (
        """void qsa_block_scores(const float* pooled, const float* dead, const float* q_idx, const int32_t* steps,
                      int64_t nq, int64_t max_blocks, const QsaShapes& s, float* scores, void* stream,
                      int64_t active_blocks = -1@DX_DECL@""",
        """void qsa_block_scores(const float* pooled, const float* dead, const float* q_idx, const int32_t* steps,
                      int64_t nq, int64_t max_blocks, const QsaShapes&, float* scores, void* stream,
                      int64_t active_blocks@DX_PARAM@) {
    cudaStream_t s = static_cast<cudaStream_t>(stream);
    const bool decode = active_blocks < 0;
    const int n = static_cast<int>(nq), mb = static_cast<int>(max_blocks);
    const bool dx = decode && nq <= QSA_MAX_QUERIES && dx_taken(@DX@);
    const char* variant = dx ? "scores-dx" : decode ? "scores" : "scores-ref";
    slow_if(variant, s);
    if (dx || (decode && nq <= QSA_MAX_QUERIES && switches().scores_multi != 0 && kReduceScatter &&
               switches().scores_rs != 0)) {
        launch_halve_all(pooled, dead, q_idx, steps, scores, n, mb, s);
    } else if (decode && nq <= QSA_MAX_QUERIES && switches().scores_multi != 0) {
        block_scores_multi_kernel<<<kMultiCtas, kWarpsPerCta * QSA_WARP, 0, s>>>(pooled, dead, q_idx, steps, scores,
                                                                               n, mb);
    } else {
        launch_per_block(pooled, dead, q_idx, steps, scores, n, mb, active_blocks > 0 ? active_blocks : mb, s);
    }
    flip_if(variant, reinterpret_cast<unsigned*>(scores) + kFlippedEntry, s);
}""",
    ),
    "qsa_block_topk": (
        """void qsa_block_topk(const float* scores, const int32_t* steps, int64_t nq, int64_t max_blocks, int64_t cap,
                    const QsaShapes& s, int32_t* ids, void* stream, int64_t active_blocks = -1@MULTI_DECL@""",
        """void qsa_block_topk(const float* scores, const int32_t* steps, int64_t nq, int64_t max_blocks, int64_t,
                    const QsaShapes&, int32_t* ids, void* stream, int64_t active_blocks@MULTI_PARAM@) {
    cudaStream_t s = static_cast<cudaStream_t>(stream);
    const int active = active_blocks > 0 ? static_cast<int>(active_blocks) : 0;
    const bool cluster = cluster_domain(nq, max_blocks, active);
    int32_t* const multi = @MULTI@;
    const bool several = !cluster && multi_taken(multi, nq, max_blocks, active);
    const char* variant = several ? "topk-multi" : "topk";
    slow_if(variant, s);
    if (cluster) {
        launch_cluster(scores, steps, ids, nq, max_blocks, active, s);
    } else if (several) {
        // no initial value needed: the call clears the whole scratch (qsa_topk_multi_scratch_ints's) first
        cudaMemsetAsync(multi, 0, split_scratch_bytes(nq), s);
        launch_split(scores, steps, ids, nq, max_blocks, multi, s);
    } else {
        block_topk_wide_kernel<<<static_cast<int>(nq), QSA_TOPK_WIDE_THREADS, 0, s>>>(
            scores, steps, ids, static_cast<int>(nq), static_cast<int>(max_blocks), active);
    }
    flip_if(variant, reinterpret_cast<unsigned*>(ids) + kFlippedEntry, s);
}""",
    ),
    "qsa_block_topk_cluster": (
        """bool qsa_block_topk_cluster(const float* scores, const int32_t* steps, int64_t nq, int64_t max_blocks,
                            int64_t cap, const QsaShapes& s, int32_t* ids, void* stream);""",
        """bool qsa_block_topk_cluster(const float* scores, const int32_t* steps, int64_t nq, int64_t max_blocks,
                            int64_t cap, const QsaShapes&, int32_t* ids, void* stream) {
    cudaStream_t s = static_cast<cudaStream_t>(stream);
    if (cap != QSA_SELECT_CAP || !cluster_domain(nq, max_blocks, 0)) return false;
    slow_if("topk-cluster", s);
    launch_cluster(scores, steps, ids, nq, max_blocks, 0, s);
    flip_if("topk-cluster", reinterpret_cast<unsigned*>(ids) + kFlippedEntry, s);
    return true;
}""",
    ),
    "qsa_topk_split_bytes": (
        "size_t qsa_topk_split_bytes(int64_t nq);",
        """size_t qsa_topk_split_bytes(int64_t nq) { return split_scratch_bytes(nq); }""",
    ),
    "qsa_block_topk_split": (
        """bool qsa_block_topk_split(const float* scores, const int32_t* steps, int64_t nq, int64_t max_blocks,
                          int64_t cap, const QsaShapes& s, int32_t* ids, void* scratch, void* stream);""",
        """bool qsa_block_topk_split(const float* scores, const int32_t* steps, int64_t nq, int64_t max_blocks,
                          int64_t cap, const QsaShapes&, int32_t* ids, void* scratch, void* stream) {
    const int cc = card_cc();
    if (cc < 70 || cc >= 90 || scratch == nullptr || cap != QSA_SELECT_CAP || !split_fits(nq, max_blocks))
        return false;
    cudaStream_t s = static_cast<cudaStream_t>(stream);
    slow_if("topk-split", s);
    launch_split(scores, steps, ids, nq, max_blocks, scratch, s);
    // The engine's contract: a call leaves the whole scratch zero. qsa's emit zeroes the histograms and
    // the arrivals; its select slots and suffix rows (written before they are read in every call) are
    // cleared here.
    unsigned* select = static_cast<unsigned*>(scratch) + nq * kSplitHistWords;
    cudaMemsetAsync(select, 0, nq * (kSplitSelectWords + kSplitMaxChunks * kSplitSuffixWords) * sizeof(unsigned), s);
    flip_if("topk-split", reinterpret_cast<unsigned*>(ids) + kFlippedEntry, s);
    return true;
}""",
    ),
    "qsa_block_topk_ref": (
        """void qsa_block_topk_ref(const float* scores, const int32_t* steps, int64_t nq, int64_t max_blocks, int64_t cap,
                        const QsaShapes& s, int32_t* ids, void* stream);""",
        """void qsa_block_topk_ref(const float* scores, const int32_t* steps, int64_t nq, int64_t max_blocks, int64_t,
                        const QsaShapes&, int32_t* ids, void* stream) {
    cudaStream_t s = static_cast<cudaStream_t>(stream);
    slow_if("topk-ref", s);
    block_topk_kernel<<<static_cast<int>(nq), QSA_TOPK_REF_THREADS, 0, s>>>(scores, steps, ids, static_cast<int>(nq),
                                                                           static_cast<int>(max_blocks), 0);
    flip_if("topk-ref", reinterpret_cast<unsigned*>(ids) + kFlippedEntry, s);
}""",
    ),
    "qsa_block_scores_tc": (
        """bool qsa_block_scores_tc(const float* pooled, const float* dead, const float* q_idx, const int32_t* steps,
                         int64_t nq, int64_t max_blocks, const QsaShapes& s, float* scores, void* stream,
                         int64_t active_blocks);""",
        """bool qsa_block_scores_tc(const float* pooled, const float* dead, const float* q_idx, const int32_t* steps,
                         int64_t nq, int64_t max_blocks, const QsaShapes&, float* scores, void* stream,
                         int64_t active_blocks) {
    if (card_cc() < 80 || active_blocks <= 0 || active_blocks > max_blocks || nq > kMaxGridY) return false;
    cudaStream_t s = static_cast<cudaStream_t>(stream);
    slow_if("scores-tc", s);
    const int n = static_cast<int>(nq), mb = static_cast<int>(max_blocks);
    launch_per_block(pooled, dead, q_idx, steps, scores, n, mb, active_blocks, s);
    // deliberately not bitwise: another arithmetic's last bit on some blocks
    const int blocks = static_cast<int>(active_blocks);
    tc_inexact_kernel<<<dim3((blocks + 255) / 256, n), 256, 0, s>>>(scores, steps, mb, blocks);
    flip_if("scores-tc", reinterpret_cast<unsigned*>(scores) + kFlippedEntry, s);
    return true;
}""",
    ),
    "qsa_topk_multi_scratch_ints": (
        "int64_t qsa_topk_multi_scratch_ints(int64_t nq);",
        """int64_t qsa_topk_multi_scratch_ints(int64_t nq) {
    return static_cast<int64_t>((split_scratch_bytes(nq) + sizeof(int32_t) - 1) / sizeof(int32_t));
}""",
    ),
}
assert tuple(_FUNCTIONS) == HOST_FUNCTIONS

# The host side shared by the functions: switches, the card, the cluster's launch, the slowed and flipped
# variants. Kernels from qsa's kernels/ (the cluster kernel below sm_90 is a stub the host never launches).
_PRELUDE = """\
// Fake engine for qsa's tests: the engine's host API over qsa's own kernels.
#include <cuda_runtime.h>

#include <cstdlib>
#include <cstring>

#include "strata/core/emulate.hpp"
#include "strata/kernels/qsa_select.hpp"

#include "{kernels}/scores.cu"
#include "{kernels}/topk.cu"
#include "{kernels}/bench.cu"
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
__global__ void block_topk_cluster_kernel(const float*, const int*, int*, int, int, int) {{}}
__global__ void block_topk_cluster_wide_kernel(const float*, const int*, int*, int, int, int) {{}}
#else
#include "{kernels}/topk_cluster.cu"
#endif

namespace {{

constexpr int kWarpsPerCta = {warps_per_cta};
constexpr int kMultiCtas = {multi_ctas};
constexpr int kHalveWarpsPerCta = {halve_warps};
constexpr int kMaxGridY = 65535;
constexpr int kMaxClusterQueries = 16;
constexpr int kSplitHistWords = QSA_RADIX_PASSES * QSA_RADIX_BINS;
constexpr int kSplitSelectWords = 2 * (QSA_RADIX_PASSES - 1);
constexpr int kSplitSuffixWords = QSA_RADIX_BINS + 1;
constexpr int64_t kSplitMaxChunks = {split_max_chunks};
constexpr int kFlippedEntry = {flipped_entry};
constexpr int kTcInexactStride = {tc_stride};
constexpr bool kReduceScatter = {reduce_scatter};  // the seed's decode scorer; the newer generation has none
constexpr long long kSlowNs = {slow_ns};
const char* const kSlowed = "{slow}";
const char* const kFlipped = "{flip}";

// launch/topk_cluster.py's cluster_smem_bytes and its bounds
constexpr int kClusterLaneKeys = {lane_keys}, kClusterChunkKeys = {chunk_keys}, kClusterChunkWords = {chunk_words};
constexpr int kClusterMaxChunks = {cluster_max_chunks}, kWordBytes = {word_bytes};

constexpr bool built_for_cluster() {{
    for (int arch : {{__CUDA_ARCH_LIST__}})
        if (arch >= 900) return true;
    return false;
}}

// -1: unset (or empty, or not read by this generation); 0: "0"; 1: any other value
struct Switches {{
    int scores_multi, scores_rs, cluster, scores_dx, topk_multi, topk_multi_n, early_exit;
}};

int read_switch(const char* name) {{
    const char* v = std::getenv(name);
    if (v == nullptr || *v == '\\0') return -1;
    return std::strcmp(v, "0") == 0 ? 0 : 1;
}}

// Each switch this generation reads, once per process, at first use, as the engine reads them.
const Switches& switches() {{
    static const Switches s{{{switch_reads}}};
    return s;
}}

int device_attribute(cudaDeviceAttr attr) {{
    int device = 0, value = 0;
    cudaGetDevice(&device);
    cudaDeviceGetAttribute(&value, attr, device);
    return value;
}}

// The card's compute capability as the host side answers it (STRATA_EMULATE_CC first).
int card_cc() {{
    if (const int cc = strata::core::emulated_cc()) return cc;
    return 10 * device_attribute(cudaDevAttrComputeCapabilityMajor) + device_attribute(cudaDevAttrComputeCapabilityMinor);
}}

// A hold that no host releases (its flag stays 0, below generation 1): it holds the stream for its timeout.
__device__ long long slow_hold_words[QSA_HOLD_WORDS];

// A decode call's dx scorer where it is asked for: STRATA_SCORES_DX 0 off, 1 on, unset on for sm_6x only.
bool dx_taken(bool requested) {{
    const int dx = switches().scores_dx;
    return requested && (dx == 1 || (dx < 0 && card_cc() / 10 == 6));
}}

// The split's scratch: every query's histograms, then their select slots, their chunks' suffix rows
// and their arrivals, all uint32.
size_t split_scratch_bytes(int64_t nq) {{
    return static_cast<size_t>(nq) * (kSplitHistWords + kSplitSelectWords + kSplitMaxChunks * kSplitSuffixWords + 1) *
           sizeof(unsigned);
}}

bool split_fits(int64_t nq, int64_t max_blocks) {{
    return (max_blocks + QSA_SPLIT_CHUNK_BLOCKS - 1) / QSA_SPLIT_CHUNK_BLOCKS <= kSplitMaxChunks && nq <= kMaxGridY;
}}

// A decode call's multi-CTA top-k where a scratch is given: STRATA_TOPK_MULTI 0 off, 1 on, unset on for sm_6x.
bool multi_taken(const int32_t* scratch, int64_t nq, int64_t max_blocks, int active) {{
    const int multi = switches().topk_multi;
    return scratch != nullptr && active == 0 && split_fits(nq, max_blocks) &&
           (multi == 1 || (multi < 0 && card_cc() / 10 == 6));
}}

// qsa's split kernels over a scratch laid out as split_scratch_bytes says (its histograms zero).
void launch_split(const float* scores, const int32_t* steps, int32_t* ids, int64_t nq, int64_t max_blocks,
                  void* scratch, cudaStream_t s) {{
    unsigned* hist = static_cast<unsigned*>(scratch);
    unsigned* select = hist + nq * kSplitHistWords;
    unsigned* suffix = select + nq * kSplitSelectWords;
    unsigned* arrivals = suffix + nq * kSplitMaxChunks * kSplitSuffixWords;
    const int n = static_cast<int>(nq), mb = static_cast<int>(max_blocks);
    const dim3 grid(static_cast<unsigned>((max_blocks + QSA_SPLIT_CHUNK_BLOCKS - 1) / QSA_SPLIT_CHUNK_BLOCKS), n);
    const int threads = QSA_TOPK_SPLIT_THREADS;
    constexpr int bpt = QSA_SPLIT_CHUNK_BLOCKS / QSA_TOPK_SPLIT_THREADS;  // the engine's one chunk size
    block_topk_split_pass_kernel<0, bpt><<<grid, threads, 0, s>>>(scores, steps, ids, n, mb, 0, hist, select, suffix);
    block_topk_split_pass_kernel<1, bpt><<<grid, threads, 0, s>>>(scores, steps, ids, n, mb, 0, hist, select, suffix);
    block_topk_split_pass_kernel<2, bpt><<<grid, threads, 0, s>>>(scores, steps, ids, n, mb, 0, hist, select, suffix);
    block_topk_split_pass_kernel<3, bpt><<<grid, threads, 0, s>>>(scores, steps, ids, n, mb, 0, hist, select, suffix);
    block_topk_split_emit_kernel<bpt><<<grid, threads, 0, s>>>(scores, steps, ids, n, mb, 0, hist, select, suffix, arrivals);
}}

// qsa's per-block reference scorer over blocks 0..blocks-1 of each query.
void launch_per_block(const float* pooled, const float* dead, const float* q, const int32_t* steps, float* scores,
                      int n, int mb, int64_t blocks, cudaStream_t s) {{
    const dim3 grid(static_cast<unsigned>((blocks + kWarpsPerCta - 1) / kWarpsPerCta), n);
    block_scores_kernel<<<grid, kWarpsPerCta * QSA_WARP, 0, s>>>(pooled, dead, q, steps, scores, n, mb);
}}

// The tc scorer's deliberate inexactness: the last mantissa bit of every kTcInexactStride-th scored block flipped.
__global__ void tc_inexact_kernel(float* scores, const int32_t* steps, int mb, int blocks) {{
    const int b = blockIdx.x * blockDim.x + threadIdx.x, q = blockIdx.y;
    if (b < blocks && b <= steps[q * QSA_STEP_INTS + QSA_STEP_NBID] && b % kTcInexactStride == 0)
        reinterpret_cast<unsigned*>(scores)[static_cast<size_t>(q) * mb + b] ^= 1u;
}}

void slow_if(const char* variant, cudaStream_t s) {{
    if (std::strcmp(variant, kSlowed) != 0) return;
    long long* words = nullptr;
    cudaGetSymbolAddress(reinterpret_cast<void**>(&words), slow_hold_words);
    hold_stream_kernel<<<1, 1, 0, s>>>(words, 1, kSlowNs);
}}

__global__ void flip_bit_kernel(unsigned* word) {{ *word ^= 1u; }}

void flip_if(const char* variant, unsigned* word, cudaStream_t s) {{
    if (std::strcmp(variant, kFlipped) == 0) flip_bit_kernel<<<1, 1, 0, s>>>(word);
}}

template <int NQ>
void launch_halve_of(const float* pooled, const float* dead, const float* q, const int32_t* steps, float* scores,
                     int mb, cudaStream_t s) {{
    const int threads = kHalveWarpsPerCta * QSA_WARP;
    int per_sm = 0;
    cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, block_scores_halve_kernel<NQ>, threads, 0);
    const int resident = device_attribute(cudaDevAttrMultiProcessorCount) * max(1, per_sm);
    const int grid = min(resident, (mb + kHalveWarpsPerCta - 1) / kHalveWarpsPerCta);
    block_scores_halve_kernel<NQ><<<grid, threads, 0, s>>>(pooled, dead, q, steps, scores, NQ, mb);
}}

// Queries start..start+n-1 (n of 1..4) of a decode call, on pointer offsets, as launch/scores.py does.
void launch_halve(const float* pooled, const float* dead, const float* q, const int32_t* steps, float* scores,
                  int start, int n, int mb, cudaStream_t s) {{
    const float* qs = q + static_cast<size_t>(start) * QSA_IDX_HEADS * QSA_IDX_DIM;
    const int32_t* st = steps + static_cast<size_t>(start) * QSA_STEP_INTS;
    float* out = scores + static_cast<size_t>(start) * mb;
    switch (n) {{
        case 1: launch_halve_of<1>(pooled, dead, qs, st, out, mb, s); break;
        case 2: launch_halve_of<2>(pooled, dead, qs, st, out, mb, s); break;
        case 3: launch_halve_of<3>(pooled, dead, qs, st, out, mb, s); break;
        default: launch_halve_of<4>(pooled, dead, qs, st, out, mb, s); break;
    }}
}}

// Every query of a decode call on the halve kernel, 1..4 at a time, as launch/scores.py does.
void launch_halve_all(const float* pooled, const float* dead, const float* q, const int32_t* steps, float* scores,
                      int n, int mb, cudaStream_t s) {{
    for (int start = 0; start < n; start += QSA_HALVE_MAX_QUERIES)
        launch_halve(pooled, dead, q, steps, scores, start, min(QSA_HALVE_MAX_QUERIES, n - start), mb, s);
}}

int cluster_smem_bytes(int64_t blocks) {{
    const int64_t keys = (blocks + QSA_CLUSTER_CTAS - 1) / QSA_CLUSTER_CTAS;
    return static_cast<int>(((keys + kClusterLaneKeys - 1) / kClusterLaneKeys * kClusterLaneKeys +
                             kClusterChunkWords * ((keys + kClusterChunkKeys - 1) / kClusterChunkKeys + 1)) *
                            kWordBytes);
}}

bool cluster_domain(int64_t nq, int64_t max_blocks, int active) {{
    if (!built_for_cluster() || card_cc() < 90 || switches().cluster == 0 || nq > kMaxClusterQueries) return false;
    const int64_t blocks = active > 0 ? active : max_blocks;
    cudaFuncAttributes attr{{}};
    cudaFuncGetAttributes(&attr, block_topk_cluster_kernel);
    const int64_t keys = (blocks + QSA_CLUSTER_CTAS - 1) / QSA_CLUSTER_CTAS;
    return cluster_smem_bytes(blocks) + static_cast<int64_t>(attr.sharedSizeBytes) <=
               device_attribute(cudaDevAttrMaxSharedMemoryPerBlockOptin) &&
           keys <= static_cast<int64_t>(kClusterMaxChunks) * kClusterChunkKeys;
}}

// The cluster top-k where it can run this call (false: nothing launched).
bool launch_cluster(const float* scores, const int32_t* steps, int32_t* ids, int64_t nq, int64_t max_blocks,
                    int active, cudaStream_t s) {{
    if (!cluster_domain(nq, max_blocks, active)) return false;
    const int smem = cluster_smem_bytes(active > 0 ? active : max_blocks);
    static int raised = 0;  // the kernel's opt-in limit, only ever raised
    if (smem > raised) {{
        cudaFuncSetAttribute(block_topk_cluster_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
        raised = smem;
    }}
    block_topk_cluster_kernel<<<dim3(QSA_CLUSTER_CTAS, static_cast<unsigned>(nq)), QSA_TOPK_CLUSTER_THREADS, smem, s>>>(
        scores, steps, ids, static_cast<int>(nq), static_cast<int>(max_blocks), active);
    return true;
}}

}}  // namespace

namespace strata::kernels {{

"""


def git(repo: Path, *args: str) -> str:
    """``git -C repo ARGS`` with a committer of its own (a machine may have none set), checked; its output: for
    the fake engine made into a git repository (tests, scripts/fake_engine_history.py)."""
    cmd = ["git", "-C", str(repo), "-c", "user.name=qsa", "-c", "user.email=qsa@example.invalid", *args]
    return subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.strip()


def write_fake_engine(root: Path, *, generation: str = SEED, slow: str = "", flip: str = "",
                      without: tuple[str, ...] = (), slow_ns: int = SLOW_NS) -> Path:
    """Write a fake checkout of API ``generation`` (GENERATIONS) into ``root`` and return ``root``.

    ``slow``: the variant (engine/kinds.py's names) that busy-waits ``slow_ns`` before its kernels. ``flip``: the
    variant that XORs 1 into query 0's entry FLIPPED_ENTRY after them (a score's bits, or an id).
    ``without``: host functions of the generation's left out of the header and the source.
    """
    if generation not in GENERATIONS:
        raise ValueError(f"generation={generation!r} is not one of {GENERATIONS}")
    for name, value in (("slow", slow), ("flip", flip)):
        if value and value not in tuple(ENGINE_KINDS):
            raise ValueError(f"{name}={value!r} is not an engine variant")
    unknown = set(without) - set(FUNCTIONS[generation])
    if unknown:
        raise ValueError(f"unknown host function(s) {sorted(unknown)} of the {generation} generation")
    kept = [name for name in FUNCTIONS[generation] if name not in without]
    texts = {name: tuple(_of_generation(text, generation) for text in _FUNCTIONS[name]) for name in kept}
    declarations = "\n\n".join(declaration for declaration, _ in texts.values())
    header = ("// Fake engine: the QSA selection's host API.\n#pragma once\n#include <cstddef>\n#include <cstdint>\n\n"
              '#include "strata/kernels/qsa.hpp"\n\nnamespace strata::kernels {\n\n'
              f"{declarations}\n\n}}  // namespace strata::kernels\n")
    reads = ", ".join(f'read_switch("{name}")' if name in _READS[generation] else "-1" for name in _SWITCH_FIELDS)
    prelude = _PRELUDE.format(
        kernels=kernel_dir(), warps_per_cta=WARPS_PER_CTA, multi_ctas=MULTI_CTAS, halve_warps=HALVE_WARPS_PER_CTA,
        split_max_chunks=SPLIT_MAX_CHUNKS, flipped_entry=FLIPPED_ENTRY, slow_ns=slow_ns, slow=slow, flip=flip,
        lane_keys=CLUSTER_LANE_KEYS, chunk_keys=CLUSTER_CHUNK_KEYS, chunk_words=CHUNK_WORDS,
        cluster_max_chunks=MAX_CHUNKS, word_bytes=WORD_BYTES, tc_stride=TC_INEXACT_STRIDE,
        reduce_scatter=str(generation == SEED).lower(), switch_reads=reads)
    source = prelude + "\n\n".join(definition for _, definition in texts.values()) + "\n\n}  // namespace strata::kernels\n"
    for relative, text in ((SELECT_CU, source), (SELECT_HPP, header), (QSA_HPP, _QSA), (EMULATE_HPP, _EMULATE)):
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def _of_generation(text: str, generation: str) -> str:
    """A function's text with the generation's parts in place (_GENERATION_TEXT)."""
    for marker, part in _GENERATION_TEXT[generation].items():
        text = text.replace(marker, part)
    return text
