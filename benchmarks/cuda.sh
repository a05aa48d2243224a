#!/usr/bin/env bash
# The GPU measurements of docs/cuda.md in one go (about 9 minutes at most: each part under its own timeout).
# Run from the repository root on a machine with a CUDA GPU; results (JSON, tables, stderr tails) go to $OUT.
#   OUT=/tmp/cuda-bench bash benchmarks/cuda.sh
set -u
OUT=${OUT:-$(mktemp -d)}; mkdir -p "$OUT"; echo "results in $OUT"
export PYTHONPATH=.
B="python3 -m app bench --backend torch --device cuda --dtype bfloat16 --compile --json"
T='import json,sys;from app.cli.bench_table import print_table;print_table(json.load(open(sys.argv[1])))'
(nvidia-smi --query-gpu=name,memory.total --format=csv
python3 -c "import torch,transformers;print(torch.__version__,transformers.__version__)") > $OUT/env.txt 2>&1
timeout 270 $B --random 1b --tokens 256 --repeat 2 > $OUT/1b.json 2> $OUT/1b.err
echo "exit $?" >> $OUT/1b.err
timeout 80 python3 benchmarks/compile_start.py --random 1b --device cuda --dtype bfloat16 > $OUT/compile_start.txt 2>&1
timeout 170 $B --random 7b --tokens 128 --repeat 2 --modes trace,no-trace --quick > $OUT/7b.json 2> $OUT/7b.err
echo "exit $?" >> $OUT/7b.err
for f in 1b 7b
do python3 -c "$T" $OUT/$f.json > $OUT/$f.txt 2>&1
done
cat $OUT/env.txt
for f in 1b 7b
do echo "== $f"
cat $OUT/$f.txt
grep -v "^ *$" $OUT/$f.err | tail -4
done
echo "== compile start"
cat $OUT/compile_start.txt
