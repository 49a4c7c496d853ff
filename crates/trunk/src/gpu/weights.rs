//! Weights on a device, in the formats the kernels read (`Mat` in
//! kernels/common.cuh): F32, BF16, FP8 with f32 128x128 tile scales, FP4
//! with E8M0 1x32 scales. Formats the kernels do not read are converted
//! exactly at upload (F16 and Q8_0 to F32, MXFP4 repacked to FP4).

use std::borrow::Cow;

use anyhow::{bail, Result};
use cudarc::driver::DeviceRepr;

use super::device::{Buf, Gpu};
use super::products::{limb_arm, LIMB_K};
use crate::weights::matrix::{MatFormat, Matrix};
use crate::weights::model::{CompressorWeights, Dsv4Weights, ExpertWeights, HcWeights, LayerWeights};

/// The kernels' `Mat` (kernels/common.cuh), by value.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct MatArg {
    pub data: u64,
    pub scales: u64,
    pub rows: i32,
    pub cols: i32,
    pub fmt: i32,
    /// 1 where the kernels' scaled-code products are exact for every chunk
    /// ([`codes_scale_exactly`]).
    pub scaled: i32,
}

// SAFETY: plain old data with the layout of the C struct `Mat`; all-zero
// bits are a valid (null) value.
unsafe impl DeviceRepr for MatArg {}
unsafe impl cudarc::driver::ValidAsZeroBits for MatArg {}

const FMT_F32: i32 = 0;
const FMT_BF16: i32 = 1;
const FMT_FP8: i32 = 2;
const FMT_FP4: i32 = 3;

/// How a matrix's rows lie in device memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MatLayout {
    /// Row after row, as on the host: what every kernel but the `tensor`
    /// sums' FP4 ones reads.
    Rows,
    /// FP4 only, for the routed experts under the `tensor` sums
    /// (kernels/moe_tensor.cu `Fp4Limbs`): tiles of 16 rows, each tile's K
    /// blocks of [`LIMB_K`] columns one after another, a block's 16 rows
    /// of codes (64 bytes each) row after row, and the E8M0 scale bytes
    /// likewise (4 a row's block). A warp's load of 8 rows' block is then
    /// 512 contiguous bytes, not 8 runs of 64. Rows are padded with zero
    /// bytes to a multiple of 16 (the kernels never read past `rows`; the
    /// experts' rows, I and D, are multiples of `LIMB_K` wherever
    /// [`limb_arm`] takes them, so none is padded there).
    RowTiles,
}

/// The bytes of `rows` rows of `row_bytes` each in [`MatLayout::RowTiles`]
/// order, for blocks of `block_bytes` a row (a K block's codes or scale
/// bytes): byte `j` of row `r` goes to `(r / 16) * 16 * row_bytes +
/// (j / block_bytes) * 16 * block_bytes + (r % 16) * block_bytes + j %
/// block_bytes`; the rows past `rows` up to a multiple of 16 are zeros.
pub fn row_tiles(data: &[u8], rows: usize, row_bytes: usize, block_bytes: usize) -> Vec<u8> {
    assert!(row_bytes.is_multiple_of(block_bytes) && data.len() == rows * row_bytes);
    let mut out = vec![0u8; rows.div_ceil(16) * 16 * row_bytes];
    for (r, row) in data.chunks_exact(row_bytes).enumerate() {
        let tile = (r / 16) * 16 * row_bytes + (r % 16) * block_bytes;
        for (b, block) in row.chunks_exact(block_bytes).enumerate() {
            let at = tile + b * 16 * block_bytes;
            out[at..at + block_bytes].copy_from_slice(block);
        }
    }
    out
}

pub struct DevMat {
    _data: Buf<u8>,
    _scales: Option<Buf<u8>>,
    pub arg: MatArg,
    /// Whether every weight times its scale is a normal BF16 exactly, so
    /// that the `tensor` sums may take the rows ([`codes_bf16_exactly`]).
    pub bf16_exact: bool,
}

/// The kernels read rows in 16-byte chunks: a format whose row is not a
/// whole number of chunks goes up as F32 (exact).
fn whole_chunks(m: &Matrix) -> bool {
    match &m.format {
        MatFormat::F32 => m.cols.is_multiple_of(4),
        MatFormat::BF16 => m.cols.is_multiple_of(8),
        MatFormat::Fp8 { .. } => m.cols.is_multiple_of(16),
        MatFormat::Fp4 { .. } | MatFormat::Mxfp4 => m.cols.is_multiple_of(32),
        _ => true,
    }
}

