//! Decode state on the devices: the `kvstate` classes of the DSV4 layout,
//! each on the device of the stage that owns its layer, plus per-stage
//! scratch sized for the widest chunk the state will be fed, and
//! `Dsv4Gpu`'s sizing and allocation of one.

use std::sync::Arc;

use anyhow::{bail, Result};
use kvstate::{DeviceState, Layout, StateError, StateStore};

use super::attention::attention_pair_tokens;
use super::device::{Buf, Gpu};
use super::forward::Dsv4Gpu;
use super::products::GROUP_TOKENS;
use crate::config::AttnKind;

/// Activation scratch of one stage, for chunks of up to `width` tokens.
pub struct Scratch {
    pub width: usize,
    pub tokens: Buf<i32>,
    pub x: Buf<f32>,
    /// The streams after a layer's attention (its ffn site's post writes
    /// them here, since other blocks of that launch still read `x`).
    pub x2: Buf<f32>,
    pub mix: Buf<f64>,
    /// The mixes' per-slice partials (`hc_slices` x (mixes + 1) a token).
    pub mixes: Buf<f64>,
    pub h: Buf<f32>,
    pub hq: Buf<f32>,
    pub qr: Buf<f32>,
    pub qrq: Buf<f32>,
    pub q: Buf<f32>,
    pub kv: Buf<f32>,
    /// Each token's rotations (cos, sin of its rotated pairs: `hd` floats at
    /// most), written with its key for the attention's queries
    /// (kernels/norm.cu `rms_norm_f32_key_rope`): for the chunks of at most
    /// `attention::attention_pair_tokens` tokens, the only ones that read
    /// them (`ScratchDims::elements` counts a row a token, an upper bound).
    pub rot: Buf<f32>,
    pub attn: Buf<f32>,
    pub oa: Buf<f32>,
    pub oaq: Buf<f32>,
    pub a: Buf<f32>,
    pub ckv: Buf<f32>,
    pub cgate: Buf<f32>,
    pub ikv: Buf<f32>,
    pub igate: Buf<f32>,
    pub iq: Buf<f32>,
    pub iw: Buf<f32>,
    pub scores: Buf<f64>,
    pub sel: Buf<i32>,
    pub rlogits: Buf<f32>,
    pub ridx: Buf<i32>,
    pub rwts: Buf<f64>,
    /// The (token, slot) pair ids in order (a decode step's expert launches).
    pub pairs: Buf<i32>,
    /// The pair ids listed by expert: the per-expert arm's lists, the fused
    /// arm's order for several tokens.
    pub pair_lists: Buf<i32>,
    /// The expert groups of several tokens (kernels/moe.cu `moe_group_pairs`:
    /// per group its first index into `pair_lists` and its pair count).
    pub expert_groups: Buf<i32>,
    pub hmid: Buf<f32>,
    pub hmidq: Buf<f32>,
    pub slot_out: Buf<f32>,
    /// The `tensor` expert sums' limb rows of a prefill's expert inputs
    /// (kernels/moe_tensor.cu `limb_rows`: the tokens' d-wide rows, then the
    /// pairs' middles); empty under the exact sums.
    pub limbs: Buf<u16>,
    pub sg: Buf<f32>,
    pub su: Buf<f32>,
    pub sh: Buf<f32>,
    pub shq: Buf<f32>,
    pub sout: Buf<f32>,
    pub head_rows: Buf<i32>,
    pub hy: Buf<f32>,
    pub logits: Buf<f32>,
    pub argmax: Buf<i32>,
    /// hc_head's per-slice partials of the head rows (`hc_slices` x (hc + 1) a row).
    pub head_mix: Buf<f64>,
    /// `hc_site`'s count of finished blocks of its token (back to 0 after each launch).
    pub site_done: Buf<u32>,
    /// Per-slice (value, index) partials of the head rows' argmax.
    pub argmax_v: Buf<f32>,
    pub argmax_i: Buf<i32>,
    pub max_entries: usize,
}

