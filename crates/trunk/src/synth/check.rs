//! Is a (synthetic) model's arithmetic in a realistic range? Runs a prompt
//! through the CPU oracle and reports, per layer, the residual streams' RMS
//! and largest magnitude, and for the logits their spread and how peaked the
//! next-token distribution is.

use anyhow::Result;

use crate::cpu::{CpuOracle, LayerStat, Logits};
use crate::generate::random_prompt;

#[derive(Clone, Debug)]
pub struct ActivationReport {
    pub layers: Vec<LayerStat>,
    /// Mean over positions of the logits' standard deviation.
    pub logit_std: f64,
    /// Mean over positions of top-1 minus top-2 logit.
    pub top_gap: f64,
    /// Mean over positions of the top-1 softmax probability.
    pub top_prob: f64,
    pub all_finite: bool,
}

impl ActivationReport {
    /// Problems a realistic model must not have (empty when fine).
    pub fn problems(&self) -> Vec<String> {
        let mut p = Vec::new();
        if !self.all_finite {
            p.push("non-finite activations or logits".to_string());
        }
        for s in &self.layers {
            if !(s.rms > 0.05 && s.rms < 100.0) {
                p.push(format!("layer {}: residual RMS {:.3e} outside [0.05, 100]", s.layer, s.rms));
            }
            if s.max_abs > 1e4 {
                p.push(format!("layer {}: max |x| {:.3e} (saturation risk)", s.layer, s.max_abs));
            }
        }
        if self.logit_std < 0.5 {
            p.push(format!("logits flat: mean std {:.3}", self.logit_std));
        }
        if self.top_gap < 0.05 {
            p.push(format!("top-1/top-2 gap {:.3} (greedy picks would be near-ties)", self.top_gap));
        }
        p
    }

    pub fn render(&self) -> String {
        let mut s = String::from("layer  residual_rms  max_abs\n");
        for l in &self.layers {
            s += &format!("{:>5}  {:>12.4}  {:>7.3}\n", l.layer, l.rms, l.max_abs);
        }
        s += &format!(
            "logits: mean std {:.3}, mean top1-top2 gap {:.3}, mean top-1 probability {:.3}\n",
            self.logit_std, self.top_gap, self.top_prob
        );
        s
    }
}

/// Run `n` seeded tokens through the oracle and measure.
pub fn activation_report(oracle: &CpuOracle, n: usize) -> Result<ActivationReport> {
    let cfg = &oracle.weights.config;
    let prompt = random_prompt(n, 1, 2, cfg.vocab_size as u32);
    let mut state = oracle.new_state(n);
    let mut layers = Vec::new();
    let logits = oracle.forward_probe(&mut state, &prompt, Logits::All, Some(&mut layers))?;
    let v = cfg.vocab_size;
    let (mut std, mut gap, mut prob) = (0.0, 0.0, 0.0);
    for row in logits.chunks(v) {
        let mean = row.iter().map(|&x| x as f64).sum::<f64>() / v as f64;
        std += (row.iter().map(|&x| (x as f64 - mean).powi(2)).sum::<f64>() / v as f64).sqrt();
        let top = crate::generate::top_k(row, 2);
        gap += (top[0].1 - top[1].1) as f64;
        let z: f64 = row.iter().map(|&x| ((x - top[0].1) as f64).exp()).sum();
        prob += 1.0 / z;
    }
    let rows = (logits.len() / v) as f64;
    Ok(ActivationReport {
        all_finite: logits.iter().all(|x| x.is_finite()) && layers.iter().all(|l| l.finite),
        layers,
        logit_std: std / rows,
        top_gap: gap / rows,
        top_prob: prob / rows,
    })
}
