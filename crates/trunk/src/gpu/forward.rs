//! `Dsv4Gpu`: the DSV4 forward on one or more devices. Layers are split
//! into contiguous stages (`--devices 0,1`; `0,0` puts two stages on one
//! device so the split path runs on one GPU); the residual streams cross a
//! stage boundary by a device copy. Every op is a kernel in kernels/ with a
//! CPU twin in cpu/ops; all reductions have a fixed order independent of
//! the chunk width, so chunked prefill and decode give identical bits.

use std::ops::Range;
use std::sync::Arc;

use anyhow::{bail, Result};
use kvstate::StateStore;

use super::device::{Buf, Gpu};
use super::graph::{StepGraphs, StepKey};
use super::options::{Fault, GpuOptions, MoeArm, ProductSums};
use super::profile::ProfileCell;
use super::sites::post_plan;
use super::state::GpuState;
use super::weights::{device_bytes, DevHc, DevLayer, DevMat};
use crate::config::Dsv4Config;
use crate::cpu::ops::rope::Rope;
use crate::cpu::{Logits, Variant};
use crate::launch;
use crate::state::Dsv4StateLayout;
use crate::weights::Dsv4Weights;

/// Residual streams a forward copies out after its layers (all, or `layers`).
struct Capture<'a> {
    out: &'a mut Vec<Vec<f32>>,
    layers: Option<&'a [usize]>,
}

/// Where a forward's token ids come from.
#[derive(Clone, Copy)]
enum TokenSource<'a> {
    /// Host values, written to the first stage's scratch (and each later
    /// stage's) before the embedding.
    Host(&'a [i32]),
    /// One id at a device address (a captured step's input word).
    Device(u64),
}

impl TokenSource<'_> {
    fn len(&self) -> usize {
        match self {
            TokenSource::Host(t) => t.len(),
            TokenSource::Device(_) => 1,
        }
    }
}

/// What a forward does with the state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Pass {
    /// Consume the tokens: write their cache rows, advance the positions.
    Commit,
    /// A drafter's block (`forward_block`): window attention sees the ring
    /// and the whole block; nothing is written to the state.
    Block,
}

pub(super) struct Stage {
    pub(super) gpu: Arc<Gpu>,
    pub(super) layers: Range<usize>,
    pub(super) dev: Vec<DevLayer>,
    pub(super) embed: Option<DevMat>,
    pub(super) head: Option<DevMat>,
    pub(super) norm: Option<Buf<f32>>,
    pub(super) hc_head: Option<DevHc>,
    pub(super) rope_main: Buf<f32>,
    pub(super) rope_compress: Buf<f32>,
    pub(super) weight_bytes: usize,
}

pub struct Dsv4Gpu {
    pub config: Dsv4Config,
    pub weights: Arc<Dsv4Weights>,
    pub opts: GpuOptions,
    pub state_layout: Dsv4StateLayout,
    pub(super) stages: Vec<Stage>,
    pub(super) layer_stage: Vec<usize>,
    /// Per stage boundary (stage i to i+1): whether the activations cross
    /// by a direct peer copy (true, also for two stages on one device) or
    /// through the driver's staged path.
    pub boundary_direct: Vec<bool>,
    /// Per-op device timing (off unless a benchmark turns it on).
    pub profile: ProfileCell,
    /// This realization among those the process has loaded (a recorded
    /// decode step belongs to one).
    id: u64,
}

/// Realizations loaded so far (`Dsv4Gpu::id`).
static LOADED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Per-device memory use.
#[derive(Clone, Debug)]
pub struct VramLine {
    pub device: usize,
    pub name: String,
    pub layers: Range<usize>,
    pub weights: usize,
    pub free: usize,
    pub total: usize,
}

/// The most routed experts `moe_route` takes: its scores and biases (12
/// bytes an expert) and its static lists (6,464 bytes) fit the 48 KiB of
/// shared memory a launch may take without an opt-in (below 3,557).
pub(crate) const MAX_ROUTED_EXPERTS: usize = 3_500;

/// The most hyper-connection streams the kernels take (kernels/hc.cu HC_MAX).
pub const MAX_HC_STREAMS: usize = 8;

