//! `Dsv4Config`: the shape and hyper-parameters of a DeepSeek V4 model.
//!
//! Parsed from a Hugging Face `config.json` (transformers 5.17's
//! `DeepseekV4Config` keys, and the legacy keys the official checkpoint ships:
//! `compress_ratios`, `num_hash_layers`, `qk_rope_head_dim`, `rope_scaling`)
//! or from GGUF metadata (`gguf.rs`). `validate` gives an error that names the
//! field for every inconsistency the forward would otherwise trip over.

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

/// The attention kind of a layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum AttnKind {
    /// Sliding window of raw KV rows only.
    Window,
    /// Compressed sparse attention: overlapping windows, lightning indexer.
    Csa,
    /// Heavily compressed attention: non-overlapping windows, all entries.
    Hca,
}

impl AttnKind {
    pub fn hf_name(self) -> &'static str {
        match self {
            AttnKind::Window => "sliding_attention",
            AttnKind::Csa => "compressed_sparse_attention",
            AttnKind::Hca => "heavily_compressed_attention",
        }
    }
    fn from_hf_name(s: &str) -> Option<Self> {
        Some(match s {
            "sliding_attention" => AttnKind::Window,
            "compressed_sparse_attention" => AttnKind::Csa,
            "heavily_compressed_attention" => AttnKind::Hca,
            _ => return None,
        })
    }
}

/// How a layer's MoE chooses experts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum MlpKind {
    /// Frozen token -> experts table (`tid2eid`).
    Hash,
    /// Top-k of the scores plus the correction bias.
    Score,
}

/// Router score function.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ScoringFunc {
    SqrtSoftplus,
    Sigmoid,
    Softmax,
}

/// YaRN parameters of the compressed layers' RoPE.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Yarn {
    pub factor: f64,
    pub original_max_position_embeddings: u64,
    pub beta_fast: f64,
    pub beta_slow: f64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Dsv4Config {
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub head_dim: usize,
    /// Rotated dims at the end of each head (interleaved pairs).
    pub rope_dim: usize,
    pub q_lora_rank: usize,
    pub o_groups: usize,
    pub o_lora_rank: usize,
    pub moe_intermediate_size: usize,
    pub n_routed_experts: usize,
    pub n_shared_experts: usize,
    pub num_experts_per_tok: usize,
    pub routed_scaling_factor: f64,
    pub scoring_func: ScoringFunc,
    pub norm_topk_prob: bool,
    pub rms_norm_eps: f64,
    pub rope_theta: f64,
    pub compress_rope_theta: f64,
    pub yarn: Option<Yarn>,
    pub layer_types: Vec<AttnKind>,
    pub csa_ratio: usize,
    pub hca_ratio: usize,
    pub mlp_layer_types: Vec<MlpKind>,
    pub hc_mult: usize,
    pub hc_sinkhorn_iters: usize,
    pub hc_eps: f64,
    pub swiglu_limit: f64,
    pub sliding_window: usize,
    pub index_n_heads: usize,
    pub index_head_dim: usize,
    pub index_topk: usize,
    pub num_nextn_predict_layers: usize,
    pub max_position_embeddings: u64,
    pub bos_token_id: Option<u32>,
    pub eos_token_id: Option<u32>,
    pub tie_word_embeddings: bool,
    /// The DSpark drafter shipped with the checkpoint (`mtp.*` stages), if any.
    #[serde(default)]
    pub dspark: Option<DsparkConfig>,
}

/// DSpark drafter hyper-parameters (checkpoint keys `dspark_*`, `n_mtp_layers`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DsparkConfig {
    /// Block size (query slots: anchor + noise), also the drafts per pass.
    pub block_size: usize,
    pub noise_token_id: u32,
    /// Trunk layers whose outputs (stream means) feed the drafter, in order.
    pub target_layer_ids: Vec<usize>,
    pub markov_rank: usize,
    /// Draft stages (`mtp.0 .. mtp.{stages-1}`).
    pub stages: usize,
}

impl Dsv4Config {
    /// Compress ratio of a layer (0 for window-only layers).
    pub fn compress_ratio(&self, layer: usize) -> usize {
        match self.layer_types[layer] {
            AttnKind::Window => 0,
            AttnKind::Csa => self.csa_ratio,
            AttnKind::Hca => self.hca_ratio,
        }
    }

