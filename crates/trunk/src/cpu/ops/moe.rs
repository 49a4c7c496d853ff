//! The MoE block: routing and clamped SwiGLU experts.
//!
//! Routing: router logits `x . gate`, scores `sqrt(softplus(logits))` (or
//! sigmoid/softmax); score layers pick the top-k of `scores + bias`, hash
//! layers read `tid2eid[token]`; the chosen unbiased scores are renormalized
//! (`/ (sum + 1e-20)`) and scaled by `routed_scaling_factor`.
//! Expert: `g = min(x W1, lim)`, `u = clamp(x W3, -lim, lim)`,
//! `h = silu(g) u * weight`, `y = h W2` (the routing weight multiplies before
//! the down projection, as the reference does).

use anyhow::bail;

use super::linear::linear;
use super::quant::Variant;
use crate::config::{Dsv4Config, ScoringFunc};
use crate::weights::model::{ExpertWeights, MoeWeights};

/// How the routed experts are scheduled: all selected experts of a token
/// together (fused; on the GPU one launch per projection), or one expert at a
/// time over the tokens routed to it. Both arms give identical bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum MoeArm {
    /// Token-major: each token's selected experts together.
    #[default]
    Fused,
    /// Expert-major: each expert over the tokens routed to it.
    PerExpert,
}

impl std::str::FromStr for MoeArm {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> anyhow::Result<Self> {
        match s {
            "fused" => Ok(MoeArm::Fused),
            "per-expert" => Ok(MoeArm::PerExpert),
            _ => bail!("unknown MoE arm `{s}` (fused or per-expert)"),
        }
    }
}

/// The experts and weights of one token.
#[derive(Clone, Debug, PartialEq)]
pub struct Route {
    pub experts: Vec<usize>,
    pub weights: Vec<f64>,
}

fn softplus(x: f64) -> f64 {
    // torch's softplus: linear above the threshold 20
    if x > 20.0 {
        x
    } else {
        x.exp().ln_1p()
    }
}

/// Route one token from its router logits.
pub fn route(cfg: &Dsv4Config, w: &MoeWeights, logits: &[f32], token: u32) -> Route {
    let scores: Vec<f64> = match cfg.scoring_func {
        ScoringFunc::SqrtSoftplus => logits.iter().map(|&l| softplus(l as f64).sqrt()).collect(),
        ScoringFunc::Sigmoid => logits.iter().map(|&l| 1.0 / (1.0 + (-(l as f64)).exp())).collect(),
        ScoringFunc::Softmax => {
            let mx = logits.iter().fold(f32::NEG_INFINITY, |m, &l| m.max(l)) as f64;
            let e: Vec<f64> = logits.iter().map(|&l| (l as f64 - mx).exp()).collect();
            let s: f64 = e.iter().sum();
            e.into_iter().map(|v| v / s).collect()
        }
    };
    let k = cfg.num_experts_per_tok;
    let experts: Vec<usize> = match &w.tid2eid {
        Some(t) => t[token as usize * k..(token as usize + 1) * k].iter().map(|&e| e as usize).collect(),
        None => {
            let bias = w.bias.as_deref();
            let biased: Vec<f64> =
                scores.iter().enumerate().map(|(e, s)| s + bias.map_or(0.0, |b| b[e] as f64)).collect();
            let mut idx: Vec<usize> = (0..scores.len()).collect();
            idx.sort_by(|&a, &b| biased[b].total_cmp(&biased[a]).then(a.cmp(&b)));
            idx.truncate(k);
            idx
        }
    };
    let mut weights: Vec<f64> = experts.iter().map(|&e| scores[e]).collect();
    if cfg.norm_topk_prob {
        let s: f64 = weights.iter().sum::<f64>() + 1e-20;
        for v in &mut weights {
            *v /= s;
        }
    }
    for v in &mut weights {
        *v *= cfg.routed_scaling_factor;
    }
    Route { experts, weights }
}

