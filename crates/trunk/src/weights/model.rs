//! `Dsv4Weights`: every tensor of a DSV4 model, checked against the config,
//! kept in its stored format (memory-mapped where the source is a file).

use std::sync::Arc;

use anyhow::{bail, Context, Result};

use super::formats::e8m0_to_f32;
use super::matrix::{MatFormat, Matrix};
use super::names::{self, CheckpointLayout};
use super::tensor::{DType, RawTensor, TensorSource};
use crate::config::{AttnKind, Dsv4Config, MlpKind};

/// Which arithmetic the routed experts run on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum ExpertArm {
    /// The stored format (FP4 E2M1 with E8M0 scales in official checkpoints).
    #[default]
    Native,
    /// A BF16 dequantization made at load (exact for FP4 values).
    Bf16,
}

impl std::str::FromStr for ExpertArm {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "native" | "fp4" => Ok(ExpertArm::Native),
            "bf16" => Ok(ExpertArm::Bf16),
            _ => bail!("unknown expert arm `{s}` (expected native or bf16)"),
        }
    }
}

#[derive(Clone, Debug)]
pub struct HcWeights {
    /// `[(2+hc)*hc, hc*D]` (or `[hc, hc*D]` for the head), row-major.
    pub fn_: Vec<f32>,
    pub base: Vec<f32>,
    pub scale: Vec<f32>,
}

#[derive(Clone, Debug)]
pub struct CompressorWeights {
    /// Position bias `[ratio, width]`.
    pub ape: Vec<f32>,
    pub wkv: Matrix,
    pub wgate: Matrix,
    pub norm: Vec<f32>,
}

#[derive(Clone, Debug)]
pub struct IndexerWeights {
    pub wq_b: Matrix,
    pub weights_proj: Matrix,
    pub compressor: CompressorWeights,
}

#[derive(Clone, Debug)]
pub struct AttnWeights {
    pub sink: Vec<f32>,
    pub wq_a: Matrix,
    pub q_norm: Vec<f32>,
    pub wq_b: Matrix,
    pub wkv: Matrix,
    pub kv_norm: Vec<f32>,
    pub wo_a: Matrix,
    pub wo_b: Matrix,
    pub compressor: Option<CompressorWeights>,
    pub indexer: Option<IndexerWeights>,
}

#[derive(Clone, Debug)]
pub struct ExpertWeights {
    /// gate `[I, D]`
    pub w1: Matrix,
    /// down `[D, I]`
    pub w2: Matrix,
    /// up `[I, D]`
    pub w3: Matrix,
}

#[derive(Clone, Debug)]
pub struct MoeWeights {
    pub gate: Matrix,
    pub bias: Option<Vec<f32>>,
    /// `[vocab, top_k]` expert ids for hash layers.
    pub tid2eid: Option<Vec<u32>>,
    pub shared: ExpertWeights,
    pub experts: Vec<ExpertWeights>,
}

#[derive(Clone, Debug)]
pub struct LayerWeights {
    pub attn_norm: Vec<f32>,
    pub ffn_norm: Vec<f32>,
    pub hc_attn: HcWeights,
    pub hc_ffn: HcWeights,
    pub attn: AttnWeights,
    pub ffn: MoeWeights,
}

#[derive(Clone, Debug)]
pub struct Dsv4Weights {
    pub config: Dsv4Config,
    pub embed: Matrix,
    pub head: Matrix,
    pub norm: Vec<f32>,
    pub hc_head: HcWeights,
    pub layers: Vec<LayerWeights>,
    pub layout: CheckpointLayout,
    pub expert_arm: ExpertArm,
}

/// Typed, checked access to a source under one layout.
struct Loader<'a> {
    src: &'a dyn TensorSource,
    layout: CheckpointLayout,
}

impl<'a> Loader<'a> {
    fn name(&self, canonical: &str) -> Result<String> {
        Ok(match self.layout {
            CheckpointLayout::Official => names::official_name(canonical),
            CheckpointLayout::TransformersSaved => names::saved_name(canonical),
            CheckpointLayout::Hf => {
                names::hf_name(canonical).with_context(|| format!("no HF name for `{canonical}`"))?
            }
            CheckpointLayout::Gguf => {
                names::gguf_name(canonical).with_context(|| format!("no GGUF name for `{canonical}`"))?
            }
        })
    }

    fn raw(&self, name: &str) -> Result<RawTensor> {
        self.src.get(name).with_context(|| format!("{}: missing tensor `{name}`", self.src.origin(name)))
    }