/// The shapes the GPU kernels are written for, checked before anything is
/// uploaded: kernels/hc.cu HC_MAX, moe.cu's chosen[16] and `moe_route`'s
/// shared memory, attention.cu ATT_Q4 (float4 rows), indexer.cu IDX_KM and
/// IDX_HEADS.
pub(crate) fn check_kernel_bounds(cfg: &Dsv4Config) -> Result<()> {
    let bounds: [(&str, usize, usize, usize); 6] = [
        ("hc_mult", cfg.hc_mult, MAX_HC_STREAMS, 1),
        ("num_experts_per_tok", cfg.num_experts_per_tok, 16, 1),
        ("n_routed_experts", cfg.n_routed_experts, MAX_ROUTED_EXPERTS, 1),
        ("head_dim", cfg.head_dim, 512, 4),
        ("index_head_dim", cfg.index_head_dim, 128, 4),
        ("index_n_heads", cfg.index_n_heads, 64, 1),
    ];
    let problems: Vec<String> = bounds
        .iter()
        .filter(|&&(_, v, max, mult)| v > max || !v.is_multiple_of(mult))
        .map(|&(name, v, max, mult)| match mult {
            1 => format!("{name} = {v} (at most {max})"),
            _ => format!("{name} = {v} (at most {max}, a multiple of {mult})"),
        })
        .collect();
    if !problems.is_empty() {
        bail!("the GPU kernels do not support this config: {}", problems.join(", "));
    }
    Ok(())
}

impl Dsv4Gpu {
    /// Split the layers over `devices` and upload the weights; refuses up
    /// front, with the numbers, a split that does not fit.
    pub fn load(weights: Arc<Dsv4Weights>, devices: &[usize], opts: GpuOptions) -> Result<Dsv4Gpu> {
        let cfg = weights.config.clone();
        if devices.is_empty() {
            bail!("no devices given");
        }
        check_kernel_bounds(&cfg)?;
        let n = cfg.num_hidden_layers;
        let s = devices.len().min(n);
        let ranges: Vec<Range<usize>> = (0..s).map(|i| (i * n / s)..((i + 1) * n / s)).collect();
        let mut gpus: Vec<Arc<Gpu>> = Vec::new();
        for &d in &devices[..s] {
            gpus.push(Arc::new(Gpu::open(d)?));
        }
        // fit check: weights per stage against free memory per device
        let mut need_per_dev: std::collections::BTreeMap<usize, usize> = Default::default();
        for (i, r) in ranges.iter().enumerate() {
            *need_per_dev.entry(devices[i]).or_default() += device_bytes(&weights, r.clone(), i == 0, i + 1 == s);
        }
        let mut problems = Vec::new();
        for (&d, &need) in &need_per_dev {
            let g = gpus.iter().find(|g| g.ordinal == d).unwrap();
            problems.extend(g.shortfall("weights", need, 256 << 20)?);
        }
        if !problems.is_empty() {
            bail!("the model does not fit: {}", problems.join("; "));
        }
        let (rm, rc) = (Rope::main(&cfg), Rope::compress(&cfg));
        let mut stages = Vec::new();
        for (i, r) in ranges.iter().enumerate() {
            let g = gpus[i].clone();
            let dev = r
                .clone()
                .map(|l| DevLayer::upload(&g, &weights.layers[l], opts.sums == ProductSums::Tensor))
                .collect::<Result<Vec<_>>>()?;
            let last = i + 1 == s;
            stages.push(Stage {
                layers: r.clone(),
                dev,
                embed: if i == 0 { Some(DevMat::upload(&g, &weights.embed)?) } else { None },
                head: if last { Some(DevMat::upload(&g, &weights.head)?) } else { None },
                norm: if last { Some(g.upload(&weights.norm)?) } else { None },
                hc_head: if last {
                    Some(DevHc {
                        fn_: g.upload(&weights.hc_head.fn_)?,
                        base: g.upload(&weights.hc_head.base)?,
                        scale: g.upload(&weights.hc_head.scale)?,
                    })
                } else {
                    None
                },
                rope_main: g.upload(&rm.inv_freq)?,
                rope_compress: g.upload(&rc.inv_freq)?,
                weight_bytes: device_bytes(&weights, r.clone(), i == 0, last),
                gpu: g,
            });
            stages.last().unwrap().gpu.sync()?;
        }
        let mut boundary_direct = Vec::new();
        for w in gpus.windows(2) {
            let direct = w[1].enable_peer_access(&w[0])? & w[0].enable_peer_access(&w[1])?;
            boundary_direct.push(direct);
        }
        let mut layer_stage = vec![0; n];
        for (i, r) in ranges.iter().enumerate() {
            for l in r.clone() {
                layer_stage[l] = i;
            }
        }
        Ok(Dsv4Gpu {
            state_layout: Dsv4StateLayout::new(&cfg, 0),
            config: cfg,
            weights,
            opts,
            stages,
            layer_stage,
            boundary_direct,
            profile: ProfileCell::default(),
            id: LOADED.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
        })
    }

