//! Tensor names of the three checkpoint layouts.
//!
//! Canonical names are the official checkpoint's (`layers.3.attn.wq_a`,
//! without the `.weight` suffix for linear maps). `hf_name` and `gguf_name`
//! translate one canonical name to transformers' parameter name and to
//! llama.cpp's `deepseek4` GGUF name. Routed experts are per-expert in the
//! official layout and stacked in the other two; those are handled by the
//! loader, not here.

/// The layouts a checkpoint can come in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CheckpointLayout {
    /// DeepSeek's published names (`embed.weight`, `layers.N.attn.wq_a.weight` + `.scale`).
    Official,
    /// transformers' `DeepseekV4ForCausalLM` parameter names.
    Hf,
    /// llama.cpp's `deepseek4` GGUF tensor names.
    Gguf,
    /// What transformers 5.17's `save_pretrained` writes: its conversion
    /// mapping run backwards, i.e. official names under `model.` (with
    /// `attn.kv_norm` saved as `attn.norm`), per-expert tensors, and
    /// `model.embed_tokens`, `head`, `model.norm`, `model.hc_head.*`.
    TransformersSaved,
}

/// Split `layers.N.rest` into (N, rest).
fn split_layer(canonical: &str) -> Option<(usize, &str)> {
    let rest = canonical.strip_prefix("layers.")?;
    let dot = rest.find('.')?;
    Some((rest[..dot].parse().ok()?, &rest[dot + 1..]))
}

/// transformers' name for a canonical tensor (`.weight` included where the
/// parameter has it).
pub fn hf_name(canonical: &str) -> Option<String> {
    let global = match canonical {
        "embed" => Some("model.embed_tokens.weight"),
        "head" => Some("lm_head.weight"),
        "norm" => Some("model.norm.weight"),
        "hc_head_fn" => Some("model.hc_head.hc_fn"),
        "hc_head_base" => Some("model.hc_head.hc_base"),
        "hc_head_scale" => Some("model.hc_head.hc_scale"),
        _ => None,
    };
    if let Some(g) = global {
        return Some(g.to_string());
    }
    let (l, rest) = split_layer(canonical)?;
    let local = match rest {
        "attn_norm" => "input_layernorm.weight",
        "ffn_norm" => "post_attention_layernorm.weight",
        "hc_attn_fn" => "attn_hc.fn",
        "hc_attn_base" => "attn_hc.base",
        "hc_attn_scale" => "attn_hc.scale",
        "hc_ffn_fn" => "ffn_hc.fn",
        "hc_ffn_base" => "ffn_hc.base",
        "hc_ffn_scale" => "ffn_hc.scale",
        "attn.attn_sink" => "self_attn.sinks",
        "attn.wq_a" => "self_attn.q_a_proj.weight",
        "attn.q_norm" => "self_attn.q_a_norm.weight",
        "attn.wq_b" => "self_attn.q_b_proj.weight",
        "attn.wkv" => "self_attn.kv_proj.weight",
        "attn.kv_norm" => "self_attn.kv_norm.weight",
        "attn.wo_a" => "self_attn.o_a_proj.weight",
        "attn.wo_b" => "self_attn.o_b_proj.weight",
        "attn.compressor.ape" => "self_attn.compressor.position_bias",
        "attn.compressor.wkv" => "self_attn.compressor.kv_proj.weight",
        "attn.compressor.wgate" => "self_attn.compressor.gate_proj.weight",
        "attn.compressor.norm" => "self_attn.compressor.kv_norm.weight",
        "attn.indexer.wq_b" => "self_attn.compressor.indexer.q_b_proj.weight",
        "attn.indexer.weights_proj" => "self_attn.compressor.indexer.scorer.weights_proj.weight",
        "attn.indexer.compressor.ape" => "self_attn.compressor.indexer.position_bias",
        "attn.indexer.compressor.wkv" => "self_attn.compressor.indexer.kv_proj.weight",
        "attn.indexer.compressor.wgate" => "self_attn.compressor.indexer.gate_proj.weight",
        "attn.indexer.compressor.norm" => "self_attn.compressor.indexer.kv_norm.weight",
        "ffn.gate" => "mlp.gate.weight",
        "ffn.gate.bias" => "mlp.gate.e_score_correction_bias",
        "ffn.gate.tid2eid" => "mlp.gate.tid2eid",
        "ffn.shared_experts.w1" => "mlp.shared_experts.gate_proj.weight",
        "ffn.shared_experts.w2" => "mlp.shared_experts.down_proj.weight",
        "ffn.shared_experts.w3" => "mlp.shared_experts.up_proj.weight",
        _ => return None,
    };
    Some(format!("model.layers.{l}.{local}"))
}

