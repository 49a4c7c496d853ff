//! The KV compressors of CSA and HCA layers (and of the CSA indexer).
//!
//! Each token contributes a raw row `[kv | gate]` of width `2 * c * hd`
//! (`c = 2` for the overlapping CSA series, 1 for HCA). When a window of
//! `ratio` tokens closes, entry `w` pools per channel with a softmax over the
//! gate plus the learned position bias (`ape[slot]`):
//! - HCA: the window's `ratio` rows;
//! - CSA: the previous window's first-half rows (series a) and this window's
//!   second-half rows (series b), `2 * ratio` slots; window 0 has no previous.
//!
//! The pooled row is RMS-normalized with weight, then rotated at position
//! `w * ratio`.

/// Pool one entry. `prev` and `cur` hold the raw rows of the previous and the
/// current window (oldest first); `overlap` selects the CSA two-series form.
pub fn pool_entry(prev: &[&[f32]], cur: &[&[f32]], ape: &[f32], hd: usize, overlap: bool) -> Vec<f32> {
    let c = if overlap { 2 } else { 1 };
    let width = c * hd; // kv (and gate) width of a raw row
    let ratio = cur.len();
    let mut out = vec![0.0f32; hd];
    // (kv, gate) slots for channel i
    for i in 0..hd {
        let mut slots: Vec<(f64, f64)> = Vec::with_capacity(2 * ratio);
        if overlap {
            for (j, row) in prev.iter().enumerate() {
                slots.push((row[i] as f64, row[width + i] as f64 + ape[j * width + i] as f64));
            }
            for (j, row) in cur.iter().enumerate() {
                slots.push((row[hd + i] as f64, row[width + hd + i] as f64 + ape[j * width + hd + i] as f64));
            }
        } else {
            for (j, row) in cur.iter().enumerate() {
                slots.push((row[i] as f64, row[width + i] as f64 + ape[j * width + i] as f64));
            }
        }
        let mx = slots.iter().map(|s| s.1).fold(f64::NEG_INFINITY, f64::max);
        let mut den = 0.0;
        let mut num = 0.0;
        for (kv, g) in slots {
            let e = (g - mx).exp();
            den += e;
            num += e * kv;
        }
        out[i] = (num / den) as f32;
    }
    out
}