    fn has(&self, canonical: &str) -> bool {
        self.name(canonical).map(|n| self.src.get(&n).is_some()).unwrap_or(false)
    }

    fn where_(&self, name: &str) -> String {
        format!("{}: tensor `{name}`", self.src.origin(name))
    }

    /// A float vector/array of exactly `shape`.
    fn floats(&self, canonical: &str, shape: &[usize]) -> Result<Vec<f32>> {
        let name = self.name(canonical)?;
        let t = self.raw(&name)?;
        if t.shape != shape {
            bail!("{}: shape {:?}, expected {:?}", self.where_(&name), t.shape, shape);
        }
        t.to_f32().with_context(|| format!("{}: dtype {:?} is not a float type", self.where_(&name), t.dtype))
    }

    /// A linear map `[rows, cols]`, dense or block-quantized.
    fn matrix(&self, canonical: &str, rows: usize, cols: usize) -> Result<Matrix> {
        let name = self.name(canonical)?;
        let t = self.raw(&name)?;
        let ctx = || self.where_(&name);
        let scale_name = |suffix: &str| {
            if let Some(base) = name.strip_suffix(".weight") {
                format!("{base}.{suffix}")
            } else {
                format!("{name}_{suffix}")
            }
        };
        let scale = self.src.get(&scale_name("scale")).or_else(|| self.src.get(&scale_name("weight_scale_inv")));
        match t.dtype {
            DType::F8E4M3 => {
                if t.shape != [rows, cols] {
                    bail!("{}: shape {:?}, expected [{rows}, {cols}]", ctx(), t.shape);
                }
                let s = scale.with_context(|| format!("{}: FP8 weight without a `.scale` tensor", ctx()))?;
                let grid = [rows.div_ceil(128), cols.div_ceil(128)];
                if s.shape != grid {
                    bail!("{}: scale shape {:?}, expected {grid:?} (128x128 blocks)", ctx(), s.shape);
                }
                let scales: Vec<f32> = match s.dtype {
                    DType::F8E8M0 | DType::U8 => s.data.iter().map(|&b| e8m0_to_f32(b)).collect(),
                    DType::F32 | DType::BF16 | DType::F16 => s.to_f32()?,
                    d => bail!("{}: scale dtype {d:?} (expected F8_E8M0 or F32)", ctx()),
                };
                Ok(Matrix { rows, cols, format: MatFormat::Fp8 { scales: Arc::new(scales), block: 128 }, data: t.data })
            }
            DType::I8 | DType::U8 => {
                // packed FP4 E2M1, two per byte along the row
                if !cols.is_multiple_of(32) || t.shape != [rows, cols / 2] {
                    bail!("{}: packed FP4 shape {:?}, expected [{rows}, {}]", ctx(), t.shape, cols / 2);
                }
                let s = scale.with_context(|| format!("{}: FP4 weight without a `.scale` tensor", ctx()))?;
                if s.shape != [rows, cols / 32] || !matches!(s.dtype, DType::F8E8M0 | DType::U8) {
                    bail!(
                        "{}: FP4 scale {:?} {:?}, expected F8_E8M0 [{rows}, {}] (1x32 blocks)",
                        ctx(),
                        s.dtype,
                        s.shape,
                        cols / 32
                    );
                }
                Ok(Matrix { rows, cols, format: MatFormat::Fp4 { scales: s.data }, data: t.data })
            }
            _ => {
                if t.shape != [rows, cols] {
                    bail!("{}: shape {:?}, expected [{rows}, {cols}]", ctx(), t.shape);
                }
                Matrix::from_dense(&t).with_context(ctx)
            }
        }
    }

    fn hc(&self, prefix: &str, rows: usize, width: usize, n_scale: usize) -> Result<HcWeights> {
        Ok(HcWeights {
            fn_: self.floats(&format!("{prefix}fn"), &[rows, width])?,
            base: self.floats(&format!("{prefix}base"), &[rows])?,
            scale: self.floats(&format!("{prefix}scale"), &[n_scale])?,
        })
    }

    fn compressor(
        &self,
        prefix: &str,
        cfg: &Dsv4Config,
        ratio: usize,
        width: usize,
        hd: usize,
    ) -> Result<CompressorWeights> {
        Ok(CompressorWeights {
            ape: self.floats(&format!("{prefix}.ape"), &[ratio, width])?,
            wkv: self.matrix(&format!("{prefix}.wkv"), width, cfg.hidden_size)?,
            wgate: self.matrix(&format!("{prefix}.wgate"), width, cfg.hidden_size)?,
            norm: self.floats(&format!("{prefix}.norm"), &[hd])?,
        })
    }