    /// The stream of the first stage (timing).
    pub fn first_stream(&self) -> std::sync::Arc<cudarc::driver::CudaStream> {
        self.stages[0].gpu.stream.clone()
    }

    /// The CUDA context of the first stage (host buffers for snapshots).
    pub fn context(&self) -> &std::sync::Arc<cudarc::driver::CudaContext> {
        &self.stages[0].gpu.ctx
    }

    /// The CUDA context of each stage, in stage order.
    pub fn stage_contexts(&self) -> Vec<std::sync::Arc<cudarc::driver::CudaContext>> {
        self.stages.iter().map(|s| s.gpu.ctx.clone()).collect()
    }

    /// The layers of each stage, in stage order.
    pub fn stage_layers(&self) -> Vec<Range<usize>> {
        self.stages.iter().map(|s| s.layers.clone()).collect()
    }

    /// The reduction widths (K) of the products on the `tensor` sums, every
    /// layer's in turn (none under [`ProductSums::Exact`]): the routed
    /// experts' gate/up and down where they lie in row tiles (`limb_arm` took
    /// the layer at upload, gpu/weights.rs `experts_layout`), and each
    /// attention projection `dense_limbs` takes (gpu/products.rs), for the
    /// band (gates `Realization::GpuTensor`).
    pub fn tensor_widths(&self) -> Vec<usize> {
        if self.opts.sums != ProductSums::Tensor {
            return Vec::new();
        }
        let c = &self.config;
        let (d, inter) = (c.hidden_size, c.moe_intermediate_size);
        let mut widths = Vec::new();
        for dl in self.stages.iter().flat_map(|s| &s.dev) {
            let gin = c.num_attention_heads * c.head_dim / c.o_groups;
            let projections =
                [(&dl.wq_a, 1, 0), (&dl.wkv, 1, 0), (&dl.wq_b, 1, 0), (&dl.wo_a, c.o_groups, gin), (&dl.wo_b, 1, 0)];
            for (w, groups, x_group) in projections.into_iter().filter(|_| self.dense_tensor()) {
                if super::products::dense_limbs(w.bf16_exact, w.arg.cols as usize, groups, x_group).is_some() {
                    widths.push(w.arg.cols as usize);
                }
            }
            if dl.experts_layout == super::weights::MatLayout::RowTiles {
                widths.extend([d, inter]);
            }
        }
        widths
    }

    pub fn devices(&self) -> Vec<usize> {
        self.stages.iter().map(|s| s.gpu.ordinal).collect()
    }

    pub fn vram_report(&self) -> Result<Vec<VramLine>> {
        self.stages
            .iter()
            .map(|s| {
                let (free, total) = s.gpu.mem_info()?;
                Ok(VramLine {
                    device: s.gpu.ordinal,
                    name: s.gpu.name(),
                    layers: s.layers.clone(),
                    weights: s.weight_bytes,
                    free,
                    total,
                })
            })
            .collect()
    }

    /// Monolithic prefill: all tokens as one chunk.
    pub fn prefill_with_cache(&self, st: &mut GpuState, tokens: &[u32], which: Logits) -> Result<Vec<f32>> {
        self.forward(st, tokens, which)
    }

    /// Prefill in chunks of `width` tokens; logits as `which` asks, over all tokens.
    pub fn prefill_with_cache_chunked(
        &self,
        st: &mut GpuState,
        tokens: &[u32],
        width: usize,
        which: Logits,
    ) -> Result<Vec<f32>> {
        if width == 0 {
            bail!("chunk width must be positive");
        }
        let mut out = Vec::new();
        let chunks: Vec<&[u32]> = tokens.chunks(width).collect();
        for (i, c) in chunks.iter().enumerate() {
            let w = match which {
                Logits::All => Logits::All,
                Logits::Last if i + 1 == chunks.len() => Logits::Last,
                _ => Logits::None,
            };
            out.extend(self.forward(st, c, w)?);
        }
        Ok(out)
    }

