//! Writing a synthetic model in the official, HF or GGUF layout.

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use anyhow::{bail, Context, Result};

use super::{to_bf16_bytes, to_f32_bytes, Kind, Spec, Synth};
use crate::config::Dsv4Config;
use crate::weights::gguf::write_gguf;
use crate::weights::gguf_meta::config_to_gguf;
use crate::weights::names::{self, CheckpointLayout};
use crate::weights::safetensors::{write_checkpoint, TensorPlan};
use crate::weights::tensor::{Bytes, DType, RawTensor, TensorSource};

/// Where a planned tensor's bytes come from.
#[derive(Clone, Debug)]
enum Source {
    /// Official: FP8 codes / FP4 packed bytes of a spec.
    QuantData(usize),
    /// Official: the E8M0 scales of an FP8/FP4 spec.
    QuantScales(usize),
    /// A dense spec in its own dtype (BF16 or F32).
    Dense(usize),
    /// A dense spec widened to F32 (GGUF norms).
    DenseF32(usize),
    /// An FP8/FP4 spec's values as BF16.
    AsBf16(usize),
    /// tid2eid as I64 / I32.
    Ids(usize, DType),
    /// Stacked experts of a layer: (spec indices in order, as BF16 rows).
    StackBf16(Vec<usize>),
    /// Stacked FP4 experts re-packed to MXFP4 blocks.
    StackMxfp4(Vec<usize>),
}

/// The plan of a layout: tensors in write order with their byte sources.
pub struct LayoutPlan {
    pub plans: Vec<TensorPlan>,
    sources: Vec<Source>,
}

fn expert_spec_indices(specs: &[Spec], l: usize, ne: usize, w: &str) -> Vec<usize> {
    let idx: HashMap<&str, usize> = specs.iter().enumerate().map(|(i, s)| (s.canonical.as_str(), i)).collect();
    (0..ne).map(|e| idx[format!("layers.{l}.ffn.experts.{e}.{w}").as_str()]).collect()
}

fn is_expert(canonical: &str) -> bool {
    canonical.contains(".ffn.experts.")
}

impl Synth {
    /// The tensors of `layout`, in write order.
    pub fn plan(&self, layout: CheckpointLayout) -> Result<LayoutPlan> {
        if layout == CheckpointLayout::TransformersSaved {
            bail!("synth writes the official, hf (module names) or gguf layout");
        }
        let specs = self.specs();
        let c = &self.config;
        let mut plans = Vec::new();
        let mut sources = Vec::new();
        let mut push = |name: String, dtype: DType, shape: Vec<usize>, src: Source| {
            plans.push(TensorPlan { name, dtype, shape });
            sources.push(src);
        };
        for (i, s) in specs.iter().enumerate() {
            if layout != CheckpointLayout::Official && (is_expert(&s.canonical) || s.canonical.starts_with("mtp.")) {
                // stacked experts follow below; the DSpark stages ship in the official layout only
                continue;
            }
            let name = match layout {
                CheckpointLayout::Official => names::official_name(&s.canonical),
                CheckpointLayout::Hf => names::hf_name(&s.canonical).context("hf name")?,
                CheckpointLayout::Gguf => names::gguf_name(&s.canonical).context("gguf name")?,
                CheckpointLayout::TransformersSaved => unreachable!(),
            };
            match (&s.kind, layout) {
                (Kind::Fp8 { rows, cols, .. }, CheckpointLayout::Official) => {
                    push(name.clone(), DType::F8E4M3, vec![*rows, *cols], Source::QuantData(i));
                    let scale = name.strip_suffix(".weight").unwrap().to_string() + ".scale";
                    push(scale, DType::F8E8M0, vec![rows.div_ceil(128), cols.div_ceil(128)], Source::QuantScales(i));
                }
                (Kind::Fp4 { rows, cols, .. }, CheckpointLayout::Official) => {
                    push(name.clone(), DType::I8, vec![*rows, cols / 2], Source::QuantData(i));
                    let scale = name.strip_suffix(".weight").unwrap().to_string() + ".scale";
                    push(scale, DType::F8E8M0, vec![*rows, cols / 32], Source::QuantScales(i));
                }
                (Kind::Fp8 { rows, cols, .. }, _) => push(name, DType::BF16, vec![*rows, *cols], Source::AsBf16(i)),
                (Kind::Fp4 { .. }, _) => unreachable!("experts are stacked"),
                (Kind::Bf16 { shape, .. }, CheckpointLayout::Gguf) if shape.len() == 1 => {
                    push(name, DType::F32, shape.clone(), Source::DenseF32(i))
                }
                (Kind::Bf16 { shape, .. }, _) => push(name, DType::BF16, shape.clone(), Source::Dense(i)),
                (Kind::F32 { shape, .. }, _) => push(name, DType::F32, shape.clone(), Source::Dense(i)),
                (Kind::Tid2eid { vocab, k, .. }, CheckpointLayout::Gguf) => {
                    push(name, DType::I32, vec![*vocab, *k], Source::Ids(i, DType::I32))
                }
                (Kind::Tid2eid { vocab, k, .. }, _) => {
                    push(name, DType::I64, vec![*vocab, *k], Source::Ids(i, DType::I64))
                }
            }
            // stacked experts go right after the layer's shared expert
            if s.canonical.ends_with("ffn.shared_experts.w3")
                && s.canonical.starts_with("layers.")
                && layout != CheckpointLayout::Official
            {
                let l: usize = s.canonical.split('.').nth(1).unwrap().parse().unwrap();
                let (ne, inter, d) = (c.n_routed_experts, c.moe_intermediate_size, c.hidden_size);
                let w1 = expert_spec_indices(&specs, l, ne, "w1");
                let w2 = expert_spec_indices(&specs, l, ne, "w2");
                let w3 = expert_spec_indices(&specs, l, ne, "w3");
                if layout == CheckpointLayout::Hf {
                    let (gu, dn) = names::hf_expert_names(l);
                    let mut order = Vec::with_capacity(2 * ne);
                    for e in 0..ne {
                        order.push(w1[e]);
                        order.push(w3[e]);
                    }
                    push(gu, DType::BF16, vec![ne, 2 * inter, d], Source::StackBf16(order));
                    push(dn, DType::BF16, vec![ne, d, inter], Source::StackBf16(w2));
                } else {
                    let [g, u, dn] = names::gguf_expert_names(l);
                    push(g, DType::Mxfp4, vec![ne, inter, d], Source::StackMxfp4(w1));
                    push(u, DType::Mxfp4, vec![ne, inter, d], Source::StackMxfp4(w3));
                    push(dn, DType::Mxfp4, vec![ne, d, inter], Source::StackMxfp4(w2));
                }
            }
        }
        Ok(LayoutPlan { plans, sources })
    }
}