/// Flat stream elements per `hc_site` block (kernels/hc.cu `HC_SLICE`,
/// its block size): the mixes are summed per slice, then over the slices.
pub const HC_SLICE: usize = 256;

/// Slices of a token's `hc * d` flat streams.
pub fn hc_slices(hc: usize, d: usize) -> usize {
    (hc * d).div_ceil(HC_SLICE)
}

/// Rows of `fn` that `hc_site_rows` stages a tile at a time in its dynamic
/// shared memory, as f64 (kernels/hc.cu `HC_MMA_ROWS`: the tensor-core
/// instruction's m), the doubles a warp's 32 elements take in a staged row
/// (`HC_X_GROUP`: the second half one double on) and the doubles of a
/// staged row (`HC_X_ROW`: 2 of padding, 10 mod 16, so that a fragment's
/// reads of 8 rows fall in distinct banks).
pub const HC_MMA_ROWS: usize = 16;
pub const HC_X_GROUP: usize = 33;
pub const HC_X_ROW: usize = HC_SLICE / 32 * HC_X_GROUP + 2;

/// Tokens of an `hc_site_rows` block (kernels/hc.cu `HC_ROWS_TOKENS`: the
/// tensor-core instruction's n; fn's staged rows serve them all).
pub const HC_ROWS_TOKENS: usize = 8;
/// What `hc_site_rows` opts in to: its dynamic shared memory at eight
/// streams (80 mixes; `hc_rows_smem`).
pub const HC_ROWS_SMEM_MAX: usize = 96 << 10;

/// The dynamic shared memory of `hc_site_rows` with `nm` mixes: a tile of
/// fn's rows and the block's tokens' x' ([`HC_MMA_ROWS`] and
/// [`HC_ROWS_TOKENS`] rows of [`HC_X_ROW`] doubles), then the tokens' 8
/// warps' values (rows of nm + 1 doubles).
pub fn hc_rows_smem(nm: usize) -> usize {
    (HC_MMA_ROWS + HC_ROWS_TOKENS) * HC_X_ROW * 8 + HC_ROWS_TOKENS * HC_SLICE / 32 * (nm + 1) * 8
}

/// Rows of logits computed per head launch.
pub const LOGIT_ROWS: usize = 64;

/// Slices each logit row's argmax is split into (kernels/argmax.cu takes it
/// from the launch; a power of two, at most 256).
pub const ARGMAX_SLICES: usize = 64;
const _: () = assert!(ARGMAX_SLICES.is_power_of_two() && ARGMAX_SLICES <= 256);

/// The sizes scratch needs (in f32/i32 elements), for the fit check and allocation.
pub struct ScratchDims {
    pub d: usize,
    pub hc: usize,
    pub q_lora: usize,
    pub heads_x_hd: usize,
    pub hd: usize,
    pub go: usize,
    pub cw: usize,
    pub iw: usize,
    pub idx_heads_x_di: usize,
    pub idx_heads: usize,
    pub topk: usize,
    pub experts: usize,
    pub k: usize,
    pub inter: usize,
    pub vocab: usize,
    pub max_entries: usize,
    /// Whether scratch holds the `tensor` expert sums' limb rows.
    pub limbs: bool,
}

