#!/usr/bin/env bash
# ABI checks of acl-sys's declarations through bindgen (feature `bindgen`, needs libclang).
#
# 1. Runtime functions and structs, against CANN's real acl headers: downloads the
#    torch-npu 2.14.0 wheel (it ships them), extracts only
#    torch_npu/include/third_party/acl/inc/** into target/acl-headers/, and builds and tests
#    acl-sys with ACL_INCLUDE_DIR pointing there. build.rs asserts at compile time that each
#    hand-written function-pointer type equals the generated one and that each #[repr(C)]
#    struct has the header's layout, so a mismatch fails the build. Nothing from the wheel
#    is committed. When the wheel cannot be downloaded this part says so and is skipped.
# 2. aclnn functions: CANN's operator headers cannot be fetched here, so the aclnn pass of
#    build.rs (bindgen in C++ mode over ACLNN_INCLUDE_DIRS) runs on the test header set
#    acl-sys/testdata/aclnn-headers, which declares the real headers' prototypes and is
#    laid out like hicann/opbase and the ops repositories:
#    - positive: acl-sys builds and checks every aclnn prototype of the set;
#    - negative control: a copy of the set in which aclnnMatmulGetWorkspaceSize's
#      `int8_t cubeMathType` is `int32_t` and aclnn_silu.h is missing must fail to build
#      with exactly one error, naming aclnnMatmulGetWorkspaceSize, and must warn that
#      aclnnSiluGetWorkspaceSize and aclnnSilu were not found.
#    Both reuse the build of part 1 (same target directory), so each is one acl-sys build.
#
# Without libclang everything is skipped with a message. Exit codes: 0 checked (or
# skipped), 1 mismatch or failure; with ACL_ABI_REQUIRED=1 a skip is a failure too.
set -euo pipefail
cd "$(dirname "$0")/.."

skip() {
    echo "acl-abi-check: SKIP: $*"
    [ "${ACL_ABI_REQUIRED:-0}" = 1 ] && exit 1
    return 0
}

# The places clang-sys (bindgen's loader) looks in; libclang-cpp is not libclang.
have_libclang() {
    local d f
    if [ -n "${LIBCLANG_PATH:-}" ] && [ -f "$LIBCLANG_PATH" ]; then return 0; fi
    for d in ${LIBCLANG_PATH:-} $(llvm-config --libdir 2>/dev/null || true) /usr/lib /usr/lib64 \
        /usr/local/lib /usr/lib/*-linux-gnu /usr/lib/llvm-*/lib /usr/lib64/llvm*/lib; do
        for f in "$d"/libclang.so* "$d"/libclang-[0-9]*.so*; do
            [ -e "$f" ] && return 0
        done
    done
    return 1
}

if ! have_libclang; then
    skip "libclang not found (install libclang-dev, or set LIBCLANG_PATH); acl-sys's ABI checks need it"
    exit 0
fi

# ---- 1. runtime, against the torch-npu wheel's acl headers ----
dest=target/acl-headers
inc="$dest/torch_npu/include/third_party/acl/inc"
runtime=1
if [ ! -f "$inc/acl/acl_rt.h" ]; then
    mkdir -p "$dest/wheel"
    if python3 -m pip download torch-npu==2.14.0 --no-deps --only-binary=:all: -d "$dest/wheel" -q; then
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
    else
        skip "could not download the torch-npu 2.14.0 wheel (no registry?): runtime check not run"
        runtime=0
    fi
fi

mkdir -p target
log=target/acl-abi-check.log
if [ "$runtime" = 1 ]; then
    export ACL_INCLUDE_DIR="$PWD/$inc"
    if ! env -u ACLNN_INCLUDE_DIRS cargo test -p acl-sys --features bindgen 2>&1 | tee "$log"; then
        echo "acl-abi-check: FAILED (see $log)"
        exit 1
    fi
    n=$(grep -o 'ABI check generated for [0-9]* runtime functions' "$log" | tail -n 1 || true)
    if [ -z "$n" ]; then
        # cargo prints build-script warnings only when the script ran; force it once.
        touch acl-sys/build.rs
        env -u ACLNN_INCLUDE_DIRS cargo build -p acl-sys --features bindgen 2>&1 | tee "$log" >/dev/null
        n=$(grep -o 'ABI check generated for [0-9]* runtime functions' "$log" | tail -n 1 || true)
    fi
    [ -n "$n" ] || { echo "acl-abi-check: FAILED: bindgen produced no runtime check"; exit 1; }
    echo "acl-abi-check: OK: $n against $ACL_INCLUDE_DIR"
