// engine_shim.cu: qsa's extern "C" face of an engine checkout's QSA selection (docs/spec.md section 8).
//
// Compiled by qsa_cli/engine/build.py in one nvcc command with the checkout's src/kernels/cuda/qsa_select.cu,
// whose host functions are C++ (namespace strata::kernels, mangled names): each wrapper below takes plain
// pointers, int64 counts and the stream as void*, so that Python can call it through ctypes.
//
// Every wrapper returns an int: 1 when the engine's function enqueued its work (a void function always
// does), 0 when a bool function returned false (it launched nothing: the call is outside its domain), and
// -1 when it threw (the message is qsa_shim_exception()'s): a C++ exception must not unwind into ctypes.
//
// QSA_SHIM_HAS_<NAME> (0 or 1, one per host path: a function, or an optional parameter of one such as
// qsa_block_scores's decode_dx, QSA_SHIM_HAS_QSA_BLOCK_SCORES_DECODE_DX) says whether the checkout's header
// declares it; qsa_cli/engine/build.py reads the header and sets them, so a path a checkout lacks is a
// wrapper that is not there. qsa_shim_functions() names those that are (a parameter as function.parameter).
#include <cuda_runtime.h>

#include <cstdint>
#include <exception>
#include <string>

#include "strata/kernels/qsa_select.hpp"

#ifndef QSA_SHIM_HAS_QSA_BLOCK_SCORES
#define QSA_SHIM_HAS_QSA_BLOCK_SCORES 1
#endif
#ifndef QSA_SHIM_HAS_QSA_BLOCK_TOPK
#define QSA_SHIM_HAS_QSA_BLOCK_TOPK 1
#endif
#ifndef QSA_SHIM_HAS_QSA_BLOCK_TOPK_CLUSTER
#define QSA_SHIM_HAS_QSA_BLOCK_TOPK_CLUSTER 1
#endif
#ifndef QSA_SHIM_HAS_QSA_TOPK_SPLIT_BYTES
#define QSA_SHIM_HAS_QSA_TOPK_SPLIT_BYTES 1
#endif
#ifndef QSA_SHIM_HAS_QSA_BLOCK_TOPK_SPLIT
#define QSA_SHIM_HAS_QSA_BLOCK_TOPK_SPLIT 1
#endif
#ifndef QSA_SHIM_HAS_QSA_BLOCK_TOPK_REF
#define QSA_SHIM_HAS_QSA_BLOCK_TOPK_REF 1
#endif
// the newer generation's paths: absent unless the build finds them declared
#ifndef QSA_SHIM_HAS_QSA_BLOCK_SCORES_TC
#define QSA_SHIM_HAS_QSA_BLOCK_SCORES_TC 0
#endif
#ifndef QSA_SHIM_HAS_QSA_TOPK_MULTI_SCRATCH_INTS
#define QSA_SHIM_HAS_QSA_TOPK_MULTI_SCRATCH_INTS 0
#endif
#ifndef QSA_SHIM_HAS_QSA_BLOCK_SCORES_DECODE_DX
#define QSA_SHIM_HAS_QSA_BLOCK_SCORES_DECODE_DX 0
#endif
#ifndef QSA_SHIM_HAS_QSA_BLOCK_TOPK_MULTI_SCRATCH
#define QSA_SHIM_HAS_QSA_BLOCK_TOPK_MULTI_SCRATCH 0
#endif

namespace {

namespace sk = strata::kernels;

constexpr int kLaunched = 1;
constexpr int kRefused = 0;
constexpr int kThrew = -1;

thread_local std::string last_exception;

// The real model's shapes, asked for once (the engine passes them to every call).
const sk::QsaShapes& shapes() {
    static const sk::QsaShapes s = sk::qsa_real_shapes();
    return s;
}

// Runs one engine call: its bool result (or kLaunched for a void call), kThrew if it threw.
template <typename Call>
int guarded(Call&& call) {
    try {
        return call() ? kLaunched : kRefused;
    } catch (const std::exception& e) {
        last_exception = e.what();
    } catch (...) {
        last_exception = "an exception that is not a std::exception";
    }
    return kThrew;
}

}  // namespace

