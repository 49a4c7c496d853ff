// dmma_shapes.cu: sm_90's larger FP64 mma shapes (m16n8k4, m16n8k8,
// m16n8k16) against a sequential chain of f64 fmas over k from C, bit for bit,
// and their rates, beside m8n8k4 (dmma_order.cu, dmma_rate.cu). A probe for
// perf.md "The gap", item 6, not engine code:
//   nvcc -O2 -arch=sm_90 -o /tmp/dmma_shapes dmma_shapes.cu && /tmp/dmma_shapes
#include <cstdio>
#include <cstring>
#include <cmath>
#include <random>
#include <vector>

// Fragments (PTX ISA, mma .f64 m16n8kK): g = lane / 4, t = lane % 4;
// A element i: row g + 8 * (i % 2), col t + 4 * (i / 2); B element i: k = t + 4 * i, col g;
// C/D element i: row g + 8 * (i / 2), col 2 * t + i % 2.
template <int K>
__device__ void mma(double (&d)[4], const double (&a)[K / 2], const double (&b)[K / 4], const double (&c)[4]);
template <>
__device__ void mma<4>(double (&d)[4], const double (&a)[2], const double (&b)[1], const double (&c)[4]) {
    asm volatile("mma.sync.aligned.m16n8k4.row.col.f64.f64.f64.f64 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%7,%8,%9,%10};"
                 : "=d"(d[0]), "=d"(d[1]), "=d"(d[2]), "=d"(d[3])
                 : "d"(a[0]), "d"(a[1]), "d"(b[0]), "d"(c[0]), "d"(c[1]), "d"(c[2]), "d"(c[3]));
}
template <>
__device__ void mma<8>(double (&d)[4], const double (&a)[4], const double (&b)[2], const double (&c)[4]) {
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f64.f64.f64.f64 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%11,%12,%13};"
                 : "=d"(d[0]), "=d"(d[1]), "=d"(d[2]), "=d"(d[3])
                 : "d"(a[0]), "d"(a[1]), "d"(a[2]), "d"(a[3]), "d"(b[0]), "d"(b[1]), "d"(c[0]), "d"(c[1]), "d"(c[2]),
                   "d"(c[3]));
}
template <>
__device__ void mma<16>(double (&d)[4], const double (&a)[8], const double (&b)[4], const double (&c)[4]) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f64.f64.f64.f64 {%0,%1,%2,%3}, "
                 "{%4,%5,%6,%7,%8,%9,%10,%11}, {%12,%13,%14,%15}, {%16,%17,%18,%19};"
                 : "=d"(d[0]), "=d"(d[1]), "=d"(d[2]), "=d"(d[3])
                 : "d"(a[0]), "d"(a[1]), "d"(a[2]), "d"(a[3]), "d"(a[4]), "d"(a[5]), "d"(a[6]), "d"(a[7]), "d"(b[0]),
                   "d"(b[1]), "d"(b[2]), "d"(b[3]), "d"(c[0]), "d"(c[1]), "d"(c[2]), "d"(c[3]));
}

template <int K>
__global__ void one(const double* A, const double* B, const double* C, double* D, int cases) {
    const int w = (blockIdx.x * blockDim.x + threadIdx.x) >> 5, lane = threadIdx.x & 31;
    if (w >= cases) return;
    const int g = lane >> 2, t = lane & 3;
    A += (size_t)w * 16 * K; B += (size_t)w * K * 8; C += (size_t)w * 128; D += (size_t)w * 128;
    double a[K / 2], b[K / 4], c[4], d[4];
    for (int i = 0; i < K / 2; i++) a[i] = A[(g + 8 * (i % 2)) * K + t + 4 * (i / 2)];
    for (int i = 0; i < K / 4; i++) b[i] = B[(t + 4 * i) * 8 + g];
    for (int i = 0; i < 4; i++) c[i] = C[(g + 8 * (i / 2)) * 8 + 2 * t + i % 2];
    mma<K>(d, a, b, c);
    for (int i = 0; i < 4; i++) D[(g + 8 * (i / 2)) * 8 + 2 * t + i % 2] = d[i];
}

#define CHAINS 8
template <int K>
__global__ void rate(double* out, int iters) {
    double a[K / 2], b[K / 4], c[CHAINS][4];
    for (int i = 0; i < K / 2; i++) a[i] = 1.0 + (threadIdx.x + i) * 1e-9;
    for (int i = 0; i < K / 4; i++) b[i] = 1.0 - (threadIdx.x + i) * 1e-9;
    for (int j = 0; j < CHAINS; j++)
        for (int i = 0; i < 4; i++) c[j][i] = j + i;
    for (int it = 0; it < iters; it++) {
#pragma unroll
        for (int j = 0; j < CHAINS; j++) mma<K>(c[j], a, b, c[j]);
    }
    double s = 0;
    for (int j = 0; j < CHAINS; j++)
        for (int i = 0; i < 4; i++) s += c[j][i];
    out[blockIdx.x * blockDim.x + threadIdx.x] = s;
}

