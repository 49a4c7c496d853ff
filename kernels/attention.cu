// attention.cu — sparse attention with a sink over one shared K=V head
// (CPU twin: cpu/ops/attention.rs, key gathering in cpu/forward.rs).
//
// Query t (position p = t0 + t), head h attends to the window rows at
// positions max(0, p-window+1) ..= p — from the ring (positions < t0, slot
// pos % ring_rows) or from this chunk's rows `local` — then to compressed
// entries: mode 1 (HCA) every entry s < (p+1)/ratio, mode 2 (CSA) the
// indexer's list sel[t, 0..topk) (-1 = none). Mode 3 is a drafter's block
// (DSpark, CPU twin in crates/dspark/src/model.rs): every query sees the
// ring's rows at positions max(0, t0-window) .. t0-1 and then all `topk`
// rows of this chunk, whatever its own position. Logits q.k * scale join a
// per-head sink logit; out = sum p_j k_j / denominator. All in f64.
// grid (n, heads), block 128, dynamic smem: max_keys doubles.

__device__ __forceinline__ const float* key_row(int j, int nwin, int first, int t0, const float* ring, int ring_rows,
                                                const float* local, const float* entries, const int* sel, int t,
                                                int topk, int mode, int hd) {
    if (j < nwin) {
        const int pos = first + j;
        return pos < t0 ? ring + (size_t)(pos % ring_rows) * hd : local + (size_t)(pos - t0) * hd;
    }
    if (mode == 3) return local + (size_t)(j - nwin) * hd;
    const int s = mode == 1 ? j - nwin : sel[(size_t)t * topk + (j - nwin)];
    return s >= 0 ? entries + (size_t)s * hd : 0;
}

extern "C" __global__ void attention_rows(const float* __restrict__ q, const float* __restrict__ ring, int ring_rows,
                                          const float* __restrict__ local, const float* __restrict__ entries,
                                          const int* __restrict__ sel, int topk, int mode, int ratio, int t0,
                                          int window, const float* __restrict__ sinks, int hd, double scale,
                                          float* __restrict__ out) {
    extern __shared__ double logits[];
    __shared__ double red[32];
    const int t = blockIdx.x, h = blockIdx.y, heads = gridDim.y;
    const int p = t0 + t;
    const float* qrow = q + ((size_t)t * heads + h) * hd;
    const int first = mode == 3 ? max(0, t0 - window) : max(0, p - window + 1);
    const int nwin = mode == 3 ? t0 - first : p - first + 1;
    int nent = 0;
    if (mode == 1) nent = (p + 1) / ratio;
    else if (mode == 2 || mode == 3) nent = topk;
    const int nk = nwin + nent;
    const int warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5, lane = threadIdx.x & 31;
    for (int j = warp; j < nk; j += nwarps) {
        const float* k = key_row(j, nwin, first, t0, ring, ring_rows, local, entries, sel, t, topk, mode, hd);
        const double acc = k ? warp_dot(qrow, k, hd) : 0.0;
        if (lane == 0) logits[j] = k ? acc * scale : -INFINITY;
    }
    __syncthreads();
    double mx = (double)sinks[h];
    for (int j = threadIdx.x; j < nk; j += blockDim.x) mx = fmax(mx, logits[j]);
    mx = block_max_d(mx, red);
    double part = 0.0;
    for (int j = threadIdx.x; j < nk; j += blockDim.x) {
        const double e = logits[j] == -INFINITY ? 0.0 : exp(logits[j] - mx);
        logits[j] = e;
        part += e;
    }
    const double denom = exp((double)sinks[h] - mx) + block_sum(part, red);
    float* orow = out + ((size_t)t * heads + h) * hd;
    for (int i = threadIdx.x; i < hd; i += blockDim.x) {
        double acc = 0.0;
        for (int j = 0; j < nk; j++) {
            const double pj = logits[j];
            if (pj == 0.0) continue;
            const float* k = key_row(j, nwin, first, t0, ring, ring_rows, local, entries, sel, t, topk, mode, hd);
            acc += pj * (double)k[i];
        }
        orow[i] = (float)(acc / denom);
    }
}

// Append the last rows of a chunk to a ring: rows t with t >= n - ring_rows
// go to slot (t0 + t) % ring_rows. grid (min(n, ring_rows)), block 256.
extern "C" __global__ void ring_append(float* __restrict__ ring, int ring_rows, const float* __restrict__ rows,
                                       int width, int n, int t0) {
    const int skip = n > ring_rows ? n - ring_rows : 0;
    const int t = skip + blockIdx.x;
    const float* src = rows + (size_t)t * width;
    float* dst = ring + (size_t)((t0 + t) % ring_rows) * width;
    for (int i = threadIdx.x; i < width; i += blockDim.x) dst[i] = src[i];
}