/// llama.cpp's `deepseek4` name for a canonical tensor.
pub fn gguf_name(canonical: &str) -> Option<String> {
    let global = match canonical {
        "embed" => Some("token_embd.weight"),
        "head" => Some("output.weight"),
        "norm" => Some("output_norm.weight"),
        "hc_head_fn" => Some("output_hc_fn.weight"),
        "hc_head_base" => Some("output_hc_base.weight"),
        "hc_head_scale" => Some("output_hc_scale.weight"),
        _ => None,
    };
    if let Some(g) = global {
        return Some(g.to_string());
    }
    let (l, rest) = split_layer(canonical)?;
    let local = match rest {
        "attn_norm" => "attn_norm.weight",
        "ffn_norm" => "ffn_norm.weight",
        "hc_attn_fn" => "hc_attn_fn.weight",
        "hc_attn_base" => "hc_attn_base.weight",
        "hc_attn_scale" => "hc_attn_scale.weight",
        "hc_ffn_fn" => "hc_ffn_fn.weight",
        "hc_ffn_base" => "hc_ffn_base.weight",
        "hc_ffn_scale" => "hc_ffn_scale.weight",
        "attn.attn_sink" => "attn_sinks.weight",
        "attn.wq_a" => "attn_q_a.weight",
        "attn.q_norm" => "attn_q_a_norm.weight",
        "attn.wq_b" => "attn_q_b.weight",
        "attn.wkv" => "attn_kv.weight",
        "attn.kv_norm" => "attn_kv_a_norm.weight",
        "attn.wo_a" => "attn_output_a.weight",
        "attn.wo_b" => "attn_output_b.weight",
        "attn.compressor.ape" => "attn_compressor_ape.weight",
        "attn.compressor.wkv" => "attn_compressor_kv.weight",
        "attn.compressor.wgate" => "attn_compressor_gate.weight",
        "attn.compressor.norm" => "attn_compressor_norm.weight",
        "attn.indexer.wq_b" => "indexer.attn_q_b.weight",
        "attn.indexer.weights_proj" => "indexer.proj.weight",
        "attn.indexer.compressor.ape" => "indexer_compressor_ape.weight",
        "attn.indexer.compressor.wkv" => "indexer_compressor_kv.weight",
        "attn.indexer.compressor.wgate" => "indexer_compressor_gate.weight",
        "attn.indexer.compressor.norm" => "indexer_compressor_norm.weight",
        "ffn.gate" => "ffn_gate_inp.weight",
        "ffn.gate.bias" => "exp_probs_b.bias",
        "ffn.gate.tid2eid" => "ffn_gate_tid2eid.weight",
        "ffn.shared_experts.w1" => "ffn_gate_shexp.weight",
        "ffn.shared_experts.w2" => "ffn_down_shexp.weight",
        "ffn.shared_experts.w3" => "ffn_up_shexp.weight",
        _ => return None,
    };
    Some(format!("blk.{l}.{local}"))
}

/// The official file name of a canonical tensor: linear maps get `.weight`.
pub fn official_name(canonical: &str) -> String {
    let bare = canonical.ends_with("ape")
        || canonical.ends_with("attn_sink")
        || canonical.ends_with("gate.bias")
        || canonical.ends_with("tid2eid")
        || canonical.contains("hc_")
        || canonical.ends_with(".weight");
    if bare {
        canonical.to_string()
    } else {
        format!("{canonical}.weight")
    }
}

/// The `save_pretrained` name of a canonical tensor (see `TransformersSaved`).
pub fn saved_name(canonical: &str) -> String {
    match canonical {
        "embed" => "model.embed_tokens.weight".into(),
        "head" => "head.weight".into(),
        "norm" => "model.norm.weight".into(),
        "hc_head_fn" => "model.hc_head.hc_fn".into(),
        "hc_head_base" => "model.hc_head.hc_base".into(),
        "hc_head_scale" => "model.hc_head.hc_scale".into(),
        c => format!("model.{}", official_name(&c.replace(".attn.kv_norm", ".attn.norm"))),
    }
}

/// Stacked routed-expert tensors of layer `l`: (gate, up, down).
pub fn hf_expert_names(l: usize) -> (String, String) {
    (format!("model.layers.{l}.mlp.experts.gate_up_proj"), format!("model.layers.{l}.mlp.experts.down_proj"))
}

pub fn gguf_expert_names(l: usize) -> [String; 3] {
    [
        format!("blk.{l}.ffn_gate_exps.weight"),
        format!("blk.{l}.ffn_up_exps.weight"),
        format!("blk.{l}.ffn_down_exps.weight"),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_translate() {
        assert_eq!(hf_name("layers.2.attn.wq_a").unwrap(), "model.layers.2.self_attn.q_a_proj.weight");
        assert_eq!(
            hf_name("layers.0.attn.indexer.compressor.ape").unwrap(),
            "model.layers.0.self_attn.compressor.indexer.position_bias"
        );
        assert_eq!(gguf_name("layers.1.ffn.gate.bias").unwrap(), "blk.1.exp_probs_b.bias");
        assert_eq!(official_name("layers.1.attn.wq_a"), "layers.1.attn.wq_a.weight");
        assert_eq!(official_name("layers.1.attn.compressor.ape"), "layers.1.attn.compressor.ape");
        assert_eq!(official_name("layers.1.hc_attn_fn"), "layers.1.hc_attn_fn");
        assert_eq!(official_name("norm"), "norm.weight");
        assert_eq!(official_name("layers.1.attn.q_norm"), "layers.1.attn.q_norm.weight");
        assert!(hf_name("layers.1.nonsense").is_none());
        assert_eq!(saved_name("layers.0.attn.kv_norm"), "model.layers.0.attn.norm.weight");
        assert_eq!(saved_name("layers.0.attn.compressor.norm"), "model.layers.0.attn.compressor.norm.weight");
        assert_eq!(saved_name("layers.0.ffn.experts.3.w2"), "model.layers.0.ffn.experts.3.w2.weight");
    }
}
