// bench.cu: the harness's own kernels, none of them measured as a variant.
#include "qsa_common.cuh"

// The read floor: a plain grid-stride read of n4 float4s (the bytes a scorer must read once).
// The sum is written only if it equals a value no data gives, so the loads cannot be dropped.
// Also used to flush the L2 between cold samples, by reading a buffer larger than the L2.
extern "C" __global__ void read_floor_kernel(const float4* __restrict__ data, long long n4, float* sink) {
    float acc = 0.0f;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n4;
         i += (long long)gridDim.x * blockDim.x) {
        const float4 v = __ldcg(data + i);
        acc += v.x + v.y + v.z + v.w;
    }
    if (acc == -1.2345e-38f) sink[0] = acc;
}

// What a hold and the clock stamps write into host-mapped memory (int64s; qsa_cli/timing.py reads them):
#define QSA_HOLD_FLAG 0      // the host's: the generation of the last hold it released
#define QSA_HOLD_STATUS 1    // the hold's: QSA_HOLD_RELEASED or QSA_HOLD_TIMED_OUT
#define QSA_HOLD_WAITED 2    // the hold's: nanoseconds it held the stream
#define QSA_STAMP_START 3    // the round's first stamp: global time (ns), then SM 0's clock64
#define QSA_STAMP_END 5      // its last stamp, likewise
#define QSA_HOLD_WORDS 7
#define QSA_HOLD_RELEASED 1
#define QSA_HOLD_TIMED_OUT 2

// Holds the stream until the host releases it (writes `generation` to the flag, once a round of timed
// samples is queued), so that events time the kernels, not the host's launch rate; or until `timeout_ns`
// of global time pass, so that a host that never releases it (it waits on this stream, or stopped) cannot
// hang the GPU. How it ended is written back: a timeout means the host was still queueing the round.
extern "C" __global__ void hold_stream_kernel(volatile long long* words, long long generation,
                                              long long timeout_ns) {
    long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    bool released;
    do {
        released = words[QSA_HOLD_FLAG] >= generation;
        if (!released) __nanosleep(1000);
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    } while (!released && now - start < timeout_ns);
    words[QSA_HOLD_WAITED] = now - start;
    __threadfence_system();
    words[QSA_HOLD_STATUS] = released ? QSA_HOLD_RELEASED : QSA_HOLD_TIMED_OUT;
}

// The global time and SM 0's cycle counter at once (as nvbench's throttle detection reads them): launched
// with a block per SM, so that one lands on SM 0; two stamps of the same SM give its average clock between
// them. clock64 counts per SM, so only SM 0's is kept (any block of it: they run within nanoseconds).
extern "C" __global__ void clock_stamp_kernel(volatile long long* stamp) {
    unsigned smid;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(smid));
    if (smid != 0) return;
    long long now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    const long long cycles = clock64();
    stamp[0] = now;
    stamp[1] = cycles;
}
