//! The CPU oracle: the full DSV4 forward in f32 with f64 accumulation, over
//! a chunk of tokens at the state's next positions. Prefill is one chunk of
//! the whole prompt, decode a chunk of one token; any chunking of a sequence
//! computes the same function (the cache holds everything a later position
//! reads).

use std::sync::Arc;

use anyhow::{bail, Result};
use kvstate::{HostState, StateStore};

use super::ops::attention::{attend, grouped_output, project_qkv, QKV};
use super::ops::compressor::pool_entry;
use super::ops::hc::{collapse, hc_head, hc_post, hc_pre, stream_mean_taps};
use super::ops::indexer::{scores, top_k};
use super::ops::linear::linear;
use super::ops::moe::moe_forward;
use super::ops::norm::rms_norm;
use super::ops::quant::Variant;
use super::ops::rope::Rope;
use crate::config::AttnKind;
use crate::state::{Dsv4StateLayout, LayerClasses};
use crate::weights::model::{CompressorWeights, Dsv4Weights, LayerWeights};

/// Which rows of a chunk get logits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Logits {
    All,
    Last,
    None,
}

/// Residual-stream statistics of one layer (for range checks of weights).
#[derive(Clone, Debug, Default)]
pub struct LayerStat {
    pub layer: usize,
    pub rms: f64,
    pub max_abs: f64,
    pub finite: bool,
    /// The residual streams after the layer, when asked for (`[n, hc, d]`).
    pub residual: Option<Vec<f32>>,
}

pub struct CpuOracle {
    pub weights: Arc<Dsv4Weights>,
    pub variant: Variant,
    pub state_layout: Dsv4StateLayout,
    rope_main: Rope,
    rope_compress: Rope,
    /// Keep each layer's residual streams in `LayerStat` (debugging aid).
    pub capture_residuals: bool,
    /// How the routed experts are scheduled (identical bits either way).
    pub moe: crate::cpu::ops::moe::MoeArm,
}

impl CpuOracle {
    pub fn new(weights: Arc<Dsv4Weights>, variant: Variant) -> Self {
        let cfg = &weights.config;
        CpuOracle {
            state_layout: Dsv4StateLayout::new(cfg, 0),
            rope_main: Rope::main(cfg),
            rope_compress: Rope::compress(cfg),
            weights,
            variant,
            capture_residuals: false,
            moe: Default::default(),
        }
    }

    /// Use a layout with `slack` extra ring rows (speculative rollback).
    pub fn with_slack(mut self, slack: usize) -> Self {
        self.state_layout = Dsv4StateLayout::new(&self.weights.config, slack);
        self
    }

    pub fn new_state(&self, capacity: usize) -> HostState {
        HostState::new(self.state_layout.layout.clone(), capacity)
    }

    /// Run `tokens` at the state's next positions; returns logits
    /// `[rows, vocab]` for the rows `which` asks for.
    pub fn forward(&self, state: &mut HostState, tokens: &[u32], which: Logits) -> Result<Vec<f32>> {
        self.forward_probe(state, tokens, which, None)
    }

    /// `forward` that also returns, per token, the mean over the
    /// hyper-connection streams of the output of each layer in `tap_layers`,
    /// concatenated (`tokens.len() * tap_layers.len() * hidden` floats): what
    /// a drafter such as DSpark reads.
    pub fn forward_taps(
        &self,
        state: &mut HostState,
        tokens: &[u32],
        which: Logits,
        tap_layers: &[usize],
    ) -> Result<(Vec<f32>, Vec<f32>)> {
        let mut taps = Vec::new();
        let l = self.forward_inner(state, tokens, which, None, Some((tap_layers, &mut taps)))?;
        Ok((l, taps))
    }

    /// `forward`, recording per-layer statistics (and the residual streams
    /// when `capture_residuals`) into `stats`.
    pub fn forward_probe(
        &self,
        state: &mut HostState,
        tokens: &[u32],
        which: Logits,
        stats: Option<&mut Vec<LayerStat>>,
    ) -> Result<Vec<f32>> {
        self.forward_inner(state, tokens, which, stats, None)
    }

