#!/usr/bin/env bash
# thirtieth session, run 3: linear_mma's addresses (perf.md "The gap", item 6).
#   M = main (b7d2d75's kernels; target/device/memra),
#   A = next/lin-addr (461e0bb; target/vA/memra): the tile's row pointers held in registers behind an empty asm
#       (ptxas, at its 168-register cap, rebuilt each from the kernel's parameters at every load: LDC.64 and four
#       address instructions, run 2 of the twenty-ninth session), plain ld.global; FP8 one scale load a chunk step
#       (the tile's 16 rows share their 128-row block). ptxas 13.0: FP8 stages 52-62 instructions a DMMA instead of
#       69-73, spills 96/224 bytes instead of 336/584, no LDC in the stage loop.
# Exactness first (the flash-shape exact chunk gate, compare small exact and fp8, chunk gate small), then rooflines
# A, M, A, M (prefill 4096 and decode 1k), then the fp8 flash-shape chunk gate.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
M=target/device/memra; A=target/vA/memra
R=$OUT/run108.txt; T0=$(date +%s)
g() { echo "## $* (t=$(( $(date +%s) - T0 ))s)" >> $R; local t0=$(date +%s); timeout 200 "$@" >> $R 2>&1; echo "rc=$? $(( $(date +%s) - t0 ))s" >> $R; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >> $R
mkdir -p /tmp/m
g $A synth --preset small --seed 1 --out /tmp/m/small
g $A gate chunks synth:flash-shape,layers=4 --variant exact --prompt-len 2176 --widths 256 --out /tmp/m/chunks_flash4.json
g $A gate compare /tmp/m/small --variant exact --prompt-len 160
g $A gate compare /tmp/m/small --variant fp8 --prompt-len 160
g $A gate chunks /tmp/m/small --variant exact --prompt-len 160 --out /tmp/m/chunks_small.json
for b in $A $M $A $M; do
  g $b bench roofline --layers 4 --contexts 1024 --prefill 4096 --prefill-reps 1
done
[ $(( $(date +%s) - T0 )) -lt 450 ] && g $A gate chunks synth:flash-shape,layers=4 --variant fp8 --prompt-len 2176 --widths 256 --out /tmp/m/chunks_flash4_fp8.json
echo "end t=$(( $(date +%s) - T0 ))s" >> $R
grep -hE "^## |rc=|^prefill|^decode|^breakdown|^end|^compare|^chunk gate|rror|anic|H200" $R | cut -c1-300
# build: main -> target/device/memra; next/lin-addr -> target/vA/memra (cargo build --release -p memra; strip -o)
# carry: ["target/device/memra","target/vA/memra"]; run: bash docs/results/prepared_session30/run108.sh; timeout_s 595