impl ScratchDims {
    /// 4-byte words of all scratch buffers for `w` tokens (f64 buffers count twice).
    pub fn elements(&self, w: usize) -> usize {
        let per_token = 1
            + 2 * self.hc * self.d
            + 2 * (2 + self.hc) * self.hc
            + 2 * hc_slices(self.hc, self.d) * ((2 + self.hc) * self.hc + 1)
            + 2 * self.d
            + 2 * self.q_lora
            + 2 * self.heads_x_hd
            + 2 * self.hd
            + 2 * self.go
            + self.d
            + 2 * self.cw
            + 2 * self.iw
            + self.idx_heads_x_di
            + self.idx_heads
            + 2 * self.max_entries
            + self.topk
            + self.experts
            + 2 * self.k
            + 2 * self.k
            + self.k
            + 2 * self.k * self.inter
            + self.k * self.d
            + 4 * self.inter
            + self.d;
        let head_mix = 2 * hc_slices(self.hc, self.d) * (self.hc + 1);
        w * (per_token + self.limb_elems(1).div_ceil(2))
            + w.max(LOGIT_ROWS)
            + 2 * self.expert_groups(w)
            + LOGIT_ROWS * (1 + self.d + self.vocab + 1 + head_mix + 2 * ARGMAX_SLICES)
    }

    /// The bf16 of the limb rows for `w` tokens: three of each input value
    /// of the products on the `tensor` sums (the widest of a token's row,
    /// its pairs' middles, its query's low rank, its heads' outputs and
    /// their low-rank groups; one product's are live at a time).
    pub fn limb_elems(&self, w: usize) -> usize {
        if self.limbs {
            let widest = [self.d, self.k * self.inter, self.q_lora, self.heads_x_hd, self.go].into_iter().max();
            w * 3 * widest.unwrap_or(0)
        } else {
            0
        }
    }

    /// Expert groups that `w` tokens' pairs can need: each expert's pairs
    /// fill groups of [`GROUP_TOKENS`] but its last.
    pub fn expert_groups(&self, w: usize) -> usize {
        (w * self.k).div_ceil(GROUP_TOKENS) + self.experts
    }

    pub fn alloc(&self, gpu: &Gpu, w: usize) -> Result<Scratch> {
        let f = |n: usize| gpu.alloc::<f32>(n);
        let dd = |n: usize| gpu.alloc::<f64>(n);
        let i = |n: usize| gpu.alloc::<i32>(n);
        let pairs: Vec<i32> = (0..(w * self.k) as i32).collect();
        Ok(Scratch {
            width: w,
            tokens: i(w)?,
            x: f(w * self.hc * self.d)?,
            x2: f(w * self.hc * self.d)?,
            mix: dd(w * (2 + self.hc) * self.hc)?,
            mixes: dd(w * hc_slices(self.hc, self.d) * ((2 + self.hc) * self.hc + 1))?,
            h: f(w * self.d)?,
            hq: f(w * self.d)?,
            qr: f(w * self.q_lora)?,
            qrq: f(w * self.q_lora)?,
            q: f(w * self.heads_x_hd)?,
            kv: f(w * self.hd)?,
            // the rotations of the tokens whose attention takes them (one head a cluster of two blocks)
            rot: f(w.min(attention_pair_tokens(gpu.sm_count, self.heads_x_hd / self.hd.max(1))) * self.hd)?,
            attn: f(w * self.heads_x_hd)?,
            oa: f(w * self.go)?,
            oaq: f(w * self.go)?,
            a: f(w * self.d)?,
            ckv: f(w * self.cw)?,
            cgate: f(w * self.cw)?,
            ikv: f(w * self.iw)?,
            igate: f(w * self.iw)?,
            iq: f(w * self.idx_heads_x_di)?,
            iw: f(w * self.idx_heads)?,
            scores: dd(w * self.max_entries)?,
            sel: i(w * self.topk)?,
            rlogits: f(w * self.experts)?,
            ridx: i(w * self.k)?,
            rwts: dd(w * self.k)?,
            pairs: gpu.upload(&pairs)?,
            pair_lists: i(w * self.k)?,
            expert_groups: i(2 * self.expert_groups(w))?,
            hmid: f(w * self.k * self.inter)?,
            hmidq: f(w * self.k * self.inter)?,
            slot_out: f(w * self.k * self.d)?,
            limbs: gpu.alloc::<u16>(self.limb_elems(w))?,
            sg: f(w * self.inter)?,
            su: f(w * self.inter)?,
            sh: f(w * self.inter)?,
            shq: f(w * self.inter)?,
            sout: f(w * self.d)?,
            head_rows: i(LOGIT_ROWS)?,
            hy: f(LOGIT_ROWS * self.d)?,
            logits: f(LOGIT_ROWS * self.vocab)?,
            argmax: i(LOGIT_ROWS)?,
            head_mix: dd(LOGIT_ROWS * hc_slices(self.hc, self.d) * (self.hc + 1))?,
            site_done: gpu.alloc::<u32>(w.max(LOGIT_ROWS))?,
            argmax_v: f(LOGIT_ROWS * ARGMAX_SLICES)?,
            argmax_i: i(LOGIT_ROWS * ARGMAX_SLICES)?,
            max_entries: self.max_entries,
        })
    }
}