    /// sha256 of the canonical JSON of the config: the model-shape identity
    /// written into parked states.
    pub fn fingerprint(&self) -> String {
        let json = serde_json::to_vec(self).expect("config serializes");
        Sha256::digest(&json).iter().map(|b| format!("{b:02x}")).collect()
    }

    /// Check every relation the forward relies on.
    pub fn validate(&self) -> Result<()> {
        let n = self.num_hidden_layers;
        let pos = |name: &str, v: usize| -> Result<()> {
            if v == 0 {
                bail!("config field `{name}` must be positive, got 0");
            }
            Ok(())
        };
        for (name, v) in [
            ("vocab_size", self.vocab_size),
            ("hidden_size", self.hidden_size),
            ("num_hidden_layers", n),
            ("num_attention_heads", self.num_attention_heads),
            ("head_dim", self.head_dim),
            ("q_lora_rank", self.q_lora_rank),
            ("o_groups", self.o_groups),
            ("o_lora_rank", self.o_lora_rank),
            ("moe_intermediate_size", self.moe_intermediate_size),
            ("n_routed_experts", self.n_routed_experts),
            ("num_experts_per_tok", self.num_experts_per_tok),
            ("hc_mult", self.hc_mult),
            ("hc_sinkhorn_iters", self.hc_sinkhorn_iters),
            ("sliding_window", self.sliding_window),
        ] {
            pos(name, v)?;
        }
        if self.layer_types.len() != n {
            bail!(
                "config: the attention layer schedule (`layer_types`/`compress_ratios`) has {} entries but `num_hidden_layers` is {n}",
                self.layer_types.len()
            );
        }
        if self.mlp_layer_types.len() != n {
            bail!(
                "config: `mlp_layer_types` has {} entries but `num_hidden_layers` is {n}",
                self.mlp_layer_types.len()
            );
        }
        if !self.num_attention_heads.is_multiple_of(self.o_groups) {
            bail!(
                "config: `num_attention_heads` ({}) is not divisible by `o_groups` ({})",
                self.num_attention_heads,
                self.o_groups
            );
        }
        if !self.rope_dim.is_multiple_of(2) || self.rope_dim == 0 || self.rope_dim > self.head_dim {
            bail!(
                "config: rotary dims (`qk_rope_head_dim`/`partial_rotary_factor`) = {} must be even, positive and <= `head_dim` ({})",
                self.rope_dim,
                self.head_dim
            );
        }
        if self.num_experts_per_tok > self.n_routed_experts {
            bail!(
                "config: `num_experts_per_tok` ({}) exceeds `n_routed_experts` ({})",
                self.num_experts_per_tok,
                self.n_routed_experts
            );
        }
        if self.n_shared_experts > 1 {
            bail!("config: `n_shared_experts` = {} is not supported (DSV4 has one)", self.n_shared_experts);
        }
        let has_csa = self.layer_types.contains(&AttnKind::Csa);
        let has_hca = self.layer_types.contains(&AttnKind::Hca);
        if has_csa {
            pos("compress_rates.compressed_sparse_attention", self.csa_ratio)?;
            pos("index_n_heads", self.index_n_heads)?;
            pos("index_head_dim", self.index_head_dim)?;
            pos("index_topk", self.index_topk)?;
            if self.rope_dim > self.index_head_dim {
                bail!(
                    "config: rotary dims ({}) exceed `index_head_dim` ({}); the indexer rotates the last rotary dims of its heads",
                    self.rope_dim,
                    self.index_head_dim
                );
            }
        }
        if has_hca {
            pos("compress_rates.heavily_compressed_attention", self.hca_ratio)?;
        }
        if self.rms_norm_eps.is_nan() || self.rms_norm_eps <= 0.0 {
            bail!("config: `rms_norm_eps` must be positive");
        }
        // a window no position can fill is a damaged field, and the
        // decode state would try to allocate it
        if self.sliding_window as u64 > self.max_position_embeddings {
            bail!(
                "config: `sliding_window` ({}) exceeds `max_position_embeddings` ({})",
                self.sliding_window,
                self.max_position_embeddings
            );
        }
        // the clamp of the experts' activations; the rotary bases (ln(base) divides)
        for (name, v, least) in [
            ("swiglu_limit", self.swiglu_limit, 0.0),
            ("rope_theta", self.rope_theta, 1.0),
            ("compress_rope_theta", self.compress_rope_theta, 1.0),
        ] {
            if !v.is_finite() || v <= least {
                bail!("config: `{name}` = {v} must be finite and above {least}");
            }
        }
        if let Some(y) = &self.yarn {
            if y.factor.is_nan() || y.factor <= 0.0 || y.original_max_position_embeddings == 0 {
                bail!("config: YaRN `factor` and `original_max_position_embeddings` must be positive");
            }
        }
        if let Some(d) = &self.dspark {
            if d.block_size == 0 || d.stages == 0 || d.markov_rank == 0 {
                bail!("config: DSpark block size, stages and markov rank must be positive");
            }
            if d.noise_token_id as usize >= self.vocab_size {
                bail!("config: `dspark_noise_token_id` {} is outside the vocabulary", d.noise_token_id);
            }
            if let Some(&l) = d.target_layer_ids.iter().find(|&&l| l >= n) {
                bail!("config: `dspark_target_layer_ids` names layer {l}, the model has {n}");
            }
        }
        for (name, id) in [("bos_token_id", self.bos_token_id), ("eos_token_id", self.eos_token_id)] {
            if let Some(id) = id {
                if id as usize >= self.vocab_size {
                    bail!("config: `{name}` = {id} is outside the vocabulary ({})", self.vocab_size);
                }
            }
        }
        Ok(())
    }