    fn experts(&self, cfg: &Dsv4Config, prefix: &str) -> Result<Vec<ExpertWeights>> {
        let l: usize = match prefix.strip_prefix("layers.").map(|x| x.parse()) {
            Some(Ok(l)) => l,
            _ => usize::MAX, // DSpark stages: per-expert official names only
        };
        let (d, i, ne) = (cfg.hidden_size, cfg.moe_intermediate_size, cfg.n_routed_experts);
        match self.layout {
            CheckpointLayout::Official | CheckpointLayout::TransformersSaved => (0..ne)
                .map(|e| {
                    let p = format!("{prefix}.ffn.experts.{e}");
                    Ok(ExpertWeights {
                        w1: self.matrix(&format!("{p}.w1"), i, d)?,
                        w2: self.matrix(&format!("{p}.w2"), d, i)?,
                        w3: self.matrix(&format!("{p}.w3"), i, d)?,
                    })
                })
                .collect(),
            CheckpointLayout::Hf => {
                let (gu, dn) = names::hf_expert_names(l);
                let tgu = self.raw(&gu)?;
                let tdn = self.raw(&dn)?;
                if tgu.shape != [ne, 2 * i, d] {
                    bail!("{}: shape {:?}, expected [{ne}, {}, {d}]", self.where_(&gu), tgu.shape, 2 * i);
                }
                if tdn.shape != [ne, d, i] {
                    bail!("{}: shape {:?}, expected [{ne}, {d}, {i}]", self.where_(&dn), tdn.shape);
                }
                let gu_all = Matrix::from_dense(&RawTensor { shape: vec![ne * 2 * i, d], ..tgu.clone() })
                    .with_context(|| self.where_(&gu))?;
                let dn_all = Matrix::from_dense(&RawTensor { shape: vec![ne * d, i], ..tdn.clone() })
                    .with_context(|| self.where_(&dn))?;
                Ok((0..ne)
                    .map(|e| ExpertWeights {
                        w1: gu_all.row_range(e * 2 * i, i),
                        w3: gu_all.row_range(e * 2 * i + i, i),
                        w2: dn_all.row_range(e * d, d),
                    })
                    .collect())
            }
            CheckpointLayout::Gguf => {
                let [g, u, dn] = names::gguf_expert_names(l);
                let load = |name: &str, rows: usize, cols: usize| -> Result<Matrix> {
                    let t = self.raw(name)?;
                    if t.shape != [ne, rows, cols] {
                        bail!("{}: shape {:?}, expected [{ne}, {rows}, {cols}]", self.where_(name), t.shape);
                    }
                    Matrix::from_dense(&RawTensor { shape: vec![ne * rows, cols], ..t.clone() })
                        .with_context(|| self.where_(name))
                };
                let (mg, mu, md) = (load(&g, i, d)?, load(&u, i, d)?, load(&dn, d, i)?);
                Ok((0..ne)
                    .map(|e| ExpertWeights {
                        w1: mg.row_range(e * i, i),
                        w3: mu.row_range(e * i, i),
                        w2: md.row_range(e * d, d),
                    })
                    .collect())
            }
        }
    }

    fn layer(&self, cfg: &Dsv4Config, l: usize) -> Result<LayerWeights> {
        self.block(cfg, &format!("layers.{l}"), cfg.layer_types[l], cfg.mlp_layer_types[l])
    }

