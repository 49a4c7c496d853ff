#!/usr/bin/env bash
# twenty-sixth session, third form: run89.sh's dense products (16 tokens a block, stages of 16 slabs) with the
# routed experts back on main's tile (groups of 8 pairs staged whole; their kernels' SASS is main's).
#   M = main 8f29471 (target/vMMAE/memra), V2 = the second form (target/v2/memra), V3 = the third (target/v3/memra)
# Exactness (compare small exact; the chunk gates; the flash-shape chunk gate; `same` against M), then prefill
# 4096 rooflines V3, V2, V3.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
M=target/vMMAE/memra; V2=target/v2/memra; V3=target/v3/memra
R=$OUT/run90.txt; T0=$(date +%s)
g() { echo "## $* (t=$(( $(date +%s) - T0 ))s)" >> $R; local t0=$(date +%s); timeout 200 "$@" >> $R 2>&1; echo "rc=$? $(( $(date +%s) - t0 ))s" >> $R; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >> $R
mkdir -p /tmp/m
g $V3 synth --preset small --seed 1 --out /tmp/m/small
g $V3 gate compare /tmp/m/small --variant exact --prompt-len 160
for v in exact fp8; do
  g $V3 gate chunks /tmp/m/small --variant $v --prompt-len 160 --out /tmp/m/chunks_$v.json
done
g $V3 gate chunks synth:flash-shape,layers=4 --variant exact --prompt-len 2176 --widths 256 --out /tmp/m/chunks_flash4.json
for b in $V3 $V2 $V3; do
  g $b bench roofline --layers 4 --contexts 1024 --prefill 4096 --prefill-reps 1
done
mkdir -p $OUT/same; MEMRA=$V3 BASE=$M OUT=$OUT/same timeout 200 bash scripts/gpu_gates.sh same > /dev/null 2>&1
cat $OUT/same/summary.txt >> $R 2>/dev/null
echo "end t=$(( $(date +%s) - T0 ))s" >> $R
grep -hE "^## |rc=|^decode b1|^prefill|^breakdown|^end|^compare|^chunk gate|^same|rror|anic|H200" $R | cut -c1-300
# build: main 8f29471 -> target/vMMAE/memra; next/mma16 (second form) -> target/v2/memra; next/mma-hybrid -> target/v3/memra
# carry: ["target/vMMAE/memra","target/v2/memra","target/v3/memra"]; run: bash docs/results/prepared_session26/run90.sh; timeout_s 560