    /// Parse a Hugging Face `config.json` (transformers or official keys).
    pub fn from_hf_json(text: &str) -> Result<Self> {
        let v: Value = serde_json::from_str(text).context("config.json is not valid JSON")?;
        let m = v.as_object().context("config.json: top level is not an object")?;
        let cfg = parse_hf(m)?;
        cfg.validate()?;
        Ok(cfg)
    }

    pub fn from_hf_file(path: &std::path::Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        Self::from_hf_json(&text).with_context(|| format!("in {}", path.display()))
    }

    /// The `config.json` transformers 5.17 writes for this model.
    pub fn to_hf_json(&self) -> Value {
        let mut m = self.common_json();
        m.insert("architectures".into(), Value::from(vec!["DeepseekV4ForCausalLM"]));
        m.insert("model_type".into(), "deepseek_v4".into());
        m.insert("layer_types".into(), Value::from(self.layer_types.iter().map(|k| k.hf_name()).collect::<Vec<_>>()));
        m.insert(
            "mlp_layer_types".into(),
            Value::from(
                self.mlp_layer_types
                    .iter()
                    .map(|k| match k {
                        MlpKind::Hash => "hash_moe",
                        MlpKind::Score => "moe",
                    })
                    .collect::<Vec<_>>(),
            ),
        );
        m.insert(
            "compress_rates".into(),
            serde_json::json!({
                "compressed_sparse_attention": self.csa_ratio,
                "heavily_compressed_attention": self.hca_ratio,
            }),
        );
        m.insert("partial_rotary_factor".into(), Value::from(self.rope_dim as f64 / self.head_dim as f64));
        let main = serde_json::json!({
            "rope_type": "default",
            "rope_theta": self.rope_theta,
            "partial_rotary_factor": self.rope_dim as f64 / self.head_dim as f64,
        });
        let compress = match &self.yarn {
            Some(y) => serde_json::json!({
                "rope_type": "yarn",
                "rope_theta": self.compress_rope_theta,
                "partial_rotary_factor": self.rope_dim as f64 / self.head_dim as f64,
                "factor": y.factor,
                "original_max_position_embeddings": y.original_max_position_embeddings,
                "beta_fast": y.beta_fast,
                "beta_slow": y.beta_slow,
                "attention_factor": 1.0,
            }),
            None => serde_json::json!({
                "rope_type": "default",
                "rope_theta": self.compress_rope_theta,
                "partial_rotary_factor": self.rope_dim as f64 / self.head_dim as f64,
            }),
        };
        m.insert("rope_parameters".into(), serde_json::json!({"main": main, "compress": compress}));
        m.insert("torch_dtype".into(), "bfloat16".into());
        Value::Object(m)
    }

