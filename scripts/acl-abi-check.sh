#!/usr/bin/env bash
# ABI check of acl-sys against the real CANN runtime headers.
#
# Downloads the torch-npu 2.14.0 wheel (it ships CANN's acl headers), extracts only
# torch_npu/include/third_party/acl/inc/** into target/acl-headers/, and builds and tests
# acl-sys with feature `bindgen`: build.rs runs bindgen over acl_rt.h & co. and asserts at
# compile time that each hand-written function-pointer type equals the generated one, so
# a mismatch fails the build. Needs libclang (Debian: libclang-dev). Nothing from the wheel
# is committed. Exit codes: 0 checked, 1 mismatch or build failure; when the wheel cannot
# be downloaded it says so and exits 0 unless ACL_ABI_REQUIRED=1.
set -euo pipefail
cd "$(dirname "$0")/.."

dest=target/acl-headers
inc="$dest/torch_npu/include/third_party/acl/inc"
if [ ! -f "$inc/acl/acl_rt.h" ]; then
    mkdir -p "$dest/wheel"
    if ! python3 -m pip download torch-npu==2.14.0 --no-deps --only-binary=:all: -d "$dest/wheel" -q; then
        echo "acl-abi-check: SKIP: could not download the torch-npu 2.14.0 wheel (no registry?)"
        [ "${ACL_ABI_REQUIRED:-0}" = 1 ] && exit 1
        exit 0
    fi
    whl=$(ls "$dest"/wheel/torch_npu-2.14.0-*.whl | head -n 1)
    python3 - "$whl" "$dest" <<'PY'
import sys, zipfile
whl, dest = sys.argv[1], sys.argv[2]
prefix = "torch_npu/include/third_party/acl/inc/"
with zipfile.ZipFile(whl) as z:
    names = [n for n in z.namelist() if n.startswith(prefix)]
    z.extractall(dest, members=names)
print(f"acl-abi-check: extracted {len(names)} entries under {dest}/{prefix}")
PY
    rm -rf "$dest/wheel"
fi

export ACL_INCLUDE_DIR="$PWD/$inc"
log=target/acl-abi-check.log
if ! cargo test -p acl-sys --features bindgen 2>&1 | tee "$log"; then
    echo "acl-abi-check: FAILED (see $log)"
    exit 1
fi
n=$(grep -o 'ABI check generated for [0-9]* runtime functions' "$log" | tail -n 1 || true)
if [ -z "$n" ]; then
    # cargo prints build-script warnings only when the script ran; force it once.
    touch acl-sys/build.rs
    cargo build -p acl-sys --features bindgen 2>&1 | tee "$log" >/dev/null
    n=$(grep -o 'ABI check generated for [0-9]* runtime functions' "$log" | tail -n 1 || true)
fi
[ -n "$n" ] || { echo "acl-abi-check: FAILED: bindgen produced no check"; exit 1; }
echo "acl-abi-check: OK: $n against $ACL_INCLUDE_DIR"