/// A spec index with the parts of its quantization (data, scale bytes) not
/// yet handed out.
type LastQuant = (usize, Option<Vec<u8>>, Option<Vec<u8>>);

/// Produces planned tensors' bytes, remembering the last quantized spec so a
/// weight and its scale are drawn once.
struct Producer<'a> {
    synth: &'a Synth,
    specs: &'a [Spec],
    last: RefCell<Option<LastQuant>>,
}

impl<'a> Producer<'a> {
    fn new(synth: &'a Synth, specs: &'a [Spec]) -> Self {
        Producer { synth, specs, last: RefCell::new(None) }
    }

    /// Spec `i`'s quantized data (`scales` false) or scale bytes (true):
    /// the part left from the last draw of `i` where there is one (each
    /// part is handed out once, not copied), else a new draw whose other
    /// part is kept for the next call.
    fn quant(&self, i: usize, scales: bool) -> Vec<u8> {
        let mut last = self.last.borrow_mut();
        if let Some((j, data, sc)) = last.as_mut() {
            if *j == i {
                if let Some(v) = if scales { sc.take() } else { data.take() } {
                    return v;
                }
            }
        }
        let (data, sc) = match self.specs[i].kind {
            Kind::Fp8 { .. } => {
                let d = self.synth.fp8(&self.specs[i]);
                (d.codes, d.scales)
            }
            Kind::Fp4 { .. } => {
                let d = self.synth.fp4(&self.specs[i]);
                (d.packed, d.scales)
            }
            _ => unreachable!(),
        };
        let (give, left) = if scales { (sc, (i, Some(data), None)) } else { (data, (i, None, Some(sc))) };
        *last = Some(left);
        give
    }

    fn produce(&self, src: &Source) -> Vec<u8> {
        match src {
            Source::QuantData(i) => self.quant(*i, false),
            Source::QuantScales(i) => self.quant(*i, true),
            Source::Dense(i) => self.synth.dense_bytes(&self.specs[*i]),
            Source::DenseF32(i) => to_f32_bytes(&self.synth.dense_values(&self.specs[*i])),
            Source::AsBf16(i) => to_bf16_bytes(&self.synth.values(&self.specs[*i])),
            Source::Ids(i, dt) => {
                let ids = self.synth.tid2eid(&self.specs[*i]);
                let mut out = Vec::new();
                for id in ids {
                    if *dt == DType::I32 {
                        out.extend_from_slice(&(id as i32).to_le_bytes());
                    } else {
                        out.extend_from_slice(&id.to_le_bytes());
                    }
                }
                out
            }
            Source::StackBf16(order) => {
                let mut out = Vec::new();
                for &i in order {
                    out.extend(to_bf16_bytes(&self.synth.values(&self.specs[i])));
                }
                out
            }
            Source::StackMxfp4(order) => {
                let mut out = Vec::new();
                for &i in order {
                    let Kind::Fp4 { rows, cols, .. } = self.specs[i].kind else { unreachable!() };
                    let d = self.synth.fp4(&self.specs[i]);
                    let nb = cols / 32;
                    for r in 0..rows {
                        for b in 0..nb {
                            out.push(d.scales[r * nb + b]);
                            // official pairs (2k, 2k+1) per byte -> ggml halves (k, k+16)
                            let src = &d.packed[(r * cols + b * 32) / 2..(r * cols + b * 32) / 2 + 16];
                            let nib = |j: usize| if j.is_multiple_of(2) { src[j / 2] & 0xF } else { src[j / 2] >> 4 };
                            for k in 0..16 {
                                out.push(nib(k) | (nib(k + 16) << 4));
                            }
                        }
                    }
                }
                out
            }
        }
    }
}

