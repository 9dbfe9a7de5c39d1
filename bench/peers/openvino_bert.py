#!/usr/bin/env python3
"""Peer baseline: the BERT encoder of `npurt bench bert` run by OpenVINO (CPU plugin).

The model is the ONNX graph bench/peers/ort_bert.py builds (same encoder, same seeded
weights, same inputs: see its docstring), in its unfused form (standard ONNX ops, as a
PyTorch export writes them); OpenVINO applies its own fusions when it compiles the model.
It is compiled for the CPU with

    PERFORMANCE_HINT = LATENCY, INFERENCE_NUM_THREADS = T, INFERENCE_PRECISION_HINT = P

with P = f32 unless `--precision bf16` asks otherwise (f32 must be forced: on a CPU with
AVX-512-BF16 or AMX, OpenVINO runs bf16 by default), and timed with one synchronous infer
request per run.

`--precision int8` first quantises the same ONNX file with NNCF (`nncf.quantize`, the
transformer preset, calibrated on `--calibration` batches of random token ids drawn with
`--seed`), saves it as int8.xml beside the ONNX file (reused by later runs on the same
work directory), and compiles that with P = f32: the MatMuls NNCF quantised run in int8
(AMX-INT8 or AVX-512-VNNI), everything else in f32, as `npurt --precision int8` does.
NNCF must be installed (`pip install nncf`).

    python3 bench/peers/openvino_bert.py --model bert-base --seq 128 --runs 5
    python3 bench/peers/openvino_bert.py --model minilm-l6 --seq 32 --threads 1,2 --json out.json
    python3 bench/peers/openvino_bert.py --model bert-base --seq 128 --threads 2 --precision bf16
    python3 bench/peers/openvino_bert.py --model minilm-l6 --seq 128 --threads 2 --precision int8

Each thread count runs in a fresh subprocess, so its peak RSS is its own. `--serve` keeps
one compiled model loaded and answers `run` lines on stdin with one timed inference each
(the protocol of ort_bert.py --serve), for `npurt bench bert --compare-ort`, which
alternates npurt, ONNX Runtime and OpenVINO in one run.

Requires numpy, onnx and openvino (`pip install onnx openvino`).
"""

import argparse
import importlib.util
import json
import os
import platform
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def ort_bert():
    """bench/peers/ort_bert.py as a module: the model builder, the inputs, the protocol."""
    spec = importlib.util.spec_from_file_location("ort_bert", os.path.join(HERE, "ort_bert.py"))
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    return m


OB = ort_bert()


def build(args):
    """Child: writes unfused.onnx (+ external data) into args.workdir."""
    import numpy as np
    import onnx
    path = os.path.join(args.workdir, "unfused.onnx")
    if not os.path.exists(path):
        m = OB.build_unfused(onnx, np, OB.config(args.model), args.workdir, args.seed)
        onnx.save(m, path)
    OB.emit({"unfused_path": path})


def calibration(np, c, batch, seq, count, seed):
    """`count` batches of random token ids (seeded), one segment, no padding."""
    rng = np.random.default_rng(seed)
    low = 101 if c["vocab"] > 202 else 0
    return [{"input_ids": rng.integers(low, c["vocab"], size=(batch, seq), dtype=np.int64),
             "token_type_ids": np.zeros((batch, seq), np.int64),
             "attention_mask": np.ones((batch, seq), np.int64)} for _ in range(count)]


def int8_model(args, core):
    """The unfused model quantised by NNCF (int8.xml in args.workdir, made once)."""
    import numpy as np
    import openvino as ov
    path = os.path.join(args.workdir, f"int8-s{args.seq}-b{args.batch}-c{args.calibration}-seed{args.seed}.xml")
    if os.path.exists(path):
        return core.read_model(path)
    import nncf
    model = core.read_model(os.path.join(args.workdir, "unfused.onnx"))
    names = [p.get_any_name() for p in model.inputs]
    data = calibration(np, OB.config(args.model), args.batch, args.seq, args.calibration, args.seed)
    dataset = nncf.Dataset(data, lambda d: {n: d[n] for n in names})
    q = nncf.quantize(model, dataset, subset_size=len(data), model_type=nncf.ModelType.TRANSFORMER)
    ov.save_model(q, path)
    return q


