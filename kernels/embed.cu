// embed.cu — residual streams from token embeddings: x[t, j, :] = E[tok[t], :]
// for every hyper-connection stream j.   (CPU twin: cpu/forward.rs, embedding)
// grid (n, hc), block 256; E.cols % 8 == 0. A thread's 8 values go out as
// two float4s where x is 16-byte aligned (it is at every width then).
extern "C" __global__ void embed_rows(Mat e, const int* __restrict__ tokens, float* __restrict__ x) {
    await_inputs();
    const int t = blockIdx.x, j = blockIdx.y, hc = gridDim.y;
    const int d = e.cols;
    float* out = x + ((size_t)t * hc + j) * d;
    const bool vec = (((size_t)x) & 15) == 0;
    float w[8];
    for (int k = threadIdx.x * 8; k < d; k += blockDim.x * 8) {
        load8(e, tokens[t], k, w);
        if (vec) {
            *(float4*)(out + k) = make_float4(w[0], w[1], w[2], w[3]);
            *(float4*)(out + k + 4) = make_float4(w[4], w[5], w[6], w[7]);
        } else {
            #pragma unroll
            for (int i = 0; i < 8; i++) out[k + i] = w[i];
        }
    }
}