    /// One token; returns its logits.
    pub fn decode_step(&self, st: &mut GpuState, token: u32) -> Result<Vec<f32>> {
        self.forward(st, &[token], Logits::All)
    }

    /// One token; returns the argmax of its logits (computed on the
    /// device). On one stage, with the fused MoE arm and the profiler off,
    /// the step is a CUDA graph recorded while the step before it ran
    /// (gpu/graph.rs); the first step of a state, and every step elsewhere,
    /// launches its kernels one by one. Both run the same kernels with the
    /// same arguments.
    pub fn decode_step_greedy(&self, st: &mut GpuState, token: u32) -> Result<u32> {
        if !self.graphed_steps() {
            return self.run(st, &[token], Logits::Last, true, None, Pass::Commit).map(|(_, a)| a[0] as u32);
        }
        self.check_tokens(st, &[token], Pass::Commit)?;
        let g = self.stages[0].gpu.clone();
        let mut graphs = match st.graphs.take() {
            Some(graphs) => graphs,
            None => StepGraphs::new(&g)?,
        };
        let out = self.graphed_step(st, &mut graphs, &g, token);
        st.graphs = Some(graphs);
        out
    }

    /// Whether greedy decode steps run as graphs (see `decode_step_greedy`):
    /// the per-expert arm reads the routing back to the host within the
    /// step, the profiler records events between its ops, and the stage
    /// crossings are left to the stream path.
    fn graphed_steps(&self) -> bool {
        self.stages.len() == 1 && self.opts.moe == MoeArm::Fused && !self.profile.enabled()
    }

    /// What a recorded step's arguments depend on (gpu/graph.rs `StepKey`).
    fn step_key(&self, st: &GpuState) -> StepKey {
        StepKey {
            model: self.id,
            options: self.opts.clone(),
            positions: st.positions(),
            written: (0..st.layout().classes.len()).map(|c| st.written(c)).collect(),
        }
    }

    /// A greedy step: the recorded graph for this position if there is one
    /// (else the launches one by one), then the next position's step
    /// recorded while this one runs, then its token.
    fn graphed_step(&self, st: &mut GpuState, graphs: &mut StepGraphs, g: &Gpu, token: u32) -> Result<u32> {
        let t0 = st.positions();
        let streamed = match graphs.take(&self.step_key(st)) {
            Some(id) => {
                graphs.set_token(token as i32);
                graphs.launch(id, &g.stream)?;
                self.advance(st, t0, 1);
                None
            }
            None => Some(self.run(st, &[token], Logits::Last, true, None, Pass::Commit)?.1[0] as u32),
        };
        if st.positions() < st.capacity() {
            let (key, mut t1) = (self.step_key(st), st.positions());
            if self.opts.fault == Some(Fault::StaleStep) {
                t1 = t1.saturating_sub(1);
            }
            let (token_in, head_row, token_out) = (graphs.token_in(), graphs.head_row(), graphs.token_out());
            graphs.record(&g.stream, key, || {
                self.layers(st, TokenSource::Device(token_in), t1, None, Pass::Commit)?;
                self.head_rows(&st.scratch[0], head_row, 1, Some(token_out))
            })?;
        }
        match streamed {
            Some(t) => Ok(t),
            None => {
                g.sync()?;
                Ok(graphs.token() as u32)
            }
        }
    }

    /// A drafter's block pass over a window-only stack (DSpark's stages):
    /// `tokens` at the next positions, each query seeing the last
    /// `sliding_window` committed rows of its layer's ring and every row of
    /// the block (kernels/attention.cu mode 3). The state is not written.
    /// Returns the collapsed pre-norm hidden rows `[n, hidden]` (`hc_head`)
    /// and the logits `[n, vocab]` of the final norm and head.
    pub fn forward_block(&self, st: &mut GpuState, tokens: &[u32]) -> Result<(Vec<f32>, Vec<f32>)> {
        if let Some(l) = self.config.layer_types.iter().position(|&k| k != crate::config::AttnKind::Window) {
            bail!("a block pass runs window-only stacks; layer {l} is {:?}", self.config.layer_types[l]);
        }
        let n = tokens.len();
        if n > super::state::LOGIT_ROWS {
            bail!("a block of {n} tokens is wider than {} rows", super::state::LOGIT_ROWS);
        }
        self.run(st, tokens, Logits::None, false, None, Pass::Block)?;
        let c = &self.config;
        let (d, v) = (c.hidden_size, c.vocab_size);
        let si = self.stages.len() - 1;
        let stage = &self.stages[si];
        let g = &stage.gpu;
        let hcw = stage.hc_head.as_ref().expect("the last stage holds hc_head");
        let rows: Vec<i32> = (0..n as i32).collect();
        g.write(&mut st.scratch[si].head_rows, &rows)?;
        let sc = &st.scratch[si];
        self.hc_head(g, sc, hcw, sc.head_rows.ptr, n, None)?;
        let collapsed = g.download(&sc.hy, n * d)?;
        self.norm(g, sc.hy.ptr, stage.norm.as_ref().expect("the last stage holds the final norm").ptr, n, d)?;
        self.lin(g, stage.head.as_ref().expect("the last stage holds the head"), sc.hy.ptr, sc.logits.ptr, n)?;
        let logits = g.download(&sc.logits, n * v)?;
        Ok((collapsed, logits))
    }

