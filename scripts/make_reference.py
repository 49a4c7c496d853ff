"""Reference logits of a tiny DeepSeek-V4 model from transformers.

Builds a `DeepseekV4ForCausalLM` with the shape of memra's `tiny` preset in
fp32 (seeded; every buffer transformers initializes to zero or one is
randomized, so hash routing, correction bias, sinks, position biases and
hyper-connection bases are exercised), saves it with `save_pretrained` (the
HF layout memra must load), and records, for each prompt of 160 tokens, the
logits of a full forward and of token-by-token decoding with the cache.

Usage (on the GPU machine, where transformers 5.17 is installed):
    python3 scripts/make_reference.py crates/trunk/tests/fixtures/hf_tiny

Output: config.json, model.safetensors, prompts.json, and per prompt k
`logits_full_k.f32` / `logits_step_k.f32` (little-endian f32 [160, vocab]).
"""
import json
import math
import os
import sys

import torch

import transformers
from transformers import DeepseekV4Config, DeepseekV4ForCausalLM

SEED = 20261129
N_TOKENS = 160
N_PROMPTS = 2


def tiny_config() -> DeepseekV4Config:
    # mirrors crates/trunk/src/synth/presets.rs (Preset::Tiny)
    return DeepseekV4Config(
        vocab_size=320,
        hidden_size=64,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=1,
        head_dim=32,
        q_lora_rank=32,
        o_groups=2,
        o_lora_rank=32,
        moe_intermediate_size=32,
        n_routed_experts=16,
        n_shared_experts=1,
        num_experts_per_tok=4,
        routed_scaling_factor=1.5,
        scoring_func="sqrtsoftplus",
        norm_topk_prob=True,
        rms_norm_eps=1e-6,
        rope_theta=10000.0,
        compress_rope_theta=160000.0,
        rope_parameters={
            "rope_type": "yarn",
            "factor": 16.0,
            "original_max_position_embeddings": 256,
            "beta_fast": 32.0,
            "beta_slow": 1.0,
        },
        partial_rotary_factor=8 / 32,
        layer_types=[
            "sliding_attention",
            "compressed_sparse_attention",
            "heavily_compressed_attention",
            "compressed_sparse_attention",
        ],
        mlp_layer_types=["hash_moe", "hash_moe", "moe", "moe"],
        compress_rates={"compressed_sparse_attention": 4, "heavily_compressed_attention": 16},
        hc_mult=4,
        hc_sinkhorn_iters=20,
        hc_eps=1e-6,
        swiglu_limit=2.0,
        sliding_window=16,
        index_n_heads=16,
        index_head_dim=16,
        index_topk=6,
        max_position_embeddings=4096,
        bos_token_id=0,
        eos_token_id=1,
        tie_word_embeddings=False,
    )


@torch.no_grad()
def randomize(model: DeepseekV4ForCausalLM, gen: torch.Generator) -> None:
    cfg = model.config
    d = cfg.hidden_size
    for name, p in model.named_parameters():
        n = lambda *shape: torch.randn(*shape, generator=gen)  # noqa: E731
        if name.endswith("embed_tokens.weight"):
            p.copy_(n(*p.shape))
        elif name == "lm_head.weight":
            p.copy_(n(*p.shape) * 2.5 / math.sqrt(d))
        elif "norm" in name:
            p.copy_(1.0 + 0.1 * n(*p.shape))
        elif name.endswith(".fn") or name.endswith("hc_fn"):
            p.copy_(n(*p.shape) * 0.5 / math.sqrt(p.shape[1]))
        elif name.endswith(".base") or name.endswith("hc_base"):
            p.copy_(0.5 * n(*p.shape))
        elif name.endswith(".scale") or name.endswith("hc_scale"):
            p.copy_(1.0 + 0.2 * n(*p.shape))
        elif name.endswith("sinks"):
            p.copy_(n(*p.shape))
        elif name.endswith("position_bias"):
            p.copy_(0.5 * n(*p.shape))
        elif name.endswith("experts.gate_up_proj"):
            p.copy_(n(*p.shape) / math.sqrt(p.shape[2]))
        elif name.endswith("experts.down_proj"):
            p.copy_(n(*p.shape) / math.sqrt(p.shape[2]))
        elif p.dim() == 2:
            p.copy_(n(*p.shape) / math.sqrt(p.shape[1]))
        else:
            raise RuntimeError(f"no init rule for {name} {tuple(p.shape)}")
    for name, b in model.named_buffers():
        if name.endswith("e_score_correction_bias"):
            b.copy_(0.1 * torch.randn(*b.shape, generator=gen))
        elif name.endswith("tid2eid"):
            vocab, k = b.shape
            ids = torch.stack([torch.randperm(cfg.n_routed_experts, generator=gen)[:k] for _ in range(vocab)])
            b.copy_(ids)


@torch.no_grad()
def main(out_dir: str) -> None:
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    gen = torch.Generator().manual_seed(SEED)
    torch.manual_seed(SEED)
    cfg = tiny_config()
    model = DeepseekV4ForCausalLM(cfg).float()
    randomize(model, gen)
    model.eval()
    os.makedirs(out_dir, exist_ok=True)
    model.save_pretrained(out_dir, safe_serialization=True)
    model.to(dev)

    prompts = [torch.randint(2, cfg.vocab_size, (N_TOKENS,), generator=gen).tolist() for _ in range(N_PROMPTS)]
    report = {"transformers": transformers.__version__, "torch": torch.__version__, "device": dev, "prompts": prompts}
    for k, prompt in enumerate(prompts):
        ids = torch.tensor([prompt], device=dev)
        full = model(ids, use_cache=False).logits[0].float()
        cache = None
        steps = []
        for t in range(N_TOKENS):
            out = model(ids[:, t : t + 1], past_key_values=cache, use_cache=True)
            cache = out.past_key_values
            steps.append(out.logits[0, -1].float())
        step = torch.stack(steps)
        rel_rows = (full - step).abs().amax(-1) / full.abs().amax(-1)
        rel = rel_rows.max().item()
        print("per-position rel (first 40):", [f"{x:.1e}" for x in rel_rows[:40].tolist()])
        agree = (full.argmax(-1) == step.argmax(-1)).float().mean().item()
        print(f"prompt {k}: full vs step max rel {rel:.3e}, argmax agreement {agree:.4f}")
        report[f"full_vs_step_max_rel_{k}"] = rel
        full.cpu().numpy().astype("<f4").tofile(os.path.join(out_dir, f"logits_full_{k}.f32"))
        step.cpu().numpy().astype("<f4").tofile(os.path.join(out_dir, f"logits_step_{k}.f32"))
    with open(os.path.join(out_dir, "prompts.json"), "w") as f:
        json.dump(report, f, indent=1)
    print(f"wrote {out_dir}")


if __name__ == "__main__":
    main(sys.argv[1])
