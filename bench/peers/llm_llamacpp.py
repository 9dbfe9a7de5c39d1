#!/usr/bin/env python3
"""Peer baseline for `npurt bench llm`: llama.cpp through llama-cpp-python (CPU).

Two steps:

  --make-gguf OUT  writes the decoder of a preset's shape (bench/peers/llm_hf.py's presets,
                   the same seeded random weights transformers makes there) as a GGUF file
                   at --dtype f32, f16 or bf16, with the `gguf` package (llama.cpp's gguf-py):
                   the Hugging Face tensor names mapped to llama.cpp's, no vocabulary
                   (tokenizer model "none": ids in, ids out), `<arch>.vocab_size` set.
  --gguf FILE      times it as `npurt bench llm` does: prefill of --prompt-len tokens (one
                   llama_decode of the whole prompt), then --gen greedy decode steps of one
                   token; medians of --runs. Prints one JSON object (also to --json F).

llama-cpp-python's high-level API decodes one sequence, so --batch must be 1 (the JSON says
so when it is not). Threads: --threads (default: all cores).

    python3 bench/peers/llm_llamacpp.py --make-gguf /tmp/q05-f32.gguf --model qwen2-0.5b --dtype f32
    python3 bench/peers/llm_llamacpp.py --gguf /tmp/q05-f32.gguf --prompt-len 128 --gen 32

Requires llama-cpp-python (built from the registry: `pip install llama-cpp-python`), and for
--make-gguf the `gguf` package, with torch and transformers for transformers' own seeded
weights (without them, a preset is written with numpy's seeded random weights: the same
shapes and bytes per step, so the same speed, but not the transformers peer's logits).
"""

import argparse
import json
import os
import statistics
import sys
import time
import types

HERE = os.path.dirname(os.path.abspath(__file__))


def hf_weights(model: str):
    """The preset's config (an object with the Hugging Face field names) and its weights as
    (name, f32 numpy array) pairs: transformers' seeded model (llm_hf.py's, the weights the
    transformers peer times) where torch and transformers are installed, else numpy's
    seeded random weights of the same names and shapes (what a speed comparison needs; the
    logits then differ from transformers')."""
    import numpy as np

    sys.path.insert(0, HERE)
    try:
        import torch
        from llm_hf import build
    except ImportError as e:
        from llm_presets import PRESETS

        if model not in PRESETS:
            raise SystemExit(f"llm_llamacpp: {model} is not a preset, and a model directory needs torch ({e})")
        print(f"llm_llamacpp: {e}; writing numpy's seeded random weights of {model}'s shapes", file=sys.stderr)
        p = dict(PRESETS[model])
        cfg = types.SimpleNamespace(model_type=p.pop("arch"), rope_parameters={"rope_theta": p.pop("rope_theta")}, **p)
        return cfg, numpy_weights(cfg, np)
    m = build(model, torch.float32)
    return m.config, ((name, t.float().numpy()) for name, t in m.state_dict().items())


def head_dim(cfg) -> int:
    """A head's width: `head_dim` where the config has it (Qwen3), else hidden / heads."""
    return getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads


def numpy_weights(cfg, np):
    """(name, array) for every weight of a Llama / Qwen2 / Qwen3 decoder of `cfg`'s shapes,
    drawn one at a time (normal, std 0.02; norms 1; biases 0.01 · normal) from one seeded
    generator."""
    rng = np.random.default_rng(0)
    h, inter, v = cfg.hidden_size, cfg.intermediate_size, cfg.vocab_size
    d = head_dim(cfg)
    q, kv = cfg.num_attention_heads * d, cfg.num_key_value_heads * d

    def normal(*shape, std=0.02):
        return (rng.standard_normal(shape, dtype=np.float32) * std).astype(np.float32)

    yield "model.embed_tokens.weight", normal(v, h)
    for i in range(cfg.num_hidden_layers):
        pre = f"model.layers.{i}."
        yield pre + "input_layernorm.weight", np.ones(h, np.float32)
        for proj, rows in (("q_proj", q), ("k_proj", kv), ("v_proj", kv)):
            yield pre + f"self_attn.{proj}.weight", normal(rows, h)
            if cfg.model_type == "qwen2":
                yield pre + f"self_attn.{proj}.bias", normal(rows, std=0.01)
        if cfg.model_type == "qwen3":
            yield pre + "self_attn.q_norm.weight", np.ones(d, np.float32)
            yield pre + "self_attn.k_norm.weight", np.ones(d, np.float32)
        yield pre + "self_attn.o_proj.weight", normal(h, q)
        yield pre + "post_attention_layernorm.weight", np.ones(h, np.float32)
        yield pre + "mlp.gate_proj.weight", normal(inter, h)
        yield pre + "mlp.up_proj.weight", normal(inter, h)
        yield pre + "mlp.down_proj.weight", normal(h, inter)
    yield "model.norm.weight", np.ones(h, np.float32)
    if not cfg.tie_word_embeddings:
        yield "lm_head.weight", normal(v, h)