/// Options of `write_model`.
pub struct WriteOptions {
    pub layout: CheckpointLayout,
    /// Shard size for safetensors (bytes).
    pub shard_bytes: usize,
}

/// Write the model (weights, config.json, tokenizer.json) under `out`. For
/// GGUF, `out` is the `.gguf` file path and tokenizer.json goes beside it.
pub fn write_model(s: &Synth, out: &Path, opts: &WriteOptions, progress: &mut dyn FnMut(usize, usize)) -> Result<()> {
    let plan = s.plan(opts.layout)?;
    let total: usize = plan.plans.iter().map(|p| p.bytes()).sum();
    let specs = s.specs();
    let prod = Producer::new(s, &specs);
    let by_name: HashMap<String, usize> = plan.plans.iter().enumerate().map(|(i, p)| (p.name.clone(), i)).collect();
    let mut done = 0usize;
    let mut tick = |n: usize| {
        done += n;
        progress(done, total);
    };
    match opts.layout {
        CheckpointLayout::Gguf => {
            let md = config_to_gguf(&s.config, &s.name);
            write_gguf(out, &md, &plan.plans, |p| Ok(prod.produce(&plan.sources[by_name[&p.name]])), &mut tick)?;
            let dir = out.parent().unwrap_or(Path::new("."));
            super::tokenizer::write_tokenizer(&dir.join("tokenizer.json"), &s.config)?;
        }
        _ => {
            let mut meta = BTreeMap::new();
            meta.insert("format".to_string(), "pt".to_string());
            write_checkpoint(
                out,
                &plan.plans,
                opts.shard_bytes,
                &meta,
                |p| Ok(prod.produce(&plan.sources[by_name[&p.name]])),
                &mut tick,
            )?;
            let cfg = match opts.layout {
                CheckpointLayout::Hf => s.config.to_hf_json(),
                _ => s.config.to_official_json(),
            };
            std::fs::write(out.join("config.json"), serde_json::to_vec_pretty(&cfg)?)?;
            super::tokenizer::write_tokenizer(&out.join("tokenizer.json"), &s.config)?;
            let gen = serde_json::json!({
                "bos_token_id": s.config.bos_token_id,
                "eos_token_id": s.config.eos_token_id,
                "do_sample": false,
            });
            std::fs::write(out.join("generation_config.json"), serde_json::to_vec_pretty(&gen)?)?;
        }
    }
    Ok(())
}

/// An in-memory official checkpoint (the embedded default model, tests).
pub struct MemSource {
    tensors: HashMap<String, RawTensor>,
    pub config: Dsv4Config,
    label: String,
}

impl MemSource {
    /// Every tensor of the official layout, generated in parallel (each
    /// tensor from its own seeded streams, so the result does not depend on
    /// the thread count).
    pub fn official(s: &Synth) -> Result<Self> {
        Self::generate(s, false, &|_| true)
    }

    /// The tensors of `official` whose names `keep` accepts, and no others
    /// (a drafter's own tensors without the trunk's layers).
    pub fn official_only(s: &Synth, keep: &dyn Fn(&str) -> bool) -> Result<Self> {
        Self::generate(s, false, keep)
    }

    /// Like `official`, but each FP8 and FP4 tensor of a layer is drawn
    /// once per attention kind (at the first layer of that kind) and the
    /// later layers of the kind hold the same host bytes; every other tensor
    /// (router, biases, norms, hyper-connection maps, tid2eid, compressor
    /// and indexer projections) is drawn per layer, so routing differs from
    /// layer to layer. For deep benchmark shapes (43 DSV4-Flash layers are
    /// ~176 GB) on a host that cannot hold them: a GPU upload still gives
    /// every layer its own device copy, so a step reads as many bytes.
    pub fn official_sharing_quantized(s: &Synth) -> Result<Self> {
        Self::generate(s, true, &|_| true)
    }

