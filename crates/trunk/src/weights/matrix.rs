//! `Matrix`: a 2-D weight `[rows, cols]` (output-major, like `nn.Linear`)
//! kept in its stored format and decoded row by row.

use std::sync::Arc;

use anyhow::{bail, Result};

use super::formats::*;
use super::tensor::{Bytes, DType, RawTensor};

/// How a matrix's bytes encode its values.
#[derive(Clone, Debug)]
pub enum MatFormat {
    F32,
    BF16,
    F16,
    /// FP8 E4M3 with one f32 scale per `block x block` tile, scale grid
    /// `[ceil(rows/block), ceil(cols/block)]` row-major.
    Fp8 {
        scales: Arc<Vec<f32>>,
        block: usize,
    },
    /// FP4 E2M1 packed two per byte along a row (low nibble = even column),
    /// one E8M0 scale per 32 columns: `scales[row * cols/32 + col/32]`.
    Fp4 {
        scales: Bytes,
    },
    /// ggml MXFP4 blocks (E8M0 byte + 16 bytes; low nibbles hold the first 16).
    Mxfp4,
    /// ggml Q8_0 blocks (f16 scale + 32 int8).
    Q8_0,
}

#[derive(Clone, Debug)]
pub struct Matrix {
    pub rows: usize,
    pub cols: usize,
    pub format: MatFormat,
    pub data: Bytes,
}

impl Matrix {
    /// Bytes of one stored row.
    pub fn row_bytes(&self) -> usize {
        match self.format {
            MatFormat::F32 => self.cols * 4,
            MatFormat::BF16 | MatFormat::F16 => self.cols * 2,
            MatFormat::Fp8 { .. } => self.cols,
            MatFormat::Fp4 { .. } => self.cols / 2,
            MatFormat::Mxfp4 => self.cols / 32 * 17,
            MatFormat::Q8_0 => self.cols / 32 * 34,
        }
    }

    /// Bytes the weights occupy as stored (scales included).
    pub fn stored_bytes(&self) -> usize {
        self.rows * self.row_bytes()
            + match &self.format {
                MatFormat::Fp8 { scales, .. } => scales.len(),
                MatFormat::Fp4 { scales } => scales.len(),
                _ => 0,
            }
    }

    /// Decode row `r` into `out` (`cols` values).
    pub fn decode_row(&self, r: usize, out: &mut [f32]) {
        debug_assert_eq!(out.len(), self.cols);
        let rb = self.row_bytes();
        let d = &self.data[r * rb..(r + 1) * rb];
        match &self.format {
            MatFormat::F32 => {
                for (o, c) in out.iter_mut().zip(d.chunks_exact(4)) {
                    *o = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
                }
            }
            MatFormat::BF16 => {
                for (o, c) in out.iter_mut().zip(d.chunks_exact(2)) {
                    *o = bf16_to_f32(u16::from_le_bytes([c[0], c[1]]));
                }
            }
            MatFormat::F16 => {
                for (o, c) in out.iter_mut().zip(d.chunks_exact(2)) {
                    *o = f16_to_f32(u16::from_le_bytes([c[0], c[1]]));
                }
            }
            MatFormat::Fp8 { scales, block } => {
                let gc = self.cols.div_ceil(*block);
                let srow = &scales[(r / block) * gc..(r / block + 1) * gc];
                for (j, (o, &b)) in out.iter_mut().zip(d).enumerate() {
                    *o = E4M3_TABLE[b as usize] * srow[j / block];
                }
            }
            MatFormat::Fp4 { scales } => {
                let nb = self.cols / 32;
                let srow = &scales[r * nb..(r + 1) * nb];
                for (blk, &s) in srow.iter().enumerate() {
                    let scale = e8m0_to_f32(s);
                    for k in 0..16 {
                        let byte = d[blk * 16 + k];
                        out[blk * 32 + 2 * k] = E2M1_TABLE[(byte & 0xF) as usize] * scale;
                        out[blk * 32 + 2 * k + 1] = E2M1_TABLE[(byte >> 4) as usize] * scale;
                    }
                }
            }
            MatFormat::Mxfp4 => {
                for (blk, b) in d.chunks_exact(17).enumerate() {
                    let scale = e8m0_to_f32(b[0]);
                    for k in 0..16 {
                        out[blk * 32 + k] = E2M1_TABLE[(b[1 + k] & 0xF) as usize] * scale;
                        out[blk * 32 + 16 + k] = E2M1_TABLE[(b[1 + k] >> 4) as usize] * scale;
                    }
                }
            }
            MatFormat::Q8_0 => {
                for (blk, b) in d.chunks_exact(34).enumerate() {
                    let scale = f16_to_f32(u16::from_le_bytes([b[0], b[1]]));
                    for k in 0..32 {
                        out[blk * 32 + k] = b[2 + k] as i8 as f32 * scale;
                    }
                }
            }
        }
    }

