#!/usr/bin/env bash
# prepared in the thirtieth session for the next (perf.md "The gap", item 6): built, never run on a GPU.
#   M = main (fb3ab63, df306aa's kernels; target/device/memra),
#   I = next/lin-cbank (lin-index.patch on main; target/vI/memra): linear_mma's loads for K > 2 (wo_a, wo_b, wq_a,
#       wkv and the shared expert) index the matrix from the kernel's parameter with a 32-bit chunk index: an LDC.64,
#       an add and a wide multiply-add a load instead of an LDC.64 and four 64-bit address instructions, the loads
#       still a step ahead (ptxas 13.0: FP8 stages of K 4, 8, 16 60.3, 59.2, 58.7 instructions a DMMA instead of
#       64.3, 62.7, 63.8; spills 252/476 bytes instead of 296/536; the experts' SASS unchanged).
# Exactness of I first (the flash-shape exact chunk gate, compare small exact and fp8), then rooflines I, M, I, M,
# then the fp8 flash-shape chunk gate.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
M=target/device/memra; I=target/vI/memra
R=$OUT/run111.txt; T0=$(date +%s)
g() { echo "## $* (t=$(( $(date +%s) - T0 ))s)" >> $R; local t0=$(date +%s); timeout 200 "$@" >> $R 2>&1; echo "rc=$? $(( $(date +%s) - t0 ))s" >> $R; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >> $R
mkdir -p /tmp/m
g $I synth --preset small --seed 1 --out /tmp/m/small
g $I gate chunks synth:flash-shape,layers=4 --variant exact --prompt-len 2176 --widths 256 --out /tmp/m/chunks_flash4.json
g $I gate compare /tmp/m/small --variant exact --prompt-len 160
g $I gate compare /tmp/m/small --variant fp8 --prompt-len 160
for b in $I $M $I $M; do
  g $b bench roofline --layers 4 --contexts 1024 --prefill 4096 --prefill-reps 1
done
[ $(( $(date +%s) - T0 )) -lt 450 ] && g $I gate chunks synth:flash-shape,layers=4 --variant fp8 --prompt-len 2176 --widths 256 --out /tmp/m/chunks_flash4_fp8.json
echo "end t=$(( $(date +%s) - T0 ))s" >> $R
grep -hE "^## |rc=|^prefill|^decode|^breakdown|^end|^compare|^chunk gate|rror|anic|H200" $R | cut -c1-300
# build: main -> target/device/memra; next/lin-cbank (or git apply lin-index.patch on main) -> target/vI/memra
# (cargo build --release -p memra; strip -o).
# carry: ["target/device/memra","target/vI/memra"]; run: bash docs/results/prepared_session30/run111.sh; timeout_s 595
