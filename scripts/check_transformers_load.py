"""Load a memra checkpoint in transformers 5.17 and compare logits.

    python3 scripts/check_transformers_load.py MODEL_DIR TOKENS_JSON [OURS.f32]

Loads MODEL_DIR with `DeepseekV4ForCausalLM.from_pretrained` (official FP8/FP4
layout: with `FineGrainedFP8Config(dequantize=True)`), in fp32, and requires
no missing and no unexpected keys. With OURS.f32 (from `memra logits`),
compares every position: max |ours - ref| / max |ref| and argmax agreement.
Exits non-zero on missing/unexpected keys or a comparison over 1e-4.
"""
import json
import os
import sys

import numpy as np
import torch
from transformers import DeepseekV4ForCausalLM, FineGrainedFP8Config


@torch.no_grad()
def main() -> int:
    model_dir, tokens_path = sys.argv[1], sys.argv[2]
    ours_path = sys.argv[3] if len(sys.argv) > 3 else None
    torch.backends.cuda.matmul.allow_tf32 = False
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    cfg = json.load(open(os.path.join(model_dir, "config.json")))
    kwargs = {"output_loading_info": True, "dtype": torch.float32}
    if "quantization_config" in cfg:
        kwargs["quantization_config"] = FineGrainedFP8Config(dequantize=True)
    model, info = DeepseekV4ForCausalLM.from_pretrained(model_dir, **kwargs)
    model = model.float().to(dev).eval()
    bad = {k: v for k, v in info.items() if v and k in ("missing_keys", "unexpected_keys", "mismatched_keys")}
    print(f"{model_dir}: loading info: " + (json.dumps({k: sorted(map(str, v))[:20] for k, v in bad.items()}) if bad else "no missing, unexpected or mismatched keys"))
    toks = json.load(open(tokens_path))
    toks = toks["tokens"] if isinstance(toks, dict) else toks
    ref = model(torch.tensor([toks], device=dev), use_cache=False).logits[0].float().cpu().numpy()
    status = 1 if bad else 0
    if ours_path:
        ours = np.fromfile(ours_path, dtype="<f4").reshape(ref.shape)
        rel = (np.abs(ours - ref).max(-1) / np.abs(ref).max(-1)).max()
        agree = (ours.argmax(-1) == ref.argmax(-1)).mean()
        print(f"logits vs transformers: {len(toks)} positions, max rel err {rel:.3e}, argmax agreement {agree:.4f}")
        if not (rel < 1e-4 and agree == 1.0):
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
