// Fifty-fourth session: does letting each kernel schedule the next one's blocks before it waits
// (griddepcontrol.launch_dependents, then .wait) hide more of the latency work between the weight
// products than waiting first? The forty-seventh session's overlap probe (prepared_session47/overlap.cu,
// run164), launches mode only, each kernel in both orders. Build and run on the device:
//   nvcc -O2 -arch=sm_90 -o /tmp/overlap_trigger docs/results/session54/overlap_trigger.cu && /tmp/overlap_trigger
#include <cstdio>
#include <cstdint>
#include <vector>
#include <algorithm>
#include <cuda_runtime.h>

struct Seg { size_t off, n; };  // in uint4

__device__ __forceinline__ uint64_t now_ns() {
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
__device__ __forceinline__ void spin_ns(uint64_t ns) {
    const uint64_t t0 = now_ns();
    while (now_ns() - t0 < ns) {}
}

// this block's share of a segment: [lo, hi) in uint4
__device__ __forceinline__ void share(Seg s, size_t& lo, size_t& hi) {
    lo = s.off + s.n * blockIdx.x / gridDim.x;
    hi = s.off + s.n * (blockIdx.x + 1) / gridDim.x;
}

#define U 4
// xor of uint4s lo + threadIdx.x, + blockDim.x, ... below hi, U loads in flight
__device__ __forceinline__ unsigned read_range(const uint4* w, size_t lo, size_t hi, unsigned acc) {
    const size_t nt = blockDim.x;
    size_t i = lo + threadIdx.x;
    for (; i + (U - 1) * nt < hi; i += U * nt) {
        uint4 v[U];
#pragma unroll
        for (int u = 0; u < U; u++) v[u] = __ldcs(w + i + u * nt);
#pragma unroll
        for (int u = 0; u < U; u++) acc ^= v[u].x ^ v[u].w;
    }
    for (; i < hi; i += nt) {
        const uint4 v = __ldcs(w + i);
        acc ^= v.x ^ v.w;
    }
    return acc;
}

// launches: a segment (the first U loads of each thread before the wait, as the engine's products).
// TF: launch_dependents before the wait (the next kernel may schedule its blocks while this one still
// waits on its own predecessor), else after it (main's await_inputs before this probe's session).
template <bool TF>
__device__ __forceinline__ void await_order() {
    if (TF) {
        asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
        asm volatile("griddepcontrol.wait;" ::: "memory");
    } else {
        asm volatile("griddepcontrol.wait;" ::: "memory");
        asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    }
}
template <bool TF>
__global__ void one_segment(const uint4* w, Seg s, unsigned* sink) {
    size_t lo, hi;
    share(s, lo, hi);
    const size_t nt = blockDim.x;
    uint4 v[U];
    bool pre = lo + threadIdx.x + (U - 1) * nt < hi;
    if (pre) {
#pragma unroll
        for (int u = 0; u < U; u++) v[u] = __ldcs(w + lo + threadIdx.x + u * nt);
    }
    await_order<TF>();
    unsigned acc = 0;
    if (pre) {
#pragma unroll
        for (int u = 0; u < U; u++) acc ^= v[u].x ^ v[u].w;
        lo += U * nt;
    }
    acc = read_range(w, lo, hi, acc);
    if (acc == 0x12345678u) sink[0] = acc;
}

// every thread spins, so that the block holds its SM's threads for the op's length
template <bool TF>
__global__ void latency_op(uint64_t ns) {
    await_order<TF>();
    spin_ns(ns);
}

int main() {
    int sms;
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
    cudaDeviceProp prop;
    cudaGetDeviceProperties(&prop, 0);
    const double MB = 1 << 20;
    std::vector<double> layer = {1.5, 6, 32, 1.5, 33.5, 32, 1.5, 4, 16, 8, 48, 24};
    std::vector<Seg> segs;
    size_t off = 0;
    auto add = [&](double mb) {
        size_t n = (size_t)(mb * MB) / 16;
        segs.push_back({off, n});
        off += n;
    };
    for (int l = 0; l < 4; l++)
        for (double m : layer) add(m);
    add(1.5);
    add(1060);
    const size_t total = off * 16;
    printf("%s, sms %d, segments %zu, %.3f GB\n", prop.name, sms, segs.size(), total / 1e9);
    uint4* w;
    unsigned* sink;
    Seg* dsegs;
    cudaMalloc(&w, total);
    cudaMalloc(&sink, 64);
    cudaMalloc(&dsegs, segs.size() * sizeof(Seg));
    cudaMemset(w, 3, total);
    cudaMemcpy(dsegs, segs.data(), segs.size() * sizeof(Seg), cudaMemcpyHostToDevice);
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    cudaStream_t st;
    cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking);
    auto med = [](std::vector<float> v) {
        std::sort(v.begin(), v.end());
        return v[v.size() / 2];
    };
    auto timed = [&](auto&& body) {
        std::vector<float> t;
        for (int r = 0; r < 15; r++) {
            cudaEventRecord(e0, st);
            body();
            cudaEventRecord(e1, st);
            cudaEventSynchronize(e1);
            float ms;
            cudaEventElapsedTime(&ms, e0, e1);
            if (r >= 3) t.push_back(ms);
        }
        return med(t);
    };
    {
        void *a, *b;
        cudaMalloc(&a, 1 << 30);
        cudaMalloc(&b, 1 << 30);
        const float ms = timed([&] { cudaMemcpyAsync(b, a, 1 << 30, cudaMemcpyDeviceToDevice, st); });
        printf("copy 1 GiB: %.3f ms, %.0f GB/s (read + write)\n", ms, 2.0 * (1 << 30) / (ms * 1e-3) / 1e9);
        cudaFree(a);
        cudaFree(b);
    }
    const int threads = 512;
    for (int T_us : {0, 2, 4}) {
        const uint64_t ns = (uint64_t)T_us * 1000;
        // launches with PDL, captured in a graph
        for (int tf = 0; tf < 2; tf++)
        for (int op_wide = 0; op_wide < (T_us ? 2 : 1); op_wide++) {
            cudaGraph_t g;
            cudaGraphExec_t ge;
            cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal);
            cudaLaunchAttribute at[1];
            at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
            at[0].val.programmaticStreamSerializationAllowed = 1;
            for (auto s : segs) {
                cudaLaunchConfig_t c = {};
                c.gridDim = dim3(4 * sms);
                c.blockDim = dim3(threads);
                c.stream = st;
                c.attrs = at;
                c.numAttrs = 1;
                if (tf) cudaLaunchKernelEx(&c, one_segment<true>, (const uint4*)w, s, sink);
                else cudaLaunchKernelEx(&c, one_segment<false>, (const uint4*)w, s, sink);
                if (T_us) {
                    c.gridDim = dim3(op_wide ? sms : 1);
                    c.blockDim = dim3(op_wide ? 1024 : 32);
                    if (tf) cudaLaunchKernelEx(&c, latency_op<true>, ns);
                    else cudaLaunchKernelEx(&c, latency_op<false>, ns);
                }
            }
            cudaStreamEndCapture(st, &g);
            cudaGraphInstantiate(&ge, g, 0);
            const float lm = timed([&] { cudaGraphLaunch(ge, st); });
            printf("T %d us  launches (graph, PDL, %s), op %-6s %.3f ms  %.0f GB/s\n", T_us,
                   tf ? "trigger first" : "wait first", op_wide ? "wide" : "narrow", lm, total / (lm * 1e-3) / 1e9);
            cudaGraphExecDestroy(ge);
            cudaGraphDestroy(g);
        }
    }
    printf("err %s\n", cudaGetErrorString(cudaGetLastError()));
}
