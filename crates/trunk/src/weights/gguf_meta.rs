//! `Dsv4Config` <-> llama.cpp `deepseek4.*` GGUF metadata.

use std::collections::BTreeMap;

use anyhow::{bail, Context, Result};

use super::gguf::GgufValue;
use crate::config::{AttnKind, Dsv4Config, MlpKind, ScoringFunc, Yarn};

const ARCH: &str = "deepseek4";

fn key(k: &str) -> String {
    format!("{ARCH}.{k}")
}

/// The metadata a `deepseek4` GGUF carries for `cfg`, in write order.
pub fn config_to_gguf(cfg: &Dsv4Config, name: &str) -> Vec<(String, GgufValue)> {
    use GgufValue::*;
    let n = cfg.num_hidden_layers;
    let n_hash = cfg.mlp_layer_types.iter().take_while(|k| **k == MlpKind::Hash).count();
    let mut m: Vec<(String, GgufValue)> = vec![
        ("general.architecture".into(), Str(ARCH.into())),
        ("general.type".into(), Str("model".into())),
        ("general.name".into(), Str(name.into())),
        ("general.quantization_version".into(), U32(2)),
        ("general.alignment".into(), U32(32)),
        (key("block_count"), U32(n as u32)),
        (key("context_length"), U32(cfg.max_position_embeddings.min(u32::MAX as u64) as u32)),
        (key("embedding_length"), U32(cfg.hidden_size as u32)),
        (key("vocab_size"), U32(cfg.vocab_size as u32)),
        (key("attention.head_count"), U32(cfg.num_attention_heads as u32)),
        (key("attention.head_count_kv"), U32(1)),
        (key("attention.key_length"), U32(cfg.head_dim as u32)),
        (key("attention.value_length"), U32(cfg.head_dim as u32)),
        (key("attention.layer_norm_rms_epsilon"), F32(cfg.rms_norm_eps as f32)),
        (key("attention.q_lora_rank"), U32(cfg.q_lora_rank as u32)),
        (key("attention.sliding_window"), U32(cfg.sliding_window as u32)),
        (key("attention.output_group_count"), U32(cfg.o_groups as u32)),
        (key("attention.output_lora_rank"), U32(cfg.o_lora_rank as u32)),
        (key("attention.indexer.head_count"), U32(cfg.index_n_heads as u32)),
        (key("attention.indexer.key_length"), U32(cfg.index_head_dim as u32)),
        (key("attention.indexer.top_k"), U32(cfg.index_topk as u32)),
        (key("attention.compress_ratios"), Array((0..n).map(|l| I32(cfg.compress_ratio(l) as i32)).collect())),
        (key("attention.compress_rope_freq_base"), F32(cfg.compress_rope_theta as f32)),
        (key("rope.dimension_count"), U32(cfg.rope_dim as u32)),
        (key("rope.freq_base"), F32(cfg.rope_theta as f32)),
        (key("expert_count"), U32(cfg.n_routed_experts as u32)),
        (key("expert_used_count"), U32(cfg.num_experts_per_tok as u32)),
        (key("expert_shared_count"), U32(cfg.n_shared_experts as u32)),
        (key("expert_feed_forward_length"), U32(cfg.moe_intermediate_size as u32)),
        (key("expert_weights_scale"), F32(cfg.routed_scaling_factor as f32)),
        (key("expert_weights_norm"), Bool(cfg.norm_topk_prob)),
        (
            key("expert_gating_func"),
            U32(match cfg.scoring_func {
                ScoringFunc::Softmax => 1,
                ScoringFunc::Sigmoid => 2,
                ScoringFunc::SqrtSoftplus => 4,
            }),
        ),
        (key("swiglu_clamp_exp"), Array(vec![F32(cfg.swiglu_limit as f32); n])),
        (key("swiglu_clamp_shexp"), Array(vec![F32(cfg.swiglu_limit as f32); n])),
        (key("hyper_connection.count"), U32(cfg.hc_mult as u32)),
        (key("hyper_connection.sinkhorn_iterations"), U32(cfg.hc_sinkhorn_iters as u32)),
        (key("hyper_connection.epsilon"), F32(cfg.hc_eps as f32)),
        (key("hash_layer_count"), U32(n_hash as u32)),
    ];
    if let Some(y) = &cfg.yarn {
        m.push((key("rope.scaling.type"), Str("yarn".into())));
        m.push((key("rope.scaling.factor"), F32(y.factor as f32)));
        m.push((key("rope.scaling.original_context_length"), U32(y.original_max_position_embeddings as u32)));
        m.push((key("rope.scaling.yarn_beta_fast"), F32(y.beta_fast as f32)));
        m.push((key("rope.scaling.yarn_beta_slow"), F32(y.beta_slow as f32)));
    }
    // Extensions of ours that llama.cpp ignores: the compress rates when they
    // differ from 4/128 (small synthetic models) and token ids.
    m.push((key("memra.compress_rate_csa"), U32(cfg.csa_ratio as u32)));
    m.push((key("memra.compress_rate_hca"), U32(cfg.hca_ratio as u32)));
    if let Some(b) = cfg.bos_token_id {
        m.push(("tokenizer.ggml.bos_token_id".into(), U32(b)));
    }
    if let Some(e) = cfg.eos_token_id {
        m.push(("tokenizer.ggml.eos_token_id".into(), U32(e)));
    }
    m
}

