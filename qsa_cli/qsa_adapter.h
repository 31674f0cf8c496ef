// qsa_adapter.h: the ABI of a user's own engine variants (docs/engine.md, "Your own host paths").
//
// An adapter is one CUDA source (`--adapter FILE.cu`, or the checkout's own qsa_adapter.cu) that qsa
// compiles in the same nvcc command as the checkout's qsa_select.cu and qsa's engine_shim.cu, with the
// checkout's include folder: its functions may call the engine's C++ host API (strata::kernels, with any
// parameter qsa's shim does not pass). It defines small extern "C" functions of the three types below and
// the table `qsa_adapter_entries` naming them; each entry runs as the variant NAME.ENTRY of the checkout
// NAME, on qsa's inputs, checked against qsa's reference like the checkout's built-in kinds.
//
// The arrays are device pointers, C-contiguous: pooled float[max_blocks][128], dead float[128], q_idx
// float[nq][4][128], steps int32[nq][4], scores float[nq][max_blocks], ids int32[nq][cap]. `stream` is the
// cudaStream_t to enqueue on (as void*); a function only enqueues work there (no synchronisation, no
// allocation), so a CUDA graph can capture it. A call is a decode call of 1-8 queries or a prompt call of
// more: the steps say which blocks each query reads.
//
// Every function but the scratch size returns QSA_ADAPTER_LAUNCHED when it enqueued its work,
// QSA_ADAPTER_REFUSED when it launched nothing because the call is outside its domain (too many queries,
// a card it does not run on: qsa reports the variant as not run), or QSA_ADAPTER_FAILED (qsa stops with
// one line naming the variant). A C++ exception must not leave an extern "C" function: catch it and
// return QSA_ADAPTER_FAILED. A CUDA error the call leaves is reported by qsa too.
#pragma once

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define QSA_ADAPTER_LAUNCHED 1
#define QSA_ADAPTER_REFUSED 0
#define QSA_ADAPTER_FAILED (-1)

// An entry's kind: the stage its variant runs in.
#define QSA_ADAPTER_SCORES "scores"
#define QSA_ADAPTER_TOPK "topk"

// A scorer: query i's scores of blocks 0..steps[i][2] (its n_bid) into row i of `scores`, no other entry.
typedef int (*QsaAdapterScorer)(const float* pooled, const float* dead, const float* q_idx, const int32_t* steps,
                                int64_t nq, int64_t max_blocks, float* scores, void* stream);

// A top-k: query i's selected cells into entries 0..steps[i][3]-1 (its width) of row i of `ids` (row stride
// `cap`, at least 2051), no other entry, in the order of qsa's reference (docs/spec.md section 3). `scratch` is
// the entry's scratch (NULL when it needs none): scratch_bytes(nq) bytes, zero before the first call; qsa
// does not clear it between calls, so a call leaves it as the next one needs it.
typedef int (*QsaAdapterTopk)(const float* scores, const int32_t* steps, int64_t nq, int64_t max_blocks, int64_t cap,
                              int32_t* ids, void* scratch, void* stream);

// A top-k's scratch size in bytes for a call of `nq` queries (more than 0).
typedef int64_t (*QsaAdapterScratchBytes)(int64_t nq);

typedef struct QsaAdapterEntry {
    const char* name;                     // NAME.name: a letter, then letters, digits, '_' or '-' (at most 40)
    const char* kind;                     // QSA_ADAPTER_SCORES or QSA_ADAPTER_TOPK
    int32_t exact;                        // 1: bit for bit qsa's reference; 0: not (judged by error measures)
    int32_t needs_scratch;                // a top-k: 1 when it takes scratch (then scratch_bytes is set)
    QsaAdapterScorer scorer;              // kind "scores": the function; NULL otherwise
    QsaAdapterTopk topk;                  // kind "topk": the function; NULL otherwise
    QsaAdapterScratchBytes scratch_bytes; // a top-k with scratch: its size; NULL otherwise
    const char* window_scorer;            // a top-k: the scorer it follows in a decode window (an entry of this
                                          // table, or the checkout's "scores" / "scores-ref"); NULL: none
} QsaAdapterEntry;

// The adapter's entries, ended by one whose name is NULL.
extern const QsaAdapterEntry qsa_adapter_entries[];

#ifdef __cplusplus
}  // extern "C"
#endif
