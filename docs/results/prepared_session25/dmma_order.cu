// dmma_order.cu: what one FP64 tensor-core instruction (mma.sync m8n8k4 f64,
// DMMA on sm_90) computes, bit for bit, against candidate orders of f64
// fused multiply-adds. A probe for the prefill's products (perf.md "The gap",
// item 6), not engine code. Build and run on the GPU machine:
//   nvcc -O2 -arch=sm_90 -o /tmp/dmma_order dmma_order.cu && /tmp/dmma_order <out.bin>
// For each case: A 8x4 (row-major), B 4x8 (B[k][n]), C 8x8 in, D 8x8 out. The
// host checks D against
//   seq:     fma(a3,b3, fma(a2,b2, fma(a1,b1, fma(a0,b0,c))))
//   rev:     the same from k = 3 down to 0
//   c_last:  fma chain from zero over k = 0..3, then + c
//   pairs:   (fma(a1,b1,a0*b0) + fma(a3,b3,a2*b2)) + c
// and writes every case to out.bin for an exact (one rounding) check in
// dmma_exact.py.
#include <cstdio>
#include <cstdlib>
#include <cstdint>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

__global__ void dmma(const double* a, const double* b, const double* c, double* d, int cases) {
    const int warp = (blockIdx.x * blockDim.x + threadIdx.x) >> 5, lane = threadIdx.x & 31;
    if (warp >= cases) return;
    const double* A = a + warp * 32;
    const double* B = b + warp * 32;
    const double* C = c + warp * 64;
    double* D = d + warp * 64;
    // Fragments (PTX ISA, mma.m8n8k4 .f64): A row = lane/4, k = lane%4; B k = lane%4,
    // col = lane/4; C/D row = lane/4, cols 2*(lane%4) + {0, 1}.
    const int g = lane >> 2, t = lane & 3;
    double fa = A[g * 4 + t], fb = B[t * 8 + g];
    double c0 = C[g * 8 + 2 * t], c1 = C[g * 8 + 2 * t + 1], d0, d1;
    asm volatile("mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64 {%0,%1}, {%2}, {%3}, {%4,%5};"
                 : "=d"(d0), "=d"(d1)
                 : "d"(fa), "d"(fb), "d"(c0), "d"(c1));
    D[g * 8 + 2 * t] = d0;
    D[g * 8 + 2 * t + 1] = d1;
}

static double draw(std::mt19937_64& r, int kind) {
    std::uniform_real_distribution<double> u(1.0, 2.0);
    std::uniform_int_distribution<int> e(-12, 12), s(0, 1);
    double v = std::ldexp(u(r), e(r)) * (s(r) ? -1.0 : 1.0);
    if (kind == 1) {  // short mantissas (a FP8-like weight): 4 significant bits
        int64_t m = (int64_t)std::ldexp(std::fabs(v) / std::ldexp(1.0, std::ilogb(v)), 3);
        v = std::copysign(std::ldexp((double)m, std::ilogb(v) - 3), v);
    }
    if (kind == 2) {  // f32 values widened (an activation)
        v = (double)(float)v;
    }
    return v;
}

int main(int argc, char** argv) {
    const int cases = 20000;
    std::mt19937_64 r(12345);
    std::vector<double> a(cases * 32), b(cases * 32), c(cases * 64), d(cases * 64);
    for (int i = 0; i < cases; i++) {
        // regimes: 0 full 53-bit operands, 1 FP8-like A times f32 B (exact products),
        // 2 cancellation (C near -sum), 3 subnormal A (the decode's FP4 codes are
        // subnormal doubles), 4 zero C (a chunk's partial from zero)
        const int regime = i % 5;
        for (int j = 0; j < 32; j++) {
            a[i * 32 + j] = draw(r, regime == 1 ? 1 : 0);
            b[i * 32 + j] = draw(r, regime == 1 ? 2 : 0);
            if (regime == 3) a[i * 32 + j] = std::ldexp(a[i * 32 + j], -1030);
            if (regime == 3) b[i * 32 + j] = std::ldexp(b[i * 32 + j], 1000);
        }
        for (int j = 0; j < 64; j++) {
            double v = draw(r, 0);
            if (regime == 4) v = 0.0;
            if (regime == 2) {
                const int m = j / 8, n = j % 8;
                double s = 0;
                for (int k = 0; k < 4; k++) s += a[i * 32 + m * 4 + k] * b[i * 32 + k * 8 + n];
                v = -s * (1.0 + std::ldexp(draw(r, 0), -40));
            }
            c[i * 64 + j] = v;
        }
    }
    double *da, *db, *dc, *dd;
    cudaMalloc(&da, a.size() * 8); cudaMalloc(&db, b.size() * 8);
    cudaMalloc(&dc, c.size() * 8); cudaMalloc(&dd, d.size() * 8);
    cudaMemcpy(da, a.data(), a.size() * 8, cudaMemcpyHostToDevice);
    cudaMemcpy(db, b.data(), b.size() * 8, cudaMemcpyHostToDevice);
    cudaMemcpy(dc, c.data(), c.size() * 8, cudaMemcpyHostToDevice);
    dmma<<<(cases * 32 + 255) / 256, 256>>>(da, db, dc, dd, cases);
    cudaError_t err = cudaDeviceSynchronize();
    if (err != cudaSuccess) { printf("cuda error %s\n", cudaGetErrorString(err)); return 1; }
    cudaMemcpy(d.data(), dd, d.size() * 8, cudaMemcpyDeviceToHost);
    const char* names[4] = {"seq", "rev", "c_last", "pairs"};
    long miss[5][4] = {{0}}, total[5] = {0};
    for (int i = 0; i < cases; i++) {
        const int regime = i % 5;
        for (int m = 0; m < 8; m++)
            for (int n = 0; n < 8; n++) {
                const double* A = &a[i * 32 + m * 4];
                double p[4];
                for (int k = 0; k < 4; k++) p[k] = b[i * 32 + k * 8 + n];
                const double cv = c[i * 64 + m * 8 + n], dv = d[i * 64 + m * 8 + n];
                double seq = cv, rev = cv, z = 0.0;
                for (int k = 0; k < 4; k++) seq = std::fma(A[k], p[k], seq);
                for (int k = 3; k >= 0; k--) rev = std::fma(A[k], p[k], rev);
                for (int k = 0; k < 4; k++) z = std::fma(A[k], p[k], z);
                const double clast = z + cv;
                const double pairs = (std::fma(A[1], p[1], A[0] * p[0]) + std::fma(A[3], p[3], A[2] * p[2])) + cv;
                const double model[4] = {seq, rev, clast, pairs};
                total[regime]++;
                for (int q = 0; q < 4; q++)
                    if (std::memcmp(&model[q], &dv, 8) != 0) miss[regime][q]++;
            }
    }
    const char* rn[5] = {"full 53-bit", "fp8 x f32", "cancel", "subnormal a", "zero c"};
    for (int g = 0; g < 5; g++) {
        printf("regime %-12s outputs %ld:", rn[g], total[g]);
        for (int q = 0; q < 4; q++) printf("  %s differs %ld", names[q], miss[g][q]);
        printf("\n");
    }
    if (argc > 1) {
        FILE* f = fopen(argv[1], "wb");
        fwrite(a.data(), 8, a.size(), f); fwrite(b.data(), 8, b.size(), f);
        fwrite(c.data(), 8, c.size(), f); fwrite(d.data(), 8, d.size(), f);
        fclose(f);
    }
    return 0;
}
