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

// Holds the stream for `ns` nanoseconds, so that the host can enqueue a batch of timed samples
// before the GPU reaches them: events then time the kernels, not the host's launch rate.
extern "C" __global__ void hold_stream_kernel(long long ns) {
    long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do {
        __nanosleep(1000);
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    } while (now - start < ns);
}
