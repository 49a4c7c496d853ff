//! Deterministic synthetic DSV4 checkpoints.
//!
//! A model is defined once, as the official checkpoint's tensors (FP8 with
//! 128x128 UE8M0 scales, FP4 routed experts with 1x32 E8M0 scales, BF16 and
//! F32 elsewhere), each drawn from a stream keyed by (seed, tensor name,
//! 128-row chunk). The HF and GGUF layouts are exact re-encodings of the same
//! values (FP8/FP4 values are representable in BF16; FP4 repacks losslessly
//! into ggml's MXFP4), so every layout of one seed loads to the same model.
//!
//! Scales: linear maps draw N(0, 1/fan_in), so RMS-normalized inputs keep a
//! unit scale through each projection; norm weights 1 + N(0, 0.1^2); the head
//! N(0, (2.5/sqrt(D))^2) for logits of standard deviation ~2.5; buffers that
//! transformers initializes to 0 or 1 (sinks, position bias, correction bias,
//! hc base/scale, tid2eid) are random. `check::activation_report` measures
//! the result through all layers.

pub mod check;
pub mod presets;
pub mod rng;
pub mod tokenizer;
pub mod write;

use anyhow::Result;
use rayon::prelude::*;

use crate::config::{AttnKind, Dsv4Config, MlpKind};
use crate::weights::formats::*;
use rng::Rng;

pub use presets::Preset;

/// How a canonical tensor is stored in the official layout and drawn.
#[derive(Clone, Debug)]
pub enum Kind {
    /// FP8 E4M3 `[rows, cols]` with 128x128 E8M0 scales, values N(0, std^2).
    Fp8 { rows: usize, cols: usize, std: f32 },
    /// FP4 E2M1 `[rows, cols]` packed, 1x32 E8M0 scales, values N(0, std^2).
    Fp4 { rows: usize, cols: usize, std: f32 },
    /// BF16 values N(mean, std^2).
    Bf16 { shape: Vec<usize>, mean: f32, std: f32 },
    /// F32 values N(mean, std^2).
    F32 { shape: Vec<usize>, mean: f32, std: f32 },
    /// `[vocab, k]` distinct expert ids per token.
    Tid2eid { vocab: usize, k: usize, experts: usize },
}

#[derive(Clone, Debug)]
pub struct Spec {
    pub canonical: String,
    pub kind: Kind,
}

/// A synthetic model: a config and a seed.
#[derive(Clone, Debug)]
pub struct Synth {
    pub config: Dsv4Config,
    pub seed: u64,
    pub name: String,
}

/// FP8 codes and E8M0 scale codes of a generated matrix.
pub struct Fp8Data {
    pub codes: Vec<u8>,
    pub scales: Vec<u8>,
}

/// Packed FP4 bytes and E8M0 scale codes of a generated matrix.
pub struct Fp4Data {
    pub packed: Vec<u8>,
    pub scales: Vec<u8>,
}

impl Synth {
    pub fn new(preset: Preset, seed: u64) -> Self {
        Synth { config: preset.config(), seed, name: preset.name() }
    }

    /// Add a DSpark drafter (`mtp.*` stages): block 5, 3 stages reading the
    /// last three layers, noise token = the last vocabulary id, Markov rank
    /// a quarter of the hidden size (16..256).
    pub fn with_dspark(mut self) -> Self {
        let n = self.config.num_hidden_layers;
        self.config.dspark = Some(crate::config::DsparkConfig {
            block_size: 5,
            noise_token_id: self.config.vocab_size as u32 - 1,
            target_layer_ids: (n.saturating_sub(3)..n).collect(),
            markov_rank: (self.config.hidden_size / 4).clamp(16, 256),
            stages: 3,
        });
        self
    }

