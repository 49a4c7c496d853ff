//! The GPU roofline benchmark: ceilings measured in the run (a large device
//! copy, a large bf16 matrix product through cuBLAS), batch-1 decode at
//! several contexts and a long prefill, each against the bytes and FLOPs it
//! must move and do, with a per-op breakdown.

use anyhow::{anyhow, Result};
use cudarc::cublas::{CudaBlas, Gemm, GemmConfig};
use cudarc::driver::{CudaContext, CudaStream};
use kvstate::{CapacityRule, ClassSnapshot, Snapshot, StateStore};
use serde::Serialize;
use std::ops::Range;
use std::sync::Arc;

use trunk::config::AttnKind;
use trunk::cpu::ops::indexer::selects_all;
use trunk::cpu::Logits;
use trunk::gpu::Dsv4Gpu;
use trunk::weights::matrix::Matrix;
use trunk::weights::Dsv4Weights;

#[derive(Clone, Debug, Serialize)]
pub struct Ceilings {
    /// bytes read + written per second by a large device-to-device copy
    /// (on the first stage's device)
    pub copy_gbps: f64,
    /// the same copy on each stage's device, in stage order
    pub copy_gbps_by_stage: Vec<f64>,
    /// cuBLAS bf16 GEMM 8192^3 on random data
    pub bf16_tflops: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct Case {
    pub name: String,
    pub tokens: usize,
    pub context: usize,
    pub median_ms: f64,
    pub p10_ms: f64,
    pub p90_ms: f64,
    pub bytes: f64,
    pub flops: f64,
    pub gbps: f64,
    pub tflops: f64,
    pub fraction_of_copy: f64,
    pub fraction_of_matrix: f64,
    pub breakdown_ms: Vec<(String, f64)>,
}

fn median_p(mut v: Vec<f64>) -> (f64, f64, f64) {
    v.sort_by(f64::total_cmp);
    let q = |f: f64| v[((v.len() - 1) as f64 * f).round() as usize];
    (q(0.5), q(0.1), q(0.9))
}

fn timed(ctx: &Arc<CudaContext>, stream: &Arc<CudaStream>, mut f: impl FnMut() -> Result<()>) -> Result<f64> {
    let timing = Some(cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT);
    let a = ctx.new_event(timing).map_err(|e| anyhow!("{e}"))?;
    let b = ctx.new_event(timing).map_err(|e| anyhow!("{e}"))?;
    a.record(stream).map_err(|e| anyhow!("{e}"))?;
    f()?;
    b.record(stream).map_err(|e| anyhow!("{e}"))?;
    b.synchronize().map_err(|e| anyhow!("{e}"))?;
    Ok(a.elapsed_ms(&b).map_err(|e| anyhow!("{e}"))? as f64)
}

/// Median milliseconds of `f` over `reps` timed calls that follow two
/// warm-up calls.
fn median_after_warmup(
    ctx: &Arc<CudaContext>,
    stream: &Arc<CudaStream>,
    reps: usize,
    mut f: impl FnMut() -> Result<()>,
) -> Result<f64> {
    let times = (0..reps + 2).map(|_| timed(ctx, stream, &mut f)).collect::<Result<Vec<f64>>>()?;
    Ok(median_p(times[2..].to_vec()).0)
}

/// Bytes read + written per second by a 2 GiB device-to-device copy.
fn copy_rate(ctx: &Arc<CudaContext>) -> Result<f64> {
    let stream = ctx.new_stream().map_err(|e| anyhow!("{e}"))?;
    let n: usize = 1 << 31; // 2 GiB each way
    let src = stream.alloc_zeros::<u8>(n).map_err(|e| anyhow!("{e}"))?;
    let mut dst = stream.alloc_zeros::<u8>(n).map_err(|e| anyhow!("{e}"))?;
    let copy_ms =
        median_after_warmup(ctx, &stream, 10, || stream.memcpy_dtod(&src, &mut dst).map_err(|e| anyhow!("{e}")))?;
    Ok(2.0 * n as f64 / (copy_ms * 1e-3) / 1e9)
}

/// Measure the copy ceiling on every stage's device and the matrix ceiling
/// on the first.
pub fn ceilings(gpu: &Dsv4Gpu) -> Result<Ceilings> {
    let copy_gbps_by_stage = gpu.stage_contexts().iter().map(copy_rate).collect::<Result<Vec<f64>>>()?;
    let ctx = gpu.context().clone();
    let stream = ctx.new_stream().map_err(|e| anyhow!("{e}"))?;
    // bf16 GEMM on random data
    let m = 8192usize;
    let host: Vec<half::bf16> =
        (0..m * m).map(|i| half::bf16::from_f32((((i * 2654435761) % 2001) as f32 - 1000.0) / 1000.0)).collect();
    let a = stream.clone_htod(&host).map_err(|e| anyhow!("{e}"))?;
    let b = stream.clone_htod(&host).map_err(|e| anyhow!("{e}"))?;
    let mut c = stream.alloc_zeros::<half::bf16>(m * m).map_err(|e| anyhow!("{e}"))?;
    let blas = CudaBlas::new(stream.clone()).map_err(|e| anyhow!("cuBLAS: {e}"))?;
    let cfg = GemmConfig {
        transa: cudarc::cublas::sys::cublasOperation_t::CUBLAS_OP_N,
        transb: cudarc::cublas::sys::cublasOperation_t::CUBLAS_OP_N,
        m: m as i32,
        n: m as i32,
        k: m as i32,
        alpha: half::bf16::ONE,
        lda: m as i32,
        ldb: m as i32,
        beta: half::bf16::ZERO,
        ldc: m as i32,
    };
    // SAFETY: all three buffers hold m*m bf16.
    let gemm_ms = median_after_warmup(&ctx, &stream, 10, || {
        unsafe { blas.gemm(cfg, &a, &b, &mut c) }.map_err(|e| anyhow!("{e}"))
    })?;
    Ok(Ceilings {
        copy_gbps: copy_gbps_by_stage[0],
        copy_gbps_by_stage,
        bf16_tflops: 2.0 * (m as f64).powi(3) / (gemm_ms * 1e-3) / 1e12,
    })
}

/// One stage boundary's crossing: the residual streams of `tokens` tokens
/// (`tokens x hc x hidden` f32) copied from stage `i`'s device to stage
/// `i+1`'s by the same peer copy the forward issues, median of 20, per
/// boundary in milliseconds.
pub fn boundary_cost(gpu: &Dsv4Gpu, tokens: usize) -> Result<Vec<f64>> {
    let c = &gpu.config;
    let bytes = tokens * c.hc_mult * c.hidden_size * 4;
    let ctxs = gpu.stage_contexts();
    let mut out = Vec::new();
    for w in ctxs.windows(2) {
        let (s0, s1) = (w[0].new_stream().map_err(|e| anyhow!("{e}"))?, w[1].new_stream().map_err(|e| anyhow!("{e}"))?);
        let src = s0.alloc_zeros::<u8>(bytes).map_err(|e| anyhow!("{e}"))?;
        let dst = s1.alloc_zeros::<u8>(bytes).map_err(|e| anyhow!("{e}"))?;
        s0.synchronize().map_err(|e| anyhow!("{e}"))?;
        let (sp, dp) = {
            use cudarc::driver::DevicePtr;
            (src.device_ptr(&s0).0, dst.device_ptr(&s1).0)
        };
        out.push(median_after_warmup(&w[1], &s1, 20, || {
            w[1].bind_to_thread().map_err(|e| anyhow!("{e}"))?;
            // SAFETY: both buffers hold `bytes`; the copy is ordered on s1 and timed there.
            unsafe {
                cudarc::driver::result::memcpy_peer_async(w[1].cu_ctx(), dp, w[0].cu_ctx(), sp, bytes, s1.cu_stream())
            }
            .map_err(|e| anyhow!("{e}"))
        })?);
    }
    Ok(out)
}

fn mat(m: &Matrix) -> (f64, f64) {
    (m.stored_bytes() as f64, (m.rows * m.cols) as f64)
}

/// Bytes and FLOPs of one token at position `p` through the whole model,
/// decoded alone (its chunk ends at `p + 1`).
/// Returns (weight bytes, per-token weight MACs, cache bytes, attention FLOPs).
pub fn token_cost(w: &Dsv4Weights, p: usize) -> (f64, f64, f64, f64) {
    token_cost_of(w, p, p + 1, 0..w.layers.len(), true)
}

/// `token_cost` for the layers `layers`, with the LM head when `head`, of
/// a token in a chunk that ends at position `end` (the forward runs the
/// indexer for a whole chunk or skips it for a whole chunk).
pub fn token_cost_of(w: &Dsv4Weights, p: usize, end: usize, layers: Range<usize>, head: bool) -> (f64, f64, f64, f64) {
    let c = &w.config;
    let (mut cache, mut attn) = (0.0, 0.0);
    let mut mats: Vec<&Matrix> = if head { vec![&w.head] } else { vec![] };
    let mut extra_bytes = 0.0;
    let mut extra_macs = 0.0;
    // the indexer's queries, weights and scores only where it does not
    // select every visible entry (cpu/ops/indexer.rs `selects_all`: the GPU
    // forward skips them for the whole chunk there); its compressor always
    // runs
    let indexes = !selects_all(end / c.csa_ratio, c.index_topk);
    for (l, lw) in w.layers.iter().enumerate().filter(|(l, _)| layers.contains(l)) {
        let a = &lw.attn;
        mats.extend([&a.wq_a, &a.wq_b, &a.wkv, &a.wo_a, &a.wo_b, &lw.ffn.gate]);
        if let Some(cw) = &a.compressor {
            mats.extend([&cw.wkv, &cw.wgate]);
        }
        if let Some(iw) = &a.indexer {
            mats.extend([&iw.compressor.wkv, &iw.compressor.wgate]);
            if indexes {
                mats.extend([&iw.wq_b, &iw.weights_proj]);
            }
        }
        mats.extend([&lw.ffn.shared.w1, &lw.ffn.shared.w2, &lw.ffn.shared.w3]);
        let e = &lw.ffn.experts[0];
        for _ in 0..c.num_experts_per_tok {
            mats.extend([&e.w1, &e.w2, &e.w3]);
        }
        let hcb = (lw.hc_attn.fn_.len() + lw.hc_ffn.fn_.len()) as f64;
        extra_bytes += 4.0 * hcb;
        extra_macs += hcb;
        let (hd, nh) = (c.head_dim as f64, c.num_attention_heads as f64);
        let win = (p + 1).min(c.sliding_window) as f64;
        let keys = win
            + match c.layer_types[l] {
                AttnKind::Window => 0.0,
                AttnKind::Csa => ((p + 1) / c.csa_ratio).min(c.index_topk) as f64,
                AttnKind::Hca => ((p + 1) / c.hca_ratio) as f64,
            };
        cache += 4.0 * keys * hd;
        attn += 4.0 * nh * hd * keys;
        if c.layer_types[l] == AttnKind::Csa && indexes {
            let vis = ((p + 1) / c.csa_ratio) as f64;
            let di = c.index_head_dim as f64;
            cache += 4.0 * vis * di;
            attn += 2.0 * c.index_n_heads as f64 * di * vis;
        }
    }
    let (mut bytes, mut macs) = (extra_bytes, extra_macs);
    for m in mats {
        let (b, k) = mat(m);
        bytes += b;
        macs += k;
    }
    (bytes, macs, cache, attn)
}

/// A state at position `ctx` with every live row filled with finite values.
fn filled_state(gpu: &Dsv4Gpu, ctx: usize, capacity: usize, chunk: usize) -> Result<trunk::gpu::GpuState> {
    let mut st = gpu.alloc_decode_state_for_transient(capacity, chunk)?;
    let layout = st.layout().clone();
    let mut classes = Vec::new();
    for (i, spec) in layout.classes.iter().enumerate() {
        let written = match spec.rule {
            CapacityRule::Grows { positions_per_row } => (ctx / positions_per_row) as u64,
            CapacityRule::Ring { .. } => ctx as u64,
            CapacityRule::Fixed { rows } => rows as u64,
        };
        let live = match spec.rule {
            CapacityRule::Ring { rows } => (written as usize).min(rows),
            _ => written as usize,
        };
        let mut bytes = Vec::with_capacity(live * spec.row_bytes());
        for k in 0..live * spec.row_width {
            let v = (((k * 2654435761 + i * 97) % 2001) as f32 - 1000.0) / 1000.0;
            bytes.extend_from_slice(&v.to_le_bytes());
        }
        classes.push(ClassSnapshot { written, live_rows: live, bytes });
    }
    st.kv.restore_bulk(&Snapshot { layout, positions: ctx, classes }).map_err(|e| anyhow!("{e}"))?;
    Ok(st)
}

/// Seconds that reading the weights once and the cache rows of the tokens
/// at positions `ps` takes at the copy ceilings, stage by stage (stage `i`
/// holds `stages[i]`'s layers at `gbps[i]`, the last one the head; the
/// stages run one after the other), and the bytes.
pub fn copy_bound_of(w: &Dsv4Weights, stages: &[Range<usize>], gbps: &[f64], ps: Range<usize>) -> (f64, f64) {
    let (mut secs, mut bytes) = (0.0, 0.0);
    for (i, r) in stages.iter().enumerate() {
        let head = i + 1 == stages.len();
        let (wb, _, _, _) = token_cost_of(w, ps.start, ps.end, r.clone(), head);
        let cache: f64 = ps.clone().map(|p| token_cost_of(w, p, ps.end, r.clone(), head).2).sum();
        secs += (wb + cache) / (gbps[i] * 1e9);
        bytes += wb + cache;
    }
    (secs, bytes)
}

fn copy_bound(gpu: &Dsv4Gpu, ceil: &Ceilings, ps: Range<usize>) -> (f64, f64) {
    copy_bound_of(&gpu.weights, &gpu.stage_layers(), &ceil.copy_gbps_by_stage, ps)
}

/// Batch-1 decode at context `ctx`: `steps` timed steps after warm-up.
pub fn decode_case(gpu: &Dsv4Gpu, ceil: &Ceilings, ctx: usize, steps: usize) -> Result<Case> {
    let mut st = filled_state(gpu, ctx, ctx + steps + 8, 1)?;
    let ctx_ = gpu.context().clone();
    let stream = gpu.first_stream();
    let mut tok = 7u32;
    for _ in 0..3 {
        tok = gpu.decode_step_greedy(&mut st, tok)?;
    }
    let mut times = Vec::new();
    for _ in 0..steps {
        let mut t = tok;
        times.push(timed(&ctx_, &stream, || {
            t = gpu.decode_step_greedy(&mut st, t)?;
            Ok(())
        })?);
        tok = t;
    }
    gpu.profile.set(true);
    for _ in 0..3 {
        tok = gpu.decode_step_greedy(&mut st, tok)?;
    }
    let breakdown: Vec<(String, f64)> = gpu.profile.take()?.into_iter().map(|(l, ms)| (l, ms / 3.0)).collect();
    gpu.profile.set(false);
    let (_, macs, _, attn) = token_cost(&gpu.weights, ctx + 3);
    let (bound_secs, bytes) = copy_bound(gpu, ceil, ctx + 3..ctx + 4);
    let flops = 2.0 * macs + attn;
    let c = Case::of(format!("decode b1 ctx {ctx}"), 1, ctx, times, bytes, flops, bound_secs, ceil);
    Ok(Case { breakdown_ms: breakdown, ..c })
}

impl Case {
    /// A case from its step times (ms; median, p10, p90 taken), the bytes and
    /// FLOPs it must move and do, and the seconds those bytes take at the
    /// copy ceiling; no breakdown.
    #[allow(clippy::too_many_arguments)]
    fn of(
        name: String,
        tokens: usize,
        context: usize,
        times_ms: Vec<f64>,
        bytes: f64,
        flops: f64,
        copy_bound_secs: f64,
        ceil: &Ceilings,
    ) -> Case {
        let (median_ms, p10_ms, p90_ms) = median_p(times_ms);
        let secs = median_ms * 1e-3;
        Case {
            name,
            tokens,
            context,
            median_ms,
            p10_ms,
            p90_ms,
            bytes,
            flops,
            gbps: bytes / secs / 1e9,
            tflops: flops / secs / 1e12,
            fraction_of_copy: copy_bound_secs / secs,
            fraction_of_matrix: flops / secs / 1e12 / ceil.bf16_tflops,
            breakdown_ms: Vec::new(),
        }
    }
}

/// Prefill of `n` tokens from an empty state in one chunk.
pub fn prefill_case(gpu: &Dsv4Gpu, ceil: &Ceilings, n: usize, reps: usize) -> Result<Case> {
    let ctx_ = gpu.context().clone();
    let stream = gpu.first_stream();
    let tokens: Vec<u32> = (0..n).map(|i| ((i * 7919) % (gpu.config.vocab_size - 2)) as u32 + 2).collect();
    let mut times = Vec::new();
    let mut breakdown = Vec::new();
    for r in 0..reps + 1 {
        let mut st = gpu.alloc_decode_state_for_transient(n, n)?;
        if r == reps {
            gpu.profile.set(true);
            gpu.prefill_with_cache(&mut st, &tokens, Logits::Last)?;
            breakdown = gpu.profile.take()?;
            gpu.profile.set(false);
        } else {
            times.push(timed(&ctx_, &stream, || gpu.prefill_with_cache(&mut st, &tokens, Logits::Last).map(|_| ()))?);
        }
    }
    let cost = |p: usize| token_cost_of(&gpu.weights, p, n, 0..gpu.weights.layers.len(), true);
    let (_, macs, _, _) = cost(0);
    let attn: f64 = (0..n).map(|p| cost(p).3).sum();
    let flops = 2.0 * macs * n as f64 + attn;
    let (bound_secs, bytes) = copy_bound(gpu, ceil, 0..n);
    let c = Case::of(format!("prefill {n}"), n, 0, times, bytes, flops, bound_secs, ceil);
    Ok(Case { breakdown_ms: breakdown, ..c })
}

#[cfg(test)]
mod tests {
    use super::*;
    use trunk::weights::ExpertArm;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-12 * a.abs().max(b.abs())
    }

