// Can a persistent decode kernel hide the step's non-product work under the weights' streaming?
// (perf.md "The gap", items 16-17: the products alone stream at ~73% of the copy rate, the other
// kernels cost ~0.17 ms on the path, and a persistent kernel with grid barriers and register-deep
// read-ahead streamed no better than launches.) This probe adds what that one did not have: latency
// work between the products, and read-ahead as deep as shared memory.
//
// The step's weight bytes as 50 segments (persist.cu's: flash-shape products of 4 layers, then hc_head's
// fn and the head), read with 16-byte loads and no arithmetic, each block a contiguous share. After every
// segment, a latency op of T us that one block spins through (standing in for the norms, attention, hc
// sites and routing between products, ~0.17 ms a step over ~50 boundaries: T ~3.4 us), on which the next
// segment depends. Modes:
//   launches: a kernel a segment (4 blocks of 512 an SM) and a spin kernel after it, in a CUDA graph with
//     programmatic dependent launch (the engine's way: each kernel's first loads before
//     griddepcontrol.wait, so the next segment's blocks load while the op runs, where they fit beside
//     it); the op on one block of 32 threads (every SM free for the next segment) or on a block of 1024
//     threads an SM (as the engine's 512-thread attention and hc blocks, room for 2 segment blocks);
//   barriers: one kernel, 1 block an SM; after a segment a grid barrier, block 0 spins, a grid barrier;
//   ahead S: the same, each block's first S KiB of its share of the next segment copied into shared
//     memory (cp.async) before the first barrier, so that they stream while the latency op runs.
// Expected: launches ~ stream + 50 (T + boundary); ahead approaches max(stream, ...) as S grows if the
// persistent form can hide the latency work. Build and run on the device:
//   nvcc -O2 -arch=sm_90 -o /tmp/overlap docs/results/prepared_session47/overlap.cu && /tmp/overlap
#include <cstdio>
#include <cstdint>
#include <vector>
#include <algorithm>
#include <cuda_runtime.h>

struct Seg { size_t off, n; };  // in uint4
__device__ unsigned bar_count = 0, bar_gen = 0;

__device__ __forceinline__ void grid_barrier(unsigned nblocks) {
    __syncthreads();
    if (threadIdx.x == 0) {
        volatile unsigned* gen = &bar_gen;
        const unsigned g = *gen;
        __threadfence();
        if (atomicAdd(&bar_count, 1u) == nblocks - 1) {
            bar_count = 0;
            __threadfence();
            atomicAdd(&bar_gen, 1u);
        } else {
            while (*gen == g) {}
        }
        __threadfence();
    }
    __syncthreads();
}

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

__device__ __forceinline__ void copy16(void* dst, const void* src) {
    const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(d), "l"(src) : "memory");
}

// launches: a segment (the first U loads of each thread before the wait, as the engine's products)
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
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
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
__global__ void latency_op(uint64_t ns) {
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    spin_ns(ns);
}

// persistent: ahead_u4 = 0 (barriers) or the uint4s of the next share copied ahead
extern __shared__ uint4 ring[];
__global__ void persistent(const uint4* w, const Seg* segs, int nseg, uint64_t ns, int ahead_u4, unsigned* sink) {
    unsigned acc = 0;
    int have = 0;  // uint4s of this segment's share already in ring
    for (int k = 0; k < nseg; k++) {
        size_t lo, hi;
        share(segs[k], lo, hi);
        if (have) {
            asm volatile("cp.async.wait_all;" ::: "memory");
            for (int i = threadIdx.x; i < have; i += blockDim.x) acc ^= ring[i].x ^ ring[i].w;  // its own copies
            lo += have;
        }
        acc = read_range(w, lo, hi, acc);
        have = 0;
        if (ahead_u4 && k + 1 < nseg) {
            size_t nlo, nhi;
            share(segs[k + 1], nlo, nhi);
            have = (int)min((size_t)ahead_u4, nhi - nlo);
            for (int i = threadIdx.x; i < have; i += blockDim.x) copy16(ring + i, w + nlo + i);
            asm volatile("cp.async.commit_group;" ::: "memory");
        }
        grid_barrier(gridDim.x);
        if (blockIdx.x == 0 && threadIdx.x == 0) spin_ns(ns);
        grid_barrier(gridDim.x);
    }
    if (acc == 0x12345678u) sink[0] = acc;
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
    const int max_smem = 200 << 10;
    cudaFuncSetAttribute(persistent, cudaFuncAttributeMaxDynamicSharedMemorySize, max_smem);
    int fit = 0;
    cudaOccupancyMaxActiveBlocksPerMultiprocessor(&fit, persistent, threads, max_smem);
    printf("persistent: %d block(s) an SM at %d KiB of shared memory\n", fit, max_smem >> 10);
    for (int T_us : {0, 2, 4}) {
        const uint64_t ns = (uint64_t)T_us * 1000;
        // launches with PDL, captured in a graph
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
                cudaLaunchKernelEx(&c, one_segment, (const uint4*)w, s, sink);
                if (T_us) {
                    c.gridDim = dim3(op_wide ? sms : 1);
                    c.blockDim = dim3(op_wide ? 1024 : 32);
                    cudaLaunchKernelEx(&c, latency_op, ns);
                }
            }
            cudaStreamEndCapture(st, &g);
            cudaGraphInstantiate(&ge, g, 0);
            const float lm = timed([&] { cudaGraphLaunch(ge, st); });
            printf("T %d us  launches (graph, PDL), op %-6s %.3f ms  %.0f GB/s\n", T_us,
                   op_wide ? "wide" : "narrow", lm, total / (lm * 1e-3) / 1e9);
            cudaGraphExecDestroy(ge);
            cudaGraphDestroy(g);
        }
        for (int kib : {0, 32, 96, 192}) {
            const int u4 = (kib << 10) / 16;
            const float pm = timed([&] {
                persistent<<<sms, threads, kib << 10, st>>>(w, dsegs, (int)segs.size(), ns, u4, sink);
            });
            printf("T %d us  persistent, ahead %3d KiB        %.3f ms  %.0f GB/s\n", T_us, kib, pm,
                   total / (pm * 1e-3) / 1e9);
        }
    }
    printf("err %s\n", cudaGetErrorString(cudaGetLastError()));
}