    /// One transformer block under `p` (`layers.N`, or a DSpark stage `mtp.S`).
    fn block(&self, cfg: &Dsv4Config, p: &str, kind: AttnKind, mlp: MlpKind) -> Result<LayerWeights> {
        let (d, h, hd, hc) = (cfg.hidden_size, cfg.num_attention_heads, cfg.head_dim, cfg.hc_mult);
        let mix = (2 + hc) * hc;
        let compressor = match kind {
            AttnKind::Window => None,
            AttnKind::Csa => Some(self.compressor(&format!("{p}.attn.compressor"), cfg, cfg.csa_ratio, 2 * hd, hd)?),
            AttnKind::Hca => Some(self.compressor(&format!("{p}.attn.compressor"), cfg, cfg.hca_ratio, hd, hd)?),
        };
        let indexer = match kind {
            AttnKind::Csa => {
                let (hi, di) = (cfg.index_n_heads, cfg.index_head_dim);
                Some(IndexerWeights {
                    wq_b: self.matrix(&format!("{p}.attn.indexer.wq_b"), hi * di, cfg.q_lora_rank)?,
                    weights_proj: self.matrix(&format!("{p}.attn.indexer.weights_proj"), hi, d)?,
                    compressor: self.compressor(
                        &format!("{p}.attn.indexer.compressor"),
                        cfg,
                        cfg.csa_ratio,
                        2 * di,
                        di,
                    )?,
                })
            }
            _ => None,
        };
        // a compressor on a window layer (or its absence on a compressed one)
        // means the config's schedule does not match the weights
        if kind == AttnKind::Window && self.has(&format!("{p}.attn.compressor.wkv")) {
            bail!(
                "{}: {p} has compressor weights but the config schedules it as window-only (compress ratio 0)",
                self.src.origin("")
            );
        }
        if kind != AttnKind::Csa && self.has(&format!("{p}.attn.indexer.wq_b")) {
            bail!("{}: {p} has indexer weights but the config does not schedule it as CSA", self.src.origin(""));
        }
        let attn = AttnWeights {
            sink: self.floats(&format!("{p}.attn.attn_sink"), &[h])?,
            wq_a: self.matrix(&format!("{p}.attn.wq_a"), cfg.q_lora_rank, d)?,
            q_norm: self.floats(&format!("{p}.attn.q_norm"), &[cfg.q_lora_rank])?,
            wq_b: self.matrix(&format!("{p}.attn.wq_b"), h * hd, cfg.q_lora_rank)?,
            wkv: self.matrix(&format!("{p}.attn.wkv"), hd, d)?,
            kv_norm: self.floats(&format!("{p}.attn.kv_norm"), &[hd])?,
            wo_a: self.matrix(&format!("{p}.attn.wo_a"), cfg.o_groups * cfg.o_lora_rank, h * hd / cfg.o_groups)?,
            wo_b: self.matrix(&format!("{p}.attn.wo_b"), d, cfg.o_groups * cfg.o_lora_rank)?,
            compressor,
            indexer,
        };
        let si = cfg.moe_intermediate_size * cfg.n_shared_experts.max(1);
        let ne = cfg.n_routed_experts;
        let (bias, tid2eid) = match mlp {
            MlpKind::Score => (Some(self.floats(&format!("{p}.ffn.gate.bias"), &[ne])?), None),
            MlpKind::Hash => {
                let name = self.name(&format!("{p}.ffn.gate.tid2eid"))?;
                let t = self.raw(&name)?;
                let k = cfg.num_experts_per_tok;
                if t.shape != [cfg.vocab_size, k] {
                    bail!("{}: shape {:?}, expected [{}, {k}]", self.where_(&name), t.shape, cfg.vocab_size);
                }
                let ids = t.to_i64().with_context(|| format!("{}: dtype {:?}", self.where_(&name), t.dtype))?;
                let mut out = Vec::with_capacity(ids.len());
                for (j, id) in ids.into_iter().enumerate() {
                    if id < 0 || id as usize >= ne {
                        bail!("{}: entry {j} = {id} is not an expert id (0..{ne})", self.where_(&name));
                    }
                    out.push(id as u32);
                }
                (None, Some(out))
            }
        };
        let ffn = MoeWeights {
            gate: self.matrix(&format!("{p}.ffn.gate"), ne, d)?,
            bias,
            tid2eid,
            shared: ExpertWeights {
                w1: self.matrix(&format!("{p}.ffn.shared_experts.w1"), si, d)?,
                w2: self.matrix(&format!("{p}.ffn.shared_experts.w2"), d, si)?,
                w3: self.matrix(&format!("{p}.ffn.shared_experts.w3"), si, d)?,
            },
            experts: self.experts(cfg, p)?,
        };
        Ok(LayerWeights {
            attn_norm: self.floats(&format!("{p}.attn_norm"), &[d])?,
            ffn_norm: self.floats(&format!("{p}.ffn_norm"), &[d])?,
            hc_attn: self.hc(&format!("{p}.hc_attn_"), mix, hc * d, 3)?,
            hc_ffn: self.hc(&format!("{p}.hc_ffn_"), mix, hc * d, 3)?,
            attn,
            ffn,
        })
    }
}