static double draw(std::mt19937_64& r, int kind) {
    std::uniform_real_distribution<double> u(1.0, 2.0);
    std::uniform_int_distribution<int> e(-12, 12), s(0, 1), small(-8, 8);
    if (kind == 3) return (double)small(r);  // small integers: every order exact (checks the fragment map)
    double v = std::ldexp(u(r), e(r)) * (s(r) ? -1.0 : 1.0);
    if (kind == 1) v = (double)(float)v;
    return v;
}

template <int K>
void test(const char* name) {
    const int cases = 8000;
    std::mt19937_64 r(777 + K);
    std::vector<double> A(cases * 16 * K), B(cases * K * 8), C(cases * 128), D(cases * 128);
    for (int i = 0; i < cases; i++) {
        const int regime = i % 3;  // 0 full 53-bit, 1 f32 values, 2 small integers
        const int kind = regime == 2 ? 3 : regime;
        for (int j = 0; j < 16 * K; j++) A[i * 16 * K + j] = draw(r, kind);
        for (int j = 0; j < K * 8; j++) B[i * K * 8 + j] = draw(r, kind);
        for (int j = 0; j < 128; j++) C[i * 128 + j] = draw(r, kind);
    }
    double *a, *b, *c, *d;
    cudaMalloc(&a, A.size() * 8); cudaMalloc(&b, B.size() * 8); cudaMalloc(&c, C.size() * 8); cudaMalloc(&d, D.size() * 8);
    cudaMemcpy(a, A.data(), A.size() * 8, cudaMemcpyHostToDevice);
    cudaMemcpy(b, B.data(), B.size() * 8, cudaMemcpyHostToDevice);
    cudaMemcpy(c, C.data(), C.size() * 8, cudaMemcpyHostToDevice);
    one<K><<<cases * 32 / 256, 256>>>(a, b, c, d, cases);
    cudaError_t err = cudaDeviceSynchronize();
    if (err != cudaSuccess) { printf("%s: %s\n", name, cudaGetErrorString(err)); return; }
    cudaMemcpy(D.data(), d, D.size() * 8, cudaMemcpyDeviceToHost);
    long miss[3][3] = {{0}}, tot[3] = {0};
    for (int i = 0; i < cases; i++)
        for (int m = 0; m < 16; m++)
            for (int n = 0; n < 8; n++) {
                const double* a_ = &A[i * 16 * K + m * K];
                const double cv = C[i * 128 + m * 8 + n], dv = D[i * 128 + m * 8 + n];
                double seq = cv, halves = cv, h2 = 0;
                for (int k = 0; k < K; k++) seq = std::fma(a_[k], B[i * K * 8 + k * 8 + n], seq);
                // in groups of 4 from C (m8n8k4 steps), and groups of 4 summed apart then added
                for (int k0 = 0; k0 < K; k0 += 4) {
                    double z = 0;
                    for (int k = k0; k < k0 + 4; k++) z = std::fma(a_[k], B[i * K * 8 + k * 8 + n], z);
                    h2 += z;
                }
                halves = h2 + cv;
                const double model[3] = {seq, halves, dv};
                tot[i % 3]++;
                for (int q = 0; q < 2; q++)
                    if (std::memcmp(&model[q], &dv, 8) != 0) miss[i % 3][q]++;
            }
    const char* rn[3] = {"full 53-bit", "f32 values", "small ints"};
    for (int g = 0; g < 3; g++)
        printf("%s %-12s outputs %ld: seq differs %ld, fours-then-c differs %ld\n", name, rn[g], tot[g], miss[g][0],
               miss[g][1]);
    cudaFree(a); cudaFree(b); cudaFree(c); cudaFree(d);
}

template <int K>
void bench(const char* name, int sms) {
    double* out;
    cudaMalloc(&out, sizeof(double) * sms * 2 * 1024);
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0); cudaEventCreate(&e1);
    const int iters = 2048;
    for (int warps = 4; warps <= 16; warps *= 2) {
        const int blocks = sms * 2, threads = warps * 16;
        float ms;
        rate<K><<<blocks, threads>>>(out, 16);
        cudaEventRecord(e0); rate<K><<<blocks, threads>>>(out, iters); cudaEventRecord(e1);
        cudaEventSynchronize(e1); cudaEventElapsedTime(&ms, e0, e1);
        const double w = (double)blocks * threads / 32;
        printf("%s warps/SM %2d: %.2f T fma/s (%.3f ms)\n", name, warps, w * iters * CHAINS * 128.0 * K / (ms * 1e-3) / 1e12, ms);
    }
    cudaFree(out);
}

int main() {
    int sms;
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
    test<4>("m16n8k4 "); test<8>("m16n8k8 "); test<16>("m16n8k16");
    bench<4>("m16n8k4 ", sms); bench<8>("m16n8k8 ", sms); bench<16>("m16n8k16", sms);
    printf("%s\n", cudaGetErrorString(cudaDeviceSynchronize()));
    return 0;
}
