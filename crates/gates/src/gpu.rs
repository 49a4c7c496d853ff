//! The GPU forward as a gate realization, and the GPU-against-CPU
//! comparison (per-layer residual divergence and final logits).

use anyhow::Result;
use serde::Serialize;

use crate::tf::TeacherForced;
use trunk::cpu::{CpuOracle, Logits};
use trunk::gpu::Dsv4Gpu;

/// Teacher forcing on the GPU: chunked prefill of the prompt, then one
/// decode step per banked token.
pub struct GpuRealization<'a> {
    pub gpu: &'a Dsv4Gpu,
    pub prefill_chunk: usize,
}

impl TeacherForced for GpuRealization<'_> {
    fn logits(&self, prompt: &[u32], tokens: &[u32]) -> Result<Vec<f32>> {
        let w = self.prefill_chunk.min(prompt.len()).max(1);
        let mut st = self.gpu.alloc_decode_state_for_transient(prompt.len() + tokens.len(), w)?;
        let mut out = self.gpu.prefill_with_cache_chunked(&mut st, prompt, w, Logits::Last)?;
        for &t in &tokens[..tokens.len().saturating_sub(1)] {
            out.extend(self.gpu.decode_step(&mut st, t)?);
        }
        Ok(out)
    }
    fn vocab(&self) -> usize {
        self.gpu.config.vocab_size
    }
    fn describe(&self) -> String {
        format!(
            "gpu/{} devices {:?} experts {:?} moe {:?} sums {:?}{}",
            self.gpu.opts.variant,
            self.gpu.devices(),
            self.gpu.weights.expert_arm,
            self.gpu.opts.moe,
            self.gpu.opts.sums,
            self.gpu.opts.fault.map(|f| format!(" FAULT {f:?}")).unwrap_or_default()
        )
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct LayerDivergence {
    pub layer: usize,
    /// max |gpu - cpu| / max |cpu| over the layer's residual streams
    pub max_rel: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct Comparison {
    pub positions: usize,
    pub layers: Vec<LayerDivergence>,
    /// max over positions of max |gpu - cpu| / max |cpu|
    pub logits_max_rel: f64,
    pub argmax_agreement: f64,
}

fn rel(a: &[f32], b: &[f32]) -> f64 {
    let scale = b.iter().fold(0.0f32, |m, x| m.max(x.abs())) as f64;
    let d = a.iter().zip(b).fold(0.0f32, |m, (x, y)| m.max((x - y).abs())) as f64;
    d / scale.max(1e-30)
}

/// Run `tokens` as one chunk through both and compare every layer.
pub fn compare(cpu: &CpuOracle, gpu: &Dsv4Gpu, tokens: &[u32]) -> Result<Comparison> {
    let v = gpu.config.vocab_size;
    let mut cst = cpu.new_state(tokens.len());
    let mut stats = Vec::new();
    let mut probe = CpuOracle::new(cpu.weights.clone(), cpu.variant);
    probe.capture_residuals = true;
    let cl = probe.forward_probe(&mut cst, tokens, Logits::All, Some(&mut stats))?;
    let mut gst = gpu.alloc_decode_state_for(tokens.len())?;
    let (gl, gres) = gpu.forward_capture(&mut gst, tokens, Logits::All)?;
    let layers = stats
        .iter()
        .zip(&gres)
        .map(|(s, g)| LayerDivergence { layer: s.layer, max_rel: rel(g, s.residual.as_deref().unwrap_or(&[])) })
        .collect();
    let mut worst = 0.0f64;
    let mut agree = 0usize;
    for (a, b) in gl.chunks(v).zip(cl.chunks(v)) {
        worst = worst.max(rel(a, b));
        agree += (trunk::generate::argmax(a) == trunk::generate::argmax(b)) as usize;
    }
    Ok(Comparison {
        positions: tokens.len(),
        layers,
        logits_max_rel: worst,
        argmax_agreement: agree as f64 / tokens.len() as f64,
    })
}
