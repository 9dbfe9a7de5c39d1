"""The Embedder against sentence-transformers' reference embeddings.

The model comes from scripts/fetch-test-assets.sh (target/test-assets/all-MiniLM-L6-v2, or
NPURT_TEST_MODEL_DIR) and the reference from ../shared/fixtures/minilm_reference.json; the
tests skip with a message when either is absent.
"""

from __future__ import annotations

import json
import os
import pathlib

import numpy as np
import pytest

import npurt
from conftest import REPO


def assets():
    d = pathlib.Path(os.environ.get("NPURT_TEST_MODEL_DIR", REPO / "target/test-assets/all-MiniLM-L6-v2"))
    if not ((d / "model.safetensors").is_file() and (d / "tokenizer.json").is_file()):
        pytest.skip(f"no model at {d} (run scripts/fetch-test-assets.sh)")
    f = REPO.parent / "shared/fixtures/minilm_reference.json"
    if not f.is_file():
        pytest.skip(f"no fixture at {f}")
    return d, json.loads(f.read_text())


def test_embedder_matches_reference(rt: npurt.Runtime) -> None:
    d, ref = assets()
    e = rt.Embedder(d, batch_size=4)
    assert e.dimension == 384 and e.max_seq_length == 256
    texts = [c["text"] for c in ref["cases"]]
    got = e.embed(texts)
    assert got.dtype == np.float32 and got.shape == (len(texts), 384)
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)
    for row, c in zip(got, ref["cases"]):
        want = np.asarray(c["embedding"], np.float64)
        cos = float(row @ want / (np.linalg.norm(row) * np.linalg.norm(want)))
        assert cos >= 0.99999, (cos, c["text"])
    one = e.embed(texts[0])
    np.testing.assert_allclose(one[0], got[0], atol=1e-5)
    assert e.embed([]).shape == (0, 384)


def test_embedder_missing_dir(rt: npurt.Runtime, tmp_path: pathlib.Path) -> None:
    with pytest.raises(npurt.Error):
        rt.Embedder(tmp_path / "absent")


def test_rows_are_unit_length_without_a_normalize_module(rt: npurt.Runtime, tmp_path: pathlib.Path) -> None:
    import tiny_model

    texts = ["hello world", "the quick brown fox jumps over the lazy dog", "fox", "zebra unknown words"]
    e = rt.Embedder(tiny_model.write(tmp_path / "plain"), batch_size=3)
    assert not e.model_normalizes
    raw = e.embed(texts, normalize=False)
    assert raw.dtype == np.float32 and raw.shape == (4, 32)
    norms = np.linalg.norm(raw.astype(np.float64), axis=1)
    assert np.all(np.abs(norms - 1.0) > 0.1), norms  # the model alone does not normalise
    rows = e.embed(texts)
    assert rows.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(rows.astype(np.float64), axis=1), 1.0, atol=1e-6)
    np.testing.assert_allclose(rows, raw / norms[:, None], rtol=1e-6, atol=1e-7)

    # A model with a Normalize module: its own rows are unit length and kept as they are.
    n = rt.Embedder(tiny_model.write(tmp_path / "normalizing", normalize=True), batch_size=3)
    assert n.model_normalizes
    own = n.embed(texts, normalize=False)
    np.testing.assert_allclose(np.linalg.norm(own.astype(np.float64), axis=1), 1.0, atol=1e-6)
    np.testing.assert_array_equal(n.embed(texts), own)
    np.testing.assert_allclose(own, rows, rtol=1e-5, atol=1e-6)