def make_gguf(out: str, model: str, dtype: str) -> None:
    import gguf
    import numpy as np

    cfg, weights = hf_weights(model)
    arch = {"qwen2": gguf.MODEL_ARCH.QWEN2, "qwen3": gguf.MODEL_ARCH.QWEN3, "llama": gguf.MODEL_ARCH.LLAMA}[
        cfg.model_type
    ]
    names = gguf.get_tensor_name_map(arch, cfg.num_hidden_layers)
    w = gguf.GGUFWriter(out, gguf.MODEL_ARCH_NAMES[arch])
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_block_count(cfg.num_hidden_layers)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(cfg.num_attention_heads)
    w.add_head_count_kv(cfg.num_key_value_heads)
    w.add_key_length(head_dim(cfg))
    w.add_value_length(head_dim(cfg))
    w.add_rope_freq_base(float(cfg.rope_parameters["rope_theta"]))
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    w.add_vocab_size(cfg.vocab_size)
    w.add_tokenizer_model("none")
    ftype = {"f32": gguf.LlamaFileType.ALL_F32, "f16": gguf.LlamaFileType.MOSTLY_F16,
             "bf16": gguf.LlamaFileType.MOSTLY_BF16}[dtype]
    w.add_file_type(ftype)
    for name, a in weights:
        if name == "lm_head.weight" and cfg.tie_word_embeddings:
            continue
        g = names.get_name(name, try_suffixes=(".weight", ".bias"))
        if g is None:
            raise SystemExit(f"llm_llamacpp: no GGUF name for {name}")
        if a.ndim == 1 or dtype == "f32":  # norms and biases stay f32, as llama.cpp's converter
            w.add_tensor(g, a.astype(np.float32))
        elif dtype == "f16":
            w.add_tensor(g, a.astype(np.float16))
        else:
            bits = (a.astype(np.float32).view(np.uint32) + 0x7FFF + ((a.view(np.uint32) >> 16) & 1)) >> 16
            w.add_tensor(g, bits.astype(np.uint16), raw_dtype=gguf.GGMLQuantizationType.BF16)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"llm_llamacpp: wrote {out} ({os.path.getsize(out) / 2**20:.0f} MiB)")


def bench(a) -> dict:
    import llama_cpp
    import numpy as np

    threads = a.threads or os.cpu_count()
    llm = llama_cpp.Llama(model_path=a.gguf, n_ctx=a.prompt_len + a.gen + 8, n_batch=max(a.prompt_len, 8),
                          n_threads=threads, n_threads_batch=threads, logits_all=False, verbose=False)
    vocab = llm.n_vocab()

    def last_logits():
        # The logits of the batch's last token (llama-cpp-python keeps none without logits_all).
        return np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(vocab,))

    prompt = [(i * 7919) % vocab for i in range(a.prompt_len)]
    llm.reset()
    llm.eval(prompt[:8])  # warm-up
    prefill, decode = [], []
    for _ in range(a.runs):
        llm.reset()
        t0 = time.perf_counter()
        llm.eval(prompt)
        prefill.append((time.perf_counter() - t0) * 1e3)
        tok = int(last_logits().argmax())
        t0 = time.perf_counter()
        for _ in range(a.gen):
            llm.eval([tok])
            tok = int(last_logits().argmax())
        decode.append((time.perf_counter() - t0) * 1e3 / a.gen)
    step = statistics.median(decode)
    return {
        "peer": "llama.cpp",
        "gguf": os.path.basename(a.gguf),
        "threads": threads,
        "batch": 1,
        "batch_asked": a.batch,
        "prompt_len": a.prompt_len,
        "gen": a.gen,
        "prefill_ms": statistics.median(prefill),
        "decode_ms_per_token": step,
        "tokens_per_s": 1e3 / step,
        "versions": {"llama_cpp_python": llama_cpp.__version__},
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--make-gguf", metavar="OUT")
    ap.add_argument("--model", default="qwen2-0.5b")
    ap.add_argument("--dtype", choices=["f32", "f16", "bf16"], default="f32")
    ap.add_argument("--gguf")
    ap.add_argument("--prompt-len", type=int, default=128)
    ap.add_argument("--gen", type=int, default=32)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--json")
    a = ap.parse_args()
    if a.make_gguf:
        make_gguf(a.make_gguf, a.model, a.dtype)
        return 0
    if not a.gguf:
        ap.error("give --make-gguf OUT or --gguf FILE")
    if a.batch != 1:
        print("llm_llamacpp: llama-cpp-python decodes one sequence; timing batch 1", file=sys.stderr)
    out = bench(a)
    text = json.dumps(out)
    print(text)
    if a.json:
        with open(a.json, "w") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
