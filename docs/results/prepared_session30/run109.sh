#!/usr/bin/env bash
# thirtieth session, run 4: linear_mma's addresses where K <= 2 (perf.md "The gap", item 6).
#   M = main (b7d2d75's kernels; target/device/memra),
#   B = next/lin-addr (c519678; target/vB/memra): linear_mma's row pointers held in registers behind an empty
#       asm only where K <= 2 (run 3, every K: wq_b, K 2, faster; wo_a and wo_b, K 8 and 16, slower, ptxas issuing
#       their loads just before the sums instead of a step ahead), plain ld.global there; FP8 one scale load a chunk
#       step for every K (the tile's 16 rows share their 128-row block). ptxas 13.0: FP8 stages 55-64 instructions
#       a DMMA instead of 69-73 (K 1 and 2: 55 and 62), loads a step ahead as on main, spills 296/536 bytes (main 336/584).
# Exactness first (the flash-shape exact chunk gate, compare small exact and fp8, chunk gate small), then rooflines
# B (the headline's three contexts, JSON), M, B, M (prefill 4096 and decode 1k), then the fp8 flash-shape chunk gate.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
M=target/device/memra; A=target/vB/memra
R=$OUT/run109.txt; T0=$(date +%s)
g() { echo "## $* (t=$(( $(date +%s) - T0 ))s)" >> $R; local t0=$(date +%s); timeout 200 "$@" >> $R 2>&1; echo "rc=$? $(( $(date +%s) - t0 ))s" >> $R; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >> $R
mkdir -p /tmp/m
g $A synth --preset small --seed 1 --out /tmp/m/small
g $A gate chunks synth:flash-shape,layers=4 --variant exact --prompt-len 2176 --widths 256 --out /tmp/m/chunks_flash4.json
g $A gate compare /tmp/m/small --variant exact --prompt-len 160
g $A gate compare /tmp/m/small --variant fp8 --prompt-len 160
g $A gate chunks /tmp/m/small --variant exact --prompt-len 160 --out /tmp/m/chunks_small.json
g $A bench roofline --layers 4 --contexts 1024,8192,32768 --prefill 4096 --prefill-reps 1 --out $OUT/roofline_B.json
for b in $M $A $M; do
  g $b bench roofline --layers 4 --contexts 1024 --prefill 4096 --prefill-reps 1
done
[ $(( $(date +%s) - T0 )) -lt 400 ] && g $A gate chunks synth:flash-shape,layers=4 --variant fp8 --prompt-len 2176 --widths 256 --out /tmp/m/chunks_flash4_fp8.json
echo "end t=$(( $(date +%s) - T0 ))s" >> $R
grep -hE "^## |rc=|^prefill|^decode|^breakdown|^end|^compare|^chunk gate|rror|anic|H200" $R | cut -c1-300
# build: main -> target/device/memra; next/lin-addr c519678 -> target/vB/memra (cargo build --release -p memra; strip -o)
# carry: ["target/device/memra","target/vB/memra"]; run: bash docs/results/prepared_session30/run109.sh; timeout_s 500
