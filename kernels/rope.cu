// rope.cu — interleaved partial RoPE on the last 2*npairs dims of each head
// (CPU twin: cpu/ops/rope.rs). Angles in f32 (p * inv_freq), cos/sin in
// double of that angle, the rotation in f32 without contraction, exactly as
// the CPU twin. `inverse` rotates back (the attention output).
//
// x holds n tokens x heads rows of `width`; token t sits at position pos0 + t.
// grid (n * heads), block 32.
extern "C" __global__ void rope_rows(float* __restrict__ x, int heads, int width, const float* __restrict__ inv_freq,
                                     int npairs, int pos0, int inverse) {
    const int row = blockIdx.x;
    const int t = row / heads;
    const float p = (float)(pos0 + t);
    float* r = x + (size_t)row * width + (width - 2 * npairs);
    for (int i = threadIdx.x; i < npairs; i += blockDim.x) {
        const float ang = __fmul_rn(p, inv_freq[i]);
        const float c = (float)cos((double)ang);
        float s = (float)sin((double)ang);
        if (inverse) s = -s;
        rotate_pair(&r[2 * i], &r[2 * i + 1], c, s);
    }
}