    /// Every canonical tensor in checkpoint order.
    pub fn specs(&self) -> Vec<Spec> {
        let c = &self.config;
        let (v, d, hc) = (c.vocab_size, c.hidden_size, c.hc_mult);
        let lin = |rows: usize, cols: usize| Kind::Fp8 { rows, cols, std: 1.0 / (cols as f32).sqrt() };
        let bf = |shape: Vec<usize>, mean: f32, std: f32| Kind::Bf16 { shape, mean, std };
        let f32k = |shape: Vec<usize>, mean: f32, std: f32| Kind::F32 { shape, mean, std };
        let mut s = vec![
            Spec { canonical: "embed".into(), kind: bf(vec![v, d], 0.0, 1.0) },
            Spec { canonical: "head".into(), kind: bf(vec![v, d], 0.0, 2.5 / (d as f32).sqrt()) },
            Spec { canonical: "norm".into(), kind: bf(vec![d], 1.0, 0.1) },
            Spec { canonical: "hc_head_fn".into(), kind: f32k(vec![hc, hc * d], 0.0, 0.5 / ((hc * d) as f32).sqrt()) },
            Spec { canonical: "hc_head_base".into(), kind: f32k(vec![hc], 0.0, 0.5) },
            Spec { canonical: "hc_head_scale".into(), kind: f32k(vec![1], 1.0, 0.2) },
        ];
        for l in 0..c.num_hidden_layers {
            s.extend(self.block_specs(&format!("layers.{l}"), c.layer_types[l], c.mlp_layer_types[l]));
        }
        if let Some(ds) = &c.dspark {
            let r = ds.markov_rank;
            for st in 0..ds.stages {
                let p = format!("mtp.{st}");
                if st == 0 {
                    let w = ds.target_layer_ids.len() * d;
                    s.push(Spec { canonical: format!("{p}.main_proj"), kind: lin(d, w) });
                    s.push(Spec { canonical: format!("{p}.main_norm"), kind: bf(vec![d], 1.0, 0.1) });
                }
                s.extend(self.block_specs(&p, AttnKind::Window, MlpKind::Score));
                if st + 1 == ds.stages {
                    s.push(Spec { canonical: format!("{p}.norm"), kind: bf(vec![d], 1.0, 0.1) });
                    s.push(Spec {
                        canonical: format!("{p}.hc_head_fn"),
                        kind: f32k(vec![hc, hc * d], 0.0, 0.5 / ((hc * d) as f32).sqrt()),
                    });
                    s.push(Spec { canonical: format!("{p}.hc_head_base"), kind: f32k(vec![hc], 0.0, 0.5) });
                    s.push(Spec { canonical: format!("{p}.hc_head_scale"), kind: f32k(vec![1], 1.0, 0.2) });
                    s.push(Spec { canonical: format!("{p}.markov_head.markov_w1"), kind: bf(vec![v, r], 0.0, 1.0) });
                    s.push(Spec {
                        canonical: format!("{p}.markov_head.markov_w2"),
                        kind: bf(vec![v, r], 0.0, 1.0 / (r as f32).sqrt()),
                    });
                    s.push(Spec {
                        canonical: format!("{p}.confidence_head.proj"),
                        kind: bf(vec![1, d + r], 0.0, 1.0 / ((d + r) as f32).sqrt()),
                    });
                }
            }
        }
        s
    }