/// A DSV4 decode state on the devices: the cache classes (a `kvstate`
/// device state, each class on the device of the stage owning its layer)
/// and per-stage scratch.
pub struct GpuState {
    pub kv: DeviceState,
    pub scratch: Vec<Scratch>,
    pub scratch_elements: usize,
    /// The greedy decode steps' graphs (gpu/graph.rs), made at the first
    /// greedy step.
    pub(crate) graphs: Option<super::graph::StepGraphs>,
}

impl GpuState {
    pub fn chunk_width(&self) -> usize {
        self.scratch[0].width
    }

    pub fn capacity(&self) -> usize {
        self.kv.capacity()
    }

    pub fn class_bytes(&self) -> usize {
        self.kv.allocated_bytes()
    }

    pub fn scratch_bytes(&self) -> usize {
        // every scratch buffer holds 4-byte words
        self.scratch_elements * 4
    }
}

/// A model's decode state: its size for a capacity, checked against each
/// device's free memory, and allocated on the stages that own its classes.
impl Dsv4Gpu {
    /// The most keys one query attends to in a state of `capacity`
    /// positions: the window and the largest compressed set of any layer,
    /// or a drafter's block (as `attention` sizes its launch).
    fn attention_keys(&self, capacity: usize) -> usize {
        let c = &self.config;
        let entries = c
            .layer_types
            .iter()
            .map(|k| match k {
                AttnKind::Window => 0,
                AttnKind::Csa => c.index_topk,
                AttnKind::Hca => capacity / c.hca_ratio + 1,
            })
            .max()
            .unwrap_or(0);
        c.sliding_window + entries.max(LOGIT_ROWS)
    }

    fn dims(&self, capacity: usize) -> ScratchDims {
        let c = &self.config;
        ScratchDims {
            d: c.hidden_size,
            hc: c.hc_mult,
            q_lora: c.q_lora_rank,
            heads_x_hd: c.num_attention_heads * c.head_dim,
            hd: c.head_dim,
            go: c.o_groups * c.o_lora_rank,
            cw: 2 * c.head_dim,
            iw: 2 * c.index_head_dim,
            idx_heads_x_di: c.index_n_heads * c.index_head_dim,
            idx_heads: c.index_n_heads,
            topk: c.index_topk,
            experts: c.n_routed_experts,
            k: c.num_experts_per_tok,
            inter: c.moe_intermediate_size * c.n_shared_experts.max(1),
            vocab: c.vocab_size,
            max_entries: capacity / c.csa_ratio.max(1) + 1,
            limbs: self.opts.sums == super::options::ProductSums::Tensor,
        }
    }

    /// A state for `capacity` positions whose scratch takes chunks of up to
    /// `capacity` tokens (monolithic prefill).
    pub fn alloc_decode_state_for(&self, capacity: usize) -> Result<GpuState> {
        self.alloc_decode_state_for_transient(capacity, capacity)
    }

