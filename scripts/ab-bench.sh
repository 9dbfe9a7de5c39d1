#!/usr/bin/env bash
# Alternates two npurt binaries on the same machine, to tell a change's effect on speed from
# the host's noise: `bench bert --model bert-base --seq 128` and `bench gemm`, BEFORE then
# AFTER in each round, then prints the medians and the ratios after / before.
#
#   scripts/ab-bench.sh BEFORE AFTER [BERT_ROUNDS] [GEMM_ROUNDS]   (defaults 10 and 3)
#
# Build each binary with `cargo build --release` at its commit and copy target/release/npurt
# aside. Writes every run's output under target/ab-bench/.
set -euo pipefail
[ $# -ge 2 ] || { sed -n 2,9p "$0"; exit 2; }
before=$1 after=$2 bert_rounds=${3:-10} gemm_rounds=${4:-3}
cd "$(dirname "$0")/.."
out=target/ab-bench
rm -rf "$out" && mkdir -p "$out"
for r in $(seq 1 "$bert_rounds"); do
    for who in before after; do
        bin=$before; [ "$who" = after ] && bin=$after
        "$bin" bench bert --model bert-base --seq 128 --runs 20 > "$out/bert-$who-$r.txt" 2>&1
    done
done
for r in $(seq 1 "$gemm_rounds"); do
    for who in before after; do
        bin=$before; [ "$who" = after ] && bin=$after
        "$bin" bench gemm --runs 5 --json "$out/gemm-$who-$r.json" > "$out/gemm-$who-$r.txt" 2>&1
    done
done
python3 - "$out" <<'PY'
import glob, json, statistics as st, sys
out = sys.argv[1]
def bert(who):
    ms = []
    for f in sorted(glob.glob(f"{out}/bert-{who}-*.txt")):
        ms += [float(l.split()[1]) for l in open(f) if l.startswith("+mapping")]
    return ms
b, a = bert("before"), bert("after")
print(f"bench bert bert-base s128, ms: before median {st.median(b):.1f}, after {st.median(a):.1f}, "
      f"median of the rounds' ratios {st.median([x / y for x, y in zip(a, b)]):.3f}")
def gemm(who):
    rows = {}
    for f in glob.glob(f"{out}/gemm-{who}-*.json"):
        for r in json.load(open(f))["rows"]:
            rows.setdefault((r["shape"], r["variant"]), []).append(r["pct_of_peak"])
    return rows
B, A = gemm("before"), gemm("after")
ratios = []
for key in sorted(B):
    if key in A:
        x, y = st.median(B[key]), st.median(A[key])
        ratios.append(y / x)
        print(f"bench gemm {key[0]:<14} {key[1]:<10} % of peak: before {x:5.1f}, after {y:5.1f}, ratio {y / x:.3f}")
print(f"bench gemm: geometric mean of the ratios {st.geometric_mean(ratios):.3f} over {len(ratios)} rows")
PY