    fn generate(s: &Synth, share: bool, keep: &dyn Fn(&str) -> bool) -> Result<Self> {
        use rayon::prelude::*;
        let plan = s.plan(CheckpointLayout::Official)?;
        let specs = s.specs();
        // with sharing: the layer whose quantized tensors a layer reuses
        let layer_of =
            |canonical: &str| -> Option<usize> { canonical.strip_prefix("layers.")?.split('.').next()?.parse().ok() };
        let kinds = &s.config.layer_types;
        let rep = |l: usize| (0..l).find(|&r| kinds[r] == kinds[l]).unwrap_or(l);
        let borrowed = |spec: usize| -> Option<(usize, usize)> {
            if !share || !matches!(specs[spec].kind, Kind::Fp8 { .. } | Kind::Fp4 { .. }) {
                return None;
            }
            let l = layer_of(&specs[spec].canonical)?;
            (rep(l) != l).then_some((l, rep(l)))
        };
        // plan entries grouped by the spec that produces them (a weight and its scale)
        let mut groups: Vec<Vec<usize>> = Vec::new();
        for (k, src) in plan.sources.iter().enumerate() {
            let spec = match src {
                Source::QuantData(i) | Source::QuantScales(i) | Source::Dense(i) | Source::Ids(i, _) => *i,
                other => bail!("synth: unexpected source {other:?} in the official layout"),
            };
            match groups.last_mut() {
                Some(g) if matches!(plan.sources[g[0]], Source::QuantData(j) if j == spec) => g.push(k),
                _ => groups.push(vec![k]),
            }
        }
        groups.retain(|g| keep(&plan.plans[g[0]].name));
        let (groups, copies): (Vec<Vec<usize>>, Vec<Vec<usize>>) = groups.into_iter().partition(|g| {
            let spec = match plan.sources[g[0]] {
                Source::QuantData(i) | Source::QuantScales(i) | Source::Dense(i) | Source::Ids(i, _) => i,
                _ => unreachable!("checked above"),
            };
            borrowed(spec).is_none()
        });
        let made: Vec<Result<Vec<(String, RawTensor)>>> = groups
            .par_iter()
            .map(|g| {
                let prod = Producer::new(s, &specs);
                g.iter()
                    .map(|&k| {
                        let p = &plan.plans[k];
                        let data = prod.produce(&plan.sources[k]);
                        if data.len() != p.bytes() {
                            bail!("synth: tensor `{}` has {} bytes, planned {}", p.name, data.len(), p.bytes());
                        }
                        Ok((
                            p.name.clone(),
                            RawTensor { dtype: p.dtype, shape: p.shape.clone(), data: Bytes::from_vec(data) },
                        ))
                    })
                    .collect()
            })
            .collect();
        let mut tensors = HashMap::new();
        for group in made {
            for (name, t) in group? {
                tensors.insert(name, t);
            }
        }
        for k in copies.into_iter().flatten() {
            let (Source::QuantData(i) | Source::QuantScales(i)) = plan.sources[k] else { unreachable!("quantized") };
            let (l, r) = borrowed(i).expect("partitioned as borrowed");
            let name = &plan.plans[k].name;
            let from = name.replacen(&format!("layers.{l}."), &format!("layers.{r}."), 1);
            let t =
                tensors.get(&from).with_context(|| format!("synth: `{name}` shares `{from}`, not generated"))?.clone();
            tensors.insert(name.clone(), t);
        }
        let label = if share {
            format!("<synthetic {} seed {}, quantized tensors shared per attention kind>", s.name, s.seed)
        } else {
            format!("<synthetic {} seed {}>", s.name, s.seed)
        };
        Ok(MemSource { tensors, config: s.config.clone(), label })
    }

    /// sha256 over every tensor (name, dtype, shape, bytes) in name order.
    pub fn sha256(&self) -> String {
        use sha2::{Digest, Sha256};
        let mut names: Vec<&String> = self.tensors.keys().collect();
        names.sort();
        let mut h = Sha256::new();
        for n in names {
            let t = &self.tensors[n];
            h.update(n.as_bytes());
            h.update(format!("{:?}{:?}", t.dtype, t.shape).as_bytes());
            h.update(&t.data[..]);
        }
        h.finalize().iter().map(|b| format!("{b:02x}")).collect()
    }
}

impl TensorSource for MemSource {
    fn get(&self, name: &str) -> Option<RawTensor> {
        self.tensors.get(name).cloned()
    }
    fn names(&self) -> Vec<String> {
        let mut v: Vec<String> = self.tensors.keys().cloned().collect();
        v.sort();
        v
    }
    fn origin(&self, _name: &str) -> String {
        self.label.clone()
    }
}
