//! The DSpark drafter on a GPU: the same steps as the CPU reference
//! (model.rs, markov.rs), on trunk's kernels.
//!
//! The three stages run as a window-only DSV4 stack (`trunk::gpu::Dsv4Gpu`
//! over the `mtp.*` blocks, the shared embedding and head, the last
//! stage's norm and hc_head); its window rings are the drafter's rings. A
//! commit uploads the taps, runs `main_proj` and `main_norm` on the device
//! and appends each stage's K=V row (`append_window_rows`); a proposal is a
//! block pass (`forward_block`: ring + whole block, bidirectional) that
//! returns the collapsed rows and base logits. The Markov bias `W2 . W1[prev]`
//! runs on the device per slot; the sum, the greedy pick and the confidence
//! `sigmoid(w . [x_k ; W1[prev_k]])` run on the host in the heads the CPU
//! reference uses (`markov::markov_heads`). Every kernel computes what its CPU twin
//! does, in the same order, so proposals match the CPU reference bit for
//! bit (checked by `memra gate drafters`).

use std::sync::Arc;

use anyhow::{bail, Result};

use trunk::config::{AttnKind, MlpKind};
use trunk::cpu::Variant;
use trunk::gpu::device::Buf;
use trunk::gpu::weights::DevMat;
use trunk::gpu::{Dsv4Gpu, GpuOptions, GpuState, MoeArm};
use trunk::weights::Dsv4Weights;

use crate::markov::markov_heads;
use crate::model::DsparkWeights;

pub struct DsparkGpu {
    pub w: Arc<DsparkWeights>,
    pub variant: Variant,
    stack: Dsv4Gpu,
    pub state: GpuState,
    main_proj: DevMat,
    main_norm: Buf<f32>,
    markov_w2: DevMat,
    taps: Buf<f32>,
    main_x: Buf<f32>,
    /// `W1[prev]` of one slot and its bias logits.
    e: Buf<f32>,
    bias: Buf<f32>,
    /// Widest commit one call takes (the state's chunk width).
    chunk: usize,
}

impl DsparkGpu {
    /// The stages on `device`, a state for `capacity` positions whose
    /// commits take up to `chunk` positions per call.
    pub fn new(
        w: Arc<DsparkWeights>,
        variant: Variant,
        moe: MoeArm,
        device: usize,
        capacity: usize,
        chunk: usize,
    ) -> Result<DsparkGpu> {
        let stages = w.stages.len();
        let mut config = w.cfg.clone();
        config.num_hidden_layers = stages;
        config.layer_types = vec![AttnKind::Window; stages];
        config.mlp_layer_types = vec![MlpKind::Score; stages];
        config.dspark = None;
        let stack_weights = Dsv4Weights {
            config,
            embed: w.embed.clone(),
            head: w.head.clone(),
            norm: w.norm.clone(),
            hc_head: w.hc_head.clone(),
            layers: w.stages.clone(),
            layout: trunk::weights::CheckpointLayout::Official,
            expert_arm: trunk::weights::ExpertArm::Native,
        };
        let stack =
            Dsv4Gpu::load(Arc::new(stack_weights), &[device], GpuOptions { variant, moe, ..Default::default() })?;
        let chunk = chunk.max(w.ds.block_size);
        let state = stack.alloc_decode_state_for_transient(capacity, chunk)?;
        let g = stack.stage_gpu(0).clone();
        let (d, r, v) = (w.cfg.hidden_size, w.ds.markov_rank, w.cfg.vocab_size);
        let tw = w.ds.target_layer_ids.len() * d;
        Ok(DsparkGpu {
            main_proj: DevMat::upload(&g, &w.main_proj)?,
            main_norm: g.upload(&w.main_norm)?,
            markov_w2: DevMat::upload(&g, &w.markov_w2)?,
            taps: g.alloc(2 * chunk * tw)?,
            main_x: g.alloc(chunk * d)?,
            e: g.alloc(r)?,
            bias: g.alloc(v)?,
            chunk,
            stack,
            state,
            variant,
            w,
        })
    }

    pub fn tap_width(&self) -> usize {
        self.w.ds.target_layer_ids.len() * self.w.cfg.hidden_size
    }

    /// As `Dspark::commit`: write every stage's ring row for the positions
    /// `pos0 ..` whose taps are given (in pieces of the state's chunk width).
    pub fn commit(&mut self, pos0: usize, taps: &[f32]) -> Result<()> {
        use kvstate::StateStore;
        let tw = self.tap_width();
        if tw == 0 || !taps.len().is_multiple_of(tw) {
            bail!("DSpark: {} tap values are not whole rows of {tw}", taps.len());
        }
        let n = taps.len() / tw;
        if pos0 != self.state.positions() {
            bail!("DSpark: commit at position {pos0}, the drafter is at {}", self.state.positions());
        }
        if pos0 + n > self.state.capacity() {
            bail!(
                "DSpark: committing {n} positions at {pos0} exceeds the drafter's capacity {}",
                self.state.capacity()
            );
        }
        let d = self.w.cfg.hidden_size;
        let eps = self.w.cfg.rms_norm_eps as f32;
        for (i, piece) in taps.chunks(self.chunk * tw).enumerate() {
            let m = piece.len() / tw;
            let g = self.stack.stage_gpu(0).clone();
            g.write(&mut self.taps, piece)?;
            let x = match self.variant {
                Variant::Exact => self.taps.ptr,
                Variant::Fp8 => g.act_fp8(self.taps.ptr, self.taps.at(self.chunk * tw), m, tw)?,
            };
            g.lin(&self.main_proj, x, self.main_x.ptr, m)?;
            g.rms_norm(self.main_x.ptr, self.main_norm.ptr, m, d, eps)?;
            self.stack.append_window_rows(&mut self.state, self.main_x.ptr, m, pos0 + i * self.chunk)?;
        }
        Ok(())
    }

    /// As `Dspark::forward_spec` (without the capture): the block's greedy
    /// drafts after `anchor` and their confidences.
    pub fn forward_spec(&mut self, anchor: u32) -> Result<(Vec<u32>, Vec<f32>)> {
        let g = self.w.ds.block_size;
        let mut tokens = vec![self.w.ds.noise_token_id; g];
        tokens[0] = anchor;
        let (collapsed, base) = self.stack.forward_block(&mut self.state, &tokens)?;
        let gpu = self.stack.stage_gpu(0).clone();
        let (e_buf, bias_buf, w2, v) = (&mut self.e, &self.bias, &self.markov_w2, self.w.cfg.vocab_size);
        let heads = markov_heads(&self.w, anchor, &collapsed, &base, |e| {
            gpu.write(e_buf, e)?;
            gpu.lin(w2, e_buf.ptr, bias_buf.ptr, 1)?;
            gpu.download(bias_buf, v)
        })?;
        Ok((heads.drafts, heads.conf))
    }
}