    /// The tensors of one transformer block under `prefix` (a trunk layer
    /// `layers.N` or a DSpark stage `mtp.S`).
    fn block_specs(&self, prefix: &str, kind: AttnKind, mlp: MlpKind) -> Vec<Spec> {
        let c = &self.config;
        let (v, d, h, hd, hc) = (c.vocab_size, c.hidden_size, c.num_attention_heads, c.head_dim, c.hc_mult);
        let lin = |rows: usize, cols: usize| Kind::Fp8 { rows, cols, std: 1.0 / (cols as f32).sqrt() };
        let bf = |shape: Vec<usize>, mean: f32, std: f32| Kind::Bf16 { shape, mean, std };
        let f32k = |shape: Vec<usize>, mean: f32, std: f32| Kind::F32 { shape, mean, std };
        let mix = (2 + hc) * hc;
        let mut s = Vec::new();
        {
            let p = |x: &str| format!("{prefix}.{x}");
            let mut add = |name: String, kind: Kind| s.push(Spec { canonical: name, kind });
            add(p("attn_norm"), bf(vec![d], 1.0, 0.1));
            add(p("ffn_norm"), bf(vec![d], 1.0, 0.1));
            for site in ["attn", "ffn"] {
                add(p(&format!("hc_{site}_fn")), f32k(vec![mix, hc * d], 0.0, 0.5 / ((hc * d) as f32).sqrt()));
                add(p(&format!("hc_{site}_base")), f32k(vec![mix], 0.0, 0.5));
                add(p(&format!("hc_{site}_scale")), f32k(vec![3], 1.0, 0.2));
            }
            add(p("attn.attn_sink"), f32k(vec![h], 0.0, 1.0));
            add(p("attn.wq_a"), lin(c.q_lora_rank, d));
            add(p("attn.q_norm"), bf(vec![c.q_lora_rank], 1.0, 0.1));
            add(p("attn.wq_b"), lin(h * hd, c.q_lora_rank));
            add(p("attn.wkv"), lin(hd, d));
            add(p("attn.kv_norm"), bf(vec![hd], 1.0, 0.1));
            add(p("attn.wo_a"), lin(c.o_groups * c.o_lora_rank, h * hd / c.o_groups));
            add(p("attn.wo_b"), lin(d, c.o_groups * c.o_lora_rank));
            if kind != AttnKind::Window {
                let (ratio, width) = if kind == AttnKind::Csa { (c.csa_ratio, 2 * hd) } else { (c.hca_ratio, hd) };
                add(p("attn.compressor.ape"), f32k(vec![ratio, width], 0.0, 0.5));
                add(p("attn.compressor.wkv"), bf(vec![width, d], 0.0, 1.0 / (d as f32).sqrt()));
                add(p("attn.compressor.wgate"), bf(vec![width, d], 0.0, 1.0 / (d as f32).sqrt()));
                add(p("attn.compressor.norm"), bf(vec![hd], 1.0, 0.1));
            }
            if kind == AttnKind::Csa {
                let (hi, di) = (c.index_n_heads, c.index_head_dim);
                add(p("attn.indexer.wq_b"), lin(hi * di, c.q_lora_rank));
                add(p("attn.indexer.weights_proj"), bf(vec![hi, d], 0.0, 1.0 / (d as f32).sqrt()));
                add(p("attn.indexer.compressor.ape"), f32k(vec![c.csa_ratio, 2 * di], 0.0, 0.5));
                add(p("attn.indexer.compressor.wkv"), bf(vec![2 * di, d], 0.0, 1.0 / (d as f32).sqrt()));
                add(p("attn.indexer.compressor.wgate"), bf(vec![2 * di, d], 0.0, 1.0 / (d as f32).sqrt()));
                add(p("attn.indexer.compressor.norm"), bf(vec![di], 1.0, 0.1));
            }
            let (ne, inter) = (c.n_routed_experts, c.moe_intermediate_size);
            add(p("ffn.gate"), bf(vec![ne, d], 0.0, 1.0 / (d as f32).sqrt()));
            match mlp {
                MlpKind::Score => add(p("ffn.gate.bias"), f32k(vec![ne], 0.0, 0.1)),
                MlpKind::Hash => {
                    add(p("ffn.gate.tid2eid"), Kind::Tid2eid { vocab: v, k: c.num_experts_per_tok, experts: ne })
                }
            }
            let si = inter * c.n_shared_experts.max(1);
            add(p("ffn.shared_experts.w1"), lin(si, d));
            add(p("ffn.shared_experts.w2"), lin(d, si));
            add(p("ffn.shared_experts.w3"), lin(si, d));
            for e in 0..ne {
                let fp4 = |rows: usize, cols: usize| Kind::Fp4 { rows, cols, std: 1.0 / (cols as f32).sqrt() };
                add(p(&format!("ffn.experts.{e}.w1")), fp4(inter, d));
                add(p(&format!("ffn.experts.{e}.w2")), fp4(d, inter));
                add(p(&format!("ffn.experts.{e}.w3")), fp4(inter, d));
            }
        }
        s
    }

    /// Each 128-row chunk of a `rows` x `cols` normal matrix (chunk i: rows
    /// 128 i .., drawn from its own stream, so that the values do not depend
    /// on the thread count), in a buffer reused within a thread, handed with
    /// the chunk's item of `chunks` to `f`, in parallel. The values never
    /// exist whole, so a quantized tensor costs its own bytes, not four a
    /// value.
    fn by_row_chunks<C: Send>(
        &self,
        name: &str,
        (rows, cols): (usize, usize),
        (mean, std): (f32, f32),
        chunks: impl IndexedParallelIterator<Item = C>,
        f: impl Fn(&[f32], C) + Sync + Send,
    ) {
        chunks.enumerate().for_each_init(Vec::new, |vals: &mut Vec<f32>, (i, c)| {
            vals.clear();
            vals.resize(128.min(rows - 128 * i) * cols, 0.0);
            Rng::new(self.seed, name, i as u64).fill_normal(vals, mean, std);
            f(vals, c);
        });
    }

