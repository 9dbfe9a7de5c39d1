#!/usr/bin/env python3
"""Writes five tiny random-weight decoder models and their reference outputs.

    python scripts/make_tiny_llm.py OUT_DIR

makes OUT_DIR/llama/ (LlamaForCausalLM: grouped-query attention, untied lm_head, the
tokenizer adds a BOS token, ``rope_theta`` at the top level of config.json as older files
have it) and OUT_DIR/qwen2/ (Qwen2ForCausalLM: q/k/v biases, tied embeddings, no BOS,
``rope_parameters`` as transformers >= 5 writes it) and OUT_DIR/llama3/ (LlamaForCausalLM
with Llama 3.1's ``llama3`` rope scaling, written as Llama 3.x files have it: ``rope_theta`` at
the top level, the scaling in ``rope_scaling``; its original context of 64 positions puts the
head's eight frequencies in all three of the scaling's bands) and OUT_DIR/qwen2-yarn/ (the
Qwen2 above with ``yarn`` scaling in ``rope_parameters``, likewise in all three bands, and
cos and sin multiplied by its attention factor) and OUT_DIR/qwen3/ (Qwen3ForCausalLM: q and k
heads RMS-normalised, a head_dim of 32 where hidden / heads is 16, untied). Each is a Hugging Face model
directory (config.json, generation_config.json, model.safetensors, tokenizer.json,
tokenizer_config.json) plus reference.json, computed here with `transformers` on torch in
f32:

    {"cases": [{"prompt": str,
                "prompt_ids": [int],           # tokenizer(prompt).input_ids
                "prefill_logits": [V floats],  # logits at the last prompt position
                "decode_logits": [[V floats] x 16],  # greedy decode steps 1..16
                "greedy_ids": [17 ints]}, ...],      # argmax of each of the above
     "min_top2_gap": float,                   # smallest margin between the top two logits
     "max_abs_logit": float}                  # largest |logit| of the prefill logits

Four prompts of different lengths; stop tokens are ignored. The weights are drawn with a
larger spread than the models' own initialisation so that greedy choices are well
separated (the margin is reported); the seed is fixed, so the files are the same on every
run with the same library versions. Needs torch, transformers and tokenizers.
"""

import inspect
import json
import os
import sys

import torch
from tokenizers import Tokenizer, models, pre_tokenizers, decoders, trainers, processors
from transformers import (
    AutoModelForCausalLM,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedTokenizerFast,
    Qwen2Config,
    Qwen2ForCausalLM,
    Qwen3Config,
    Qwen3ForCausalLM,
)

CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "A runtime executes neural network operators on accelerators and on the CPU.",
    "Decoder models read a prompt once, then write one token at a time.",
    "Keys and values of earlier tokens stay in a cache made of fixed-size blocks.",
    "Rotary position embeddings turn each pair of features by an angle.",
    "Grouped-query attention lets several query heads share one key and value head.",
    "Il était une fois un petit renard qui aimait les étoiles.",
    "Zahlen wie 1234 und 56789 sowie Zeichen: ({[<>]}) & % $ # @ !",
]
PROMPTS = [
    "The quick brown fox",
    "Hello",
    "Keys and values of earlier tokens stay in a cache, and rotary embeddings",
    "Grouped-query attention: ünïcödé ✓ 42",
]
DECODE_STEPS = 16