extern "C" {

// Comma-separated names of the host functions this build wraps.
const char* qsa_shim_functions() {
    return ""
#if QSA_SHIM_HAS_QSA_BLOCK_SCORES
           "qsa_block_scores,"
#endif
#if QSA_SHIM_HAS_QSA_BLOCK_TOPK
           "qsa_block_topk,"
#endif
#if QSA_SHIM_HAS_QSA_BLOCK_TOPK_CLUSTER
           "qsa_block_topk_cluster,"
#endif
#if QSA_SHIM_HAS_QSA_TOPK_SPLIT_BYTES
           "qsa_topk_split_bytes,"
#endif
#if QSA_SHIM_HAS_QSA_BLOCK_TOPK_SPLIT
           "qsa_block_topk_split,"
#endif
#if QSA_SHIM_HAS_QSA_BLOCK_TOPK_REF
           "qsa_block_topk_ref,"
#endif
#if QSA_SHIM_HAS_QSA_BLOCK_SCORES_TC
           "qsa_block_scores_tc,"
#endif
#if QSA_SHIM_HAS_QSA_TOPK_MULTI_SCRATCH_INTS
           "qsa_topk_multi_scratch_ints,"
#endif
#if QSA_SHIM_HAS_QSA_BLOCK_SCORES_DECODE_DX
           "qsa_block_scores.decode_dx,"
#endif
#if QSA_SHIM_HAS_QSA_BLOCK_TOPK_MULTI_SCRATCH
           "qsa_block_topk.multi_scratch,"
#endif
        ;
}

// The indexer's shapes of qsa_real_shapes(): idx_n_head, idx_dim, idx_block, idx_top_k (qsa checks them
// against its own geometry before it runs anything).
int qsa_shim_index_shapes(int64_t* out) {
    return guarded([&] {
        const sk::QsaShapes& s = shapes();
        out[0] = s.idx_n_head;
        out[1] = s.idx_dim;
        out[2] = s.idx_block;
        out[3] = s.idx_top_k;
        return true;
    });
}

// The message of the last exception a wrapper caught on this thread.
const char* qsa_shim_exception() { return last_exception.c_str(); }

// The CUDA runtime's last error in this library (its runtime is linked in statically, so CuPy's does not
// see it): cudaGetLastError when `clear`, else cudaPeekAtLastError.
int qsa_shim_last_error(int clear) {
    return static_cast<int>(clear ? cudaGetLastError() : cudaPeekAtLastError());
}

const char* qsa_shim_error_name(int code) { return cudaGetErrorName(static_cast<cudaError_t>(code)); }

const char* qsa_shim_error_string(int code) { return cudaGetErrorString(static_cast<cudaError_t>(code)); }

#if QSA_SHIM_HAS_QSA_BLOCK_SCORES
int qsa_shim_block_scores(const float* pooled, const float* dead, const float* q_idx, const int32_t* steps,
                          int64_t nq, int64_t max_blocks, float* scores, void* stream, int64_t active_blocks) {
    return guarded([&] {
        sk::qsa_block_scores(pooled, dead, q_idx, steps, nq, max_blocks, shapes(), scores, stream, active_blocks);
        return true;
    });
}
#endif

#if QSA_SHIM_HAS_QSA_BLOCK_TOPK
int qsa_shim_block_topk(const float* scores, const int32_t* steps, int64_t nq, int64_t max_blocks, int64_t cap,
                        int32_t* ids, void* stream, int64_t active_blocks) {
    return guarded([&] {
        sk::qsa_block_topk(scores, steps, nq, max_blocks, cap, shapes(), ids, stream, active_blocks);
        return true;
    });
}
#endif

#if QSA_SHIM_HAS_QSA_BLOCK_TOPK_CLUSTER
int qsa_shim_block_topk_cluster(const float* scores, const int32_t* steps, int64_t nq, int64_t max_blocks,
                                int64_t cap, int32_t* ids, void* stream) {
    return guarded([&] { return sk::qsa_block_topk_cluster(scores, steps, nq, max_blocks, cap, shapes(), ids, stream); });
}
#endif

#if QSA_SHIM_HAS_QSA_TOPK_SPLIT_BYTES
int qsa_shim_topk_split_bytes(int64_t nq, uint64_t* bytes) {
    return guarded([&] {
        *bytes = static_cast<uint64_t>(sk::qsa_topk_split_bytes(nq));
        return true;
    });
}
#endif

#if QSA_SHIM_HAS_QSA_BLOCK_TOPK_SPLIT
int qsa_shim_block_topk_split(const float* scores, const int32_t* steps, int64_t nq, int64_t max_blocks, int64_t cap,
                              int32_t* ids, void* scratch, void* stream) {
    return guarded([&] {
        return sk::qsa_block_topk_split(scores, steps, nq, max_blocks, cap, shapes(), ids, scratch, stream);
    });
}
#endif

#if QSA_SHIM_HAS_QSA_BLOCK_TOPK_REF
int qsa_shim_block_topk_ref(const float* scores, const int32_t* steps, int64_t nq, int64_t max_blocks, int64_t cap,
                            int32_t* ids, void* stream) {
    return guarded([&] {
        sk::qsa_block_topk_ref(scores, steps, nq, max_blocks, cap, shapes(), ids, stream);
        return true;
    });
}
#endif

#if QSA_SHIM_HAS_QSA_BLOCK_SCORES_TC
int qsa_shim_block_scores_tc(const float* pooled, const float* dead, const float* q_idx, const int32_t* steps,
                             int64_t nq, int64_t max_blocks, float* scores, void* stream, int64_t active_blocks) {
    return guarded([&] {
        return sk::qsa_block_scores_tc(pooled, dead, q_idx, steps, nq, max_blocks, shapes(), scores, stream,
                                       active_blocks);
    });
}
#endif

#if QSA_SHIM_HAS_QSA_TOPK_MULTI_SCRATCH_INTS
int qsa_shim_topk_multi_scratch_ints(int64_t nq, int64_t* ints) {
    return guarded([&] {
        *ints = static_cast<int64_t>(sk::qsa_topk_multi_scratch_ints(nq));
        return true;
    });
}
#endif

// qsa_block_scores with decode_dx = true: the path that parameter opens (the shuffle-free decode scorer).
#if QSA_SHIM_HAS_QSA_BLOCK_SCORES_DECODE_DX
int qsa_shim_block_scores_decode_dx(const float* pooled, const float* dead, const float* q_idx, const int32_t* steps,
                                    int64_t nq, int64_t max_blocks, float* scores, void* stream,
                                    int64_t active_blocks) {
    return guarded([&] {
        sk::qsa_block_scores(pooled, dead, q_idx, steps, nq, max_blocks, shapes(), scores, stream, active_blocks,
                             true);
        return true;
    });
}
#endif

// qsa_block_topk with a multi_scratch: the path that parameter opens (several CTAs a query).
#if QSA_SHIM_HAS_QSA_BLOCK_TOPK_MULTI_SCRATCH
int qsa_shim_block_topk_multi_scratch(const float* scores, const int32_t* steps, int64_t nq, int64_t max_blocks,
                                      int64_t cap, int32_t* ids, void* stream, int64_t active_blocks,
                                      int32_t* multi_scratch) {
    return guarded([&] {
        sk::qsa_block_topk(scores, steps, nq, max_blocks, cap, shapes(), ids, stream, active_blocks, multi_scratch);
        return true;
    });
}
#endif

}  // extern "C"