/// The `Mat` format `m` goes up as ([`DevMat::upload`]), before uploading.
pub fn device_format(m: &Matrix) -> i32 {
    match &m.format {
        _ if !whole_chunks(m) => FMT_F32,
        MatFormat::BF16 => FMT_BF16,
        MatFormat::Fp8 { .. } => FMT_FP8,
        MatFormat::Fp4 { .. } | MatFormat::Mxfp4 => FMT_FP4,
        MatFormat::F32 | MatFormat::F16 | MatFormat::Q8_0 => FMT_F32,
    }
}

impl DevMat {
    pub fn upload(gpu: &Gpu, m: &Matrix) -> Result<DevMat> {
        DevMat::upload_as(gpu, m, MatLayout::Rows)
    }

    /// [`DevMat::upload`] in `layout`: [`MatLayout::RowTiles`] takes FP4
    /// rows of a multiple of [`LIMB_K`] values only.
    pub fn upload_as(gpu: &Gpu, m: &Matrix, layout: MatLayout) -> Result<DevMat> {
        let whole = whole_chunks(m);
        let fmt = device_format(m);
        if layout == MatLayout::RowTiles && (fmt != FMT_FP4 || !m.cols.is_multiple_of(LIMB_K)) {
            bail!(
                "a {}x{} weight that goes up as {} cannot lie in row tiles (FP4 rows of a multiple of {LIMB_K} values only)",
                m.rows,
                m.cols,
                ["F32", "BF16", "FP8", "FP4"][fmt as usize]
            );
        }
        if !m.cols.is_multiple_of(4) {
            anyhow::bail!("a {}x{} weight: the GPU kernels need rows of a multiple of 4 values", m.rows, m.cols);
        }
        // formats the kernels read go up from the host bytes as they are
        // (as `fmt`, device_format's choice); the others as F32
        let (bytes, scales): (Cow<[u8]>, Option<Vec<u8>>) = match &m.format {
            _ if !whole => (m.to_f32().iter().flat_map(|v| v.to_le_bytes()).collect(), None),
            MatFormat::F32 | MatFormat::BF16 => (Cow::Borrowed(&m.data[..]), None),
            MatFormat::Fp8 { scales, block } => {
                assert_eq!(*block, 128, "FP8 tiles other than 128x128");
                (Cow::Borrowed(&m.data[..]), Some(scales.iter().flat_map(|s| s.to_le_bytes()).collect()))
            }
            MatFormat::Fp4 { scales } => (Cow::Borrowed(&m.data[..]), Some(scales.to_vec())),
            MatFormat::Mxfp4 => {
                // ggml blocks (scale, 16 bytes: low nibbles = first 16) -> pairs, scales apart
                let nb = m.cols / 32;
                let mut packed = Vec::with_capacity(m.rows * m.cols / 2);
                let mut sc = Vec::with_capacity(m.rows * nb);
                for blk in m.data.chunks_exact(17) {
                    sc.push(blk[0]);
                    let nib = |j: usize| if j < 16 { blk[1 + j] & 0xF } else { blk[1 + j - 16] >> 4 };
                    for k in 0..16 {
                        packed.push(nib(2 * k) | (nib(2 * k + 1) << 4));
                    }
                }
                (Cow::Owned(packed), Some(sc))
            }
            MatFormat::F16 | MatFormat::Q8_0 => (m.to_f32().iter().flat_map(|v| v.to_le_bytes()).collect(), None),
        };
        let scaled = codes_scale_exactly(fmt, &bytes, scales.as_deref()) as i32;
        let bf16_exact = codes_bf16_exactly(fmt, &bytes, scales.as_deref());
        let (bytes, scales) = match layout {
            MatLayout::Rows => (bytes, scales),
            MatLayout::RowTiles => {
                let tiles = |b: &[u8], per_value: usize| row_tiles(b, m.rows, m.cols / per_value, LIMB_K / per_value);
                (Cow::Owned(tiles(&bytes, 2)), scales.map(|s| tiles(&s, 32)))
            }
        };
        let data = gpu.upload(&bytes)?;
        let scales = match scales {
            Some(s) => Some(gpu.upload(&s)?),
            None => None,
        };
        let arg = MatArg {
            data: data.ptr,
            scales: scales.as_ref().map_or(0, |s| s.ptr),
            rows: m.rows as i32,
            cols: m.cols as i32,
            fmt,
            scaled,
        };
        Ok(DevMat { _data: data, _scales: scales, arg, bf16_exact })
    }
}