fi

# ---- 2. aclnn, on the test header set: positive, then the negative control ----
start=$SECONDS
set_dir="$PWD/acl-sys/testdata/aclnn-headers"
# Only the test set: no toolkit or wheel headers may leak into these two builds.
aclnn_build() { # $1 = header set root, $2 = log
    env -u ASCEND_TOOLKIT_HOME -u ASCEND_HOME_PATH CARGO_TERM_COLOR=never \
        ACL_INCLUDE_DIR="$1/runtime" ACLNN_INCLUDE_DIRS="$1/opbase:$1/ops-math:$1/ops-nn:$1/ops-transformer" \
        cargo build -p acl-sys --features bindgen >"$2" 2>&1
}
count_re='aclnn ABI check generated for [0-9]* aclnn functions ([0-9]* not found)'

plog=target/acl-abi-check-aclnn.log
if ! aclnn_build "$set_dir" "$plog"; then
    cat "$plog"
    echo "acl-abi-check: FAILED: acl-sys does not build against the aclnn test header set (see $plog)"
    exit 1
fi
n=$(grep -o "$count_re" "$plog" | tail -n 1 || true)
if [ -z "$n" ]; then
    touch acl-sys/build.rs
    aclnn_build "$set_dir" "$plog" || { cat "$plog"; exit 1; }
    n=$(grep -o "$count_re" "$plog" | tail -n 1 || true)
fi
[ -n "$n" ] || { cat "$plog"; echo "acl-abi-check: FAILED: no aclnn check was generated"; exit 1; }
grep 'is declared by acl-sys but not in the aclnn headers' "$plog" | sed 's/^warning: [^:]*: /acl-abi-check: note: /' || true
echo "acl-abi-check: OK: $n against acl-sys/testdata/aclnn-headers"

neg="$PWD/target/aclnn-abi-negative"
nlog=target/acl-abi-check-aclnn-negative.log
rm -rf "$neg"
cp -r "$set_dir" "$neg"
sed -i 's/int8_t cubeMathType/int32_t cubeMathType/' "$neg/ops-nn/aclnn_matmul.h"
changed=$(diff "$set_dir/ops-nn/aclnn_matmul.h" "$neg/ops-nn/aclnn_matmul.h" | grep -c '^>' || true)
[ "$changed" = 1 ] || { echo "acl-abi-check: FAILED: the negative control changed $changed lines of aclnn_matmul.h, not 1"; exit 1; }
rm "$neg/ops-nn/aclnn_silu.h"
if aclnn_build "$neg" "$nlog"; then
    echo "acl-abi-check: FAILED: the negative control (cubeMathType as int32_t) built; the aclnn check does not work"
    exit 1
fi
fail=0
grep -q "$count_re" "$nlog" || { echo "acl-abi-check: negative control: bindgen did not run"; fail=1; }
errors=$(grep -c '^error\[E' "$nlog" || true)
[ "$errors" = 1 ] || { echo "acl-abi-check: negative control: $errors compile errors, expected exactly 1"; fail=1; }
grep -q '^error\[E.*aclnnMatmulGetWorkspaceSize' "$nlog" \
    || { echo "acl-abi-check: negative control: the error does not name aclnnMatmulGetWorkspaceSize"; fail=1; }
for s in aclnnSiluGetWorkspaceSize aclnnSilu; do
    grep -q "acl-sys: $s is declared by acl-sys but not in the aclnn headers" "$nlog" \
        || { echo "acl-abi-check: negative control: no warning that $s was not found"; fail=1; }
done
if [ "$fail" = 1 ]; then
    cat "$nlog"
    echo "acl-abi-check: FAILED: the negative control did not fail as it must (see $nlog)"
    exit 1
fi
echo "acl-abi-check: OK: the negative control failed as it must: one error, naming aclnnMatmulGetWorkspaceSize; aclnnSilu* warned as not found"
echo "acl-abi-check: aclnn positive and negative builds took $((SECONDS - start)) s"
