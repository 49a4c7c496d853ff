// dmma_rate.cu: multiply-adds a second of the H200's FP64 tensor cores
// (mma.sync m8n8k4 f64: 256 a warp instruction) against its FP64 pipes (DFMA:
// 32 a warp instruction), each with several independent chains a warp and
// every SM full. A probe for perf.md "The gap", item 6, not engine code:
//   nvcc -O2 -arch=sm_90 -o /tmp/dmma_rate dmma_rate.cu && /tmp/dmma_rate
#include <cstdio>
#define CHAINS 8
__global__ void tc(double* out, int iters) {
    double a = 1.0 + threadIdx.x * 1e-9, b = 1.0 - threadIdx.x * 1e-9;
    double c[CHAINS][2];
    for (int i = 0; i < CHAINS; i++) c[i][0] = c[i][1] = i;
    for (int it = 0; it < iters; it++) {
#pragma unroll
        for (int i = 0; i < CHAINS; i++)
            asm volatile("mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64 {%0,%1}, {%2}, {%3}, {%0,%1};"
                         : "+d"(c[i][0]), "+d"(c[i][1]) : "d"(a), "d"(b));
    }
    double s = 0;
    for (int i = 0; i < CHAINS; i++) s += c[i][0] + c[i][1];
    out[blockIdx.x * blockDim.x + threadIdx.x] = s;
}
__global__ void fp(double* out, int iters) {
    double a = 1.0 + threadIdx.x * 1e-9, b = 1.0 - threadIdx.x * 1e-9;
    double c[CHAINS];
    for (int i = 0; i < CHAINS; i++) c[i] = i;
    for (int it = 0; it < iters; it++) {
#pragma unroll
        for (int i = 0; i < CHAINS; i++) asm volatile("fma.rn.f64 %0, %1, %2, %0;" : "+d"(c[i]) : "d"(a), "d"(b));
    }
    double s = 0;
    for (int i = 0; i < CHAINS; i++) s += c[i];
    out[blockIdx.x * blockDim.x + threadIdx.x] = s;
}
int main() {
    int sms;
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
    double* out;
    cudaMalloc(&out, sizeof(double) * sms * 8 * 1024);
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0); cudaEventCreate(&e1);
    const int iters = 4096;
    for (int warps = 4; warps <= 32; warps *= 2) {
        const int blocks = sms * 2, threads = warps * 16;  // two blocks an SM: `warps` warps an SM
        float ms_tc, ms_fp;
        tc<<<blocks, threads>>>(out, 16);
        cudaEventRecord(e0); tc<<<blocks, threads>>>(out, iters); cudaEventRecord(e1);
        cudaEventSynchronize(e1); cudaEventElapsedTime(&ms_tc, e0, e1);
        fp<<<blocks, threads>>>(out, 16);
        cudaEventRecord(e0); fp<<<blocks, threads>>>(out, iters); cudaEventRecord(e1);
        cudaEventSynchronize(e1); cudaEventElapsedTime(&ms_fp, e0, e1);
        const double w = (double)blocks * threads / 32;
        const double tc_fma = w * iters * CHAINS * 256 / (ms_tc * 1e-3);
        const double fp_fma = w * iters * CHAINS * 32 / (ms_fp * 1e-3);
        printf("warps/SM %2d: DMMA %.2f T fma/s (%.3f ms), DFMA %.2f T fma/s (%.3f ms)\n", warps, tc_fma / 1e12, ms_tc,
               fp_fma / 1e12, ms_fp);
    }
    printf("%s\n", cudaGetErrorString(cudaDeviceSynchronize()));
    return 0;
}