/// Whether the decode kernels may multiply raw codes and scale each chunk's
/// partial sum (kernels/common.cuh `Code`) with the same bits as the
/// dequantized weights give: no Inf or NaN codes (F32, BF16, FP8), FP8
/// scales positive powers of two in [2^-126, 2^119] (every code times the
/// scale exact in f32), FP4 scale bytes at most 252 (6 * 2^125 still
/// finite). `bytes` and `scales` as they go to the device.
pub fn codes_scale_exactly(fmt: i32, bytes: &[u8], scales: Option<&[u8]>) -> bool {
    let scales = scales.unwrap_or(&[]);
    match fmt {
        FMT_F32 => bytes.chunks_exact(4).all(|w| (w[3] & 0x7F, w[2] & 0x80) != (0x7F, 0x80)),
        FMT_BF16 => bytes.chunks_exact(2).all(|h| (h[1] & 0x7F, h[0] & 0x80) != (0x7F, 0x80)),
        FMT_FP8 => {
            bytes.iter().all(|&b| b & 0x7F != 0x7F)
                && scales.chunks_exact(4).all(|w| {
                    let bits = u32::from_le_bytes([w[0], w[1], w[2], w[3]]);
                    bits & 0x807F_FFFF == 0 && (1..=246).contains(&(bits >> 23))
                })
        }
        FMT_FP4 => scales.iter().all(|&e| e <= 252),
        _ => false,
    }
}

/// Whether every FP8 weight times its 128x128 block's scale is a normal
/// BF16 exactly (kernels/moe_tensor.cu `fp8_bf16x4`): no NaN codes, scales
/// positive powers of two in [2^-117, 2^119] (the smallest code, 2^-9,
/// stays normal; the largest, 448, finite). Other formats: false.
pub fn codes_bf16_exactly(fmt: i32, bytes: &[u8], scales: Option<&[u8]>) -> bool {
    fmt == FMT_FP8
        && bytes.iter().all(|&b| b & 0x7F != 0x7F)
        && scales.unwrap_or(&[]).chunks_exact(4).all(|w| {
            let bits = u32::from_le_bytes([w[0], w[1], w[2], w[3]]);
            bits & 0x807F_FFFF == 0 && (10..=246).contains(&(bits >> 23))
        })
}

pub struct DevHc {
    pub fn_: Buf<f32>,
    pub base: Buf<f32>,
    pub scale: Buf<f32>,
}

impl DevHc {
    fn upload(gpu: &Gpu, h: &HcWeights) -> Result<DevHc> {
        Ok(DevHc { fn_: gpu.upload(&h.fn_)?, base: gpu.upload(&h.base)?, scale: gpu.upload(&h.scale)? })
    }
}

pub struct DevCompressor {
    pub ape: Buf<f32>,
    pub wkv: DevMat,
    pub wgate: DevMat,
    pub norm: Buf<f32>,
}

impl DevCompressor {
    fn upload(gpu: &Gpu, c: &CompressorWeights) -> Result<DevCompressor> {
        Ok(DevCompressor {
            ape: gpu.upload(&c.ape)?,
            wkv: DevMat::upload(gpu, &c.wkv)?,
            wgate: DevMat::upload(gpu, &c.wgate)?,
            norm: gpu.upload(&c.norm)?,
        })
    }
}

pub struct DevExpert {
    pub w1: DevMat,
    pub w2: DevMat,
    pub w3: DevMat,
}

impl DevExpert {
    fn upload(gpu: &Gpu, e: &ExpertWeights, layout: MatLayout) -> Result<DevExpert> {
        Ok(DevExpert {
            w1: DevMat::upload_as(gpu, &e.w1, layout)?,
            w2: DevMat::upload_as(gpu, &e.w2, layout)?,
            w3: DevMat::upload_as(gpu, &e.w3, layout)?,
        })
    }
}

/// Where the routed experts of a layer lie in row tiles: under the `tensor`
/// sums (`tensor_experts`), where every expert's W1, W3 and W2 go up as FP4
/// and [`limb_arm`] takes their widths (the layer's expert products are
/// then all `Fp4Limbs` kernels, kernels/moe_tensor.cu).
pub fn experts_layout(experts: &[ExpertWeights], tensor_experts: bool) -> MatLayout {
    let fp4 = |m: &Matrix| device_format(m) == FMT_FP4;
    let tiled = tensor_experts
        && experts.first().is_some_and(|e| limb_arm(FMT_FP4, FMT_FP4, e.w1.cols, e.w1.rows))
        && experts.iter().all(|e| fp4(&e.w1) && fp4(&e.w2) && fp4(&e.w3));
    if tiled {
        MatLayout::RowTiles
    } else {
        MatLayout::Rows
    }
}