    /// A state for `capacity` positions with scratch for chunks of up to
    /// `chunk_width` tokens. Refused up front when it would not fit.
    pub fn alloc_decode_state_for_transient(&self, capacity: usize, chunk_width: usize) -> Result<GpuState> {
        self.alloc_decode_state_with_slack(capacity, chunk_width, 0)
    }

    /// `alloc_decode_state_for_transient` whose rings keep `slack` extra rows,
    /// so that speculative decoding can rewind up to `slack` positions.
    pub fn alloc_decode_state_with_slack(&self, capacity: usize, chunk_width: usize, slack: usize) -> Result<GpuState> {
        if capacity == 0 || chunk_width == 0 {
            bail!("capacity and chunk width must be positive");
        }
        let keys = self.attention_keys(capacity);
        let most = super::attention::ATTENTION_MAX_KEYS;
        if keys > most {
            bail!(
                "a state for {capacity} positions lets a query attend to {keys} keys; the attention kernel \
                 holds at most {most} in shared memory (kernels/attention.cu)"
            );
        }
        let layout = if slack == 0 {
            self.state_layout.layout.clone()
        } else {
            crate::state::Dsv4StateLayout::new(&self.config, slack).layout
        };
        let dims = self.dims(capacity);
        let scratch_elems = dims.elements(chunk_width);
        let mut need: std::collections::BTreeMap<usize, usize> = Default::default();
        for (i, s) in self.stages.iter().enumerate() {
            let mut b = scratch_elems * 4;
            for (ci, spec) in layout.classes.iter().enumerate() {
                if self.class_stage(ci) == i {
                    b += spec.rule.rows_for(capacity) * spec.row_bytes();
                }
            }
            *need.entry(s.gpu.ordinal).or_default() += b;
        }
        let mut problems = Vec::new();
        for (&d, &b) in &need {
            let g = &self.stages.iter().find(|s| s.gpu.ordinal == d).unwrap().gpu;
            problems.extend(g.shortfall("state + scratch", b, 64 << 20)?);
        }
        if !problems.is_empty() {
            bail!("a state for {capacity} positions (chunks of {chunk_width}) does not fit: {}", problems.join("; "));
        }
        let kv = kvstate::DeviceState::new(layout.clone(), capacity, |ci| {
            self.stages[self.class_stage(ci)].gpu.stream.clone()
        })
        .map_err(|e| anyhow::anyhow!("{e}"))?;
        let scratch = self.stages.iter().map(|s| dims.alloc(&s.gpu, chunk_width)).collect::<Result<Vec<_>>>()?;
        for s in &self.stages {
            s.gpu.sync()?;
        }
        Ok(GpuState { kv, scratch, scratch_elements: scratch_elems * self.stages.len(), graphs: None })
    }

    fn class_stage(&self, class: usize) -> usize {
        let l = self.state_layout.layers.iter().position(|lc| {
            lc.kv == class
                || lc.comp_pending == Some(class)
                || lc.comp_entries == Some(class)
                || lc.idx_pending == Some(class)
                || lc.idx_entries == Some(class)
        });
        self.layer_stage[l.expect("every class belongs to a layer")]
    }
}

impl StateStore for GpuState {
    fn layout(&self) -> &Arc<Layout> {
        self.kv.layout()
    }
    fn capacity(&self) -> usize {
        self.kv.capacity()
    }
    fn positions(&self) -> usize {
        self.kv.positions()
    }
    fn set_positions(&mut self, positions: usize) {
        self.kv.set_positions(positions)
    }
    fn written(&self, class: usize) -> u64 {
        self.kv.written(class)
    }
    fn truncate(&mut self, class: usize, written: u64) -> Result<(), StateError> {
        self.kv.truncate(class, written)
    }
    fn read_live(&self, class: usize, out: &mut [u8]) -> Result<(), StateError> {
        self.kv.read_live(class, out)
    }
    fn write_live(&mut self, class: usize, written: u64, rows: &[u8]) -> Result<(), StateError> {
        self.kv.write_live(class, written, rows)
    }
}