/// One expert on `n` rows of `x` with per-row routing weights; returns `[n, D]`.
pub fn expert_forward(
    e: &ExpertWeights,
    x: &[f32],
    n: usize,
    weights: &[f64],
    limit: f32,
    variant: Variant,
) -> Vec<f32> {
    let d = e.w1.cols;
    let inter = e.w1.rows;
    let xq = variant.act(x, d);
    let g = linear(&xq, n, &e.w1);
    let u = linear(&xq, n, &e.w3);
    let mut h = vec![0.0f32; n * inter];
    for r in 0..n {
        for i in 0..inter {
            let gv = g[r * inter + i].min(limit) as f64;
            let uv = u[r * inter + i].clamp(-limit, limit) as f64;
            let silu = gv / (1.0 + (-gv).exp());
            h[r * inter + i] = (silu * uv * weights[r]) as f32;
        }
    }
    let hq = variant.act(&h, inter);
    linear(&hq, n, &e.w2)
}

/// The MoE block on `n` rows: routed experts plus the shared expert.
pub fn moe_forward(
    cfg: &Dsv4Config,
    w: &MoeWeights,
    x: &[f32],
    tokens: &[u32],
    variant: Variant,
    arm: MoeArm,
) -> (Vec<f32>, Vec<Route>) {
    let n = tokens.len();
    let d = cfg.hidden_size;
    let limit = cfg.swiglu_limit as f32;
    let logits = linear(x, n, &w.gate);
    let routes: Vec<Route> =
        (0..n).map(|i| route(cfg, w, &logits[i * w.gate.rows..(i + 1) * w.gate.rows], tokens[i])).collect();
    // contributions per (token, slot), summed in slot order in f64
    let mut acc = vec![0.0f64; n * d];
    let shared = expert_forward(&w.shared, x, n, &vec![1.0; n], limit, variant);
    // work items: (expert, its rows); expert-major groups rows per expert,
    // token-major keeps every (token, slot) on its own
    let mut by_expert: Vec<(usize, Vec<(usize, usize)>)> = Vec::new();
    match arm {
        MoeArm::PerExpert => {
            let mut g: Vec<Vec<(usize, usize)>> = vec![Vec::new(); w.experts.len()];
            for (i, r) in routes.iter().enumerate() {
                for (slot, &e) in r.experts.iter().enumerate() {
                    g[e].push((i, slot));
                }
            }
            by_expert.extend(g.into_iter().enumerate());
        }
        MoeArm::Fused => {
            for (i, r) in routes.iter().enumerate() {
                for (slot, &e) in r.experts.iter().enumerate() {
                    by_expert.push((e, vec![(i, slot)]));
                }
            }
        }
    }
    let k = cfg.num_experts_per_tok;
    let mut per_slot = vec![0.0f32; n * k * d];
    for (e, rows) in by_expert.iter() {
        let e = *e;
        if rows.is_empty() {
            continue;
        }
        let xs: Vec<f32> = rows.iter().flat_map(|&(i, _)| x[i * d..(i + 1) * d].iter().copied()).collect();
        let ws: Vec<f64> = rows.iter().map(|&(i, s)| routes[i].weights[s]).collect();
        let y = expert_forward(&w.experts[e], &xs, rows.len(), &ws, limit, variant);
        for (j, &(i, s)) in rows.iter().enumerate() {
            per_slot[(i * k + s) * d..(i * k + s + 1) * d].copy_from_slice(&y[j * d..(j + 1) * d]);
        }
    }
    for i in 0..n {
        for s in 0..routes[i].experts.len() {
            for c in 0..d {
                acc[i * d + c] += per_slot[(i * k + s) * d + c] as f64;
            }
        }
        for c in 0..d {
            acc[i * d + c] += shared[i * d + c] as f64;
        }
    }
    (acc.into_iter().map(|v| v as f32).collect(), routes)
}
