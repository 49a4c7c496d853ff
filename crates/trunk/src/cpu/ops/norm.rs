//! RMSNorm: `x * rsqrt(mean(x^2) + eps)`, times a weight when given.
//! Sums in f64; one rounding to f32 per output.

/// Normalize `x` in place (rows of `width`), optionally scaling by `weight`.
pub fn rms_norm(x: &mut [f32], width: usize, weight: Option<&[f32]>, eps: f32) {
    for row in x.chunks_mut(width) {
        let ms = row.iter().map(|&v| v as f64 * v as f64).sum::<f64>() / width as f64;
        let r = 1.0 / (ms + eps as f64).sqrt();
        match weight {
            Some(w) => {
                for (v, &g) in row.iter_mut().zip(w) {
                    *v = (*v as f64 * r * g as f64) as f32;
                }
            }
            None => {
                for v in row.iter_mut() {
                    *v = (*v as f64 * r) as f32;
                }
            }
        }
    }
}

/// `1 / sqrt(mean(x^2) + eps)` of one row.
pub fn rms_inv(x: &[f32], eps: f32) -> f64 {
    let ms = x.iter().map(|&v| v as f64 * v as f64).sum::<f64>() / x.len() as f64;
    1.0 / (ms + eps as f64).sqrt()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unit_rms_after_norm() {
        let mut x: Vec<f32> = (0..64).map(|i| (i as f32 - 20.0) * 0.3).collect();
        rms_norm(&mut x, 32, None, 1e-6);
        for row in x.chunks(32) {
            let ms: f64 = row.iter().map(|&v| (v as f64).powi(2)).sum::<f64>() / 32.0;
            assert!((ms - 1.0).abs() < 1e-5, "{ms}");
        }
    }
}