    /// A dense (BF16/F32) tensor drawn a chunk of rows at a time into
    /// `per_value` items of `T` a value: `f(values, out)` writes a chunk's
    /// values, given whether the tensor is BF16. `what` names the caller in
    /// the panic for other kinds.
    fn dense<T: Copy + Default + Send + Sync>(
        &self,
        spec: &Spec,
        what: &str,
        per_value: impl Fn(bool) -> usize,
        f: impl Fn(bool, &[f32], &mut [T]) + Sync + Send,
    ) -> Vec<T> {
        let (Kind::Bf16 { shape, mean, std } | Kind::F32 { shape, mean, std }) = &spec.kind else {
            panic!("{what} on {:?}", spec.kind)
        };
        let bf16 = matches!(spec.kind, Kind::Bf16 { .. });
        let cols = *shape.last().unwrap();
        let rows: usize = shape[..shape.len() - 1].iter().product();
        let width = per_value(bf16);
        let mut out = vec![T::default(); rows * cols * width];
        let chunks = out.par_chunks_mut(128 * cols * width);
        self.by_row_chunks(&spec.canonical, (rows, cols), (*mean, *std), chunks, |v, o| f(bf16, v, o));
        out
    }

    /// Values of a dense (BF16/F32) tensor as f32 (BF16 ones already rounded).
    pub fn dense_values(&self, spec: &Spec) -> Vec<f32> {
        self.dense(
            spec,
            "dense_values",
            |_| 1,
            |bf16, v, o| {
                for (x, y) in v.iter().zip(o.iter_mut()) {
                    *y = if bf16 { bf16_to_f32(f32_to_bf16(*x)) } else { *x };
                }
            },
        )
    }

    /// The little-endian bytes of a dense tensor in its own dtype (BF16 or
    /// F32): `to_bf16_bytes` / `to_f32_bytes` of `dense_values`, drawn a
    /// chunk of rows at a time.
    pub fn dense_bytes(&self, spec: &Spec) -> Vec<u8> {
        self.dense(
            spec,
            "dense_bytes",
            |bf16| if bf16 { 2 } else { 4 },
            |bf16, v, o| {
                if bf16 {
                    for (x, b) in v.iter().zip(o.chunks_exact_mut(2)) {
                        b.copy_from_slice(&f32_to_bf16(*x).to_le_bytes());
                    }
                } else {
                    for (x, b) in v.iter().zip(o.chunks_exact_mut(4)) {
                        b.copy_from_slice(&x.to_le_bytes());
                    }
                }
            },
        )
    }

    pub fn fp8(&self, spec: &Spec) -> Fp8Data {
        let Kind::Fp8 { rows, cols, std } = spec.kind else { panic!("fp8 on {:?}", spec.kind) };
        let (gr, gc) = (rows.div_ceil(128), cols.div_ceil(128));
        let mut scales = vec![0u8; gr * gc];
        let mut codes = vec![0u8; rows * cols];
        // a 128-row chunk is one row of 128 x 128 blocks
        let chunks = codes.par_chunks_mut(128 * cols).zip(scales.par_chunks_mut(gc));
        self.by_row_chunks(&spec.canonical, (rows, cols), (0.0, std), chunks, |vals, (crow, srow)| {
            let n = vals.len() / cols;
            for (bj, sc) in srow.iter_mut().enumerate() {
                let (c0, c1) = (bj * 128, ((bj + 1) * 128).min(cols));
                let mut amax = 0.0f32;
                for r in 0..n {
                    for x in &vals[r * cols + c0..r * cols + c1] {
                        amax = amax.max(x.abs());
                    }
                }
                let s = pow2_scale_for(amax.max(1e-30), E4M3_MAX);
                *sc = e8m0_of_pow2(s);
                for r in 0..n {
                    for cc in c0..c1 {
                        crow[r * cols + cc] = f32_to_e4m3((vals[r * cols + cc] / s).clamp(-E4M3_MAX, E4M3_MAX));
                    }
                }
            }
        });
        Fp8Data { codes, scales }
    }

