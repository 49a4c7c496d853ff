//! The Markov head and the confidence head. Slot k's base logits `U_k` get
//! the low-rank bigram bias `W2 . W1[prev_k]` (`prev_1` = the anchor, then
//! each slot's greedy pick), and the confidence `sigmoid(w . [x_k ; W1[prev_k]])`
//! estimates the probability that the slot's draft survives verification.

use anyhow::Result;

use trunk::cpu::ops::linear::{dot, linear};
use trunk::cpu::ops::norm::rms_norm;
use trunk::generate::argmax;

use crate::model::{Capture, Dspark, DsparkWeights};

impl Dspark {
    /// A proposal: `block_size` greedy drafts after `anchor` with their
    /// confidences, and what was computed on the way.
    pub fn forward_spec(&self, anchor: u32) -> Result<(Vec<u32>, Vec<f32>, Capture)> {
        let w = &self.w;
        let (d, g) = (w.cfg.hidden_size, w.ds.block_size);
        let crate::model::Backbone { tokens, collapsed, outputs: block_outputs } = self.backbone(anchor)?;
        let mut normed = collapsed.clone();
        rms_norm(&mut normed, d, Some(&w.norm), w.cfg.rms_norm_eps as f32);
        let base = linear(&normed, g, &w.head);
        let heads = markov_heads(w, anchor, &collapsed, &base, |e| Ok(linear(e, 1, &w.markov_w2)))?;
        let (main_hidden, main_x) = self.last_commit();
        let cap = Capture {
            main_hidden: main_hidden.to_vec(),
            main_x: main_x.to_vec(),
            block_outputs,
            block_tokens: tokens,
            collapsed,
            logits_base: base,
            logits_markov: heads.logits,
            markov_embed: heads.embed,
        };
        Ok((heads.drafts, heads.conf, cap))
    }
}

/// What the heads give for one block.
pub struct Heads {
    pub drafts: Vec<u32>,
    pub conf: Vec<f32>,
    /// Logits after the Markov bias `[block, vocab]`.
    pub logits: Vec<f32>,
    /// `W1[prev_k]` per slot `[block, rank]`.
    pub embed: Vec<f32>,
}

/// The Markov and confidence heads over a block's collapsed rows
/// `[block, hidden]` and base logits `[block, vocab]`, slot by slot (each
/// slot's `prev` is the previous pick). `bias(e)` computes `W2 . e`, on
/// whichever device holds `W2`; the rest runs here, so every realization
/// picks and scores with the same code.
pub fn markov_heads(
    w: &DsparkWeights,
    anchor: u32,
    collapsed: &[f32],
    base: &[f32],
    mut bias: impl FnMut(&[f32]) -> Result<Vec<f32>>,
) -> Result<Heads> {
    let (d, v, r, g) = (w.cfg.hidden_size, w.cfg.vocab_size, w.ds.markov_rank, w.ds.block_size);
    let mut h =
        Heads { drafts: Vec::with_capacity(g), conf: Vec::with_capacity(g), logits: Vec::new(), embed: Vec::new() };
    let mut prev = anchor;
    let mut e = vec![0.0f32; r];
    let mut joint = vec![0.0f32; d + r];
    for k in 0..g {
        w.markov_w1.decode_row(prev as usize, &mut e);
        let b = bias(&e)?;
        let logits: Vec<f32> = (0..v).map(|t| base[k * v + t] + b[t]).collect();
        let pick = argmax(&logits);
        joint[..d].copy_from_slice(&collapsed[k * d..(k + 1) * d]);
        joint[d..].copy_from_slice(&e);
        let z = dot(&w.confidence, &joint);
        h.conf.push((1.0 / (1.0 + (-z).exp())) as f32);
        h.logits.extend_from_slice(&logits);
        h.embed.extend_from_slice(&e);
        h.drafts.push(pick);
        prev = pick;
    }
    Ok(h)
}
