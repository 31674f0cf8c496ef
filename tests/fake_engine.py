"""A fake engine checkout for the engine adapter's tests: the engine's layout and host API (docs/spec.md
section 8) over qsa's own kernels.

``write_fake_engine(root)`` writes the four files a checkout must have. Its ``qsa_select.cu`` includes
qsa's ``kernels/*.cu`` by absolute path (the tree is generated at test time) and launches them with the
grids, blocks and shared memory of qsa's launchers (``qsa_cli/launch/*.py``), so each of its variants
must give qsa's bits. It reads its ``STRATA_*`` switches once per process, as the engine does. Options
make a checkout that must fail a check: a variant slowed down, a variant with one bit flipped, functions
left out.
"""

from __future__ import annotations

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
from qsa_cli.engine.checkout import ENGINE_FILES, HOST_FUNCTIONS
from qsa_cli.engine.kinds import ENGINE_KINDS
from qsa_cli.kernels import kernel_dir
from qsa_cli.launch.scores import HALVE_WARPS_PER_CTA, MULTI_CTAS, WARPS_PER_CTA
from qsa_cli.launch.topk_cluster import CHUNK_WORDS, MAX_CHUNKS, WORD_BYTES

SELECT_CU, SELECT_HPP, QSA_HPP, EMULATE_HPP = ENGINE_FILES
SLOW_NS = 20_000  # the slowed variant's busy wait before its kernels
FLIPPED_ENTRY = 5  # the flipped variant XORs 1 into query 0's score of block 5, or its id at position 5
# The split's scratch holds every chunk's counts of a query up to qsa's largest capacity.
SPLIT_MAX_CHUNKS = -(-max_blocks(MAX_CAPACITY) // SPLIT_CHUNK_BLOCKS)

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
                      int64_t active_blocks = -1);""",
        """void qsa_block_scores(const float* pooled, const float* dead, const float* q_idx, const int32_t* steps,
                      int64_t nq, int64_t max_blocks, const QsaShapes&, float* scores, void* stream,
                      int64_t active_blocks) {
    cudaStream_t s = static_cast<cudaStream_t>(stream);
    const bool decode = active_blocks < 0;
    const char* variant = decode ? "scores" : "scores-ref";
    slow_if(variant, s);
    const int n = static_cast<int>(nq), mb = static_cast<int>(max_blocks);
    if (decode && nq <= QSA_MAX_QUERIES && switches().scores_multi) {
        if (switches().scores_rs) {
            for (int start = 0; start < n; start += QSA_HALVE_MAX_QUERIES)
                launch_halve(pooled, dead, q_idx, steps, scores, start, min(QSA_HALVE_MAX_QUERIES, n - start), mb, s);
        } else {
            block_scores_multi_kernel<<<kMultiCtas, kWarpsPerCta * QSA_WARP, 0, s>>>(pooled, dead, q_idx, steps,
                                                                                   scores, n, mb);
        }
    } else {
        const int blocks = active_blocks > 0 ? static_cast<int>(active_blocks) : mb;
        const dim3 grid((blocks + kWarpsPerCta - 1) / kWarpsPerCta, n);
        block_scores_kernel<<<grid, kWarpsPerCta * QSA_WARP, 0, s>>>(pooled, dead, q_idx, steps, scores, n, mb);
    }
    flip_if(variant, reinterpret_cast<unsigned*>(scores) + kFlippedEntry, s);
}""",
    ),
    "qsa_block_topk": (
        """void qsa_block_topk(const float* scores, const int32_t* steps, int64_t nq, int64_t max_blocks, int64_t cap,
                    const QsaShapes& s, int32_t* ids, void* stream, int64_t active_blocks = -1);""",
        """void qsa_block_topk(const float* scores, const int32_t* steps, int64_t nq, int64_t max_blocks, int64_t,
                    const QsaShapes&, int32_t* ids, void* stream, int64_t active_blocks) {
    cudaStream_t s = static_cast<cudaStream_t>(stream);
    slow_if("topk", s);
    const int active = active_blocks > 0 ? static_cast<int>(active_blocks) : 0;
    if (!launch_cluster(scores, steps, ids, nq, max_blocks, active, s))
        block_topk_wide_kernel<<<static_cast<int>(nq), QSA_TOPK_WIDE_THREADS, 0, s>>>(
            scores, steps, ids, static_cast<int>(nq), static_cast<int>(max_blocks), active);
    flip_if("topk", reinterpret_cast<unsigned*>(ids) + kFlippedEntry, s);
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
        """size_t qsa_topk_split_bytes(int64_t nq) {
    return static_cast<size_t>(nq) * (kSplitHistWords * sizeof(unsigned) + kSplitSelectWords * sizeof(unsigned) +
                                      kSplitMaxChunks * sizeof(topk_counts));
}""",
    ),
    "qsa_block_topk_split": (
        """bool qsa_block_topk_split(const float* scores, const int32_t* steps, int64_t nq, int64_t max_blocks,
                          int64_t cap, const QsaShapes& s, int32_t* ids, void* scratch, void* stream);""",
        """bool qsa_block_topk_split(const float* scores, const int32_t* steps, int64_t nq, int64_t max_blocks,
                          int64_t cap, const QsaShapes&, int32_t* ids, void* scratch, void* stream) {
    const int cc = card_cc();
    const int64_t chunks = (max_blocks + QSA_SPLIT_CHUNK_BLOCKS - 1) / QSA_SPLIT_CHUNK_BLOCKS;
    if (cc < 70 || cc >= 90 || scratch == nullptr || cap != QSA_SELECT_CAP || chunks > kSplitMaxChunks ||
        nq > kMaxGridY)
        return false;
    cudaStream_t s = static_cast<cudaStream_t>(stream);
    slow_if("topk-split", s);
    // the scratch: every query's histograms, then their select slots, then their chunks' counts
    unsigned* hist = static_cast<unsigned*>(scratch);
    unsigned* select = hist + nq * kSplitHistWords;
    topk_counts* counts = reinterpret_cast<topk_counts*>(select + nq * kSplitSelectWords);
    const int n = static_cast<int>(nq), mb = static_cast<int>(max_blocks);
    const dim3 grid(static_cast<unsigned>(chunks), n);
    const int threads = QSA_TOPK_SPLIT_THREADS;
    block_topk_split_pass_kernel<0><<<grid, threads, 0, s>>>(scores, steps, ids, n, mb, 0, hist, select);
    block_topk_split_pass_kernel<1><<<grid, threads, 0, s>>>(scores, steps, ids, n, mb, 0, hist, select);
    block_topk_split_pass_kernel<2><<<grid, threads, 0, s>>>(scores, steps, ids, n, mb, 0, hist, select);
    block_topk_split_pass_kernel<3><<<grid, threads, 0, s>>>(scores, steps, ids, n, mb, 0, hist, select);
    block_topk_split_count_kernel<<<grid, threads, 0, s>>>(scores, steps, ids, n, mb, 0, hist, counts, select);
    block_topk_split_emit_kernel<<<grid, threads, 0, s>>>(scores, steps, ids, n, mb, 0, hist, counts, select);
    // The engine's contract: a call leaves the whole scratch zero. qsa's emit zeroes the histograms; its
    // select slots and chunk counts (written before they are read in every call) are cleared here.
    cudaMemsetAsync(select, 0, nq * (kSplitSelectWords * sizeof(unsigned) + kSplitMaxChunks * sizeof(topk_counts)), s);
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
constexpr int kSplitSelectWords = 2 * QSA_RADIX_PASSES;
constexpr int64_t kSplitMaxChunks = {split_max_chunks};
constexpr int kFlippedEntry = {flipped_entry};
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

struct Switches {{
    bool scores_multi, scores_rs, cluster;
}};

bool switched_off(const char* name) {{
    const char* v = std::getenv(name);
    return v != nullptr && std::strcmp(v, "0") == 0;
}}

// Each switch read once per process, at first use, as the engine reads them.
const Switches& switches() {{
    static const Switches s{{!switched_off("STRATA_SCORES_MULTI"), !switched_off("STRATA_SCORES_RS"),
                            !switched_off("STRATA_QSA_CLUSTER")}};
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

int cluster_smem_bytes(int64_t blocks) {{
    const int64_t keys = (blocks + QSA_CLUSTER_CTAS - 1) / QSA_CLUSTER_CTAS;
    return static_cast<int>(((keys + kClusterLaneKeys - 1) / kClusterLaneKeys * kClusterLaneKeys +
                             kClusterChunkWords * ((keys + kClusterChunkKeys - 1) / kClusterChunkKeys + 1)) *
                            kWordBytes);
}}

bool cluster_domain(int64_t nq, int64_t max_blocks, int active) {{
    if (!built_for_cluster() || card_cc() < 90 || !switches().cluster || nq > kMaxClusterQueries) return false;
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


def write_fake_engine(root: Path, *, slow: str = "", flip: str = "", without: tuple[str, ...] = ()) -> Path:
    """Write a fake checkout into ``root`` and return ``root``.

    ``slow``: the variant (engine/kinds.py's names) that busy-waits SLOW_NS before its kernels. ``flip``: the
    variant that XORs 1 into query 0's entry FLIPPED_ENTRY after them (a score's bits, or an id).
    ``without``: host functions left out of the header and the source.
    """
    for name, value in (("slow", slow), ("flip", flip)):
        if value and value not in tuple(ENGINE_KINDS):
            raise ValueError(f"{name}={value!r} is not an engine variant")
    unknown = set(without) - set(HOST_FUNCTIONS)
    if unknown:
        raise ValueError(f"unknown host function(s) {sorted(unknown)}")
    kept = [name for name in HOST_FUNCTIONS if name not in without]
    declarations = "\n\n".join(_FUNCTIONS[name][0] for name in kept)
    header = ("// Fake engine: the QSA selection's host API.\n#pragma once\n#include <cstddef>\n#include <cstdint>\n\n"
              '#include "strata/kernels/qsa.hpp"\n\nnamespace strata::kernels {\n\n'
              f"{declarations}\n\n}}  // namespace strata::kernels\n")
    prelude = _PRELUDE.format(
        kernels=kernel_dir(), warps_per_cta=WARPS_PER_CTA, multi_ctas=MULTI_CTAS, halve_warps=HALVE_WARPS_PER_CTA,
        split_max_chunks=SPLIT_MAX_CHUNKS, flipped_entry=FLIPPED_ENTRY, slow_ns=SLOW_NS, slow=slow, flip=flip,
        lane_keys=CLUSTER_LANE_KEYS, chunk_keys=CLUSTER_CHUNK_KEYS, chunk_words=CHUNK_WORDS,
        cluster_max_chunks=MAX_CHUNKS, word_bytes=WORD_BYTES)
    source = prelude + "\n\n".join(_FUNCTIONS[name][1] for name in kept) + "\n\n}  // namespace strata::kernels\n"
    for relative, text in ((SELECT_CU, source), (SELECT_HPP, header), (QSA_HPP, _QSA), (EMULATE_HPP, _EMULATE)):
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root