    fn forward_inner(
        &self,
        state: &mut HostState,
        tokens: &[u32],
        which: Logits,
        mut stats: Option<&mut Vec<LayerStat>>,
        mut taps: Option<(&[usize], &mut Vec<f32>)>,
    ) -> Result<Vec<f32>> {
        let w = &*self.weights;
        let cfg = &w.config;
        let (d, hc) = (cfg.hidden_size, cfg.hc_mult);
        let n = tokens.len();
        if n == 0 {
            bail!("no tokens");
        }
        if !self.state_layout.accepts(state.layout()) {
            bail!("state layout does not match this model's layout");
        }
        let t0 = state.positions();
        if t0 + n > state.capacity() {
            bail!("state capacity {} positions: cannot add {n} tokens at position {t0}", state.capacity());
        }
        for &t in tokens {
            if t as usize >= cfg.vocab_size {
                bail!("token id {t} is outside the vocabulary ({})", cfg.vocab_size);
            }
        }
        let positions: Vec<usize> = (t0..t0 + n).collect();
        // residual streams [n, hc, d]
        let mut x = vec![0.0f32; n * hc * d];
        let mut row = vec![0.0f32; d];
        for (i, &t) in tokens.iter().enumerate() {
            w.embed.decode_row(t as usize, &mut row);
            for j in 0..hc {
                x[(i * hc + j) * d..(i * hc + j + 1) * d].copy_from_slice(&row);
            }
        }
        let eps = cfg.rms_norm_eps as f32;
        let hc_eps = cfg.hc_eps as f32;
        let mut tap_outputs: Vec<(usize, Vec<f32>)> = Vec::new();
        for (l, lw) in w.layers.iter().enumerate() {
            let lc = self.state_layout.layers[l];
            // attention site
            let mixes: Vec<_> = (0..n)
                .map(|i| hc_pre(&lw.hc_attn, &x[i * hc * d..(i + 1) * hc * d], hc, cfg.hc_sinkhorn_iters, hc_eps, eps))
                .collect();
            let mut h: Vec<f32> =
                (0..n).flat_map(|i| collapse(&mixes[i].pre, &x[i * hc * d..(i + 1) * hc * d], d)).collect();
            rms_norm(&mut h, d, Some(&lw.attn_norm), eps);
            let a = self.attention(l, lw, lc, state, &h, &positions)?;
            for i in 0..n {
                hc_post(&mixes[i], &a[i * d..(i + 1) * d], &mut x[i * hc * d..(i + 1) * hc * d], d);
            }
            // ffn site
            let mixes: Vec<_> = (0..n)
                .map(|i| hc_pre(&lw.hc_ffn, &x[i * hc * d..(i + 1) * hc * d], hc, cfg.hc_sinkhorn_iters, hc_eps, eps))
                .collect();
            let mut h: Vec<f32> =
                (0..n).flat_map(|i| collapse(&mixes[i].pre, &x[i * hc * d..(i + 1) * hc * d], d)).collect();
            rms_norm(&mut h, d, Some(&lw.ffn_norm), eps);
            let (m, _) = moe_forward(cfg, &lw.ffn, &h, tokens, self.variant, self.moe);
            for i in 0..n {
                hc_post(&mixes[i], &m[i * d..(i + 1) * d], &mut x[i * hc * d..(i + 1) * hc * d], d);
            }
            if let Some((layers, _)) = &taps {
                if layers.contains(&l) {
                    tap_outputs.push((l, x.clone()));
                }
            }
            if let Some(s) = stats.as_deref_mut() {
                let ss: f64 = x.iter().map(|&v| v as f64 * v as f64).sum();
                s.push(LayerStat {
                    layer: l,
                    rms: (ss / x.len() as f64).sqrt(),
                    max_abs: x.iter().fold(0.0f64, |m, &v| m.max((v as f64).abs())),
                    finite: x.iter().all(|v| v.is_finite()),
                    residual: if self.capture_residuals { Some(x.clone()) } else { None },
                });
            }
        }
        if let Some((layers, out)) = taps.as_mut() {
            if let Some(missing) = layers.iter().find(|l| !tap_outputs.iter().any(|(k, _)| k == *l)) {
                bail!("tap layer {missing}: the model has {} layers", w.layers.len());
            }
            let of = |layer: usize| tap_outputs.iter().find(|(k, _)| *k == layer).map(|(_, x)| x.as_slice()).unwrap();
            **out = stream_mean_taps(layers, n, hc, d, of);
        }
        state.set_positions(t0 + n);
        let rows: Vec<usize> = match which {
            Logits::All => (0..n).collect(),
            Logits::Last => vec![n - 1],
            Logits::None => vec![],
        };
        if rows.is_empty() {
            return Ok(Vec::new());
        }
        let mut y: Vec<f32> =
            rows.iter().flat_map(|&i| hc_head(&w.hc_head, &x[i * hc * d..(i + 1) * hc * d], d, hc_eps, eps)).collect();
        rms_norm(&mut y, d, Some(&w.norm), eps);
        Ok(linear(&y, rows.len(), &w.head))
    }

    /// Run a compressor over the chunk: append raw rows to `pending`, and
    /// for every window that closes, pool, normalize, rotate and store an
    /// entry in `entries`.
    #[allow(clippy::too_many_arguments)]
    fn compress(
        &self,
        state: &mut HostState,
        cw: &CompressorWeights,
        pending: usize,
        entries: usize,
        h: &[f32],
        positions: &[usize],
        ratio: usize,
        overlap: bool,
        finish: &dyn Fn(&mut [f32]),
    ) -> Result<()> {
        let n = positions.len();
        let width = cw.wkv.rows;
        let hd = cw.norm.len();
        let kv = linear(h, n, &cw.wkv);
        let gate = linear(h, n, &cw.wgate);
        let eps = self.weights.config.rms_norm_eps as f32;
        let mut raw = vec![0.0f32; 2 * width];
        for (i, &p) in positions.iter().enumerate() {
            raw[..width].copy_from_slice(&kv[i * width..(i + 1) * width]);
            raw[width..].copy_from_slice(&gate[i * width..(i + 1) * width]);
            state.push_row_f32(pending, &raw)?;
            if (p + 1) % ratio == 0 {
                let wi = p / ratio;
                let cur: Vec<&[f32]> =
                    (wi * ratio..(wi + 1) * ratio).map(|s| state.row_f32(pending, s as u64)).collect();
                let prev: Vec<&[f32]> = if overlap && wi > 0 {
                    ((wi - 1) * ratio..wi * ratio).map(|s| state.row_f32(pending, s as u64)).collect()
                } else {
                    Vec::new()
                };
                let mut e = pool_entry(&prev, &cur, &cw.ape, hd, overlap);
                rms_norm(&mut e, hd, Some(&cw.norm), eps);
                self.rope_compress.apply(&mut e, wi * ratio, false);
                finish(&mut e);
                state.push_row_f32(entries, &e)?;
            }
        }
        Ok(())
    }

