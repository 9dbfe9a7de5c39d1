"""A tiny sentence-transformers model directory written from scratch (no download).

The encoder is ``BertConfig::tiny`` (vocabulary 50, hidden 32, 2 layers, 4 heads) with
seeded random weights in ``model.safetensors`` under the Hugging Face BERT names, a
word-level ``tokenizer.json``, and a ``modules.json`` of Transformer, mean Pooling and,
when ``normalize``, Normalize.
"""

from __future__ import annotations

import json
import pathlib
import struct
from typing import Dict

import numpy as np

CONFIG = {"vocab_size": 50, "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
          "intermediate_size": 64, "max_position_embeddings": 64, "type_vocab_size": 2, "layer_norm_eps": 1e-12,
          "hidden_act": "gelu"}

WORDS = ["hello", "world", "fox", "quick", "brown", "dog", "lazy", "jumps", "over", "the"]

TOKENIZER = {
    "version": "1.0", "truncation": None, "padding": None, "added_tokens": [], "normalizer": None,
    "pre_tokenizer": {"type": "Whitespace"}, "post_processor": None, "decoder": None,
    "model": {"type": "WordLevel", "unk_token": "[UNK]",
              "vocab": {"[UNK]": 0, "[PAD]": 1, **{w: i + 2 for i, w in enumerate(WORDS)}}},
}


def weights(seed: int = 7) -> Dict[str, np.ndarray]:
    """The encoder's tensors by their Hugging Face names."""
    r = np.random.default_rng(seed)
    h, inter = CONFIG["hidden_size"], CONFIG["intermediate_size"]

    def normal(*shape: int) -> np.ndarray:
        return (0.5 * r.standard_normal(shape)).astype(np.float32)

    w = {
        "embeddings.word_embeddings.weight": normal(CONFIG["vocab_size"], h),
        "embeddings.position_embeddings.weight": normal(CONFIG["max_position_embeddings"], h),
        "embeddings.token_type_embeddings.weight": normal(CONFIG["type_vocab_size"], h),
        "embeddings.LayerNorm.weight": np.ones(h, np.float32),
        "embeddings.LayerNorm.bias": normal(h),
    }
    for layer in range(CONFIG["num_hidden_layers"]):
        p = f"encoder.layer.{layer}"
        for name, (n, k) in {"attention.self.query": (h, h), "attention.self.key": (h, h),
                             "attention.self.value": (h, h), "attention.output.dense": (h, h),
                             "intermediate.dense": (inter, h), "output.dense": (h, inter)}.items():
            w[f"{p}.{name}.weight"] = normal(n, k) / np.sqrt(k)
            w[f"{p}.{name}.bias"] = normal(n)
        for ln in ("attention.output.LayerNorm", "output.LayerNorm"):
            w[f"{p}.{ln}.weight"] = np.ones(h, np.float32)
            w[f"{p}.{ln}.bias"] = normal(h)
    return w


def safetensors_bytes(tensors: Dict[str, np.ndarray]) -> bytes:
    """``tensors`` (float32) in the safetensors format."""
    header = {}
    data = bytearray()
    for name, a in tensors.items():
        b = np.ascontiguousarray(a, np.float32).tobytes()
        header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [len(data), len(data) + len(b)]}
        data += b
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + bytes(data)


def write(root: pathlib.Path, normalize: bool = False, with_weights: bool = True) -> pathlib.Path:
    """Writes the model directory under ``root``; returns it."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "config.json").write_text(json.dumps(CONFIG))
    (root / "tokenizer.json").write_text(json.dumps(TOKENIZER))
    (root / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 64, "do_lower_case": False}))
    modules = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
               {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]
    if normalize:
        modules.append({"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"})
    (root / "modules.json").write_text(json.dumps(modules))
    (root / "1_Pooling").mkdir(exist_ok=True)
    (root / "1_Pooling" / "config.json").write_text(
        json.dumps({"word_embedding_dimension": CONFIG["hidden_size"], "pooling_mode_mean_tokens": True}))
    if with_weights:
        (root / "model.safetensors").write_bytes(safetensors_bytes(weights()))
    return root


LLM_CONFIG = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 12, "hidden_size": 16,
              "intermediate_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1,
              "max_position_embeddings": 64, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
              "tie_word_embeddings": False, "bos_token_id": 0, "eos_token_id": 1, "hidden_act": "silu"}


def write_llm(root: pathlib.Path, seed: int = 3) -> pathlib.Path:
    """A tiny Llama decoder directory (1 layer, grouped-query 2:1, vocabulary 12: the
    word-level tokenizer above) with seeded random weights; returns it."""
    root.mkdir(parents=True, exist_ok=True)
    c = LLM_CONFIG
    r = np.random.default_rng(seed)
    h, inter, v = c["hidden_size"], c["intermediate_size"], c["vocab_size"]
    kv = h // c["num_attention_heads"] * c["num_key_value_heads"]

    def normal(*shape: int) -> np.ndarray:
        return (r.standard_normal(shape) / np.sqrt(shape[-1])).astype(np.float32)

    p = "model.layers.0"
    w = {"model.embed_tokens.weight": normal(v, h), "model.norm.weight": np.ones(h, np.float32),
         "lm_head.weight": normal(v, h), f"{p}.input_layernorm.weight": np.ones(h, np.float32),
         f"{p}.post_attention_layernorm.weight": np.ones(h, np.float32),
         f"{p}.self_attn.q_proj.weight": normal(h, h), f"{p}.self_attn.k_proj.weight": normal(kv, h),
         f"{p}.self_attn.v_proj.weight": normal(kv, h), f"{p}.self_attn.o_proj.weight": normal(h, h),
         f"{p}.mlp.gate_proj.weight": normal(inter, h), f"{p}.mlp.up_proj.weight": normal(inter, h),
         f"{p}.mlp.down_proj.weight": normal(h, inter)}
    (root / "config.json").write_text(json.dumps(c))
    (root / "tokenizer.json").write_text(json.dumps(TOKENIZER))
    (root / "model.safetensors").write_bytes(safetensors_bytes(w))
    return root
