//! Synthetic model shapes.
//!
//! - `tiny` (a few MB): every code path at toy widths. Window 16, CSA ratio 4
//!   with index_topk 6 (16 indexer heads, so that an all-ReLU-zero score tie
//!   is improbable), HCA ratio 16: a 160-token sequence slides the window
//!   ten times, closes 40 CSA windows of which the indexer keeps 6, and 10
//!   HCA windows. YaRN's original length is 256, so its ramp touches the
//!   tested positions. swiglu_limit 2 so that the clamps engage.
//! - `small` (~0.4 GB official, ~1 GB HF): GPU-test widths with the same
//!   coverage (window 64, HCA ratio 32, index_topk 16).
//! - `flash-shape`: DeepSeek-V4-Flash widths and formats with N layers; 43
//!   layers give the published schedule, fewer give window then CSA/HCA
//!   alternating (window, CSA, HCA, CSA for 4).

use anyhow::{bail, Result};

use crate::config::{AttnKind, Dsv4Config, MlpKind, ScoringFunc, Yarn};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Preset {
    Tiny,
    Small,
    FlashShape { layers: usize },
}

impl Preset {
    pub fn parse(name: &str, layers: Option<usize>) -> Result<Self> {
        if layers.is_some() && !matches!(name, "flash-shape" | "flash") {
            bail!("preset `{name}` has a fixed depth; a layer count applies to flash-shape only");
        }
        if layers == Some(0) {
            bail!("preset `{name}`: the layer count must be positive");
        }
        Ok(match name {
            "tiny" => Preset::Tiny,
            "small" => Preset::Small,
            "flash-shape" | "flash" => Preset::FlashShape { layers: layers.unwrap_or(4) },
            other => bail!("unknown preset `{other}` (expected tiny, small or flash-shape)"),
        })
    }

    pub fn name(&self) -> String {
        match self {
            Preset::Tiny => "tiny".into(),
            Preset::Small => "small".into(),
            Preset::FlashShape { layers } => format!("flash-shape-{layers}l"),
        }
    }

    pub fn config(&self) -> Dsv4Config {
        match *self {
            Preset::Tiny => {
                let layer_types = vec![AttnKind::Window, AttnKind::Csa, AttnKind::Hca, AttnKind::Csa];
                Dsv4Config {
                    vocab_size: 320,
                    hidden_size: 64,
                    num_hidden_layers: 4,
                    num_attention_heads: 4,
                    head_dim: 32,
                    rope_dim: 8,
                    q_lora_rank: 32,
                    o_groups: 2,
                    o_lora_rank: 32,
                    moe_intermediate_size: 32,
                    n_routed_experts: 16,
                    n_shared_experts: 1,
                    num_experts_per_tok: 4,
                    routed_scaling_factor: 1.5,
                    scoring_func: ScoringFunc::SqrtSoftplus,
                    norm_topk_prob: true,
                    rms_norm_eps: 1e-6,
                    rope_theta: 10000.0,
                    compress_rope_theta: 160000.0,
                    yarn: Some(Yarn {
                        factor: 16.0,
                        original_max_position_embeddings: 256,
                        beta_fast: 32.0,
                        beta_slow: 1.0,
                    }),
                    mlp_layer_types: vec![MlpKind::Hash, MlpKind::Hash, MlpKind::Score, MlpKind::Score],
                    layer_types,
                    csa_ratio: 4,
                    hca_ratio: 16,
                    hc_mult: 4,
                    hc_sinkhorn_iters: 20,
                    hc_eps: 1e-6,
                    swiglu_limit: 2.0,
                    sliding_window: 16,
                    index_n_heads: 16,
                    index_head_dim: 16,
                    index_topk: 6,
                    num_nextn_predict_layers: 0,
                    max_position_embeddings: 4096,
                    bos_token_id: Some(0),
                    eos_token_id: Some(1),
                    tie_word_embeddings: false,
                    dspark: None,
                }
            }
            Preset::Small => {
                use AttnKind::*;
                let layer_types = vec![Window, Csa, Hca, Csa, Window, Hca, Csa, Hca];
                Dsv4Config {
                    vocab_size: 32000,
                    hidden_size: 1024,
                    num_hidden_layers: 8,
                    num_attention_heads: 16,
                    head_dim: 128,
                    rope_dim: 64,
                    q_lora_rank: 512,
                    o_groups: 4,
                    o_lora_rank: 256,
                    moe_intermediate_size: 256,
                    n_routed_experts: 64,
                    num_experts_per_tok: 6,
                    mlp_layer_types: (0..8).map(|i| if i < 3 { MlpKind::Hash } else { MlpKind::Score }).collect(),
                    layer_types,
                    hca_ratio: 32,
                    swiglu_limit: 3.0,
                    sliding_window: 64,
                    index_n_heads: 16,
                    index_head_dim: 128,
                    index_topk: 16,
                    yarn: Some(Yarn {
                        factor: 16.0,
                        original_max_position_embeddings: 4096,
                        beta_fast: 32.0,
                        beta_slow: 1.0,
                    }),
                    max_position_embeddings: 1 << 20,
                    ..Preset::Tiny.config()
                }
            }
            Preset::FlashShape { layers } => {
                let layer_types: Vec<AttnKind> = if layers == 43 {
                    (0..43)
                        .map(|i| match i {
                            0 | 1 => AttnKind::Window,
                            i if i % 2 == 0 => AttnKind::Csa,
                            _ => AttnKind::Hca,
                        })
                        .collect()
                } else {
                    (0..layers)
                        .map(|i| match i {
                            0 => AttnKind::Window,
                            i if i % 2 == 1 => AttnKind::Csa,
                            _ => AttnKind::Hca,
                        })
                        .collect()
                };
                Dsv4Config {
                    vocab_size: 129280,
                    hidden_size: 4096,
                    num_hidden_layers: layers,
                    num_attention_heads: 64,
                    head_dim: 512,
                    rope_dim: 64,
                    q_lora_rank: 1024,
                    o_groups: 8,
                    o_lora_rank: 1024,
                    moe_intermediate_size: 2048,
                    n_routed_experts: 256,
                    num_experts_per_tok: 6,
                    mlp_layer_types: (0..layers).map(|i| if i < 3 { MlpKind::Hash } else { MlpKind::Score }).collect(),
                    layer_types,
                    csa_ratio: 4,
                    hca_ratio: 128,
                    swiglu_limit: 10.0,
                    sliding_window: 128,
                    index_n_heads: 64,
                    index_head_dim: 128,
                    index_topk: 512,
                    yarn: Some(Yarn {
                        factor: 16.0,
                        original_max_position_embeddings: 65536,
                        beta_fast: 32.0,
                        beta_slow: 1.0,
                    }),
                    max_position_embeddings: 1 << 20,
                    ..Preset::Tiny.config()
                }
            }
        }
    }
}