def make_tokenizer(bos: bool) -> Tokenizer:
    """A byte-level BPE trained on CORPUS; with `bos`, a post-processor that adds <s>."""
    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=["<s>", "</s>", "<pad>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(CORPUS * 4, trainer=trainer)
    if bos:
        tok.post_processor = processors.TemplateProcessing(
            single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", tok.token_to_id("<s>"))]
        )
    else:
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
    return tok


def spread_weights(model: torch.nn.Module, seed: int) -> None:
    """Normal weights (std 1.2 / sqrt(fan-in); lm_head 3 / sqrt(fan-in); embeddings 0.5), norm
    weights near 1, biases 0.2."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=g))
            elif name.endswith("bias"):
                p.copy_(0.2 * torch.randn(p.shape, generator=g))
            elif p.dim() == 2 and "embed_tokens" in name:
                p.copy_(0.5 * torch.randn(p.shape, generator=g))
            elif name.startswith("lm_head"):
                p.copy_(3.0 * torch.randn(p.shape, generator=g) / p.shape[-1] ** 0.5)
            else:
                p.copy_(1.2 * torch.randn(p.shape, generator=g) / p.shape[-1] ** 0.5)


def step(model, ids, cache):
    """One forward pass with the KV cache, under the cache's name in this transformers."""
    if "cache" in inspect.signature(model.forward).parameters:
        out = model(torch.tensor([ids]), cache=cache, use_cache=True)
        return out.logits[0, -1], out.cache
    out = model(torch.tensor([ids]), past_key_values=cache, use_cache=True)
    return out.logits[0, -1], out.past_key_values


def reference(model, tokenizer) -> dict:
    cases, gap = [], float("inf")
    for prompt in PROMPTS:
        ids = tokenizer(prompt).input_ids
        with torch.no_grad():
            logits, cache = step(model, ids, None)
            prefill = logits.tolist()
            greedy, decode = [int(logits.argmax())], []
            gap = min(gap, float(logits.topk(2).values[0] - logits.topk(2).values[1]))
            for _ in range(DECODE_STEPS):
                logits, cache = step(model, [greedy[-1]], cache)
                decode.append(logits.tolist())
                greedy.append(int(logits.argmax()))
                gap = min(gap, float(logits.topk(2).values[0] - logits.topk(2).values[1]))
        cases.append(
            {"prompt": prompt, "prompt_ids": ids, "prefill_logits": prefill, "decode_logits": decode, "greedy_ids": greedy}
        )
    scale = max(max(abs(x) for x in c["prefill_logits"]) for c in cases)
    return {"cases": cases, "min_top2_gap": gap, "max_abs_logit": scale}


def write(out: str, name: str, config, cls, bos: bool, seed: int, legacy_rope: bool) -> None:
    """``legacy_rope``: config.json as older files have it, ``rope_theta`` at the top level and
    any other rope parameters in ``rope_scaling``."""
    d = os.path.join(out, name)
    os.makedirs(d, exist_ok=True)
    tok = make_tokenizer(bos)
    tok.save(os.path.join(d, "tokenizer.json"))
    fast = PreTrainedTokenizerFast(
        tokenizer_file=os.path.join(d, "tokenizer.json"), bos_token="<s>", eos_token="</s>", pad_token="<pad>"
    )
    fast.save_pretrained(d)
    config.vocab_size = tok.get_vocab_size()
    config.bos_token_id = tok.token_to_id("<s>")
    config.eos_token_id = tok.token_to_id("</s>")
    config.pad_token_id = tok.token_to_id("<pad>")
    torch.manual_seed(seed)
    model = cls(config).eval()
    spread_weights(model, seed)
    model.save_pretrained(d, safe_serialization=True)
    if legacy_rope:
        # Older config.json files carry rope_theta at the top level.
        path = os.path.join(d, "config.json")
        with open(path) as f:
            cfg = json.load(f)
        params = dict(cfg.pop("rope_parameters", None) or {})
        cfg["rope_theta"] = params.pop("rope_theta")
        cfg.pop("rope_scaling", None)
        if params.get("rope_type", "default") != "default":
            cfg["rope_scaling"] = params
        with open(path, "w") as f:
            json.dump(cfg, f, indent=2)
    # The reference comes from the files as written, read back.
    model = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32).eval()
    tokenizer = PreTrainedTokenizerFast.from_pretrained(d)
    theta = model.config.rope_parameters["rope_theta"]
    if abs(theta - config.rope_parameters["rope_theta"]) > 1e-6 * theta:
        raise SystemExit(f"make_tiny_llm: {d}: rope_theta {theta} read back, expected {config.rope_parameters['rope_theta']}")
    kind = model.config.rope_parameters.get("rope_type", "default")
    if kind != config.rope_parameters.get("rope_type", "default"):
        raise SystemExit(f"make_tiny_llm: {d}: rope_type {kind!r} read back, expected {config.rope_parameters['rope_type']!r}")
    ref = reference(model, tokenizer)
    with open(os.path.join(d, "reference.json"), "w") as f:
        json.dump(ref, f)
    print(f"make_tiny_llm: wrote {d} (vocab {config.vocab_size}, min top-2 gap {ref['min_top2_gap']:.4f}, max |logit| {ref['max_abs_logit']:.2f})")


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    out = sys.argv[1]
    torch.set_num_threads(1)
    common = dict(
        hidden_size=64,
        intermediate_size=160,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        rms_norm_eps=1e-6,
    )
    llama = LlamaConfig(
        **common,
        tie_word_embeddings=False,
        attention_bias=False,
        rope_parameters={"rope_type": "default", "rope_theta": 500000.0},
    )
    write(out, "llama", llama, LlamaForCausalLM, bos=True, seed=7, legacy_rope=True)
    qwen2 = Qwen2Config(
        **common, tie_word_embeddings=True, rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}
    )
    write(out, "qwen2", qwen2, Qwen2ForCausalLM, bos=False, seed=11, legacy_rope=False)
    # head_dim 16, theta 500000: wavelengths 2π · 500000^(i/8) = 6.3, 32.5, 168, ...; with an
    # original context of 64 (low 1, high 4) the first keeps its frequency, the second is
    # interpolated, the rest are divided by the factor.
    llama3 = LlamaConfig(
        **common,
        tie_word_embeddings=True,
        attention_bias=False,
        rope_parameters={
            "rope_type": "llama3",
            "rope_theta": 500000.0,
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 64,
        },
    )
    write(out, "llama3", llama3, LlamaForCausalLM, bos=True, seed=13, legacy_rope=True)
    # theta 1e6, original context 64: the correction dims of 32 and 1 rotations are -0.66
    # and 1.34, truncated to 0 and 2: pair 0 kept, pair 1 blended, pairs 2.. interpolated.
    yarn = Qwen2Config(
        **common,
        tie_word_embeddings=True,
        rope_parameters={
            "rope_type": "yarn",
            "rope_theta": 1000000.0,
            "factor": 4.0,
            "original_max_position_embeddings": 64,
        },
    )
    write(out, "qwen2-yarn", yarn, Qwen2ForCausalLM, bos=False, seed=17, legacy_rope=False)
    qwen3 = Qwen3Config(
        **common,
        head_dim=32,
        tie_word_embeddings=False,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
    )
    write(out, "qwen3", qwen3, Qwen3ForCausalLM, bos=False, seed=19, legacy_rope=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