    /// Append, for `n` positions from `pos0` (the state's next position),
    /// every layer's window K=V row computed from the given hidden rows
    /// (`hidden`: a device address of `[n, hidden]` f32 on the first stage's
    /// device): `kv_norm(wkv(h))`, rotated at the position (FP8 on the
    /// non-rope dims in the fp8 variant), into the layer's ring; then
    /// advance the positions. A drafter's commit (DSpark's `main_x`).
    /// Window-only stacks on one device.
    pub fn append_window_rows(&self, st: &mut GpuState, hidden: u64, n: usize, pos0: usize) -> Result<()> {
        if self.stages.len() != 1 || self.config.layer_types.iter().any(|&k| k != crate::config::AttnKind::Window) {
            bail!("append_window_rows runs window-only stacks on one device");
        }
        if pos0 != st.positions() {
            bail!("appending at position {pos0}, the state is at {}", st.positions());
        }
        if n > st.chunk_width() {
            bail!("{n} rows are wider than this state's scratch ({})", st.chunk_width());
        }
        let c = &self.config;
        let (d, hd, rd) = (c.hidden_size, c.head_dim, c.rope_dim);
        let stage = &self.stages[0];
        let g = &*stage.gpu;
        let sc = &st.scratch[0];
        let hq = if self.opts.variant == Variant::Fp8 { g.act_fp8(hidden, sc.hq.ptr, n, d)? } else { hidden };
        for (l, dl) in stage.dev.iter().enumerate() {
            let sc = &st.scratch[0];
            self.lin(g, &dl.wkv, hq, sc.kv.ptr, n)?;
            super::attention::NormRope {
                x: sc.kv.ptr,
                w: dl.kv_norm.ptr,
                heads: 1,
                rows: n,
                x2: 0,
                w2: 0,
                n2: 0,
                width: hd,
                eps: c.rms_norm_eps as f32,
                inv_freq: stage.rope_main.ptr,
                npairs: rd / 2,
                pos0,
            }
            .launch(g)?;
            if self.opts.variant == Variant::Fp8 {
                let nope = hd - rd;
                launch!(g, "kv_fp8_rows", Gpu::cfg((n as u32, nope.div_ceil(64) as u32, 1), 64, 0); sc.kv.ptr, hd as i32, nope as i32);
            }
            let ring = &st.kv.classes[self.state_layout.layers[l].kv];
            launch!(g, "ring_append", Gpu::cfg((n.min(ring.rows) as u32, 1, 1), 256, 0);
                ring.ptr, ring.rows as i32, sc.kv.ptr, hd as i32, n as i32, pos0 as i32);
            st.kv.advance(self.state_layout.layers[l].kv, n as u64);
        }
        g.sync()?;
        st.set_positions(pos0 + n);
        Ok(())
    }

    /// The device of stage `i` (its context, stream and kernels).
    pub fn stage_gpu(&self, i: usize) -> &Arc<Gpu> {
        &self.stages[i].gpu
    }

    /// Named live contents of every class (for bit comparison).
    pub fn cache_classes(&self, st: &GpuState) -> Result<Vec<(String, Vec<u8>)>> {
        let snap = kvstate::snapshot(st).map_err(|e| anyhow::anyhow!("{e}"))?;
        Ok(snap.layout.classes.iter().zip(snap.classes).map(|(c, s)| (c.name.clone(), s.bytes)).collect())
    }