    pub fn fp4(&self, spec: &Spec) -> Fp4Data {
        let Kind::Fp4 { rows, cols, std } = spec.kind else { panic!("fp4 on {:?}", spec.kind) };
        let nb = cols / 32;
        let mut scales = vec![0u8; rows * nb];
        let mut packed = vec![0u8; rows * cols / 2];
        let chunks = packed.par_chunks_mut(128 * cols / 2).zip(scales.par_chunks_mut(128 * nb));
        self.by_row_chunks(&spec.canonical, (rows, cols), (0.0, std), chunks, |vals, (pk, sc)| {
            for ((row, prow), srow) in
                vals.chunks_exact(cols).zip(pk.chunks_exact_mut(cols / 2)).zip(sc.chunks_exact_mut(nb))
            {
                for b in 0..nb {
                    let blk = &row[b * 32..(b + 1) * 32];
                    let amax = blk.iter().fold(0.0f32, |m, x| m.max(x.abs()));
                    let s = pow2_scale_for(amax.max(1e-30), E2M1_MAX);
                    srow[b] = e8m0_of_pow2(s);
                    for k in 0..16 {
                        let lo = f32_to_e2m1((blk[2 * k] / s).clamp(-E2M1_MAX, E2M1_MAX));
                        let hi = f32_to_e2m1((blk[2 * k + 1] / s).clamp(-E2M1_MAX, E2M1_MAX));
                        prow[b * 16 + k] = lo | (hi << 4);
                    }
                }
            }
        });
        Fp4Data { packed, scales }
    }

    pub fn tid2eid(&self, spec: &Spec) -> Vec<i64> {
        let Kind::Tid2eid { vocab, k, experts } = spec.kind else { panic!("tid2eid on {:?}", spec.kind) };
        let mut rng = Rng::new(self.seed, &spec.canonical, 0);
        let mut out = Vec::with_capacity(vocab * k);
        for _ in 0..vocab {
            let mut picked: Vec<i64> = Vec::with_capacity(k);
            while picked.len() < k {
                let e = rng.below(experts as u64) as i64;
                if !picked.contains(&e) {
                    picked.push(e);
                }
            }
            out.extend(picked);
        }
        out
    }

    /// The values of any float spec, decoded to f32 (`[rows, cols]` row-major).
    pub fn values(&self, spec: &Spec) -> Vec<f32> {
        match &spec.kind {
            Kind::Fp8 { rows, cols, .. } => {
                let d = self.fp8(spec);
                let gc = cols.div_ceil(128);
                let mut out = vec![0.0f32; rows * cols];
                for r in 0..*rows {
                    for c in 0..*cols {
                        out[r * cols + c] =
                            e4m3_to_f32(d.codes[r * cols + c]) * e8m0_to_f32(d.scales[(r / 128) * gc + c / 128]);
                    }
                }
                out
            }
            Kind::Fp4 { rows, cols, .. } => {
                let d = self.fp4(spec);
                let nb = cols / 32;
                let mut out = vec![0.0f32; rows * cols];
                for r in 0..*rows {
                    for c in 0..*cols {
                        let byte = d.packed[(r * cols + c) / 2];
                        let nib = if c % 2 == 0 { byte & 0xF } else { byte >> 4 };
                        out[r * cols + c] = e2m1_to_f32(nib) * e8m0_to_f32(d.scales[r * nb + c / 32]);
                    }
                }
                out
            }
            Kind::Bf16 { .. } | Kind::F32 { .. } => self.dense_values(spec),
            Kind::Tid2eid { .. } => panic!("values on tid2eid"),
        }
    }
}

/// Bytes of f32 values as little-endian BF16 (exact for values already on the bf16 grid).
pub fn to_bf16_bytes(v: &[f32]) -> Vec<u8> {
    let mut out = Vec::with_capacity(v.len() * 2);
    for &x in v {
        out.extend_from_slice(&f32_to_bf16(x).to_le_bytes());
    }
    out
}

pub fn to_f32_bytes(v: &[f32]) -> Vec<u8> {
    let mut out = Vec::with_capacity(v.len() * 4);
    for &x in v {
        out.extend_from_slice(&x.to_le_bytes());
    }
    out
}

/// Convenience: the synthetic model's tensors as an in-memory official
/// checkpoint, for the embedded default model and tests.
pub fn in_memory(s: &Synth) -> Result<write::MemSource> {
    write::MemSource::official(s)
}
