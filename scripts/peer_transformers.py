"""Time transformers' batch-1 greedy decode of a memra checkpoint (the peer number).

    python3 scripts/peer_transformers.py MODEL_DIR [--context 1024] [--steps 32] [--out peer.json] [--load-on cuda|cpu]

Loads MODEL_DIR (official FP8/FP4 layout, e.g. from `memra synth --preset
flash-shape --layers 4 --seed 0`) with `DeepseekV4ForCausalLM.from_pretrained`,
`FineGrainedFP8Config(dequantize=True)`, in bf16 with `device_map="cuda"`: the
FP8/FP4 tensors go to the GPU as stored and are dequantized there (`--load-on
cpu`: on the host, ~52 GB bf16 for 4 flash-shape layers, then moved to the GPU).
Prefills --context ids (random.Random(0), in [2, vocab)) with use_cache=True, i.e.
the model's own DynamicCache of DeepSeek-V4 sliding/CSA/HCA layers, timed once;
then 3 warm-up and --steps timed greedy decode steps (argmax fed back, cache
reused), each between two torch.cuda.synchronize(). Prints one summary line and
writes JSON. Exits 2 when the model does not load or has missing/unexpected keys.
"""
import argparse
import datetime
import json
import os
import random
import statistics
import sys
import time

import torch
import transformers
from transformers import DeepseekV4ForCausalLM, FineGrainedFP8Config

WARMUP = 3


def log(msg):
    print(msg, flush=True)


def fail(msg):
    print(f"peer_transformers: {msg}", file=sys.stderr, flush=True)
    sys.exit(2)


def pct(xs, q):  # linear interpolation between order statistics
    s, k = sorted(xs), (len(xs) - 1) * q
    f = int(k)
    return s[f] + (s[min(f + 1, len(s) - 1)] - s[f]) * (k - f)


def timed(fn):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    r = fn()
    torch.cuda.synchronize()
    return r, (time.perf_counter() - t0) * 1000.0


@torch.no_grad()
def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model_dir")
    ap.add_argument("--context", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=32)
    ap.add_argument("--out", default="peer.json")
    ap.add_argument("--load-on", choices=["cuda", "cpu"], default="cuda")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        fail("no CUDA device")
    cfg = json.load(open(os.path.join(args.model_dir, "config.json")))
    rope, index_dim = cfg.get("qk_rope_head_dim"), cfg.get("index_head_dim", 128)
    if rope is not None and rope > index_dim:
        fail(f"qk_rope_head_dim {rope} > index_head_dim {index_dim}: transformers' DSV4 indexer rotates "
             "the last rotary dims of its heads and cannot run this config")

    kwargs = {"dtype": torch.bfloat16, "attn_implementation": "eager", "output_loading_info": True,
              "device_map": args.load_on}
    if "quantization_config" in cfg:
        kwargs["quantization_config"] = FineGrainedFP8Config(dequantize=True)
    log(f"loading {args.model_dir} in bf16 (dequantizing on {args.load_on}; transformers "
        f"{transformers.__version__}, torch {torch.__version__}) ...")
    t0 = time.perf_counter()
    try:
        model, info = DeepseekV4ForCausalLM.from_pretrained(args.model_dir, **kwargs)
    except Exception as e:  # noqa: BLE001 - any load failure ends the run with its reason
        fail(f"transformers could not load {args.model_dir} as DeepseekV4ForCausalLM: {type(e).__name__}: {e}")
    bad = {k: sorted(map(str, v))[:10] for k, v in info.items()
           if v and k in ("missing_keys", "unexpected_keys", "mismatched_keys")}
    if bad:
        fail("loading info: " + json.dumps(bad))
    if args.load_on == "cpu":
        model = model.to("cuda")
    # A pre-quantized checkpoint's plain tensors keep their stored dtype; every
    # matmul/norm weight must be bf16 like the activations (the F32 mHC, sink and
    # compressor-bias tensors stay F32: the model upcasts around them).
    n_cast = 0
    for name, p in model.named_parameters():
        if name.endswith((".weight", "experts.gate_up_proj", "experts.down_proj")) and p.dtype != torch.bfloat16:
            p.data = p.data.to(torch.bfloat16)
            n_cast += 1
    model.eval()
    load_s = time.perf_counter() - t0
    dtypes = {}
    for p in model.parameters():
        dtypes[str(p.dtype)] = dtypes.get(str(p.dtype), 0) + p.numel()
    log(f"loaded in {load_s:.1f}s; {torch.cuda.memory_allocated() / 2**30:.1f} GiB on GPU; "
        f"params by dtype {dtypes}; {n_cast} weights cast to bf16")

    rng = random.Random(0)
    prompt = torch.tensor([[rng.randrange(2, model.config.vocab_size) for _ in range(args.context)]], device="cuda")

    def step(ids, cache):
        out = model(input_ids=ids, past_key_values=cache, use_cache=True, logits_to_keep=1)
        return out.logits[:, -1].argmax(-1, keepdim=True), out.past_key_values

    step(prompt[:, :16], None)  # warm-up forward on a throwaway cache (library/kernel init)
    (tok, cache), prefill_ms = timed(lambda: step(prompt, None))
    layers = [type(layer).__name__ for layer in cache.layers]
    log(f"prefill {args.context} tokens: {prefill_ms:.1f} ms; cache {type(cache).__name__} {layers}")
    times = []
    for i in range(WARMUP + args.steps):
        (tok, cache), ms = timed(lambda: step(tok, cache))
        if i >= WARMUP:
            times.append(ms)
        if i + 1 == WARMUP or (i + 1 - WARMUP) % 8 == 0:
            log(f"  decode step {i + 1}/{WARMUP + args.steps}: {ms:.2f} ms")
    expect = args.context + WARMUP + args.steps
    if cache.get_seq_length() != expect:
        fail(f"cache holds {cache.get_seq_length()} positions, expected {expect}")

    med = statistics.median(times)
    res = dict(
        model_dir=os.path.abspath(args.model_dir), layers=model.config.num_hidden_layers, dtype="bf16",
        context=args.context, steps=args.steps, warmup_steps=WARMUP, median_ms=med, p10_ms=pct(times, 0.1),
        p90_ms=pct(times, 0.9), tokens_per_s=1000.0 / med, prefill_ms=prefill_ms, load_s=load_s, step_ms=times,
        torch=torch.__version__, transformers=transformers.__version__, device=torch.cuda.get_device_name(),
        date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        attn_implementation=getattr(model.config, "_attn_implementation", None),
        experts_implementation=getattr(model.config, "_experts_implementation", None),
        cache_layers=layers, peak_gib=torch.cuda.max_memory_allocated() / 2**30,
    )
    with open(args.out, "w") as f:
        json.dump(res, f, indent=1)
    log(f"transformers {transformers.__version__} bf16, {res['layers']} layers, context {args.context}: "
        f"decode median {med:.2f} ms (p10 {res['p10_ms']:.2f}, p90 {res['p90_ms']:.2f}) = "
        f"{res['tokens_per_s']:.1f} tok/s over {args.steps} steps; prefill {prefill_ms:.0f} ms; "
        f"load {load_s:.0f}s -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
