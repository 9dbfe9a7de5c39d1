#!/usr/bin/env bash
# gpu-check.sh — run npurt's CUDA checks on a GPU host, from prebuilt binaries.
#
# The GPU host (CUDA driver + toolkit libraries + PyTorch, no network, at most 64 MiB of
# files received) builds nothing: binaries are built on a CPU machine and copied over.
#
# 1. On the CPU machine (repository root), build and collect the binaries:
#
#        scripts/gpu-check.sh --bundle /tmp/npurt-gpu        # or any folder
#
#    which runs
#        cargo test  --release -p backend-cuda --test gpu --no-run
#        cargo build --release -p backend-cuda --example gemm_bench
#    copies the test binary (as backend_cuda_gpu_tests), gemm_bench and this script into
#    the folder, strips their debug info, and checks the total is at most 64 MiB.
#
# 2. Copy the folder to the GPU host (e.g. `scp -r /tmp/npurt-gpu host:`), then there:
#
#        OUT=/tmp/npurt-gpu-logs ./npurt-gpu/gpu-check.sh ./npurt-gpu
#
#    (the folder defaults to the script's own folder). It runs the CUDA conformance tests,
#    the GEMM benchmark (npurt vs cuBLAS called directly vs torch.matmul at 512x1024x1024,
#    512x1024x4096, 512x4096x1024 and 1024^3, in f32 (no tf32), f16 and bf16), prints a
#    summary table, writes full logs under $OUT when set (a temporary folder otherwise),
#    and finishes within 6 minutes. It says so clearly when a copied binary cannot start
#    (missing loader, glibc too old, wrong architecture, missing libraries).
#
# Exit status: 0 when every step passed, 1 otherwise.
set -euo pipefail

MAX_BUNDLE_BYTES=$((64 * 1024 * 1024))

