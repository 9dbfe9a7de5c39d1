#!/usr/bin/env python3
"""`npurt bench llm` against its peers, alternated in each round, one process per measurement.

For every (precision, batch) of --precisions x --batches, each round runs, in turn:

  npurt         NPURT_PRECISION=<p> npurt bench llm --model M --prompt-len P --gen G --batch B --json F
  transformers  bench/peers/llm_hf.py --model M --dtype <p> ... (torch on the CPU)
  llama.cpp     bench/peers/llm_llamacpp.py --gguf <file for p> ... (where llama-cpp-python
                is installed and --gguf-dir holds model-<p>.gguf; batch 1 only: its Python
                API decodes one sequence)

and reports the medians over --rounds of prefill ms (P tokens per sequence), decode ms per
step and tokens/s, with npurt's ratios to each peer (time ratios: below 1 is faster) and
npurt's share of the measured copy bandwidth. Prints a Markdown table; --json F writes
every measurement.

    python3 bench/peers/llm_compare.py --npurt target/release/npurt --model qwen2-0.5b \\
        --prompt-len 128 --gen 32 --batches 1,8 --precisions f32,bf16 --rounds 3

Requires torch and transformers for the transformers rows (they are left out, saying so,
when absent).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def run_json(cmd, env=None):
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        path = f.name
    try:
        p = subprocess.run(cmd + ["--json", path], env=env, capture_output=True, text=True, timeout=3600)
        if p.returncode != 0:
            return None, (p.stderr or p.stdout)[-2000:]
        with open(path) as f:
            return json.load(f), None
    finally:
        os.unlink(path)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--npurt", default="target/release/npurt")
    ap.add_argument("--npurt-base", help="a second npurt binary, run in every round as the contender "
                    "'npurt-base' (a before/after comparison of two builds)")
    ap.add_argument("--skip", default="", help="contenders to leave out, comma-separated (transformers, llama.cpp)")
    ap.add_argument("--model", default="qwen2-0.5b")
    ap.add_argument("--prompt-len", type=int, default=128)
    ap.add_argument("--gen", type=int, default=32)
    ap.add_argument("--batches", default="1,8")
    ap.add_argument("--precisions", default="f32,bf16")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=0, help="peer threads (0: their default, all cores)")
    ap.add_argument("--gguf-dir", help="a directory of model-f32.gguf / model-bf16.gguf for llama.cpp")
    ap.add_argument("--json")
    a = ap.parse_args()
    batches = [int(b) for b in a.batches.split(",")]
    precisions = a.precisions.split(",")
    rows = {}
    log = []
    skip = set(filter(None, a.skip.split(",")))
    have_torch = "transformers" not in skip and subprocess.run(
        [sys.executable, "-c", "import torch, transformers"], capture_output=True).returncode == 0
    if not have_torch:
        print("llm_compare: torch/transformers not importable; the transformers rows are left out", file=sys.stderr)
    for r in range(a.rounds):
        for p in precisions:
            for b in batches:
                common = ["--prompt-len", str(a.prompt_len), "--gen", str(a.gen), "--batch", str(b)]
                runs = [("npurt", [a.npurt, "bench", "llm", "--model", a.model] + common,
                         dict(os.environ, NPURT_PRECISION=p))]
                if a.npurt_base:
                    runs.append(("npurt-base", [a.npurt_base, "bench", "llm", "--model", a.model] + common,
                                 dict(os.environ, NPURT_PRECISION=p)))
                if have_torch:
                    hf = [sys.executable, os.path.join(HERE, "llm_hf.py"), "--model", a.model, "--dtype", p, "--runs", "1"]
                    if a.threads:
                        hf += ["--threads", str(a.threads)]
                    runs.append(("transformers", hf + common, None))
                # llama-cpp-python decodes one sequence: its batch-1 run is its only row.
                if b == 1 and "llama.cpp" not in skip and a.gguf_dir and os.path.exists(os.path.join(a.gguf_dir, f"model-{p}.gguf")):
                    lc = [sys.executable, os.path.join(HERE, "llm_llamacpp.py"), "--gguf",
                          os.path.join(a.gguf_dir, f"model-{p}.gguf"), "--runs", "1"]
                    if a.threads:
                        lc += ["--threads", str(a.threads)]
                    runs.append(("llama.cpp", lc + common, None))
                for name, cmd, env in runs:
                    got, err = run_json(cmd, env)
                    if got is None:
                        print(f"llm_compare: round {r} {name} {p} b{b} failed: {err}", file=sys.stderr)
                        continue
                    log.append(dict(got, contender=name, precision=p, round=r))
                    rows.setdefault((p, b, name), []).append(got)
                    print(f"round {r} {p} b{b} {name}: prefill {got['prefill_ms']:.1f} ms, "
                          f"decode {got['decode_ms_per_token']:.2f} ms/step", file=sys.stderr)
    med = lambda k, key: statistics.median(x[key] for x in rows[k])  # noqa: E731
    print(f"model {a.model}, prompt {a.prompt_len}, gen {a.gen}, medians of {a.rounds} rounds")
    print("| precision | batch | contender | prefill ms | decode ms/step | tokens/s | npurt prefill ratio | "
          "npurt decode ratio | bandwidth share |")
    print("|---|---|---|---|---|---|---|---|---|")
    for p in precisions:
        for b in batches:
            base = (p, b, "npurt")
            for name in ("npurt", "npurt-base", "transformers", "llama.cpp"):
                k = (p, b, name)
                if k not in rows:
                    continue
                pre, dec, tps = med(k, "prefill_ms"), med(k, "decode_ms_per_token"), med(k, "tokens_per_s")
                if name == "npurt":
                    share = statistics.median(x.get("bandwidth_share", float("nan")) for x in rows[k])
                    print(f"| {p} | {b} | npurt | {pre:.1f} | {dec:.2f} | {tps:.1f} | | | {share:.0%} |")
                elif base in rows:
                    rp = med(base, "prefill_ms") / pre
                    rd = med(base, "decode_ms_per_token") / dec
                    print(f"| {p} | {b} | {name} | {pre:.1f} | {dec:.2f} | {tps:.1f} | {rp:.2f} | {rd:.2f} | |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(log, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