    pub fn forward(&self, st: &mut GpuState, tokens: &[u32], which: Logits) -> Result<Vec<f32>> {
        self.run(st, tokens, which, false, None, Pass::Commit).map(|(l, _)| l)
    }

    /// `forward` that also returns the residual streams after every layer
    /// (`[n, hc, d]` each), for locating a divergence from the CPU oracle.
    pub fn forward_capture(
        &self,
        st: &mut GpuState,
        tokens: &[u32],
        which: Logits,
    ) -> Result<(Vec<f32>, Vec<Vec<f32>>)> {
        let mut res = Vec::new();
        let l = self.run(st, tokens, which, false, Some(Capture { out: &mut res, layers: None }), Pass::Commit)?.0;
        Ok((l, res))
    }

    /// `forward_capture` of the given layers only (the others' entries are
    /// empty): a drafter's taps without a download after every layer.
    pub fn forward_capture_layers(
        &self,
        st: &mut GpuState,
        tokens: &[u32],
        which: Logits,
        layers: &[usize],
    ) -> Result<(Vec<f32>, Vec<Vec<f32>>)> {
        let mut res = Vec::new();
        let l =
            self.run(st, tokens, which, false, Some(Capture { out: &mut res, layers: Some(layers) }), Pass::Commit)?.0;
        Ok((l, res))
    }

    fn run(
        &self,
        st: &mut GpuState,
        tokens: &[u32],
        which: Logits,
        greedy: bool,
        capture: Option<Capture>,
        pass: Pass,
    ) -> Result<(Vec<f32>, Vec<i32>)> {
        let n = tokens.len();
        let t0 = st.positions();
        self.check_tokens(st, tokens, pass)?;
        let toks: Vec<i32> = tokens.iter().map(|&t| t as i32).collect();
        self.layers(st, TokenSource::Host(&toks), t0, capture, pass)?;
        if pass == Pass::Block {
            return Ok((Vec::new(), Vec::new()));
        }
        self.advance(st, t0, n);
        let out = self.head(st, n, which, greedy)?;
        for si in 0..self.stages.len() {
            self.mark(si, "end")?;
        }
        Ok(out)
    }

    /// Refuse a chunk the state cannot take: empty, wider than its
    /// scratch, past its capacity (a committing pass), or with a token
    /// outside the vocabulary.
    fn check_tokens(&self, st: &GpuState, tokens: &[u32], pass: Pass) -> Result<()> {
        let (n, t0) = (tokens.len(), st.positions());
        if n == 0 {
            bail!("no tokens");
        }
        if n > st.chunk_width() {
            bail!("chunk of {n} tokens is wider than this state's scratch ({})", st.chunk_width());
        }
        // a block pass writes nothing, so it may look past the state's capacity
        if pass == Pass::Commit && t0 + n > st.capacity() {
            bail!("state capacity {} positions: cannot add {n} tokens at position {t0}", st.capacity());
        }
        if let Some(&t) = tokens.iter().find(|&&t| t as usize >= self.config.vocab_size) {
            bail!("token id {t} is outside the vocabulary ({})", self.config.vocab_size);
        }
        Ok(())
    }