    /// The `config.json` in the published checkpoint's legacy form.
    pub fn to_official_json(&self) -> Value {
        let mut m = self.common_json();
        m.insert("architectures".into(), Value::from(vec!["DeepseekV4ForCausalLM"]));
        m.insert("model_type".into(), "deepseek_v4".into());
        m.insert(
            "compress_ratios".into(),
            Value::from((0..self.num_hidden_layers).map(|l| self.compress_ratio(l)).collect::<Vec<_>>()),
        );
        let n_hash = self.mlp_layer_types.iter().take_while(|k| **k == MlpKind::Hash).count();
        m.insert("num_hash_layers".into(), Value::from(n_hash));
        // Rates other than the published 4/128 cannot be read back from
        // `compress_ratios` by transformers (it maps only 0/4/128), so such
        // configs also carry the explicit schedule and rates.
        if self.csa_ratio != 4 || self.hca_ratio != 128 {
            m.insert(
                "layer_types".into(),
                Value::from(self.layer_types.iter().map(|k| k.hf_name()).collect::<Vec<_>>()),
            );
            m.insert(
                "compress_rates".into(),
                serde_json::json!({
                    "compressed_sparse_attention": self.csa_ratio,
                    "heavily_compressed_attention": self.hca_ratio,
                }),
            );
        }
        m.insert("qk_rope_head_dim".into(), Value::from(self.rope_dim));
        if let Some(y) = &self.yarn {
            m.insert(
                "rope_scaling".into(),
                serde_json::json!({
                    "type": "yarn",
                    "factor": y.factor,
                    "original_max_position_embeddings": y.original_max_position_embeddings,
                    "beta_fast": y.beta_fast,
                    "beta_slow": y.beta_slow,
                }),
            );
        }
        m.insert("compress_rope_theta".into(), Value::from(self.compress_rope_theta));
        m.insert("torch_dtype".into(), "bfloat16".into());
        m.insert(
            "quantization_config".into(),
            serde_json::json!({
                "activation_scheme": "dynamic",
                "fmt": "e4m3",
                "quant_method": "fp8",
                "scale_fmt": "ue8m0",
                "weight_block_size": [128, 128],
            }),
        );
        m.insert("expert_dtype".into(), "fp4".into());
        Value::Object(m)
    }

    fn common_json(&self) -> Map<String, Value> {
        let mut m = Map::new();
        let mut put = |k: &str, v: Value| {
            m.insert(k.to_string(), v);
        };
        put("vocab_size", self.vocab_size.into());
        put("hidden_size", self.hidden_size.into());
        put("num_hidden_layers", self.num_hidden_layers.into());
        put("num_attention_heads", self.num_attention_heads.into());
        put("num_key_value_heads", 1.into());
        put("head_dim", self.head_dim.into());
        put("q_lora_rank", self.q_lora_rank.into());
        put("o_groups", self.o_groups.into());
        put("o_lora_rank", self.o_lora_rank.into());
        put("moe_intermediate_size", self.moe_intermediate_size.into());
        put("n_routed_experts", self.n_routed_experts.into());
        put("n_shared_experts", self.n_shared_experts.into());
        put("num_experts_per_tok", self.num_experts_per_tok.into());
        put("routed_scaling_factor", self.routed_scaling_factor.into());
        put(
            "scoring_func",
            match self.scoring_func {
                ScoringFunc::SqrtSoftplus => "sqrtsoftplus",
                ScoringFunc::Sigmoid => "sigmoid",
                ScoringFunc::Softmax => "softmax",
            }
            .into(),
        );
        put("norm_topk_prob", self.norm_topk_prob.into());
        put("rms_norm_eps", self.rms_norm_eps.into());
        put("rope_theta", self.rope_theta.into());
        put("compress_rope_theta", self.compress_rope_theta.into());
        put("hc_mult", self.hc_mult.into());
        put("hc_sinkhorn_iters", self.hc_sinkhorn_iters.into());
        put("hc_eps", self.hc_eps.into());
        put("swiglu_limit", self.swiglu_limit.into());
        put("sliding_window", self.sliding_window.into());
        put("index_n_heads", self.index_n_heads.into());
        put("index_head_dim", self.index_head_dim.into());
        put("index_topk", self.index_topk.into());
        put("num_nextn_predict_layers", self.num_nextn_predict_layers.into());
        put("max_position_embeddings", self.max_position_embeddings.into());
        put("bos_token_id", self.bos_token_id.map(Value::from).unwrap_or(Value::Null));
        put("eos_token_id", self.eos_token_id.map(Value::from).unwrap_or(Value::Null));
        put("tie_word_embeddings", self.tie_word_embeddings.into());
        if let Some(d) = &self.dspark {
            put("dspark_block_size", d.block_size.into());
            put("dspark_noise_token_id", d.noise_token_id.into());
            put("dspark_target_layer_ids", Value::from(d.target_layer_ids.clone()));
            put("dspark_markov_rank", d.markov_rank.into());
            put("n_mtp_layers", d.stages.into());
        }
        put("hidden_act", "silu".into());
        put("attention_bias", false.into());
        m
    }
}