    #[test]
    fn copy_bound_reads_weights_once_and_charges_each_stage_at_its_rate() {
        let m = trunk::model::embedded_model(ExpertArm::Native).unwrap();
        let w = &m.weights;
        let n = w.layers.len();
        assert!(n >= 2, "the embedded model has {n} layers");
        // one stage: the weights once, every position's cache rows
        let whole = [Range { start: 0, end: n }];
        let (secs, bytes) = copy_bound_of(w, &whole, &[100.0], 0..8);
        let all = || 0..n;
        let (wb, _, _, _) = token_cost_of(w, 0, 8, all(), true);
        let cache: f64 = (0..8).map(|p| token_cost_of(w, p, 8, all(), true).2).sum();
        assert!(cache > 0.0);
        assert!(close(bytes, wb + cache), "{bytes} vs {}", wb + cache);
        assert!(close(secs, bytes / 100e9));
        // split in two at equal rates: the same bytes and seconds
        let split = [0..n / 2, n / 2..n];
        let (s2, b2) = copy_bound_of(w, &split, &[100.0, 100.0], 0..8);
        assert!(close(b2, bytes) && close(s2, secs), "{b2} {s2} vs {bytes} {secs}");
        // a slower second device: its stage (with the head) at its own rate
        let (s_slow, _) = copy_bound_of(w, &split, &[100.0, 50.0], 0..8);
        let stage = |r: Range<usize>, head: bool| {
            token_cost_of(w, 0, 8, r.clone(), head).0
                + (0..8).map(|p| token_cost_of(w, p, 8, r.clone(), head).2).sum::<f64>()
        };
        let want = stage(0..n / 2, false) / 100e9 + stage(n / 2..n, true) / 50e9;
        assert!(close(s_slow, want), "{s_slow} vs {want}");
        assert!(s_slow > secs);
    }

