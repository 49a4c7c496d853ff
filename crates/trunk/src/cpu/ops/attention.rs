//! Sparse attention with a sink: one shared K=V head, `n_heads` query heads.
//!
//! For a query head `q` and key rows `k_j` (window rows and selected
//! compressed entries): `l_j = q . k_j * scale`; a per-head sink logit `s`
//! joins the softmax but carries no value; `out = sum_j p_j k_j` over the
//! full row (the rope dims too; the caller rotates the output back).

use super::linear::{dot, linear, linear_rows};
use super::norm::rms_norm;
use super::quant::Variant;
use super::rope::Rope;
use crate::config::Dsv4Config;
use crate::weights::model::AttnWeights;

/// Queries, keys and the indexer's query input of a chunk.
pub struct QKV {
    /// The low-rank query latent as the FP8 products read it.
    pub qrq: Vec<f32>,
    /// `[n, heads, hd]`, per-head RMS-normalized and rotated.
    pub q: Vec<f32>,
    /// `[n, hd]` K=V rows, normalized, rotated, as stored in the cache.
    pub kv: Vec<f32>,
}

/// `q = rope(rms(wq_b(q_norm(wq_a h))))`, `kv = rope(kv_norm(wkv h))` at `positions`.
pub fn project_qkv(cfg: &Dsv4Config, aw: &AttnWeights, h: &[f32], positions: &[usize], rope: &Rope, v: Variant) -> QKV {
    let n = positions.len();
    let (d, nh, hd, rd) = (cfg.hidden_size, cfg.num_attention_heads, cfg.head_dim, cfg.rope_dim);
    let eps = cfg.rms_norm_eps as f32;
    let hq = v.act(h, d);
    let mut qr = linear(&hq, n, &aw.wq_a);
    rms_norm(&mut qr, cfg.q_lora_rank, Some(&aw.q_norm), eps);
    let qrq = v.act(&qr, cfg.q_lora_rank).into_owned();
    let mut q = linear(&qrq, n, &aw.wq_b);
    rms_norm(&mut q, hd, None, eps);
    let mut kv = linear(&hq, n, &aw.wkv);
    rms_norm(&mut kv, hd, Some(&aw.kv_norm), eps);
    for (i, &p) in positions.iter().enumerate() {
        let (cos, sin) = rope.cos_sin(p);
        for head in q[i * nh * hd..(i + 1) * nh * hd].chunks_mut(hd) {
            rope.apply_with(head, &cos, &sin, false);
        }
        let r = &mut kv[i * hd..(i + 1) * hd];
        rope.apply_with(r, &cos, &sin, false);
        v.kv(r, rd);
    }
    QKV { qrq, q, kv }
}

/// The grouped low-rank output projection: group `g` of the heads through
/// rows `g*o_lora..` of `wo_a`, all groups through `wo_b`. `out` is `[n, heads*hd]`.
pub fn grouped_output(cfg: &Dsv4Config, aw: &AttnWeights, out: &[f32], n: usize, v: Variant) -> Vec<f32> {
    let (nh, hd, g, ol) = (cfg.num_attention_heads, cfg.head_dim, cfg.o_groups, cfg.o_lora_rank);
    let gin = nh * hd / g;
    let mut oa = vec![0.0f32; n * g * ol];
    for gi in 0..g {
        let xs: Vec<f32> =
            (0..n).flat_map(|i| out[i * nh * hd + gi * gin..i * nh * hd + (gi + 1) * gin].iter().copied()).collect();
        let y = linear_rows(&xs, n, &aw.wo_a, gi * ol, ol);
        for i in 0..n {
            oa[(i * g + gi) * ol..(i * g + gi + 1) * ol].copy_from_slice(&y[i * ol..(i + 1) * ol]);
        }
    }
    let oaq = v.act(&oa, g * ol);
    linear(&oaq, n, &aw.wo_b)
}

/// `q` is `[n_heads, hd]`, `keys` the rows attended; returns `[n_heads, hd]`.
pub fn attend(q: &[f32], keys: &[&[f32]], sinks: &[f32], hd: usize, scale: f64) -> Vec<f32> {
    let n_heads = q.len() / hd;
    let mut out = vec![0.0f32; n_heads * hd];
    let mut logits = vec![0.0f64; keys.len()];
    for h in 0..n_heads {
        let qh = &q[h * hd..(h + 1) * hd];
        let mut mx = sinks[h] as f64;
        for (l, k) in logits.iter_mut().zip(keys) {
            *l = dot(qh, k) * scale;
            mx = mx.max(*l);
        }
        let mut denom = (sinks[h] as f64 - mx).exp();
        for l in logits.iter_mut() {
            *l = (*l - mx).exp();
            denom += *l;
        }
        let mut acc = vec![0.0f64; hd];
        for (p, k) in logits.iter().zip(keys) {
            for (a, &kv) in acc.iter_mut().zip(k.iter()) {
                *a += p * kv as f64;
            }
        }
        for (o, a) in out[h * hd..(h + 1) * hd].iter_mut().zip(acc) {
            *o = (a / denom) as f32;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dominant_sink_silences_the_output() {
        let hd = 4;
        let q = vec![1.0f32; hd];
        let k = vec![0.5f32; hd];
        let o = attend(&q, &[&k], &[100.0], hd, 0.5);
        assert!(o.iter().all(|v| v.abs() < 1e-20));
        let o = attend(&q, &[&k], &[-100.0], hd, 0.5);
        assert!(o.iter().all(|v| (v - 0.5).abs() < 1e-6));
    }
}