/// Parse a config back from `deepseek4.*` metadata.
pub fn config_from_gguf(md: &BTreeMap<String, GgufValue>, origin: &str) -> Result<Dsv4Config> {
    if let Some(a) = md.get("general.architecture").and_then(|v| v.as_str()) {
        if a != ARCH {
            bail!("{origin}: `general.architecture` is `{a}`, expected `{ARCH}`");
        }
    }
    let get = |k: &str| md.get(&key(k));
    let u = |k: &str| -> Result<usize> {
        get(k)
            .with_context(|| format!("{origin}: missing metadata `{}`", key(k)))?
            .as_u64()
            .map(|x| x as usize)
            .with_context(|| format!("{origin}: metadata `{}` is not an unsigned integer", key(k)))
    };
    let f = |k: &str| -> Result<f64> {
        get(k)
            .with_context(|| format!("{origin}: missing metadata `{}`", key(k)))?
            .as_f64()
            .with_context(|| format!("{origin}: metadata `{}` is not a number", key(k)))
    };
    let n = u("block_count")?;
    let csa = get("memra.compress_rate_csa").and_then(|v| v.as_u64()).unwrap_or(4) as usize;
    let hca = get("memra.compress_rate_hca").and_then(|v| v.as_u64()).unwrap_or(128) as usize;
    let ratios = get("attention.compress_ratios")
        .and_then(|v| v.as_array())
        .with_context(|| format!("{origin}: missing array `{}`", key("attention.compress_ratios")))?;
    if ratios.len() < n {
        bail!(
            "{origin}: `{}` has {} entries, fewer than block_count {n}",
            key("attention.compress_ratios"),
            ratios.len()
        );
    }
    let layer_types = ratios[..n]
        .iter()
        .enumerate()
        .map(|(i, r)| match r.as_u64() {
            Some(0) => Ok(AttnKind::Window),
            Some(r) if r as usize == csa => Ok(AttnKind::Csa),
            Some(r) if r as usize == hca => Ok(AttnKind::Hca),
            other => bail!("{origin}: compress_ratios[{i}] = {other:?}: expected 0, {csa} or {hca}"),
        })
        .collect::<Result<Vec<_>>>()?;
    let n_hash = u("hash_layer_count")?;
    let scoring_func = match u("expert_gating_func")? {
        1 => ScoringFunc::Softmax,
        2 => ScoringFunc::Sigmoid,
        4 => ScoringFunc::SqrtSoftplus,
        g => bail!("{origin}: `{}` = {g} is not a known gating function", key("expert_gating_func")),
    };
    let swiglu = match get("swiglu_clamp_exp") {
        Some(GgufValue::Array(a)) => a.first().and_then(|v| v.as_f64()).unwrap_or(10.0),
        Some(v) => v.as_f64().unwrap_or(10.0),
        None => 10.0,
    };
    let yarn = match get("rope.scaling.type").and_then(|v| v.as_str()) {
        Some("yarn") => Some(Yarn {
            factor: f("rope.scaling.factor")?,
            original_max_position_embeddings: u("rope.scaling.original_context_length")? as u64,
            beta_fast: get("rope.scaling.yarn_beta_fast").and_then(|v| v.as_f64()).unwrap_or(32.0),
            beta_slow: get("rope.scaling.yarn_beta_slow").and_then(|v| v.as_f64()).unwrap_or(1.0),
        }),
        _ => None,
    };
    let tok = |k: &str| -> Result<Option<u32>> {
        md.get(k)
            .map(|v| {
                v.as_u64()
                    .and_then(|x| u32::try_from(x).ok())
                    .with_context(|| format!("{origin}: GGUF metadata `{k}` is not a token id"))
            })
            .transpose()
    };
    let cfg = Dsv4Config {
        vocab_size: u("vocab_size")?,
        hidden_size: u("embedding_length")?,
        num_hidden_layers: n,
        num_attention_heads: u("attention.head_count")?,
        head_dim: u("attention.key_length")?,
        rope_dim: u("rope.dimension_count")?,
        q_lora_rank: u("attention.q_lora_rank")?,
        o_groups: u("attention.output_group_count")?,
        o_lora_rank: u("attention.output_lora_rank")?,
        moe_intermediate_size: u("expert_feed_forward_length")?,
        n_routed_experts: u("expert_count")?,
        n_shared_experts: u("expert_shared_count")?,
        num_experts_per_tok: u("expert_used_count")?,
        routed_scaling_factor: f("expert_weights_scale")?,
        scoring_func,
        norm_topk_prob: get("expert_weights_norm").and_then(|v| v.as_bool()).unwrap_or(true),
        rms_norm_eps: f("attention.layer_norm_rms_epsilon")?,
        rope_theta: get("rope.freq_base").and_then(|v| v.as_f64()).unwrap_or(10000.0),
        compress_rope_theta: f("attention.compress_rope_freq_base")?,
        yarn,
        layer_types,
        csa_ratio: csa,
        hca_ratio: hca,
        mlp_layer_types: (0..n).map(|i| if i < n_hash { MlpKind::Hash } else { MlpKind::Score }).collect(),
        hc_mult: u("hyper_connection.count")?,
        hc_sinkhorn_iters: u("hyper_connection.sinkhorn_iterations")?,
        hc_eps: f("hyper_connection.epsilon")?,
        swiglu_limit: swiglu,
        sliding_window: u("attention.sliding_window")?,
        index_n_heads: u("attention.indexer.head_count")?,
        index_head_dim: u("attention.indexer.key_length")?,
        index_topk: u("attention.indexer.top_k")?,
        num_nextn_predict_layers: get("nextn_predict_layers").and_then(|v| v.as_u64()).unwrap_or(0) as usize,
        max_position_embeddings: u("context_length")? as u64,
        bos_token_id: tok("tokenizer.ggml.bos_token_id")?,
        eos_token_id: tok("tokenizer.ggml.eos_token_id")?,
        tie_word_embeddings: false,
        dspark: None,
    };
    cfg.validate().with_context(|| format!("{origin}: GGUF metadata"))?;
    Ok(cfg)
}