fn get_usize(m: &Map<String, Value>, key: &str) -> Result<Option<usize>> {
    match m.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_u64()
            .map(|x| Some(x as usize))
            .with_context(|| format!("config field `{key}` must be a non-negative integer, got {v}")),
    }
}

fn get_f64(m: &Map<String, Value>, key: &str) -> Result<Option<f64>> {
    match m.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v.as_f64().map(Some).with_context(|| format!("config field `{key}` must be a number, got {v}")),
    }
}

fn req_usize(m: &Map<String, Value>, key: &str, default: Option<usize>) -> Result<usize> {
    get_usize(m, key)?.or(default).with_context(|| format!("config field `{key}` is missing"))
}

fn token_id(m: &Map<String, Value>, key: &str, default: Option<u32>) -> Result<Option<u32>> {
    let id = |v: &Value| {
        v.as_u64()
            .and_then(|x| u32::try_from(x).ok())
            .with_context(|| format!("config field `{key}` must be a token id, got {v}"))
    };
    match m.get(key) {
        None => Ok(default),
        Some(Value::Null) => Ok(None),
        // a list gives its first id: generation stops at one token
        Some(Value::Array(a)) if a.is_empty() => {
            bail!("config field `{key}` is an empty list: give a token id or null")
        }
        Some(Value::Array(a)) => id(&a[0]).map(Some),
        Some(v) => id(v).map(Some),
    }
}