bundle() {
    local dest="$1"
    local root
    root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
    mkdir -p "$dest"
    cd "$root"
    echo "building the CUDA test binary and the GEMM benchmark (release) ..."
    local test_bin
    test_bin="$(cargo test --release -p backend-cuda --test gpu --no-run --message-format=json 2>/dev/null |
        sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | grep '/gpu-' | tail -n1)"
    if [[ -z "$test_bin" || ! -x "$test_bin" ]]; then
        echo "error: could not find the built gpu test binary" >&2
        exit 1
    fi
    cargo build --release -p backend-cuda --example gemm_bench
    local target="${CARGO_TARGET_DIR:-$root/target}"
    cp "$test_bin" "$dest/backend_cuda_gpu_tests"
    cp "$target/release/examples/gemm_bench" "$dest/gemm_bench"
    cp "${BASH_SOURCE[0]}" "$dest/gpu-check.sh"
    chmod +x "$dest"/*
    if command -v strip >/dev/null; then
        strip --strip-debug "$dest/backend_cuda_gpu_tests" "$dest/gemm_bench" || true
    fi
    local total
    total=$(du -cb "$dest"/* | tail -n1 | cut -f1)
    ls -l "$dest"
    if ((total > MAX_BUNDLE_BYTES)); then
        echo "error: the bundle is $total bytes, above the 64 MiB limit" >&2
        exit 1
    fi
    echo "bundle ready: $dest ($total bytes); copy it to the GPU host and run gpu-check.sh there"
}

if [[ "${1:-}" == "--bundle" ]]; then
    bundle "${2:?usage: gpu-check.sh --bundle DIR}"
    exit 0
fi

START=$(date +%s)
BIN="${1:-$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)}"
BIN="$(cd "$BIN" && pwd)"
LOGS="${OUT:-$(mktemp -d /tmp/npurt-gpu-check.XXXXXX)}"
mkdir -p "$LOGS"
SUMMARY="$LOGS/summary.txt"
: >"$SUMMARY"
STATUS=0

say() { echo "$*" | tee -a "$SUMMARY"; }
elapsed() { echo $(($(date +%s) - START)); }

say "npurt gpu-check: binaries in $BIN, logs in $LOGS ($(date -u +%Y-%m-%dT%H:%M:%SZ))"

# ---- environment: GPU, driver, libraries -------------------------------------------------
if command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >"$LOGS/nvidia-smi.txt" 2>&1 || true
    say "GPU: $(head -n1 "$LOGS/nvidia-smi.txt")"
else
    say "GPU: nvidia-smi not found"
fi

# NVRTC and cuBLAS may live in the toolkit or in PyTorch's wheels; make them findable.
# The binaries use CUDA 12.4 bindings and look for libX.so, libX.so.12/.11/.1; a CUDA 13
# only host gets unversioned links to its .so.13 libraries.
LIBDIRS=()
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib /usr/lib/x86_64-linux-gnu; do
    [[ -d "$d" ]] && LIBDIRS+=("$d")
done
if command -v python3 >/dev/null; then
    while IFS= read -r d; do
        [[ -n "$d" && -d "$d" ]] && LIBDIRS+=("$d")
    done < <(timeout 30 python3 - 2>/dev/null <<'PY' || true
import glob, os
try:
    import torch
    base = os.path.dirname(torch.__file__)
    print(os.path.join(base, "lib"))
    for d in glob.glob(os.path.join(os.path.dirname(base), "nvidia", "*", "lib")):
        print(d)
except Exception:
    pass
PY
)
fi
SHIM="$LOGS/libshim"
mkdir -p "$SHIM"
for stem in nvrtc cublas cublasLt; do
    found=""
    for d in "${LIBDIRS[@]}"; do
        for f in "$d/lib$stem.so" "$d/lib$stem.so.12" "$d/lib$stem.so.13" "$d/lib$stem.so.11"; do
            if [[ -e "$f" ]]; then found="$f"; break 2; fi
        done
    done
    if [[ -n "$found" ]]; then
        ln -sf "$found" "$SHIM/lib$stem.so"
        say "lib$stem: $found"
    else
        say "lib$stem: not found (searched ${LIBDIRS[*]:-nothing})"
    fi
done
JOINED="$(
    IFS=:
    echo "${LIBDIRS[*]:-}"
)"
export LD_LIBRARY_PATH="$SHIM${JOINED:+:$JOINED}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH" >"$LOGS/env.txt"

# ---- can the copied binaries start at all? ----------------------------------------------
can_start() {
    local bin="$1" log="$LOGS/start-$(basename "$1").txt"
    if [[ ! -e "$bin" ]]; then
        say "BINARY MISSING: $bin (was the bundle copied completely?)"
        return 1
    fi
    [[ -x "$bin" ]] || chmod +x "$bin" 2>/dev/null || true
    local rc=0
    timeout 30 "$bin" "${@:2}" >"$log" 2>&1 || rc=$?
    if ((rc == 126 || rc == 127)) || grep -qE "error while loading shared libraries|GLIBC_[0-9.]+' not found|cannot execute binary file|Exec format error|No such file or directory" "$log"; then
        say "BINARY CANNOT START: $bin (exit $rc): $(head -n3 "$log" | tr '\n' ' ')"
        if command -v ldd >/dev/null; then ldd "$bin" >>"$log" 2>&1 || true; fi
        return 1
    fi
    return 0
}

# ---- 1. CUDA conformance ----------------------------------------------------------------
CONF_LOG="$LOGS/conformance.log"
CONF_RESULT="not run"
if can_start "$BIN/backend_cuda_gpu_tests" --list; then
    rc=0
    timeout 200 "$BIN/backend_cuda_gpu_tests" --test-threads=1 --nocapture >"$CONF_LOG" 2>&1 || rc=$?
    # With --nocapture a test's lines can follow "test name ... " on the same line.
    mism=$(grep -c 'MISMATCH cuda' "$CONF_LOG" || true)
    skips=$(grep -cE 'SKIP cuda_[a-z0-9_]+: ' "$CONF_LOG" || true)
    checks=$(awk '/^cuda \[.*\]: [0-9]+ checks/ { for (i = 1; i <= NF; i++) if ($(i + 1) ~ /^checks/) s += $i } END { print s + 0 }' "$CONF_LOG")
    if ((rc == 124)); then
        CONF_RESULT="TIMED OUT after 200 s"
        STATUS=1
    elif ((rc != 0)); then
        CONF_RESULT="FAILED (exit $rc, $mism mismatches)"
        STATUS=1
    elif ((skips > 0)); then
        CONF_RESULT="SKIPPED ($skips tests): $(grep -m1 -oE 'SKIP cuda_[a-z0-9_]+: .*' "$CONF_LOG")"
        STATUS=1
    else
        CONF_RESULT="passed: $checks checks, $mism mismatches"
    fi
    { grep -E '(^test |MISMATCH|^cuda \[|test result)' "$CONF_LOG" || true; } | head -n 60
else
    CONF_RESULT="binary cannot start"
    STATUS=1
fi
say "conformance: $CONF_RESULT ($(elapsed) s)"

# ---- 2. GEMM: npurt and cuBLAS direct --------------------------------------------------------
GEMM_LOG="$LOGS/gemm.log"
: >"$GEMM_LOG"
if can_start "$BIN/gemm_bench" --help; then
    rc=0
    timeout 75 "$BIN/gemm_bench" --iters 50 >"$GEMM_LOG" 2>&1 || rc=$?
    if ((rc != 0)); then
        say "gemm_bench: exit $rc: $(grep -m1 -E '^(FAIL|SKIP)' "$GEMM_LOG" || tail -n1 "$GEMM_LOG")"
        STATUS=1
    fi
    { grep '^DEVICE' "$GEMM_LOG" || true; } | tee -a "$SUMMARY"
else
    STATUS=1
fi
say "gemm_bench done ($(elapsed) s)"

# ---- 3. GEMM: torch.matmul on the same shapes ----------------------------------------------
TORCH_LOG="$LOGS/torch.log"
rc=0
timeout 60 python3 - >"$TORCH_LOG" 2>&1 <<'PY' || rc=$?
import torch
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
assert torch.cuda.is_available(), "torch sees no GPU"
print("TORCH version=%s cuda=%s device=%r" % (torch.__version__, torch.version.cuda, torch.cuda.get_device_name(0)))
shapes = [(512, 1024, 1024), (512, 1024, 4096), (512, 4096, 1024), (1024, 1024, 1024)]
for name, dt in [("f32", torch.float32), ("f16", torch.float16), ("bf16", torch.bfloat16)]:
    for m, k, n in shapes:
        a = torch.randn(m, k, device="cuda", dtype=dt)
        b = torch.randn(k, n, device="cuda", dtype=dt)
        for _ in range(3):
            torch.matmul(a, b)
        torch.cuda.synchronize()
        iters = 50
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        for _ in range(iters):
            torch.matmul(a, b)
        e.record()
        torch.cuda.synchronize()
        ms = s.elapsed_time(e) / iters
        print("GEMM impl=torch dtype=%s m=%d k=%d n=%d ms=%.4f tflops=%.2f kernel=torch.matmul"
              % (name, m, k, n, ms, 2.0 * m * k * n / ms / 1e9))
PY
if ((rc != 0)); then
    say "torch: exit $rc: $(tail -n1 "$TORCH_LOG")"
    STATUS=1
else
    { grep '^TORCH' "$TORCH_LOG" || true; } | tee -a "$SUMMARY"
fi
say "torch done ($(elapsed) s)"

# ---- summary table ----------------------------------------------------------------------------
{
    echo
    echo "GEMM TFLOP/s (event-timed, mean of 50 calls; f32 without tf32)"
    { cat "$GEMM_LOG" "$TORCH_LOG" 2>/dev/null || true; } | { grep '^GEMM' || true; } | awk '
    {
        for (i = 2; i <= NF; i++) { split($i, kv, "="); f[kv[1]] = kv[2] }
        key = f["dtype"] " " f["m"] "x" f["k"] "x" f["n"]
        if (!(key in seen)) { seen[key] = 1; order[++nk] = key }
        t[key, f["impl"]] = f["tflops"]
        if (f["impl"] == "npurt") kern[key] = f["kernel"]
    }
    END {
        printf "%-22s %9s %9s %9s %12s  %s\n", "case", "npurt", "cuBLAS", "torch", "npurt/cuBLAS", "npurt kernel"
        for (i = 1; i <= nk; i++) {
            k = order[i]
            np = t[k, "npurt"]; cb = t[k, "cublas"]; tc = t[k, "torch"]
            r = (np != "" && cb != "" && cb > 0) ? sprintf("%.2f", np / cb) : "-"
            printf "%-22s %9s %9s %9s %12s  %s\n", k, (np == "" ? "-" : np), (cb == "" ? "-" : cb), (tc == "" ? "-" : tc), r, kern[k]
        }
    }'
    echo
    echo "conformance: $CONF_RESULT"
    echo "total time: $(elapsed) s; logs: $LOGS"
    if ((STATUS == 0)); then echo "RESULT: PASS"; else echo "RESULT: FAIL"; fi
} | tee -a "$SUMMARY"
exit "$STATUS"
