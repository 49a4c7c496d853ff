// What would a persistent decode kernel gain on streaming alone? The step's weight bytes as a list of
// segments (flash-shape products of 4 layers, then the head), read with 16-byte loads and no arithmetic:
//   launches: one kernel a segment, back to back (as the engine's products, no PDL), in a CUDA graph;
//   persistent: one kernel, a grid barrier after every segment;
//   persistent+ahead: the same, each thread's first loads of the next segment issued before the barrier;
//   stream: one kernel, no barriers (the ceiling).
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

#define U 4
__device__ __forceinline__ unsigned read_slice(const uint4* w, Seg s, unsigned acc, uint4 (&pre)[U], bool have_pre) {
    const size_t tid = blockIdx.x * (size_t)blockDim.x + threadIdx.x, nt = (size_t)gridDim.x * blockDim.x;
    size_t i = tid;
    if (have_pre) {
#pragma unroll
        for (int u = 0; u < U; u++) acc ^= pre[u].x ^ pre[u].w;
        i += U * nt;
    }
    for (; i + (U - 1) * nt < s.n; i += U * nt) {
        uint4 v[U];
#pragma unroll
        for (int u = 0; u < U; u++) v[u] = __ldcs(w + s.off + i + u * nt);
#pragma unroll
        for (int u = 0; u < U; u++) acc ^= v[u].x ^ v[u].w;
    }
    for (; i < s.n; i += nt) { uint4 v = __ldcs(w + s.off + i); acc ^= v.x ^ v.w; }
    return acc;
}

__global__ void one_segment(const uint4* w, Seg s, unsigned* sink) {
    uint4 pre[U];
    unsigned acc = read_slice(w, s, 0, pre, false);
    if (acc == 0x12345678u) sink[0] = acc;
}

__global__ void persistent(const uint4* w, const Seg* segs, int nseg, int mode, unsigned* sink) {
    unsigned acc = 0;
    uint4 pre[U];
    bool have = false;
    const size_t tid = blockIdx.x * (size_t)blockDim.x + threadIdx.x, nt = (size_t)gridDim.x * blockDim.x;
    for (int k = 0; k < nseg; k++) {
        acc = read_slice(w, segs[k], acc, pre, have);
        have = false;
        if (mode == 2 && k + 1 < nseg && segs[k + 1].n >= U * nt) {
#pragma unroll
            for (int u = 0; u < U; u++) pre[u] = __ldcs(w + segs[k + 1].off + tid + u * nt);
            have = true;
        }
        if (mode >= 1) grid_barrier(gridDim.x);
    }
    if (acc == 0x12345678u) sink[0] = acc;
}

int main() {
    int sms; cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
    const double MB = 1 << 20;
    // a layer's products in MB (hc fn, q_kv pair, wq_b, hc fn, wo_a, wo_b, hc fn, router, shared gate/up,
    // shared down, experts gate/up, experts down), 4 layers, then hc_head's fn and the head
    std::vector<double> layer = {1.5, 6, 32, 1.5, 33.5, 32, 1.5, 4, 16, 8, 48, 24};
    std::vector<Seg> segs;
    size_t off = 0;
    auto add = [&](double mb) { size_t n = (size_t)(mb * MB) / 16; segs.push_back({off, n}); off += n; };
    for (int l = 0; l < 4; l++) for (double m : layer) add(m);
    add(1.5); add(1060);
    const size_t total = off * 16;
    printf("sms %d segments %zu bytes %.3f GB\n", sms, segs.size(), total / 1e9);
    uint4* w; unsigned* sink; Seg* dsegs;
    cudaMalloc(&w, total); cudaMalloc(&sink, 64); cudaMalloc(&dsegs, segs.size() * sizeof(Seg));
    cudaMemset(w, 3, total);
    cudaMemcpy(dsegs, segs.data(), segs.size() * sizeof(Seg), cudaMemcpyHostToDevice);
    cudaEvent_t e0, e1; cudaEventCreate(&e0); cudaEventCreate(&e1);
    cudaStream_t st; cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking);
    auto med = [](std::vector<float> v) { std::sort(v.begin(), v.end()); return v[v.size() / 2]; };
    // copy ceiling: 1 GiB device to device
    {
        void *a, *b; cudaMalloc(&a, 1 << 30); cudaMalloc(&b, 1 << 30);
        std::vector<float> t;
        for (int r = 0; r < 10; r++) {
            cudaEventRecord(e0, st); cudaMemcpyAsync(b, a, 1 << 30, cudaMemcpyDeviceToDevice, st); cudaEventRecord(e1, st);
            cudaEventSynchronize(e1); float ms; cudaEventElapsedTime(&ms, e0, e1); if (r >= 2) t.push_back(ms);
        }
        printf("copy 1 GiB: %.3f ms, %.0f GB/s (read + write)\n", med(t), 2.0 * (1 << 30) / (med(t) * 1e-3) / 1e9);
        cudaFree(a); cudaFree(b);
    }
    for (int bps : {1, 2, 4}) {
        const int blocks = sms * bps, threads = 512;
        int fit = 0;
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&fit, persistent, threads, 0);
        if (fit < bps) { printf("blocks %d/SM do not fit (%d)\n", bps, fit); continue; }
        // launches, captured in a graph
        cudaGraph_t g; cudaGraphExec_t ge;
        cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal);
        for (auto s : segs) one_segment<<<blocks, threads, 0, st>>>(w, s, sink);
        cudaStreamEndCapture(st, &g);
        cudaGraphInstantiate(&ge, g, 0);
        std::vector<float> t[4];
        for (int r = 0; r < 15; r++) {
            for (int m = 0; m < 4; m++) {
                cudaEventRecord(e0, st);
                if (m == 0) cudaGraphLaunch(ge, st);
                else persistent<<<blocks, threads, 0, st>>>(w, dsegs, (int)segs.size(), m == 3 ? 0 : m, sink);
                cudaEventRecord(e1, st);
                cudaEventSynchronize(e1);
                float ms; cudaEventElapsedTime(&ms, e0, e1);
                if (r >= 3) t[m].push_back(ms);
            }
        }
        const char* names[4] = {"launches (graph)", "persistent, barriers", "persistent, barriers, ahead", "stream, no barriers"};
        for (int m = 0; m < 4; m++)
            printf("blocks %d/SM x %d thr  %-30s %.3f ms  %.0f GB/s\n", bps, threads, names[m], med(t[m]),
                   total / (med(t[m]) * 1e-3) / 1e9);
    }
    printf("err %s\n", cudaGetErrorString(cudaGetLastError()));
}
