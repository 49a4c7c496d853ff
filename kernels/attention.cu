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
// grid (n, heads), block 128..512, dynamic smem: max_keys doubles and
// max_keys key addresses.

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

#define ATT_QM 16  // query values per lane: head_dim <= 32 * ATT_QM (checked by the host)

extern "C" __global__ void __launch_bounds__(512) attention_rows(const float* __restrict__ q, const float* __restrict__ ring, int ring_rows,
                                          const float* __restrict__ local, const float* __restrict__ entries,
                                          const int* __restrict__ sel, int topk, int mode, int ratio, int t0,
                                          int window, const float* __restrict__ sinks, int hd, double scale,
                                          float* __restrict__ out) {
    extern __shared__ double logits[];  // nk logits, then nk key row addresses (16 bytes a key)
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
    const float** keys = (const float**)(logits + nk);
    for (int j = threadIdx.x; j < nk; j += blockDim.x)
        keys[j] = key_row(j, nwin, first, t0, ring, ring_rows, local, entries, sel, t, topk, mode, hd);
    // the query in registers, lane-strided (lane l holds elements l, l + 32, ...)
    double qd[ATT_QM];
    #pragma unroll
    for (int m = 0; m < ATT_QM; m++) qd[m] = lane + 32 * m < hd ? (double)qrow[lane + 32 * m] : 0.0;
    __syncthreads();
    // logits, two keys per warp at a time (both rows' loads issued before
    // any product); each a lane-strided f64 sum and the fixed butterfly
    for (int j = warp; j < nk; j += 2 * nwarps) {
        const int j2 = j + nwarps;
        const float* k1 = keys[j];
        const float* k2 = j2 < nk ? keys[j2] : 0;
        float a[ATT_QM], b[ATT_QM];
        #pragma unroll
        for (int m = 0; m < ATT_QM; m++) {
            const int i = lane + 32 * m;
            a[m] = k1 && i < hd ? k1[i] : 0.0f;
            b[m] = k2 && i < hd ? k2[i] : 0.0f;
        }
        double s1 = 0.0, s2 = 0.0;
        #pragma unroll
        for (int m = 0; m < ATT_QM; m++) {
            if (lane + 32 * m < hd) {
                s1 = fma(qd[m], (double)a[m], s1);
                s2 = fma(qd[m], (double)b[m], s2);
            }
        }
        #pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            s1 += __shfl_xor_sync(0xffffffffu, s1, o);
            s2 += __shfl_xor_sync(0xffffffffu, s2, o);
        }
        if (lane == 0) {
            logits[j] = k1 ? s1 * scale : -INFINITY;
            if (j2 < nk) logits[j2] = k2 ? s2 * scale : -INFINITY;
        }
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
    // out[i] = sum_j p_j k_j[i] in key order (zero weights skipped); eight
    // keys' values loaded before they are summed
    float* orow = out + ((size_t)t * heads + h) * hd;
    for (int i = threadIdx.x; i < hd; i += blockDim.x) {
        double acc = 0.0;
        for (int j0 = 0; j0 < nk; j0 += 8) {
            float kv[8];
            #pragma unroll
            for (int u = 0; u < 8; u++) {
                const int j = j0 + u;
                kv[u] = j < nk && logits[j] != 0.0 ? keys[j][i] : 0.0f;
            }
            #pragma unroll
            for (int u = 0; u < 8; u++) {
                const int j = j0 + u;
                if (j < nk) {
                    const double pj = logits[j];
                    if (pj != 0.0) acc += pj * (double)kv[u];
                }
            }
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
