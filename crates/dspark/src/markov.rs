//! The Markov head and the confidence head. Slot k's base logits `U_k` get
//! the low-rank bigram bias `W2 . W1[prev_k]` (`prev_1` = the anchor, then
//! each slot's greedy pick), and the confidence `sigmoid(w . [x_k ; W1[prev_k]])`
//! estimates the probability that the slot's draft survives verification.

use anyhow::Result;

use trunk::cpu::ops::linear::{dot, linear};
use trunk::cpu::ops::norm::rms_norm;
use trunk::generate::argmax;

use crate::model::{Capture, Dspark};

impl Dspark {
    /// A proposal: `block_size` greedy drafts after `anchor` with their
    /// confidences, and what was computed on the way.
    pub fn forward_spec(&self, anchor: u32) -> Result<(Vec<u32>, Vec<f32>, Capture)> {
        let w = &self.w;
        let (d, v, r) = (w.cfg.hidden_size, w.cfg.vocab_size, w.ds.markov_rank);
        let g = w.ds.block_size;
        let crate::model::Backbone { tokens, collapsed, outputs: block_outputs } = self.backbone(anchor)?;
        let mut normed = collapsed.clone();
        rms_norm(&mut normed, d, Some(&w.norm), w.cfg.rms_norm_eps as f32);
        let base = linear(&normed, g, &w.head);
        let (main_hidden, main_x) = self.last_commit();
        let mut cap = Capture {
            main_hidden: main_hidden.to_vec(),
            main_x: main_x.to_vec(),
            block_outputs,
            block_tokens: tokens,
            collapsed,
            logits_base: base.clone(),
            ..Default::default()
        };
        let mut drafts = Vec::with_capacity(g);
        let mut conf = Vec::with_capacity(g);
        let mut prev = anchor;
        let mut e = vec![0.0f32; r];
        let mut joint = vec![0.0f32; d + r];
        for k in 0..g {
            w.markov_w1.decode_row(prev as usize, &mut e);
            let bias = linear(&e, 1, &w.markov_w2);
            let logits: Vec<f32> = (0..v).map(|t| base[k * v + t] + bias[t]).collect();
            let pick = argmax(&logits);
            joint[..d].copy_from_slice(&cap.collapsed[k * d..(k + 1) * d]);
            joint[d..].copy_from_slice(&e);
            let z = dot(&w.confidence, &joint);
            conf.push((1.0 / (1.0 + (-z).exp())) as f32);
            cap.logits_markov.extend_from_slice(&logits);
            cap.markov_embed.extend_from_slice(&e);
            drafts.push(pick);
            prev = pick;
        }
        Ok((drafts, conf, cap))
    }
}