    #[test]
    fn the_indexer_is_charged_only_where_it_does_not_select_every_entry() {
        let m = trunk::model::embedded_model(ExpertArm::Native).unwrap();
        let w = &m.weights;
        let c = &w.config;
        let csa: Vec<usize> = (0..w.layers.len()).filter(|&l| c.layer_types[l] == AttnKind::Csa).collect();
        assert!(!csa.is_empty(), "the embedded model has no CSA layer");
        let query: f64 = csa
            .iter()
            .map(|&l| {
                let iw = w.layers[l].attn.indexer.as_ref().unwrap();
                (iw.wq_b.stored_bytes() + iw.weights_proj.stored_bytes()) as f64
            })
            .sum();
        assert!(query > 0.0);
        // the last chunk end whose token sees at most index_topk entries, and the first past it
        let last_all = (c.index_topk + 1) * c.csa_ratio - 1;
        let cost = |p: usize, end: usize| token_cost_of(w, p, end, 0..w.layers.len(), true);
        let (below, above) = (cost(last_all - 1, last_all), cost(last_all, last_all + 1));
        assert!(close(above.0 - below.0, query), "{} vs {query}", above.0 - below.0);
        // the indexer's cache rows and scores are charged with it
        assert!(above.2 > below.2 && above.3 > below.3);
        // a token early in a long chunk is charged as its chunk runs: with the indexer
        assert!(close(cost(0, last_all + 1).0, above.0));
        assert!(close(token_cost(w, 0).0, below.0));
    }
}