pub struct DevLayer {
    pub attn_norm: Buf<f32>,
    pub ffn_norm: Buf<f32>,
    pub hc_attn: DevHc,
    pub hc_ffn: DevHc,
    pub sink: Buf<f32>,
    pub wq_a: DevMat,
    pub q_norm: Buf<f32>,
    pub wq_b: DevMat,
    pub wkv: DevMat,
    pub kv_norm: Buf<f32>,
    pub wo_a: DevMat,
    pub wo_b: DevMat,
    pub compressor: Option<DevCompressor>,
    pub idx_wq_b: Option<DevMat>,
    pub idx_weights_proj: Option<DevMat>,
    pub idx_compressor: Option<DevCompressor>,
    pub gate: DevMat,
    pub bias: Option<Buf<f32>>,
    pub tid2eid: Option<Buf<i32>>,
    pub shared: DevExpert,
    _experts: Vec<DevExpert>,
    /// `Mat` tables indexed by expert id.
    pub w1s: Buf<MatArg>,
    pub w2s: Buf<MatArg>,
    pub w3s: Buf<MatArg>,
    /// The routed experts' `Mat` formats: W1 and W3 (one format), W2. The
    /// expert kernels stage activations for one format per launch.
    pub expert_fmts: (i32, i32),
    /// Every routed expert's matrices are scaled codes ([`MatArg::scaled`]):
    /// the prefill's experts may take the tensor-core kernels.
    pub experts_scaled: bool,
    /// How the routed experts' matrices lie ([`experts_layout`]).
    pub experts_layout: MatLayout,
}

impl DevLayer {
    /// The layer's weights on `gpu`; with `tensor_experts` (the `tensor`
    /// sums), the routed experts in row tiles where [`experts_layout`]
    /// takes them.
    pub fn upload(gpu: &Gpu, l: &LayerWeights, tensor_experts: bool) -> Result<DevLayer> {
        let a = &l.attn;
        let layout = experts_layout(&l.ffn.experts, tensor_experts);
        let experts: Vec<DevExpert> =
            l.ffn.experts.iter().map(|e| DevExpert::upload(gpu, e, layout)).collect::<Result<_>>()?;
        let fmt_of = |f: &dyn Fn(&DevExpert) -> i32, what: &str| -> Result<i32> {
            let first = experts.first().map_or(0, f);
            if let Some(i) = experts.iter().position(|e| f(e) != first) {
                bail!(
                    "routed expert {i}'s {what} has another format than expert 0's (one format per layer is supported)"
                );
            }
            Ok(first)
        };
        let (f1, f2, f3) =
            (fmt_of(&|e| e.w1.arg.fmt, "w1")?, fmt_of(&|e| e.w2.arg.fmt, "w2")?, fmt_of(&|e| e.w3.arg.fmt, "w3")?);
        if f1 != f3 {
            bail!("routed experts' w1 and w3 differ in format ({f1} vs {f3})");
        }
        let table = |f: &dyn Fn(&DevExpert) -> MatArg| -> Result<Buf<MatArg>> {
            let v: Vec<MatArg> = experts.iter().map(f).collect();
            gpu.upload(&v)
        };
        Ok(DevLayer {
            attn_norm: gpu.upload(&l.attn_norm)?,
            ffn_norm: gpu.upload(&l.ffn_norm)?,
            hc_attn: DevHc::upload(gpu, &l.hc_attn)?,
            hc_ffn: DevHc::upload(gpu, &l.hc_ffn)?,
            sink: gpu.upload(&a.sink)?,
            wq_a: DevMat::upload(gpu, &a.wq_a)?,
            q_norm: gpu.upload(&a.q_norm)?,
            wq_b: DevMat::upload(gpu, &a.wq_b)?,
            wkv: DevMat::upload(gpu, &a.wkv)?,
            kv_norm: gpu.upload(&a.kv_norm)?,
            wo_a: DevMat::upload(gpu, &a.wo_a)?,
            wo_b: DevMat::upload(gpu, &a.wo_b)?,
            compressor: a.compressor.as_ref().map(|c| DevCompressor::upload(gpu, c)).transpose()?,
            idx_wq_b: a.indexer.as_ref().map(|i| DevMat::upload(gpu, &i.wq_b)).transpose()?,
            idx_weights_proj: a.indexer.as_ref().map(|i| DevMat::upload(gpu, &i.weights_proj)).transpose()?,
            idx_compressor: a.indexer.as_ref().map(|i| DevCompressor::upload(gpu, &i.compressor)).transpose()?,
            gate: DevMat::upload(gpu, &l.ffn.gate)?,
            bias: l.ffn.bias.as_ref().map(|b| gpu.upload(b)).transpose()?,
            tid2eid: l
                .ffn
                .tid2eid
                .as_ref()
                .map(|t| gpu.upload(&t.iter().map(|&x| x as i32).collect::<Vec<_>>()))
                .transpose()?,
            shared: DevExpert::upload(gpu, &l.ffn.shared, MatLayout::Rows)?,
            w1s: table(&|e| e.w1.arg)?,
            w2s: table(&|e| e.w2.arg)?,
            w3s: table(&|e| e.w3.arg)?,
            expert_fmts: (f1, f2),
            experts_scaled: experts.iter().all(|e| [&e.w1, &e.w2, &e.w3].iter().all(|m| m.arg.scaled != 0)),
            experts_layout: layout,
            _experts: experts,
        })
    }
}

