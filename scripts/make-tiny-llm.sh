#!/usr/bin/env bash
# Makes the tiny decoder models the LLM tests compare against Hugging Face `transformers`:
#   target/test-assets/tiny-llm/{llama,qwen2,llama3,qwen2-yarn,qwen3}/
# (model directories plus reference.json; see scripts/make_tiny_llm.py for the format).
# Installs torch and transformers into a temporary virtual environment (removed after:
# several GiB), runs the generator, and keeps only its output. Idempotent: does nothing when
# every reference file is present. Exits 0 with a message when pip or the network is
# unavailable (the tests that need the models then skip, saying why).
set -euo pipefail
cd "$(dirname "$0")/.."

DEST="target/test-assets/tiny-llm"
if [ -s "$DEST/llama/reference.json" ] && [ -s "$DEST/qwen2/reference.json" ] && [ -s "$DEST/llama3/reference.json" ] \
    && [ -s "$DEST/qwen2-yarn/reference.json" ] && [ -s "$DEST/qwen3/reference.json" ]; then
    echo "make-tiny-llm: $DEST is already present; nothing to do"
    exit 0
fi

PY="${PYTHON:-python3}"
if ! command -v "$PY" >/dev/null 2>&1 || ! "$PY" -m venv --help >/dev/null 2>&1; then
    echo "make-tiny-llm: no python3 with venv; skipping (the tests that need $DEST will skip)"
    exit 0
fi

TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
"$PY" -m venv "$TMP/venv"
if ! "$TMP/venv/bin/python" -m pip install --quiet --disable-pip-version-check torch transformers tokenizers safetensors; then
    echo "make-tiny-llm: torch/transformers did not install (no network?); skipping (the tests that need $DEST will skip)"
    exit 0
fi
rm -rf "$DEST.partial"
mkdir -p "$DEST.partial"
"$TMP/venv/bin/python" scripts/make_tiny_llm.py "$DEST.partial"
rm -rf "$DEST"
mv "$DEST.partial" "$DEST"
"$TMP/venv/bin/python" -c "import torch, transformers; print('make-tiny-llm: made with torch', torch.__version__, 'transformers', transformers.__version__)"
