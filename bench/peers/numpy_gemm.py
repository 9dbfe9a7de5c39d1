#!/usr/bin/env python3
"""Peer baseline: single-precision GEMM through NumPy's BLAS (normally OpenBLAS).

Measures ``np.matmul`` on float32 operands at the shapes npurt's CPU GEMM is compared on
(m x k x n, i.e. A is m x k, B is k x n):

    512x1024x1024, 512x1024x4096, 512x4096x1024,
    batched 16 x (512x64 @ 64x512)   -- (16,512,64) @ (16,64,512),
    128x768x768, 128x768x3072, 128x3072x768 (BERT-base, seq 128),
    1024x1024x1024

Each shape is warmed up, then timed ``--repeat`` times (default 9); the median is reported
as milliseconds and GFLOP/s (2*m*n*k*batch flops). Before the table, the script prints what
threadpoolctl reports for the BLAS library NumPy uses (internal_api, version, architecture
i.e. the OpenBLAS kernel core type, num_threads), so the figures can be attributed.

Run it with OPENBLAS_CORETYPE unset for that command only, so OpenBLAS picks its kernel for
the real CPU (a value exported elsewhere in the shell would force a different kernel), e.g.

    env -u OPENBLAS_CORETYPE python3 bench/peers/numpy_gemm.py
    env -u OPENBLAS_CORETYPE python3 bench/peers/numpy_gemm.py --threads 2 --json out.json

Requires numpy and threadpoolctl (``pip install numpy threadpoolctl``).
"""

import argparse
import json
import os
import platform
import statistics
import sys
import time

try:
    import numpy as np
except ImportError:
    sys.exit("numpy_gemm.py: numpy is not installed (pip install numpy threadpoolctl)")
try:
    from threadpoolctl import threadpool_info, threadpool_limits
except ImportError:
    sys.exit("numpy_gemm.py: threadpoolctl is not installed (pip install threadpoolctl)")

# (label, batch, m, k, n); batch 0 means a plain 2-D matmul.
SHAPES = [
    ("512x1024x1024", 0, 512, 1024, 1024),
    ("512x1024x4096", 0, 512, 1024, 4096),
    ("512x4096x1024", 0, 512, 4096, 1024),
    ("16x512x64x512", 16, 512, 64, 512),
    ("128x768x768", 0, 128, 768, 768),
    ("128x768x3072", 0, 128, 768, 3072),
    ("128x3072x768", 0, 128, 3072, 768),
    ("1024x1024x1024", 0, 1024, 1024, 1024),
]


def blas_info():
    """The BLAS entries of threadpoolctl's report (dicts with the fields we print)."""
    keys = ("internal_api", "version", "architecture", "num_threads", "filepath")
    return [
        {key: info.get(key) for key in keys}
        for info in threadpool_info()
        if info.get("user_api") == "blas"
    ]


def bench_shape(batch, m, k, n, repeat, warmup):
    rng = np.random.default_rng(0)
    if batch:
        a = rng.standard_normal((batch, m, k), dtype=np.float32)
        b = rng.standard_normal((batch, k, n), dtype=np.float32)
        out = np.empty((batch, m, n), dtype=np.float32)
    else:
        a = rng.standard_normal((m, k), dtype=np.float32)
        b = rng.standard_normal((k, n), dtype=np.float32)
        out = np.empty((m, n), dtype=np.float32)
    for _ in range(warmup):
        np.matmul(a, b, out=out)
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        np.matmul(a, b, out=out)
        times.append(time.perf_counter() - t0)
    med = statistics.median(times)
    flops = 2.0 * m * n * k * max(batch, 1)
    return {"median_ms": med * 1e3, "min_ms": min(times) * 1e3, "gflops": flops / med * 1e-9}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=9, help="timed runs per shape (median)")
    ap.add_argument("--warmup", type=int, default=3, help="untimed runs per shape first")
    ap.add_argument("--threads", type=int, default=None,
                    help="limit BLAS threads (threadpoolctl); default: library default")
    ap.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    args = ap.parse_args()
    if args.repeat < 1:
        ap.error("--repeat must be >= 1")

    if os.environ.get("OPENBLAS_CORETYPE"):
        print(f"warning: OPENBLAS_CORETYPE={os.environ['OPENBLAS_CORETYPE']} is set; "
              "OpenBLAS kernel selection is forced. Run with `env -u OPENBLAS_CORETYPE`.",
              file=sys.stderr)

    limits = threadpool_limits(limits=args.threads, user_api="blas") if args.threads else None
    try:
        libs = blas_info()
        print(f"numpy {np.__version__}, python {platform.python_version()}, "
              f"{platform.machine()}, cpus={os.cpu_count()}")
        if not libs:
            print("threadpoolctl: no BLAS library found in this process")
        for lib in libs:
            print("BLAS: internal_api={internal_api} version={version} "
                  "architecture={architecture} num_threads={num_threads}".format(**lib))
            print(f"      filepath={lib['filepath']}")
        print(f"repeat={args.repeat} warmup={args.warmup} (median)")
        print(f"{'shape (m x k x n)':>20} {'median ms':>10} {'GFLOP/s':>9}")
        results = []
        for label, batch, m, k, n in SHAPES:
            r = bench_shape(batch, m, k, n, args.repeat, args.warmup)
            r.update({"shape": label, "batch": batch, "m": m, "k": k, "n": n})
            results.append(r)
            print(f"{label:>20} {r['median_ms']:>10.3f} {r['gflops']:>9.1f}", flush=True)
    finally:
        if limits is not None:
            limits.restore_original_limits()

    if args.json:
        doc = {
            "tool": "numpy.matmul float32",
            "numpy": np.__version__,
            "blas": libs,
            "repeat": args.repeat,
            "warmup": args.warmup,
            "openblas_coretype_env": os.environ.get("OPENBLAS_CORETYPE"),
            "results": results,
        }
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(doc, f, indent=2)
            f.write("\n")
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