    fn attention(
        &self,
        l: usize,
        lw: &LayerWeights,
        lc: LayerClasses,
        state: &mut HostState,
        h: &[f32],
        positions: &[usize],
    ) -> Result<Vec<f32>> {
        let cfg = &self.weights.config;
        let v = self.variant;
        let aw = &lw.attn;
        let n = positions.len();
        let (nh, hd, rd) = (cfg.num_attention_heads, cfg.head_dim, cfg.rope_dim);
        let kind = cfg.layer_types[l];
        let rope = if kind == AttnKind::Window { &self.rope_main } else { &self.rope_compress };
        let t0 = positions[0];

        let QKV { qrq, q, kv } = project_qkv(cfg, aw, h, positions, rope, v);

        // compressors (entries that close in this chunk are visible to it)
        let mut selected: Vec<Vec<usize>> = vec![Vec::new(); n];
        if let (Some(cw), Some(pend), Some(ent)) = (&aw.compressor, lc.comp_pending, lc.comp_entries) {
            let ratio = cfg.compress_ratio(l);
            let overlap = kind == AttnKind::Csa;
            let fin = move |e: &mut [f32]| v.kv(e, rd);
            self.compress(state, cw, pend, ent, h, positions, ratio, overlap, &fin)?;
            if kind == AttnKind::Hca {
                for (i, &p) in positions.iter().enumerate() {
                    selected[i] = (0..(p + 1) / ratio).collect();
                }
            }
        }
        if let (Some(iw), Some(pend), Some(ent)) = (&aw.indexer, lc.idx_pending, lc.idx_entries) {
            let ratio = cfg.csa_ratio;
            let fin = move |e: &mut [f32]| v.indexer(e);
            self.compress(state, &iw.compressor, pend, ent, h, positions, ratio, true, &fin)?;
            let (hi, di) = (cfg.index_n_heads, cfg.index_head_dim);
            let mut qi = linear(&qrq, n, &iw.wq_b);
            let wts: Vec<f32> = linear(h, n, &iw.weights_proj).iter().map(|x| x / (hi as f32).sqrt()).collect();
            for (i, &p) in positions.iter().enumerate() {
                let (cos, sin) = self.rope_compress.cos_sin(p);
                for head in qi[i * hi * di..(i + 1) * hi * di].chunks_mut(di) {
                    self.rope_compress.apply_with(head, &cos, &sin, false);
                    v.indexer(head);
                }
                let visible = (p + 1) / ratio;
                let keys: Vec<&[f32]> = (0..visible).map(|s| state.row_f32(ent, s as u64)).collect();
                let sc = scores(&qi[i * hi * di..(i + 1) * hi * di], &wts[i * hi..(i + 1) * hi], &keys, di);
                selected[i] = top_k(&sc, cfg.index_topk);
            }
        }

        // attention per query
        let win = cfg.sliding_window;
        let scale = 1.0 / (hd as f64).sqrt();
        let mut out = vec![0.0f32; n * nh * hd];
        for (i, &p) in positions.iter().enumerate() {
            let first = (p + 1).saturating_sub(win);
            let mut keys: Vec<&[f32]> = Vec::with_capacity(win + selected[i].len());
            for pos in first..=p {
                if pos < t0 {
                    keys.push(state.row_f32(lc.kv, pos as u64));
                } else {
                    keys.push(&kv[(pos - t0) * hd..(pos - t0 + 1) * hd]);
                }
            }
            if let Some(ent) = lc.comp_entries {
                for &s in &selected[i] {
                    keys.push(state.row_f32(ent, s as u64));
                }
            }
            let mut o = attend(&q[i * nh * hd..(i + 1) * nh * hd], &keys, &aw.sink, hd, scale);
            let (cos, sin) = rope.cos_sin(p);
            for head in o.chunks_mut(hd) {
                rope.apply_with(head, &cos, &sin, true);
            }
            out[i * nh * hd..(i + 1) * nh * hd].copy_from_slice(&o);
        }
        for i in 0..n {
            state.push_row_f32(lc.kv, &kv[i * hd..(i + 1) * hd])?;
        }

        Ok(grouped_output(cfg, aw, &out, n, v))
    }
}