    /// Enqueue the embedding and every stage's layers for the chunk at
    /// positions `t0 ..` (its width from `tokens`); with `capture`, copy
    /// the residual streams out after the layers it names.
    fn layers(
        &self,
        st: &mut GpuState,
        tokens: TokenSource,
        t0: usize,
        mut capture: Option<Capture>,
        pass: Pass,
    ) -> Result<()> {
        let n = tokens.len();
        for (si, stage) in self.stages.iter().enumerate() {
            let g = &stage.gpu;
            // where this stage's kernels read the token ids (the embedding, hash routing)
            let ids;
            if si == 0 {
                self.mark(0, "embed")?;
                let sc = &mut st.scratch[0];
                ids = match tokens {
                    TokenSource::Host(toks) => {
                        g.write(&mut sc.tokens, toks)?;
                        sc.tokens.ptr
                    }
                    TokenSource::Device(addr) => addr,
                };
                let e = stage.embed.as_ref().unwrap();
                launch!(g, "embed_rows", Gpu::cfg((n as u32, self.config.hc_mult as u32, 1), 256, 0); e.arg, ids, sc.x.ptr);
            } else {
                let TokenSource::Host(toks) = tokens else {
                    bail!("tokens read from device memory feed one stage only");
                };
                // residual streams cross the boundary (the profile's `stage wait` is
                // this stage idling until the previous one is done, not a cost)
                self.mark(si, "stage wait")?;
                let bytes = n * self.config.hc_mult * self.config.hidden_size * 4;
                let prev = &self.stages[si - 1].gpu;
                let ev = prev.stream.record_event(None).map_err(|e| anyhow::anyhow!("{e}"))?;
                g.stream.wait(&ev).map_err(|e| anyhow::anyhow!("{e}"))?;
                self.mark(si, "boundary")?;
                let (src, dst) = (st.scratch[si - 1].x.ptr, st.scratch[si].x.ptr);
                g.write(&mut st.scratch[si].tokens, toks)?;
                ids = st.scratch[si].tokens.ptr;
                g.bind()?;
                // SAFETY: both buffers hold at least `bytes`; ordered after the previous stage by the event.
                unsafe {
                    cudarc::driver::result::memcpy_peer_async(
                        g.ctx.cu_ctx(),
                        dst,
                        prev.ctx.cu_ctx(),
                        src,
                        bytes,
                        g.stream.cu_stream(),
                    )
                }
                .map_err(|e| {
                    anyhow::anyhow!("copying activations from device {} to {}: {e}", prev.ordinal, g.ordinal)
                })?;
            }
            // the layers whose streams are copied out (all of them where the capture names none)
            let only = capture.as_ref().map(|c| c.layers);
            let captured = |l: usize| only.is_some_and(|o| o.is_none_or(|o| o.contains(&l)));
            for (k, (l, pending, finish)) in post_plan(stage.layers.clone(), captured).into_iter().enumerate() {
                self.layer(st, si, l, &stage.dev[k], ids, n, t0, pass, pending, finish)?;
                if let Some(Capture { out: c, .. }) = capture.as_mut() {
                    if captured(l) {
                        c.push(g.download(&st.scratch[si].x, n * self.config.hc_mult * self.config.hidden_size)?);
                    } else {
                        c.push(Vec::new());
                    }
                }
            }
            if si + 1 < self.stages.len() {
                // the stage's work is queued: what follows on its stream is idle time
                self.mark(si, "stage idle")?;
            }
        }
        Ok(())
    }

    /// The host's side of committing `n` tokens at `t0`: every class's
    /// written rows and the state's positions.
    fn advance(&self, st: &mut GpuState, t0: usize, n: usize) {
        for (l, lc) in self.state_layout.layers.iter().enumerate() {
            st.kv.advance(lc.kv, n as u64);
            let ratio = self.config.compress_ratio(l);
            for c in [lc.comp_pending, lc.idx_pending].into_iter().flatten() {
                st.kv.advance(c, n as u64);
            }
            if let (Some(end), Some(start)) = ((t0 + n).checked_div(ratio), t0.checked_div(ratio)) {
                let closed = (end - start) as u64;
                for c in [lc.comp_entries, lc.idx_entries].into_iter().flatten() {
                    st.kv.advance(c, closed);
                }
            }
        }
        st.set_positions(t0 + n);
    }

    /// Start of op `label` on stage `si` (for the profiler).
    pub(super) fn mark(&self, si: usize, label: &'static str) -> Result<()> {
        self.profile.mark(si, &self.stages[si].gpu, label)
    }
}

#[cfg(test)]
mod tests {
    use super::{check_kernel_bounds, MAX_ROUTED_EXPERTS};
    use crate::synth::Preset;

    #[test]
    fn kernel_bounds_name_each_field_out_of_range() {
        let ok = Preset::Tiny.config();
        check_kernel_bounds(&ok).unwrap();
        let mut c = ok.clone();
        c.n_routed_experts = MAX_ROUTED_EXPERTS;
        check_kernel_bounds(&c).unwrap();
        c.n_routed_experts = MAX_ROUTED_EXPERTS + 1;
        c.head_dim = 510;
        let e = check_kernel_bounds(&c).unwrap_err().to_string();
        assert!(e.contains("n_routed_experts = 3501 (at most 3500)"), "{e}");
        assert!(e.contains("head_dim = 510 (at most 512, a multiple of 4)"), "{e}");
        assert!(!e.contains("hc_mult"), "{e}");
        let mut c = ok.clone();
        c.index_n_heads = 65;
        let e = check_kernel_bounds(&c).unwrap_err().to_string();
        assert!(e.contains("index_n_heads = 65"), "{e}");
    }
}