def compiled(args):
    """The compiled model of args.workdir for args.child_threads threads, its inputs, the
    warm-up output and the compile time in seconds (with int8, the quantisation's too
    when it runs)."""
    import numpy as np
    import openvino as ov
    c = OB.config(args.model)
    core = ov.Core()
    t0 = time.perf_counter()
    if args.precision == "int8":
        model = int8_model(args, core)
    else:
        model = core.read_model(os.path.join(args.workdir, "unfused.onnx"))
    cm = core.compile_model(model, "CPU", {
        "PERFORMANCE_HINT": "LATENCY",
        "INFERENCE_NUM_THREADS": args.child_threads,
        "INFERENCE_PRECISION_HINT": "f32" if args.precision == "int8" else args.precision,
    })
    load_s = time.perf_counter() - t0
    req = cm.create_infer_request()
    inputs = OB.bench_inputs(np, c, args.batch, args.seq)
    feeds = {p.get_any_name(): inputs[p.get_any_name()] for p in cm.inputs}
    out = req.infer(feeds)[cm.output(0)].copy()  # warm-up
    return cm, req, feeds, out, load_s


def child(args):
    """Child: times one thread count."""
    import numpy as np
    cm, req, feeds, out, load_s = compiled(args)
    c = OB.config(args.model)
    assert out.shape == (args.batch, args.seq, c["hidden"]), out.shape
    finite = bool(np.isfinite(out).all())
    times = []
    for _ in range(args.runs):
        t = time.perf_counter()
        req.infer(feeds)
        times.append((time.perf_counter() - t) * 1e3)
    ru, hwm = OB.peak_mem()
    s = sorted(times)
    OB.emit({"threads": args.child_threads, "precision": args.precision, "median_ms": s[len(s) // 2], "min_ms": s[0], "max_ms": s[-1],
             "times_ms": times, "rss_peak_bytes": ru, "vmhwm_bytes": hwm, "compile_s": load_s, "finite": finite})


def serve(args):
    """The protocol of ort_bert.py --serve: MARK {"ready"} after the warm-up; `run` ->
    MARK {"ms"}; `quit` or end of input -> MARK {"rss_peak_bytes", "vmhwm_bytes"}."""
    import numpy as np
    import openvino as ov
    cm, req, feeds, out, load_s = compiled(args)
    OB.emit({"ready": True, "variant": "openvino", "threads": args.child_threads, "precision": args.precision,
             "session_load_s": load_s,
             "finite": bool(np.isfinite(out).all()), "openvino": ov.__version__})
    for line in sys.stdin:
        cmd = line.strip()
        if cmd == "run":
            t = time.perf_counter()
            req.infer(feeds)
            OB.emit({"ms": (time.perf_counter() - t) * 1e3})
        elif cmd == "quit":
            break
    ru, hwm = OB.peak_mem()
    OB.emit({"rss_peak_bytes": ru, "vmhwm_bytes": hwm})


def run_child(argv, what):
    return OB.run_child(argv, what, script=__file__)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="bert-large", help="bert-large | bert-base | minilm-l6 (default bert-large)")
    ap.add_argument("--seq", type=int, default=512, help="sequence length (default 512)")
    ap.add_argument("--batch", type=int, default=1, help="batch size (default 1)")
    ap.add_argument("--runs", type=int, default=5, help="timed runs after 1 warm-up (default 5)")
    ap.add_argument("--threads", default="1,2", help="INFERENCE_NUM_THREADS values (default 1,2)")
    ap.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    ap.add_argument("--seed", type=int, default=42, help="weight seed (default 42)")
    ap.add_argument("--workdir", help="directory for the model (default: a new temp dir, removed at the end)")
    ap.add_argument("--serve", action="store_true",
                    help="keep the model of --workdir compiled for --child-threads and answer `run` lines on stdin")
    ap.add_argument("--build", action="store_true", help="only write unfused.onnx into --workdir")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--child-threads", type=int, default=1, help="with --serve: INFERENCE_NUM_THREADS")
    ap.add_argument("--precision", choices=("f32", "bf16", "int8"), default="f32",
                    help="INFERENCE_PRECISION_HINT (default f32; bf16 is OpenVINO's own default on CPUs with "
                         "AMX or AVX-512-BF16); int8: the model quantised by NNCF, the rest in f32")
    ap.add_argument("--calibration", type=int, default=8,
                    help="with --precision int8: calibration batches of random token ids (default 8)")
    args = ap.parse_args()

    needed = ("numpy", "onnx", "openvino") + (("nncf",) if args.precision == "int8" else ())
    missing = [m for m in needed if importlib.util.find_spec(m) is None]
    if missing:
        print(f"openvino_bert.py: {', '.join(missing)} not installed: pip install {' '.join(missing)}", file=sys.stderr)
        sys.exit(2)
    if args.calibration < 1:
        ap.error("need --calibration >= 1")
    c = OB.config(args.model)
    if not 1 <= args.seq <= c["max_pos"] or args.batch < 1 or args.runs < 1:
        ap.error(f"need 1 <= --seq <= {c['max_pos']}, --batch >= 1, --runs >= 1")
    if (args.build or args.serve) and not args.workdir:
        ap.error("--build and --serve need --workdir")
    if args.build:
        os.makedirs(args.workdir, exist_ok=True)
        return build(args)
    if args.serve:
        return serve(args)
    if args.child:
        return child(args)

    threads = OB.thread_counts(ap, args.threads)
    workdir = args.workdir or tempfile.mkdtemp(prefix="openvino_bert_")
    os.makedirs(workdir, exist_ok=True)
    common = ["--model", args.model, "--seq", str(args.seq), "--batch", str(args.batch), "--runs", str(args.runs),
              "--seed", str(args.seed), "--workdir", workdir, "--precision", args.precision,
              "--calibration", str(args.calibration)]
    import openvino as ov
    print(f"BERT {args.model} (hidden {c['hidden']}, {c['layers']} layers), batch {args.batch}, seq {args.seq}; "
          f"OpenVINO {ov.__version__} CPU, LATENCY hint, {args.precision}; {args.runs} runs after 1 warm-up; "
          f"python {platform.python_version()}, cpus={os.cpu_count()}", flush=True)
    doc = {"tool": "openvino CPU", "model": args.model, "config": c, "batch": args.batch, "seq": args.seq,
           "runs": args.runs, "threads": threads, "precision": args.precision, "seed": args.seed, "openvino": ov.__version__}
    try:
        run_child(common + ["--build"], "building the model")
        print(f"{'threads':>7} {'median ms':>10} {'min..max ms':>18} {'HWM MiB':>8} {'compile s':>9}", flush=True)
        rows = []
        for t in threads:
            r = run_child(common + ["--child", "--child-threads", str(t)], f"x{t}")
            rows.append(r)
            hwm = r["vmhwm_bytes"] or r["rss_peak_bytes"]
            print(f"{t:>7} {r['median_ms']:>10.1f} {r['min_ms']:>8.1f}..{r['max_ms']:<8.1f} {hwm / 2**20:>8.0f} "
                  f"{r['compile_s']:>9.1f}" + ("" if r["finite"] else "  (non-finite output!)"), flush=True)
        best = min(rows, key=lambda r: r["median_ms"])
        print(f"best: x{best['threads']} threads, median {best['median_ms']:.1f} ms")
        doc["results"], doc["best"] = rows, best
        if args.json:
            with open(args.json, "w", encoding="utf-8") as f:
                json.dump(doc, f, indent=2)
                f.write("\n")
            print(f"wrote {args.json}")
    finally:
        if not args.workdir:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
