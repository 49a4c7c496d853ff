// Does reading a product's weights into L2 while a DRAM-idle kernel runs make the product faster?
// busy: every block spins `spin` cycles; before spinning it asks for its slice of W (mode 1: bulk
// prefetch by one thread, 64 KB pieces; 2: prefetch.global.L2 per line by every thread; 3: loads).
// stream: reads W whole with 16-byte loads (the product stand-in). L2 flushed before each trial.
#include <cstdio>
#include <cstdint>
#include <vector>
#include <algorithm>
#include <cuda_runtime.h>

__global__ void busy(long long spin, const char* w, size_t bytes, int mode, unsigned* sink) {
    size_t slice = (bytes / gridDim.x + 127) & ~(size_t)127;
    size_t b0 = slice * blockIdx.x, b1 = min(bytes, b0 + slice);
    unsigned acc = 0;
    if (mode == 1 && threadIdx.x == 0) {
        for (size_t b = b0; b < b1; b += 65536) {
            unsigned n = (unsigned)min((size_t)65536, b1 - b);
            asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(w + b), "r"(n) : "memory");
        }
    } else if (mode == 2) {
        for (size_t b = b0 + threadIdx.x * 128; b < b1; b += blockDim.x * 128)
            asm volatile("prefetch.global.L2 [%0];" ::"l"(w + b));
    } else if (mode == 3) {
        for (size_t b = b0 + threadIdx.x * 16; b < b1; b += blockDim.x * 16) {
            uint4 v = __ldcg((const uint4*)(w + b));
            acc ^= v.x ^ v.w;
        }
    }
    long long t0 = clock64();
    while (clock64() - t0 < spin) {}
    if (acc == 0x12345678u) sink[0] = acc;
}

__global__ void stream(const uint4* w, size_t n, unsigned* sink) {
    unsigned acc = 0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        uint4 v = __ldg(w + i);
        acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    if (acc == 0x12345678u) sink[1] = acc;
}

int main() {
    int sms; cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
    int l2; cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, 0);
    int clk; cudaDeviceGetAttribute(&clk, cudaDevAttrClockRate, 0);
    printf("sms %d l2 %d MB clock %d MHz\n", sms, l2 >> 20, clk / 1000);
    size_t flush_bytes = 512ull << 20, wmax = 96ull << 20;
    char *flush, *w; unsigned* sink;
    cudaMalloc(&flush, flush_bytes); cudaMalloc(&w, wmax); cudaMalloc(&sink, 64);
    cudaMemset(flush, 1, flush_bytes); cudaMemset(w, 2, wmax);
    cudaEvent_t e0, e1, e2; cudaEventCreate(&e0); cudaEventCreate(&e1); cudaEventCreate(&e2);
    long long spin_us[] = {0, 10, 20};
    size_t sizes[] = {8ull << 20, 16ull << 20, 32ull << 20, 48ull << 20, 64ull << 20};
    for (int busy_blocks : {sms, 2 * sms}) for (long long su : spin_us) for (size_t S : sizes) for (int mode = 0; mode < 4; mode++) {
        std::vector<float> tb, ts, tt;
        for (int r = 0; r < 25; r++) {
            stream<<<sms * 8, 512>>>((const uint4*)flush, flush_bytes / 16, sink);
            cudaEventRecord(e0);
            busy<<<busy_blocks, 256>>>(su * (clk / 1000), w, S, mode, sink);
            cudaEventRecord(e1);
            stream<<<sms * 8, 512>>>((const uint4*)w, S / 16, sink);
            cudaEventRecord(e2);
            cudaEventSynchronize(e2);
            float a, b; cudaEventElapsedTime(&a, e0, e1); cudaEventElapsedTime(&b, e1, e2);
            if (r >= 5) { tb.push_back(a * 1000); ts.push_back(b * 1000); tt.push_back((a + b) * 1000); }
        }
        auto med = [](std::vector<float> v) { std::sort(v.begin(), v.end()); return v[v.size() / 2]; };
        printf("blocks %3d spin %2lld us  W %2zu MB  mode %d: busy %6.1f us  stream %6.1f us (%5.2f TB/s)  total %6.1f us\n",
               busy_blocks, su, S >> 20, mode, med(tb), med(ts), S / (med(ts) * 1e-6) / 1e12, med(tt));
    }
    cudaError_t e = cudaGetLastError();
    printf("err %s\n", cudaGetErrorString(e));
}
