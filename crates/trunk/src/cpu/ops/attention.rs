//! Sparse attention with a sink: one shared K=V head, `n_heads` query heads.
//!
//! For a query head `q` and key rows `k_j` (window rows and selected
//! compressed entries): `l_j = q . k_j * scale`; a per-head sink logit `s`
//! joins the softmax but carries no value; `out = sum_j p_j k_j` over the
//! full row (the rope dims too; the caller rotates the output back).

use super::linear::dot;

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
