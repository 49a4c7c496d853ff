// rope.cu — interleaved partial RoPE on the last 2*npairs dims of each head
// (CPU twin: cpu/ops/rope.rs). Angles in f32 (p * inv_freq), cos/sin in
// double of that angle, the rotation in f32 without contraction, exactly as
// the CPU twin. `inverse` rotates back (the attention output).
//
// x holds n tokens x heads rows of `width`; token t sits at position pos0 + t.
// grid (n * heads), block 32.
extern "C" __global__ void rope_rows(float* __restrict__ x, int heads, int width, const float* __restrict__ inv_freq,
                                     int npairs, int pos0, int inverse) {
    await_inputs();
    const int row = blockIdx.x;
    rope_pairs(x + (size_t)row * width + (width - 2 * npairs), (float)(pos0 + row / heads), inv_freq, 0, npairs,
               inverse);
}
