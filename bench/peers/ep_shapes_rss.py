"""Peak and current RSS of one ONNX Runtime session with npurt's EP through several input
shapes: load, then one run per `--seqs` entry, `/proc/self/status` printed after each step.

    python3 bench/peers/ort_bert.py --model bert-base --seq 128 --build --workdir W
    NPURT_ORT_EP_LIB=$PWD/target/release/libnpurt_ort_ep.so \\
        python3 bench/peers/ep_shapes_rss.py W/unfused.onnx --seqs 128,64

A model with symbolic batch and sequence dims compiles once per new shape (see
docs/ONNXRUNTIME.md, Memory).
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from npurt_ep import ep_session  # noqa: E402


def status():
    keep = ("VmHWM", "VmRSS", "RssAnon", "RssFile")
    with open("/proc/self/status") as f:
        rows = [line.split() for line in f]
    return {r[0].rstrip(":"): int(r[1]) // 1024 for r in rows if r and r[0].rstrip(":") in keep}


def feeds(sess, seq):
    import numpy as np
    out = {}
    for i in sess.get_inputs():
        fill = 1 if "mask" in i.name else (5 if i.name == "input_ids" else 0)
        out[i.name] = np.full((1, seq), fill, dtype=np.int64)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", help="an ONNX BERT file as ort_bert.py --build writes it")
    ap.add_argument("--seqs", default="128,64", help="sequence lengths, run in this order")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--precision", default="f32")
    args = ap.parse_args()
    sess = ep_session(args.model, args.threads, args.precision)
    print("load", status(), "MiB", flush=True)
    for seq in (int(s) for s in args.seqs.split(",")):
        sess.run(None, feeds(sess, seq))
        print(f"seq {seq}", status(), "MiB", flush=True)


if __name__ == "__main__":
    main()
