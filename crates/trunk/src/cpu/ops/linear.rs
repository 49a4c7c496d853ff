//! `linear`: `y = x W^T` for a batch of rows, W in any stored format.
//!
//! Each output is one dot product of f32 operands accumulated in f64, so the
//! result is the exactly rounded sum up to f64 rounding (order-insensitive at
//! f32 precision). Work is split over weight rows; every output element is
//! computed by one thread in a fixed order, so results do not depend on the
//! thread count.

use rayon::prelude::*;

use crate::weights::matrix::Matrix;

/// Dot product of two f32 slices accumulated in f64.
#[inline]
pub fn dot(a: &[f32], b: &[f32]) -> f64 {
    debug_assert_eq!(a.len(), b.len());
    let mut acc = [0.0f64; 4];
    let n4 = a.len() / 4 * 4;
    for i in (0..n4).step_by(4) {
        acc[0] += a[i] as f64 * b[i] as f64;
        acc[1] += a[i + 1] as f64 * b[i + 1] as f64;
        acc[2] += a[i + 2] as f64 * b[i + 2] as f64;
        acc[3] += a[i + 3] as f64 * b[i + 3] as f64;
    }
    let mut s = (acc[0] + acc[1]) + (acc[2] + acc[3]);
    for i in n4..a.len() {
        s += a[i] as f64 * b[i] as f64;
    }
    s
}

/// `x` is `[n, w.cols]`; returns `[n, w.rows]`.
pub fn linear(x: &[f32], n: usize, w: &Matrix) -> Vec<f32> {
    linear_rows(x, n, w, 0, w.rows)
}

/// Only output rows `[r_start, r_start + rows)` of `w`: returns `[n, rows]`.
pub fn linear_rows(x: &[f32], n: usize, w: &Matrix, r_start: usize, rows: usize) -> Vec<f32> {
    let cols = w.cols;
    assert!(r_start + rows <= w.rows);
    assert_eq!(x.len(), n * cols, "linear: input has {} values, expected {n} x {cols}", x.len());
    const ROWS_PER_TASK: usize = 16;
    // results transposed: [rows, n]
    let mut yt = vec![0.0f32; rows * n];
    yt.par_chunks_mut(ROWS_PER_TASK * n).enumerate().for_each(|(task, out)| {
        let mut wrow = vec![0.0f32; cols];
        let r0 = r_start + task * ROWS_PER_TASK;
        for (k, o) in out.chunks_mut(n).enumerate() {
            w.decode_row(r0 + k, &mut wrow);
            for (i, oi) in o.iter_mut().enumerate() {
                *oi = dot(&x[i * cols..(i + 1) * cols], &wrow) as f32;
            }
        }
    });
    if n == 1 {
        return yt;
    }
    let mut y = vec![0.0f32; n * rows];
    for r in 0..rows {
        for i in 0..n {
            y[i * rows + r] = yt[r * n + i];
        }
    }
    y
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::weights::matrix::MatFormat;
    use crate::weights::tensor::Bytes;

    #[test]
    fn linear_matches_naive_f64() {
        let (n, rows, cols) = (3, 37, 19);
        let w: Vec<f32> = (0..rows * cols).map(|i| ((i * 7919 % 101) as f32 - 50.0) / 31.0).collect();
        let x: Vec<f32> = (0..n * cols).map(|i| ((i * 104729 % 97) as f32 - 48.0) / 17.0).collect();
        let bytes: Vec<u8> = w.iter().flat_map(|v| v.to_le_bytes()).collect();
        let m = Matrix { rows, cols, format: MatFormat::F32, data: Bytes::from_vec(bytes) };
        let y = linear(&x, n, &m);
        for i in 0..n {
            for r in 0..rows {
                let want: f64 = (0..cols).map(|k| x[i * cols + k] as f64 * w[r * cols + k] as f64).sum();
                assert_eq!(y[i * rows + r], want as f32, "({i},{r})");
            }
        }
    }
}