/// Load one block of `cfg`'s shape under `prefix` (a DSpark stage `mtp.S`,
/// window-only and score-routed, is the intended use), with the tensor
/// names of `layout`.
pub fn load_block(
    src: &dyn TensorSource,
    layout: CheckpointLayout,
    cfg: &Dsv4Config,
    prefix: &str,
    kind: AttnKind,
    mlp: MlpKind,
) -> Result<LayerWeights> {
    Loader { src, layout }.block(cfg, prefix, kind, mlp)
}

/// A matrix `[rows, cols]` (dense or block-quantized) by canonical name.
pub fn load_matrix(
    src: &dyn TensorSource,
    layout: CheckpointLayout,
    canonical: &str,
    rows: usize,
    cols: usize,
) -> Result<Matrix> {
    Loader { src, layout }.matrix(canonical, rows, cols)
}

/// A float tensor of exactly `shape` by canonical name.
pub fn load_floats(
    src: &dyn TensorSource,
    layout: CheckpointLayout,
    canonical: &str,
    shape: &[usize],
) -> Result<Vec<f32>> {
    Loader { src, layout }.floats(canonical, shape)
}

/// Guess the layout of a source from its tensor names.
pub fn detect_layout(src: &dyn TensorSource) -> Result<CheckpointLayout> {
    if src.get("embed.weight").is_some() {
        Ok(CheckpointLayout::Official)
    } else if src.get("model.embed_tokens.weight").is_some() {
        if src.get("model.layers.0.attn_norm.weight").is_some() {
            Ok(CheckpointLayout::TransformersSaved)
        } else {
            Ok(CheckpointLayout::Hf)
        }
    } else if src.get("token_embd.weight").is_some() {
        Ok(CheckpointLayout::Gguf)
    } else {
        bail!(
            "{}: no embedding tensor (`embed.weight`, `model.embed_tokens.weight` or `token_embd.weight`); not a DeepSeek-V4 checkpoint",
            src.origin("")
        )
    }
}

impl Dsv4Weights {
    /// Load every tensor the config calls for from `src`, checking shapes and dtypes.
    pub fn load(src: &dyn TensorSource, config: &Dsv4Config, arm: ExpertArm) -> Result<Self> {
        config.validate()?;
        let layout = detect_layout(src)?;
        let ld = Loader { src, layout };
        let (v, d, hc) = (config.vocab_size, config.hidden_size, config.hc_mult);
        let embed = ld.matrix("embed", v, d)?;
        let head = ld.matrix("head", v, d)?;
        let norm = ld.floats("norm", &[d])?;
        let hc_head = ld.hc("hc_head_", hc, hc * d, 1)?;
        let mut layers = Vec::with_capacity(config.num_hidden_layers);
        for l in 0..config.num_hidden_layers {
            let mut lw = ld.layer(config, l)?;
            if arm == ExpertArm::Bf16 {
                for (x, e) in lw.ffn.experts.iter_mut().enumerate() {
                    for (w, m) in [("w1", &mut e.w1), ("w2", &mut e.w2), ("w3", &mut e.w3)] {
                        if matches!(m.format, MatFormat::Fp4 { .. } | MatFormat::Mxfp4 | MatFormat::Fp8 { .. }) {
                            *m = m
                                .to_bf16_exact()
                                .with_context(|| format!("the bf16 expert arm: layer {l} expert {x} {w}"))?;
                        }
                    }
                }
            }
            layers.push(lw);
        }
        // a checkpoint with more layers than the config asks for is a mismatch
        let extra = format!("layers.{}.attn_norm", config.num_hidden_layers);
        if ld.has(&extra) {
            bail!(
                "{}: the checkpoint has more layers than `num_hidden_layers` = {}",
                src.origin(""),
                config.num_hidden_layers
            );
        }
        Ok(Dsv4Weights { config: config.clone(), embed, head, norm, hc_head, layers, layout, expert_arm: arm })
    }

    /// Bytes of all weights as held (after the expert arm's conversion).
    pub fn stored_bytes(&self) -> usize {
        let mut n = self.embed.stored_bytes() + self.head.stored_bytes();
        for l in &self.layers {
            let a = &l.attn;
            for m in [&a.wq_a, &a.wq_b, &a.wkv, &a.wo_a, &a.wo_b, &l.ffn.gate] {
                n += m.stored_bytes();
            }
            for e in l.ffn.experts.iter().chain(std::iter::once(&l.ffn.shared)) {
                n += e.w1.stored_bytes() + e.w2.stored_bytes() + e.w3.stored_bytes();
            }
        }
        n
    }
}
