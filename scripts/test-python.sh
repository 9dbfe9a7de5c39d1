#!/usr/bin/env bash
# Builds and tests the Python package from scratch: a fresh virtual environment under
# target/, `pip install ./python pytest` (maturin builds the extension, sharing target/python
# with the cargo builds), then `pytest python/tests`. The Ascend tests use libacl_emu.so
# (built here when cargo is present; they skip with the reason otherwise); the embedding
# test uses target/test-assets from scripts/fetch-test-assets.sh (skips without it); the
# ONNX Runtime tests use the onnxruntime wheel and target/release/libnpurt_ort_ep.so, both
# installed or built here (they skip with the reason when either is missing).
#
# Overrides: CARGO_TARGET_DIR (where maturin builds; default target/python), NPURT_PY_VENV
# (the virtual environment, made afresh; default target/python-venv), ACL_EMU_LIB (an
# emulator already built: then none is built here). Arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."

PY="${PYTHON:-python3}"
VENV="${NPURT_PY_VENV:-target/python-venv}"
case "$VENV" in /*) ;; *) VENV="$PWD/$VENV" ;; esac
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target/python}"

rm -rf "$VENV"
"$PY" -m venv "$VENV"
"$VENV/bin/python" -m pip install --quiet --upgrade pip
"$VENV/bin/python" -m pip install --quiet ./python pytest
"$VENV/bin/python" -m pip install --quiet onnxruntime || echo "test-python: onnxruntime did not install; test_ort_ep.py will skip"
"$VENV/bin/python" -m pip install --quiet onnx || echo "test-python: onnx did not install; the op tests of test_ort_ep.py will skip"

if [ -n "${ACL_EMU_LIB:-}" ]; then
    echo "test-python: using the emulator $ACL_EMU_LIB"
elif command -v cargo >/dev/null 2>&1; then
    # The emulator the Ascend tests load (the workspace's own target/debug, as cargo test uses).
    env -u CARGO_TARGET_DIR cargo build --quiet -p acl-emu || echo "test-python: acl-emu did not build; the Ascend tests will skip"
    # The ONNX Runtime plugin library test_ort_ep.py registers with the onnxruntime wheel.
    env -u CARGO_TARGET_DIR cargo build --quiet --release -p npurt-ort-ep || echo "test-python: npurt-ort-ep did not build; test_ort_ep.py will skip"
fi

# From outside the source tree, so `import npurt` is the installed package.
cd python/tests
"$VENV/bin/python" -c "import npurt; print('npurt', npurt.__version__, 'backends', npurt.compiled_backends()); print(npurt.execute('Relu', [npurt.Tensor((2, 2))]))"
exec "$VENV/bin/python" -m pytest -q -rs . "$@"
