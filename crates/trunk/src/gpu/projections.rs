//! The blocks' products as the forward takes them: the activations'
//! quantization under the fp8 variant, and each attention projection on
//! the exact sums or, where [`ProductSums::Tensor`] takes its weights, the
//! tensor cores (gpu/products.rs has the launches).

use anyhow::Result;

use super::device::{Buf, Gpu};
use super::forward::Dsv4Gpu;
use super::options::ProductSums;
use super::state::Scratch;
use super::weights::DevMat;
use crate::cpu::Variant;

impl Dsv4Gpu {
    /// `dst = src` then FP8 rows when the variant quantizes; returns the address to read.
    pub(super) fn act(&self, g: &Gpu, src: &Buf<f32>, dst: &Buf<f32>, rows: usize, width: usize) -> Result<u64> {
        if self.opts.variant == Variant::Exact {
            return Ok(src.ptr);
        }
        g.act_fp8(src.ptr, dst.ptr, rows, width)
    }

    pub(super) fn lin(&self, g: &Gpu, w: &DevMat, x: u64, y: u64, n: usize) -> Result<()> {
        g.lin(w, x, y, n)
    }

    /// An attention projection (`Gpu::linear_grouped`'s arguments): on the
    /// `tensor` sums where they take `w` (gpu/products.rs `dense_limbs`;
    /// the limb rows in `sc.limbs`), else the exact sums.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn proj_grouped(
        &self,
        g: &Gpu,
        sc: &Scratch,
        w: &DevMat,
        x: u64,
        x_stride: usize,
        x_group: usize,
        y: u64,
        y_stride: usize,
        n: usize,
        groups: usize,
        rows: usize,
    ) -> Result<()> {
        if self.dense_tensor() && g.linear_limbs(w, x, x_stride, x_group, y, y_stride, n, groups, rows, &sc.limbs)? {
            return Ok(());
        }
        g.linear_grouped(w, x, x_stride, x_group, y, y_stride, n, groups, rows)
    }

    /// `y = w x` as an attention projection ([`Dsv4Gpu::proj_grouped`]).
    pub(super) fn proj(&self, g: &Gpu, sc: &Scratch, w: &DevMat, x: u64, y: u64, n: usize) -> Result<()> {
        let (rows, cols) = (w.arg.rows as usize, w.arg.cols as usize);
        self.proj_grouped(g, sc, w, x, cols, 0, y, rows, n, 1, rows)
    }

    /// Whether the attention's projections take the `tensor` sums (where
    /// `dense_limbs` takes their weights): under [`ProductSums::Tensor`] and
    /// the exact variant. Under the fp8 variant the quantizers after them
    /// turn their sums' last-bit differences into whole E4M3 steps
    /// (measured: the teacher-forced gate on small fp8 failed, 11 of 64
    /// positions out of band, and 26 of 64 with `wo_a` alone kept exact;
    /// docs/gates.md), so there only the routed experts take them (their
    /// FP4 products of quantized inputs sum exactly in f32: that gate
    /// passed with no drift).
    pub(super) fn dense_tensor(&self) -> bool {
        self.opts.sums == ProductSums::Tensor && self.opts.variant == Variant::Exact
    }

    /// Whether [`Dsv4Gpu::proj`] takes `w` on the `tensor` sums.
    pub(super) fn proj_tensor(&self, w: &DevMat) -> bool {
        self.dense_tensor() && super::products::dense_limbs(w.bf16_exact, w.arg.cols as usize, 1, 0).is_some()
    }

    /// `y = w x` and `y2 = w2 x` as attention projections: `Gpu::lin_pair`
    /// (one launch for one token) where neither takes the `tensor` sums.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn proj_pair(
        &self,
        g: &Gpu,
        sc: &Scratch,
        w: &DevMat,
        w2: &DevMat,
        x: u64,
        y: u64,
        y2: u64,
        n: usize,
    ) -> Result<()> {
        if !self.proj_tensor(w) && !self.proj_tensor(w2) {
            return g.lin_pair(w, w2, x, y, y2, n);
        }
        self.proj(g, sc, w, x, y, n)?;
        self.proj(g, sc, w2, x, y2, n)
    }

    pub(super) fn norm(&self, g: &Gpu, x: u64, w: u64, rows: usize, width: usize) -> Result<()> {
        g.rms_norm(x, w, rows, width, self.config.rms_norm_eps as f32)
    }
}