fn parse_hf(m: &Map<String, Value>) -> Result<Dsv4Config> {
    if let Some(t) = m.get("model_type").and_then(|v| v.as_str()) {
        if t != "deepseek_v4" {
            bail!("config: `model_type` is `{t}`, expected `deepseek_v4`");
        }
    }
    let n = req_usize(m, "num_hidden_layers", None)?;
    let head_dim = req_usize(m, "head_dim", Some(512))?;

    // Compress rates: modern dict, legacy scalars, defaults.
    let mut csa_ratio = 4;
    let mut hca_ratio = 128;
    if let Some(Value::Object(cr)) = m.get("compress_rates") {
        if let Some(v) = get_usize(cr, "compressed_sparse_attention")? {
            csa_ratio = v;
        }
        if let Some(v) = get_usize(cr, "heavily_compressed_attention")? {
            hca_ratio = v;
        }
    }
    if let Some(v) = get_usize(m, "compress_rate_csa")? {
        csa_ratio = v;
    }
    if let Some(v) = get_usize(m, "compress_rate_hca")? {
        hca_ratio = v;
    }

    // Attention schedule: explicit layer_types > legacy compress_ratios > V4 default.
    let layer_types: Vec<AttnKind> = if let Some(v) = m.get("layer_types").filter(|v| !v.is_null()) {
        let arr = v.as_array().context("config field `layer_types` must be a list")?;
        arr.iter()
            .enumerate()
            .map(|(i, x)| {
                x.as_str()
                    .and_then(AttnKind::from_hf_name)
                    .with_context(|| format!("config `layer_types[{i}]` = {x} is not a DeepSeek-V4 attention type"))
            })
            .collect::<Result<_>>()?
    } else if let Some(v) = m.get("compress_ratios").filter(|v| !v.is_null()) {
        let arr = v.as_array().context("config field `compress_ratios` must be a list")?;
        let mut out = Vec::with_capacity(arr.len());
        for (i, x) in arr.iter().enumerate() {
            let r = x.as_u64().with_context(|| format!("config `compress_ratios[{i}]` = {x} is not an integer"))?;
            out.push(match r {
                0 => AttnKind::Window,
                4 => AttnKind::Csa,
                128 => AttnKind::Hca,
                r if r as usize == csa_ratio => AttnKind::Csa,
                r if r as usize == hca_ratio => AttnKind::Hca,
                _ => bail!("config `compress_ratios[{i}]` = {r}: expected 0, {csa_ratio} (CSA) or {hca_ratio} (HCA)"),
            });
        }
        // The official checkpoint lists one entry per layer plus the MTP layers.
        if out.len() > n {
            out.truncate(n);
        }
        out
    } else {
        let mut v = vec![AttnKind::Hca; n.min(2)];
        for i in 0..n.saturating_sub(2) {
            v.push(if i % 2 == 1 { AttnKind::Csa } else { AttnKind::Hca });
        }
        v
    };

    let mlp_layer_types: Vec<MlpKind> = if let Some(v) = m.get("mlp_layer_types").filter(|v| !v.is_null()) {
        let arr = v.as_array().context("config field `mlp_layer_types` must be a list")?;
        arr.iter()
            .enumerate()
            .map(|(i, x)| match x.as_str() {
                Some("hash_moe") => Ok(MlpKind::Hash),
                Some("moe") => Ok(MlpKind::Score),
                _ => bail!("config `mlp_layer_types[{i}]` = {x}: expected `hash_moe` or `moe`"),
            })
            .collect::<Result<_>>()?
    } else {
        let n_hash = get_usize(m, "num_hash_layers")?.unwrap_or(3);
        (0..n).map(|i| if i < n_hash { MlpKind::Hash } else { MlpKind::Score }).collect()
    };

    let rope_dim = if let Some(r) = get_usize(m, "qk_rope_head_dim")? {
        r
    } else if let Some(f) = get_f64(m, "partial_rotary_factor")? {
        (head_dim as f64 * f).round() as usize
    } else {
        64
    };

    let rope_theta = get_f64(m, "rope_theta")?.unwrap_or(10000.0);
    let mut compress_rope_theta = get_f64(m, "compress_rope_theta")?.unwrap_or(160000.0);
    // YaRN: nested rope_parameters.compress, flat rope_parameters, or legacy rope_scaling.
    let mut yarn_src: Option<&Map<String, Value>> = None;
    if let Some(Value::Object(rp)) = m.get("rope_parameters") {
        if let Some(Value::Object(c)) = rp.get("compress") {
            if let Some(t) = get_f64(c, "rope_theta")? {
                compress_rope_theta = t;
            }
            yarn_src = Some(c);
        } else {
            yarn_src = Some(rp);
        }
    }
    if yarn_src.is_none() {
        if let Some(Value::Object(rs)) = m.get("rope_scaling") {
            yarn_src = Some(rs);
        }
    }
    let yarn = match yarn_src {
        Some(y) => {
            let ty = y.get("rope_type").or_else(|| y.get("type")).and_then(|v| v.as_str()).unwrap_or("default");
            match ty {
                "yarn" => Some(Yarn {
                    factor: get_f64(y, "factor")?.context("config: YaRN rope parameters lack `factor`")?,
                    original_max_position_embeddings: get_usize(y, "original_max_position_embeddings")?
                        .context("config: YaRN rope parameters lack `original_max_position_embeddings`")?
                        as u64,
                    beta_fast: get_f64(y, "beta_fast")?.filter(|x| *x != 0.0).unwrap_or(32.0),
                    beta_slow: get_f64(y, "beta_slow")?.filter(|x| *x != 0.0).unwrap_or(1.0),
                }),
                "default" => None,
                other => {
                    bail!("config: rope type `{other}` is not supported for DeepSeek-V4 (expected yarn or default)")
                }
            }
        }
        None => None,
    };

    let scoring_func = match m.get("scoring_func").and_then(|v| v.as_str()).unwrap_or("sqrtsoftplus") {
        "sqrtsoftplus" => ScoringFunc::SqrtSoftplus,
        "sigmoid" => ScoringFunc::Sigmoid,
        "softmax" => ScoringFunc::Softmax,
        other => bail!("config: `scoring_func` = `{other}` is not one of sqrtsoftplus, sigmoid, softmax"),
    };

    if let Some(kv) = get_usize(m, "num_key_value_heads")? {
        if kv != 1 {
            bail!("config: `num_key_value_heads` = {kv}; DeepSeek-V4 has one shared K=V head");
        }
    }

    Ok(Dsv4Config {
        vocab_size: req_usize(m, "vocab_size", None)?,
        hidden_size: req_usize(m, "hidden_size", None)?,
        num_hidden_layers: n,
        num_attention_heads: req_usize(m, "num_attention_heads", None)?,
        head_dim,
        rope_dim,
        q_lora_rank: req_usize(m, "q_lora_rank", None)?,
        o_groups: req_usize(m, "o_groups", Some(8))?,
        o_lora_rank: req_usize(m, "o_lora_rank", Some(1024))?,
        moe_intermediate_size: req_usize(m, "moe_intermediate_size", None)?,
        n_routed_experts: req_usize(m, "n_routed_experts", None)?,
        n_shared_experts: req_usize(m, "n_shared_experts", Some(1))?,
        num_experts_per_tok: req_usize(m, "num_experts_per_tok", None)?,
        routed_scaling_factor: get_f64(m, "routed_scaling_factor")?.unwrap_or(1.5),
        scoring_func,
        norm_topk_prob: m.get("norm_topk_prob").and_then(|v| v.as_bool()).unwrap_or(true),
        rms_norm_eps: get_f64(m, "rms_norm_eps")?.unwrap_or(1e-6),
        rope_theta,
        compress_rope_theta,
        yarn,
        layer_types,
        csa_ratio,
        hca_ratio,
        mlp_layer_types,
        hc_mult: req_usize(m, "hc_mult", Some(4))?,
        hc_sinkhorn_iters: req_usize(m, "hc_sinkhorn_iters", Some(20))?,
        hc_eps: get_f64(m, "hc_eps")?.unwrap_or(1e-6),
        swiglu_limit: get_f64(m, "swiglu_limit")?.unwrap_or(10.0),
        sliding_window: get_usize(m, "sliding_window")?.or(get_usize(m, "window_size")?).unwrap_or(128),
        index_n_heads: req_usize(m, "index_n_heads", Some(64))?,
        index_head_dim: req_usize(m, "index_head_dim", Some(128))?,
        index_topk: req_usize(m, "index_topk", Some(512))?,
        num_nextn_predict_layers: get_usize(m, "num_nextn_predict_layers")?.unwrap_or(0),
        max_position_embeddings: get_usize(m, "max_position_embeddings")?.unwrap_or(1 << 20) as u64,
        bos_token_id: token_id(m, "bos_token_id", Some(0))?,
        eos_token_id: token_id(m, "eos_token_id", Some(1))?,
        tie_word_embeddings: m.get("tie_word_embeddings").and_then(|v| v.as_bool()).unwrap_or(false),
        dspark: match get_usize(m, "dspark_block_size")? {
            None => None,
            Some(block_size) => Some(DsparkConfig {
                block_size,
                noise_token_id: token_id(m, "dspark_noise_token_id", None)?
                    .context("config: `dspark_block_size` without `dspark_noise_token_id`")?,
                target_layer_ids: m
                    .get("dspark_target_layer_ids")
                    .and_then(|v| v.as_array())
                    .context("config: `dspark_block_size` without `dspark_target_layer_ids`")?
                    .iter()
                    .map(|x| x.as_u64().map(|v| v as usize).context("config: `dspark_target_layer_ids` entries"))
                    .collect::<Result<_>>()?,
                markov_rank: get_usize(m, "dspark_markov_rank")?.unwrap_or(256),
                stages: get_usize(m, "n_mtp_layers")?.unwrap_or(3),
            }),
        },
    })
}
