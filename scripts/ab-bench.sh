#!/usr/bin/env bash
# Alternates two npurt binaries on the same benchmarks, so that a before/after comparison
# sees the same machine load: BERT-base s128 and the GEMM shapes, ROUNDS times each.
# Usage: scripts/ab-bench.sh BEFORE_BINARY AFTER_BINARY [OUT_DIR] [ROUNDS]
set -euo pipefail
before=$1; after=$2; out=${3:-target/ab}; rounds=${4:-4}
mkdir -p "$out"
for i in $(seq 1 "$rounds"); do
  for w in before after; do
    bin=$before; [ "$w" = after ] && bin=$after
    "$bin" bench bert --model bert-base --seq 128 --runs 7 --json "$out/bert-$w-$i.json" > "$out/bert-$w-$i.txt" 2>&1
    "$bin" bench gemm --runs 7 > "$out/gemm-$w-$i.txt" 2>&1
  done
done
echo "results in $out (bert-*.txt: the '+mapping' row; gemm-*.txt: GF/s per shape)"