    /// All values, row-major.
    pub fn to_f32(&self) -> Vec<f32> {
        let mut out = vec![0.0f32; self.rows * self.cols];
        for r in 0..self.rows {
            self.decode_row(r, &mut out[r * self.cols..(r + 1) * self.cols]);
        }
        out
    }

    /// The same values stored as BF16. Exact for FP8/FP4/MXFP4 codes (at
    /// most 4 significant bits) under power-of-two scales; refuses formats
    /// and values it would round (an FP8 block scale that is not a power of
    /// two).
    pub fn to_bf16_exact(&self) -> Result<Matrix> {
        match self.format {
            MatFormat::Fp8 { .. } | MatFormat::Fp4 { .. } | MatFormat::Mxfp4 | MatFormat::BF16 => {}
            _ => bail!("to_bf16_exact: {:?} values are not all representable in bf16", self.format),
        }
        let vals = self.to_f32();
        let mut bytes = Vec::with_capacity(vals.len() * 2);
        for (i, v) in vals.into_iter().enumerate() {
            let b = f32_to_bf16(v);
            if bf16_to_f32(b).to_bits() != v.to_bits() {
                bail!(
                    "to_bf16_exact: row {} column {}: {v:e} is not a bf16 value (its block scale is not a power of two)",
                    i / self.cols,
                    i % self.cols
                );
            }
            bytes.extend_from_slice(&b.to_le_bytes());
        }
        Ok(Matrix { rows: self.rows, cols: self.cols, format: MatFormat::BF16, data: Bytes::from_vec(bytes) })
    }

    /// A matrix from a dense raw tensor `[rows, cols]`.
    pub fn from_dense(t: &RawTensor) -> Result<Matrix> {
        if t.shape.len() != 2 {
            bail!("expected a 2-D tensor, got shape {:?}", t.shape);
        }
        let format = match t.dtype {
            DType::F32 => MatFormat::F32,
            DType::BF16 => MatFormat::BF16,
            DType::F16 => MatFormat::F16,
            DType::Mxfp4 => MatFormat::Mxfp4,
            DType::Q8_0 => MatFormat::Q8_0,
            other => bail!("dtype {other:?} is not a dense matrix type (F32, BF16, F16, MXFP4, Q8_0)"),
        };
        Ok(Matrix { rows: t.shape[0], cols: t.shape[1], format, data: t.data.clone() })
    }

    /// Rows `[start, start+n)` as their own matrix (a view, no copy).
    pub fn row_range(&self, start: usize, n: usize) -> Matrix {
        assert!(start + n <= self.rows);
        let rb = self.row_bytes();
        let format = match &self.format {
            MatFormat::Fp8 { scales, block } => {
                assert!(
                    start.is_multiple_of(*block) && (n.is_multiple_of(*block) || start + n == self.rows),
                    "FP8 row split off a block"
                );
                let gc = self.cols.div_ceil(*block);
                let s = scales[(start / block) * gc..((start + n).div_ceil(*block)) * gc].to_vec();
                MatFormat::Fp8 { scales: Arc::new(s), block: *block }
            }
            MatFormat::Fp4 { scales } => {
                let nb = self.cols / 32;
                MatFormat::Fp4 { scales: scales.slice(start * nb, n * nb) }
            }
            f => f.clone(),
        };
        Matrix { rows: n, cols: self.cols, format, data: self.data.slice(start * rb, n * rb) }
    }
}

#[cfg(test)]
mod bf16_tests {
    use super::*;

    /// FP8 codes under a power-of-two scale convert exactly; under another
    /// scale (an f32 `weight_scale_inv` of a checkpoint) the conversion
    /// names the first value it would round instead of rounding it.
    #[test]
    fn bf16_conversion_is_exact_or_refused() {
        // 0x38 is E4M3 1.0, 0x3d is 1.625
        let m = |scale: f32| Matrix {
            rows: 2,
            cols: 2,
            format: MatFormat::Fp8 { scales: Arc::new(vec![scale]), block: 128 },
            data: Bytes::from_vec(vec![0x38, 0x3d, 0x00, 0xb8]),
        };
        let b = m(0.25).to_bf16_exact().unwrap();
        assert_eq!(b.to_f32(), m(0.25).to_f32());
        assert_eq!(b.to_f32(), vec![0.25, 0.40625, 0.0, -0.25]);
        let e = m(0.0123).to_bf16_exact().unwrap_err().to_string();
        assert!(e.contains("row 0 column 0") && e.contains("power of two"), "{e}");
    }
}