/// Device bytes the weights of `layers` (and the embedding/head when asked)
/// will take, for the up-front fit check.
pub fn device_bytes(w: &Dsv4Weights, layers: std::ops::Range<usize>, embed: bool, head: bool) -> usize {
    let m = |x: &Matrix| match x.format {
        MatFormat::F16 | MatFormat::Q8_0 => x.rows * x.cols * 4,
        _ => x.stored_bytes(),
    };
    let mut n = 0;
    if embed {
        n += m(&w.embed);
    }
    if head {
        n += m(&w.head) + w.hc_head.fn_.len() * 4;
    }
    for l in &w.layers[layers] {
        let a = &l.attn;
        for x in [&a.wq_a, &a.wq_b, &a.wkv, &a.wo_a, &a.wo_b, &l.ffn.gate] {
            n += m(x);
        }
        for c in a.compressor.iter().chain(a.indexer.as_ref().map(|i| &i.compressor)) {
            n += m(&c.wkv) + m(&c.wgate) + c.ape.len() * 4;
        }
        if let Some(i) = &a.indexer {
            n += m(&i.wq_b) + m(&i.weights_proj);
        }
        for e in l.ffn.experts.iter().chain(std::iter::once(&l.ffn.shared)) {
            n += m(&e.w1) + m(&e.w2) + m(&e.w3);
        }
        n += (l.hc_attn.fn_.len() + l.hc_ffn.fn_.len()) * 4;
        n += l.ffn.tid2eid.as_ref().map_or(0, |t| t.len() * 4);
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::weights::tensor::Bytes;

    fn fp4(rows: usize, cols: usize, seed: u8) -> Matrix {
        let data = (0..rows * cols / 2).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect();
        let scales = (0..rows * cols / 32).map(|i| (i as u8).wrapping_mul(7).wrapping_add(seed)).collect();
        Matrix { rows, cols, format: MatFormat::Fp4 { scales: Bytes::from_vec(scales) }, data: Bytes::from_vec(data) }
    }

    #[test]
    fn row_tiles_put_each_chunk_where_the_tensor_kernels_read_it() {
        // kernels/moe_tensor.cu `Fp4Limbs`: the address of row r's chunk q of
        // K block b, in 16-byte chunks of codes (and in scale bytes)
        let src = include_str!("../../../../kernels/moe_tensor.cu");
        let at_src = "(size_t)(r >> 4) * 16 * (m.cols >> 5) + (r & 15) * (LIMB_K / 32) + q";
        assert!(src.contains(at_src) && src.contains("TILE_STEP = 16 * (LIMB_K / 32)"), "the kernels' addresses moved");
        assert!(src.contains("rows[r].codes + TILE_STEP * b") && src.contains("rows[r].scales + TILE_STEP * b"));
        let at = |r: usize, b: usize, q: usize, cols: usize| (r >> 4) * 16 * (cols >> 5) + (r & 15) * 4 + q + 64 * b;
        // 37 rows: the last tile is padded with zero rows
        let (rows, cols) = (37, 3 * LIMB_K);
        let m = fp4(rows, cols, 5);
        let MatFormat::Fp4 { scales } = &m.format else { unreachable!() };
        let codes = row_tiles(&m.data, rows, cols / 2, LIMB_K / 2);
        let sc = row_tiles(scales, rows, cols / 32, LIMB_K / 32);
        assert_eq!((codes.len(), sc.len()), (48 * cols / 2, 48 * cols / 32));
        for r in 0..rows {
            for b in 0..cols / LIMB_K {
                for q in 0..4 {
                    let (a, chunk) = (at(r, b, q, cols), r * cols / 32 + 4 * b + q);
                    assert_eq!(
                        codes[16 * a..16 * a + 16],
                        m.data[16 * chunk..16 * chunk + 16],
                        "row {r} block {b} q {q}"
                    );
                    assert_eq!(sc[a], scales[chunk], "row {r} block {b} q {q}");
                }
            }
        }
        for r in rows..48 {
            for (b, q) in (0..cols / LIMB_K).flat_map(|b| (0..4).map(move |q| (b, q))) {
                let a = at(r, b, q, cols);
                assert!(codes[16 * a..16 * a + 16].iter().all(|&x| x == 0) && sc[a] == 0, "padding row {r}");
            }
        }
        // a warp's load of one K block for 8 rows of a tile (lanes g, q) is
        // 32 consecutive chunks: 512 contiguous bytes
        for (t, half, b) in [(0, 0, 0), (1, 8, 2), (2, 0, 1)] {
            let first = at(16 * t + half, b, 0, cols);
            let got: Vec<usize> = (0..32).map(|lane| at(16 * t + half + lane / 4, b, lane % 4, cols)).collect();
            assert_eq!(got, (first..first + 32).collect::<Vec<_>>());
        }
        // the rows' layout keeps the bytes as they are
        assert_eq!(row_tiles(&[1, 2, 3, 4], 1, 4, 4), [vec![1, 2, 3, 4], vec![0; 60]].concat());
    }

    #[test]
    fn routed_experts_lie_in_row_tiles_only_where_the_tensor_kernels_take_them() {
        let expert = |w1: Matrix, w2: Matrix, w3: Matrix| ExpertWeights { w1, w2, w3 };
        let (d, inter) = (2 * LIMB_K, LIMB_K);
        let fp4s = || expert(fp4(inter, d, 1), fp4(d, inter, 2), fp4(inter, d, 3));
        let experts = vec![fp4s(), fp4s()];
        assert_eq!(experts_layout(&experts, true), MatLayout::RowTiles);
        assert_eq!(experts_layout(&experts, false), MatLayout::Rows);
        assert_eq!(experts_layout(&[], true), MatLayout::Rows);
        // one expert's W2 in F32: the layer keeps the exact kernels
        let f32m = |rows: usize, cols: usize| Matrix {
            rows,
            cols,
            format: MatFormat::F32,
            data: Bytes::from_vec(vec![0; rows * cols * 4]),
        };
        let mixed = vec![fp4s(), expert(fp4(inter, d, 1), f32m(d, inter), fp4(inter, d, 3))];
        assert_eq!(experts_layout(&mixed, true), MatLayout::Rows);
        // widths limb_arm does not take (K not a multiple of LIMB_K)
        let narrow = vec![expert(fp4(inter, d + 32, 1), fp4(d + 32, inter, 2), fp4(inter, d + 32, 3))];
        assert_eq!(experts_layout(&narrow, true), MatLayout::Rows);
    }

    fn f32s(v: &[f32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    #[test]
    fn scaled_codes_need_finite_codes_and_power_of_two_scales() {
        // F32 and BF16: any finite value (subnormals included), no Inf/NaN
        assert!(codes_scale_exactly(FMT_F32, &f32s(&[1.5, -0.0, 1e-45, f32::MAX]), None));
        assert!(!codes_scale_exactly(FMT_F32, &f32s(&[1.0, f32::INFINITY]), None));
        assert!(!codes_scale_exactly(FMT_F32, &f32s(&[f32::NAN]), None));
        let bf = |x: f32| crate::weights::formats::f32_to_bf16(x).to_le_bytes();
        assert!(codes_scale_exactly(FMT_BF16, &[bf(-3.0), bf(1e-40)].concat(), None));
        assert!(!codes_scale_exactly(FMT_BF16, &[bf(1.0), bf(f32::NEG_INFINITY)].concat(), None));
        // FP8: NaN codes (S.1111.111) and scales that are not powers of two
        // in range take the dequantized path
        let one = f32s(&[1.0]);
        assert!(codes_scale_exactly(FMT_FP8, &[0x00, 0x7E, 0xFE, 0x01], Some(&one)));
        assert!(!codes_scale_exactly(FMT_FP8, &[0x00, 0xFF], Some(&one)));
        assert!(!codes_scale_exactly(FMT_FP8, &[0x7F], Some(&one)));
        for good in [2f32.powi(-126), 0.25, 2f32.powi(119)] {
            assert!(codes_scale_exactly(FMT_FP8, &[0x38], Some(&f32s(&[good]))), "{good}");
        }
        for bad in [0.3f32, -1.0, 0.0, 2f32.powi(-127), 2f32.powi(120), f32::INFINITY, f32::NAN] {
            assert!(!codes_scale_exactly(FMT_FP8, &[0x38], Some(&f32s(&[bad]))), "{bad}");
        }
        // FP4: scale bytes up to 252
        assert!(codes_scale_exactly(FMT_FP4, &[0xFF, 0x77], Some(&[0, 127, 252])));
        assert!(!codes_scale_exactly(FMT_FP4, &[0x11], Some(&[127, 253])));
        assert!(!codes_scale_exactly(FMT_FP4, &[0x11], Some(&[255])));
    }

    #[test]
    fn bf16_exact_codes_are_normal_bf16_products() {
        use crate::weights::formats::{e4m3_to_f32, f32_to_bf16};
        let fits = |v: f32| v == 0.0 || (v.abs() >= f32::MIN_POSITIVE && (f32_to_bf16(v) as u32) << 16 == v.to_bits());
        // every non-NaN code times an accepted scale is a normal BF16 exactly
        for e in [-117, -3, 0, 119] {
            let scale = 2f32.powi(e);
            assert!(codes_bf16_exactly(FMT_FP8, &[0x01, 0x7E], Some(&f32s(&[scale]))), "2^{e}");
            for code in (0..=255u8).filter(|c| c & 0x7F != 0x7F) {
                assert!(fits(e4m3_to_f32(code) * scale), "code {code:#x} scale 2^{e}");
            }
        }
        // the bounds are tight: below 2^-117 the smallest code is subnormal
        assert!(!fits(e4m3_to_f32(0x01) * 2f32.powi(-118)));
        for bad in [2f32.powi(-118), 2f32.powi(120), 0.3, -1.0] {
            assert!(!codes_bf16_exactly(FMT_FP8, &[0x38], Some(&f32s(&[bad]))), "{bad}");
        }
        assert!(!codes_bf16_exactly(FMT_FP8, &[0x7F], Some(&f32s(&[1.0]))));
        assert!(!codes_bf16_exactly(FMT_FP4, &[0x11], Some(&[127])));
        assert!(!codes_bf16_exactly(FMT_BF16, &[0, 0], None));
    }

    // A Rust mirror of the kernels' scaled-code arithmetic (kernels/common.cuh
    // `Code`, `code_value`, `chunk_factor`), to test the exactness claim the
    // decode kernels rest on over random codes, activations and scales.
    const P: [i32; 4] = [896, 896, 1016, 1022]; // by format id

    fn pow2(e: i32) -> f64 {
        f64::from_bits(((e + 1023) as u64) << 52)
    }

    fn code_value(fmt: i32, c: [u32; 4], j: usize) -> f64 {
        let hi = |h: u32| f64::from_bits((h as u64) << 32);
        match fmt {
            FMT_FP4 => hi(((c[j >> 3] << (28 - 4 * (j & 7))) as i32 >> 9) as u32 & 0x8038_0000),
            FMT_FP8 => hi(((c[j >> 2] << (24 - 8 * (j & 3))) as i32 >> 7) as u32 & 0x80FE_0000),
            FMT_BF16 => {
                let w = if j & 1 == 1 { c[j >> 1] } else { c[j >> 1] << 16 };
                hi((w as i32 >> 3) as u32 & 0x8FFF_E000)
            }
            _ => f64::from_bits(((((c[j] as i32 >> 3) as u32 & 0x8FFF_FFFF) as u64) << 32) | (c[j] << 29) as u64),
        }
    }

    /// The CPU's dequantized value (weights::formats), scale applied in f32.
    fn dequant(fmt: i32, c: [u32; 4], j: usize, scale: f32) -> f32 {
        use crate::weights::formats::{bf16_to_f32, e2m1_to_f32, e4m3_to_f32};
        match fmt {
            FMT_FP4 => e2m1_to_f32((c[j >> 3] >> (4 * (j & 7)) & 0xF) as u8) * scale,
            FMT_FP8 => e4m3_to_f32((c[j >> 2] >> (8 * (j & 3)) & 0xFF) as u8) * scale,
            FMT_BF16 => bf16_to_f32((c[j >> 1] >> (16 * (j & 1)) & 0xFFFF) as u16),
            _ => f32::from_bits(c[j]),
        }
    }

    /// One chunk's dequantized partial, and its scaled-code partial with the
    /// factor the kernel multiplies it by. `scale`: the FP8 tile scale, or the
    /// FP4 block's E8M0 byte as a value; `e8m0`: that byte.
    fn partials(fmt: i32, c: [u32; 4], x: &[f32], scale: f32, e8m0: u8) -> (f64, f64, f64) {
        let xs = pow2(P[fmt as usize] - 127);
        let factor = match fmt {
            FMT_FP8 => pow2((scale.to_bits() >> 23) as i32), // scale * 2^127
            FMT_FP4 => pow2(e8m0 as i32),                    // 2^(e - 127) * 2^127
            _ => pow2(127),
        };
        let (mut slow, mut fast) = (0f64, 0f64);
        for (j, &xj) in x.iter().enumerate() {
            slow = (dequant(fmt, c, j, scale) as f64).mul_add(xj as f64, slow);
            fast = code_value(fmt, c, j).mul_add(xj as f64 * xs, fast);
        }
        (slow, fast, factor)
    }

    #[test]
    fn scaled_code_partials_equal_the_dequantized_ones_to_the_bit() {
        use crate::weights::formats::e8m0_to_f32;
        let mut rng = crate::synth::rng::Rng::new(7, "scaled-codes", 0);
        let mut word = || rng.next_u64() as u32;
        for fmt in [FMT_F32, FMT_BF16, FMT_FP8, FMT_FP4] {
            let values = [4, 8, 16, 32][fmt as usize];
            let mut checked = 0;
            for trial in 0..20_000 {
                let c = [word(), word(), word(), word()];
                let bytes: Vec<u8> = c.iter().flat_map(|w| w.to_le_bytes()).collect();
                if !codes_scale_exactly(fmt, &bytes, None) {
                    continue; // Inf/NaN codes take the dequantized path
                }
                // activations: ordinary values, or any finite f32 (subnormals and
                // the largest magnitudes included)
                let x: Vec<f32> = (0..values)
                    .map(|_| loop {
                        let v = if trial % 2 == 0 { (word() as i32 as f32) * 1e-9 } else { f32::from_bits(word()) };
                        if v.is_finite() {
                            break v;
                        }
                    })
                    .collect();
                // every scale the upload accepts
                let e8m0 = (word() % 253) as u8;
                let scale = match fmt {
                    FMT_FP8 => 2f32.powi((word() % 246) as i32 - 126),
                    FMT_FP4 => e8m0_to_f32(e8m0),
                    _ => 1.0,
                };
                let (slow, fast, factor) = partials(fmt, c, &x, scale, e8m0);
                assert_eq!(slow.to_bits(), (fast * factor).to_bits(), "format {fmt}, chunk {c:08x?}, scale {scale}");
                // the lane sum the partial joins rounds the same: acc + p against fma(p', f, acc)
                let acc = (word() as i32 as f64) * 1e-3;
                assert_eq!((acc + slow).to_bits(), fast.mul_add(factor, acc).to_bits());
                checked += 1;
            }
            assert!(checked > 15_000, "format {fmt}: only {checked} chunks checked");
        }
    }

    #[test]
    fn scaled_codes_differ_where_the_upload_refuses_them() {
        // FP4 scale byte 253: 6 * 2^126 overflows f32 when dequantized, the
        // scaled code does not
        let c = [0x0000_0007u32, 0, 0, 0];
        let mut x = [0f32; 32];
        x[0] = 1.0;
        let (slow, fast, factor) = partials(FMT_FP4, c, &x, 2f32.powi(126), 253);
        assert!(slow.is_infinite() && (fast * factor).is_finite(), "{slow} vs {fast} * {factor}");
        assert!(!codes_scale_exactly(FMT_FP4, &[0x07], Some(&[253])));
        // an FP8 scale that is not a power of two has no exact factor
        let c = [0x3F3D_3B39u32, 0x4745_4341, 0, 0];
        let x = [1.0f32; 16];
        let (slow, fast, factor) = partials(FMT_FP8, c, &x, 0.3, 0);
        assert_ne!(slow.to_bits(), (fast * factor).to_bits());
        assert!(!codes_scale_exactly(FMT_FP8, &[0x39], Some(&f32s(&[0.3]))));
    }
}
