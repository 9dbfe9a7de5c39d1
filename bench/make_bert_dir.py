#!/usr/bin/env python3
"""Writes a random-weight BERT encoder as a Hugging Face model directory:

    DIR/config.json          the BERT config (vocab_size, hidden_size, ...)
    DIR/model.safetensors    every weight src/models/bert.rs reads, float32, under the
                             Hugging Face names (embeddings.word_embeddings.weight,
                             encoder.layer.N.attention.self.query.weight, ...)

Weights are normal with std 0.02 (LayerNorm gamma 1), seeded, as `Weights::Random` in
src/models/bert.rs (not the same values). The safetensors file is written by hand (an
8-byte little-endian header length, the JSON header, then the data) one tensor at a time,
so BERT-Large (~1.34 GB) needs little memory to write.

With --tokenizer-from DIR the tokenizer files of a sentence-transformers directory (e.g.
target/test-assets/all-MiniLM-L6-v2, vocabulary 30522 as BERT) are copied too, so that
`npurt embed --model-dir OUT "text"` loads the result (mean pooling; modules.json is not
written).

Usage:
    python3 bench/make_bert_dir.py --preset bert-large --out /tmp/bert-large
    npurt bench bert --model /tmp/bert-large --seq 512 --runs 1

Needs numpy.
"""

import argparse
import json
import os
import shutil
import struct

import numpy as np

PRESETS = {
    "bert-large": dict(hidden_size=1024, num_hidden_layers=24, num_attention_heads=16, intermediate_size=4096),
    "bert-base": dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072),
    "minilm-l6": dict(hidden_size=384, num_hidden_layers=6, num_attention_heads=12, intermediate_size=1536),
    "tiny": dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64),
}

TOKENIZER_FILES = ["tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt",
                   "sentence_bert_config.json"]


def config_for(preset, vocab):
    c = dict(PRESETS[preset])
    c.update(
        architectures=["BertModel"],
        model_type="bert",
        hidden_act="gelu",
        vocab_size=vocab,
        max_position_embeddings=512,
        type_vocab_size=2,
        layer_norm_eps=1e-12,
    )
    return c


def tensors(c):
    """(name, shape, init) for every weight, in the order src/models/bert.rs reads them."""
    h, i = c["hidden_size"], c["intermediate_size"]
    out = [
        ("embeddings.word_embeddings.weight", [c["vocab_size"], h], "normal"),
        ("embeddings.position_embeddings.weight", [c["max_position_embeddings"], h], "normal"),
        ("embeddings.token_type_embeddings.weight", [c["type_vocab_size"], h], "normal"),
        ("embeddings.LayerNorm.weight", [h], "ones"),
        ("embeddings.LayerNorm.bias", [h], "normal"),
    ]

    def linear(name, n, k):
        out.append((f"{name}.weight", [n, k], "normal"))
        out.append((f"{name}.bias", [n], "normal"))

    for l in range(c["num_hidden_layers"]):
        p = f"encoder.layer.{l}"
        for part in ("query", "key", "value"):
            linear(f"{p}.attention.self.{part}", h, h)
        linear(f"{p}.attention.output.dense", h, h)
        out.append((f"{p}.attention.output.LayerNorm.weight", [h], "ones"))
        out.append((f"{p}.attention.output.LayerNorm.bias", [h], "normal"))
        linear(f"{p}.intermediate.dense", i, h)
        linear(f"{p}.output.dense", h, i)
        out.append((f"{p}.output.LayerNorm.weight", [h], "ones"))
        out.append((f"{p}.output.LayerNorm.bias", [h], "normal"))
    return out


def write_safetensors(path, specs, seed):
    header = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, shape, _ in specs:
        n = int(np.prod(shape)) * 4
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [offset, offset + n]}
        offset += n
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # the data starts 8-byte aligned
    rng = np.random.default_rng(seed)
    chunk = 1 << 22
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for _, shape, init in specs:
            n = int(np.prod(shape))
            for start in range(0, n, chunk):
                m = min(chunk, n - start)
                if init == "ones":
                    v = np.ones(m, dtype="<f4")
                else:
                    v = (rng.standard_normal(m, dtype=np.float32) * np.float32(0.02)).astype("<f4")
                f.write(v.tobytes())
    return offset


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", choices=sorted(PRESETS), default="bert-large")
    ap.add_argument("--out", required=True, help="the directory to write")
    ap.add_argument("--vocab", type=int, default=30522)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--tokenizer-from", help="a sentence-transformers directory to copy tokenizer files from")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    c = config_for(a.preset, a.vocab)
    with open(os.path.join(a.out, "config.json"), "w") as f:
        json.dump(c, f, indent=2)
    data = write_safetensors(os.path.join(a.out, "model.safetensors"), tensors(c), a.seed)
    if a.tokenizer_from:
        for name in TOKENIZER_FILES:
            src = os.path.join(a.tokenizer_from, name)
            if os.path.isfile(src):
                shutil.copy(src, os.path.join(a.out, name))
    print(f"{a.out}: {a.preset}, {data / 2**20:.1f} MiB of f32 weights")


if __name__ == "__main__":
    main()
