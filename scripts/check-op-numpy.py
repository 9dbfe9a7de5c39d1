#!/usr/bin/env python3
"""Cross-checks `npurt op` against NumPy on MatMul, Add with broadcasting, Softmax and
LayerNorm (f32, f16 and i64 inputs where the op accepts them).

Usage: cargo build --release && python3 scripts/check-op-numpy.py [--bin target/release/npurt]
Needs numpy (pip install numpy). Exits non-zero on any mismatch.
"""
import argparse
import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
except ImportError:
    sys.exit("numpy is missing: pip install numpy")


def run(binary, op, inputs, attrs, impl, tmp):
    paths = []
    for i, a in enumerate(inputs):
        p = os.path.join(tmp, f"in{i}.npy")
        np.save(p, a)
        paths.append(p)
    out = os.path.join(tmp, "out.npy")
    cmd = [binary, "op", op]
    for p in paths:
        cmd += ["--input", p]
    cmd += ["--output", out]
    for k, v in attrs.items():
        cmd += ["--attr", f"{k}={v}"]
    if impl:
        cmd += ["--impl", impl]
    subprocess.run(cmd, check=True, capture_output=True)
    return np.load(out)


def softmax(x, axis):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def layernorm(x, g, b, eps):
    m = x.mean(-1, keepdims=True)
    v = ((x - m) ** 2).mean(-1, keepdims=True)
    return (x - m) / np.sqrt(v + eps) * g + b


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="target/release/npurt")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    failures = 0
    checks = 0
    with tempfile.TemporaryDirectory() as tmp:
        for dtype in (np.float32, np.float16):
            tol = 2e-5 if dtype == np.float32 else 2e-2
            cases = [
                ("MatMul", [rng.standard_normal((33, 65)), rng.standard_normal((65, 17))], {}, lambda a, b: a @ b),
                ("MatMul", [rng.standard_normal((2, 5, 8)), rng.standard_normal((8, 3))], {}, lambda a, b: a @ b),
                ("MatMul", [rng.standard_normal((7, 9)), rng.standard_normal((4, 9))], {"trans_b": "true"}, lambda a, b: a @ b.T),
                ("Add", [rng.standard_normal((2, 1, 5)), rng.standard_normal((4, 1))], {}, lambda a, b: a + b),
                ("Add", [rng.standard_normal((3, 17)), rng.standard_normal((17,))], {}, lambda a, b: a + b),
                ("Softmax", [rng.standard_normal((4, 33))], {}, lambda x: softmax(x, -1)),
                ("Softmax", [rng.standard_normal((3, 5, 2))], {"axis": "1"}, lambda x: softmax(x, 1)),
                ("LayerNorm", [rng.standard_normal((6, 64)), rng.standard_normal(64), rng.standard_normal(64)], {"eps": "1e-5"},
                 lambda x, g, b: layernorm(x, g, b, 1e-5)),
            ]
            for op, ins, attrs, ref in cases:
                ins = [a.astype(dtype) for a in ins]
                want = ref(*[a.astype(np.float64) for a in ins])
                for impl in ("reference", "generic", "fast"):
                    got = run(args.bin, op, ins, attrs, impl, tmp).astype(np.float64)
                    checks += 1
                    ok = got.shape == want.shape and np.allclose(got, want, rtol=tol, atol=tol)
                    if not ok:
                        failures += 1
                        err = np.abs(got - want).max() if got.shape == want.shape else "shape"
                        print(f"MISMATCH {op} {np.dtype(dtype).name} {impl} {attrs}: max err {err}")
        # i64 broadcasting add
        a = rng.integers(-100, 100, (3, 1, 4)).astype(np.int64)
        b = rng.integers(-100, 100, (5, 1)).astype(np.int64)
        for impl in ("reference", "generic", "fast"):
            got = run(args.bin, "Add", [a, b], {}, impl, tmp)
            checks += 1
            if got.dtype != np.int64 or not np.array_equal(got, a + b):
                failures += 1
                print(f"MISMATCH Add int64 {impl}")
    print(f"{checks} checks against NumPy {np.__version__}, {failures} mismatches")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
