#!/usr/bin/env python3
"""Peer baseline for `npurt bench llm`: Hugging Face `transformers` on torch (CPU).

Builds a decoder of a preset's shape with seeded random weights (the shapes of
src/models/llama_config.rs's presets: `qwen2-0.5b`, `qwen3-0.6b`, `llama-tiny`) or loads a model
directory, and times, as `npurt bench llm` does:

  prefill   one forward pass over a prompt of --prompt-len tokens per sequence (batch
            --batch), the KV cache filled; ms, median of --runs
  decode    --gen greedy steps of one token per sequence with the cache (batch --batch);
            ms per step and tokens/s (batch x steps / time), median of --runs

at --dtype f32 or bf16 with --threads torch threads (default: all cores). Prompt ids are
`(i * 7919) % vocab`, as npurt's bench. Prints one JSON object (also to --json F):

    {"peer": "transformers", "model": ..., "dtype": ..., "threads": ..., "batch": ...,
     "prompt_len": ..., "gen": ..., "prefill_ms": ..., "decode_ms_per_token": ...,
     "tokens_per_s": ..., "weight_bytes": ..., "versions": {...}}

    python3 bench/peers/llm_hf.py --model qwen2-0.5b --prompt-len 128 --gen 32 --batch 1 --dtype f32

Requires torch and transformers (`pip install torch transformers`).
"""

import argparse
import json
import statistics
import time

import torch
import transformers

from llm_presets import PRESETS


def build(name: str, dtype: torch.dtype):
    if name not in PRESETS:
        return transformers.AutoModelForCausalLM.from_pretrained(name, dtype=dtype).eval()
    p = dict(PRESETS[name])
    arch = p.pop("arch")
    theta = p.pop("rope_theta")
    rope = {"rope_type": "default", "rope_theta": theta}
    if arch == "qwen2":
        cfg = transformers.Qwen2Config(**p, rope_parameters=rope)
        cls = transformers.Qwen2ForCausalLM
    elif arch == "qwen3":
        cfg = transformers.Qwen3Config(**p, rope_parameters=rope)
        cls = transformers.Qwen3ForCausalLM
    else:
        cfg = transformers.LlamaConfig(**p, rope_parameters=rope)
        cls = transformers.LlamaForCausalLM
    torch.manual_seed(0)
    return cls(cfg).to(dtype).eval()


def forward(model, ids, cache):
    import inspect

    if "cache" in inspect.signature(model.forward).parameters:
        out = model(ids, cache=cache, use_cache=True)
        return out.logits, out.cache
    out = model(ids, past_key_values=cache, use_cache=True)
    return out.logits, out.past_key_values


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="qwen2-0.5b", help="a preset name or a model directory")
    ap.add_argument("--prompt-len", type=int, default=128)
    ap.add_argument("--gen", type=int, default=32)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--dtype", choices=["f32", "bf16"], default="f32")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--json")
    a = ap.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    dtype = torch.float32 if a.dtype == "f32" else torch.bfloat16
    model = build(a.model, dtype)
    vocab = model.config.vocab_size
    ids = torch.tensor([[(i * 7919 + b) % vocab for i in range(a.prompt_len)] for b in range(a.batch)])
    prefill, decode = [], []
    with torch.inference_mode():
        forward(model, ids[:, :8], None)  # warm-up
        for _ in range(a.runs):
            t0 = time.perf_counter()
            logits, cache = forward(model, ids, None)
            prefill.append((time.perf_counter() - t0) * 1e3)
            nxt = logits[:, -1].argmax(-1, keepdim=True)
            t0 = time.perf_counter()
            for _ in range(a.gen):
                logits, cache = forward(model, nxt, cache)
                nxt = logits[:, -1].argmax(-1, keepdim=True)
            decode.append((time.perf_counter() - t0) * 1e3 / a.gen)
    step = statistics.median(decode)
    out = {
        "peer": "transformers",
        "model": a.model,
        "dtype": a.dtype,
        "threads": torch.get_num_threads(),
        "batch": a.batch,
        "prompt_len": a.prompt_len,
        "gen": a.gen,
        "prefill_ms": statistics.median(prefill),
        "decode_ms_per_token": step,
        "tokens_per_s": a.batch * 1e3 / step,
        "weight_bytes": sum(p.numel() * p.element_size() for p in model.parameters()),
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
    }
    text = json.dumps(out)
    print(text)
    if a.json:
        with open(a.json, "w") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
