#!/usr/bin/env bash
# thirty-first session, run 1 (perf.md "The gap", item 6):
#   C = main 1e5b7c0 (bf16-mma and norm-rope-128 of the thirtieth session's run110.sh, landed; target/vC/memra),
#   X = next/ci31 (C + lin-index: linear_mma's K > 2 loads indexed from the kernel's parameter with a 32-bit chunk
#       index, linear_mma_bf16's too; target/vCI/memra).
# Exactness of X first (the flash-shape exact chunk gate, compare small exact and fp8, chunk gate small), the headline
# of X (3 contexts, JSON), rooflines C, X, C, Nsight Compute's times of the dense products on X, the fp8 flash-shape
# chunk gate on X.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
C=target/vC/memra; X=target/vCI/memra
R=$OUT/run112.txt; T0=$(date +%s)
g() { echo "## $* (t=$(( $(date +%s) - T0 ))s)" >> $R; local t0=$(date +%s); timeout 200 "$@" >> $R 2>&1; echo "rc=$? $(( $(date +%s) - t0 ))s" >> $R; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >> $R
mkdir -p /tmp/m
g $X synth --preset small --seed 1 --out /tmp/m/small
g $X gate chunks synth:flash-shape,layers=4 --variant exact --prompt-len 2176 --widths 256 --out /tmp/m/chunks_flash4.json
g $X gate compare /tmp/m/small --variant exact --prompt-len 160
g $X gate compare /tmp/m/small --variant fp8 --prompt-len 160
g $X gate chunks /tmp/m/small --variant exact --prompt-len 160 --out /tmp/m/chunks_small.json
g $X bench roofline --layers 4 --contexts 1024,8192,32768 --prefill 4096 --prefill-reps 1 --out $OUT/roofline_X.json
for b in $C $X $C; do
  g $b bench roofline --layers 4 --contexts 1024 --prefill 4096 --prefill-reps 1
done
[ $(( $(date +%s) - T0 )) -lt 430 ] && g /usr/local/cuda/bin/ncu --clock-control none --metrics gpu__time_duration.sum \
  --kernel-name regex:"linear_mma" $X bench roofline --layers 2 --contexts 1024 --steps 1 --prefill 4096 --prefill-reps 1
[ $(( $(date +%s) - T0 )) -lt 470 ] && g $X gate chunks synth:flash-shape,layers=4 --variant fp8 --prompt-len 2176 --widths 256 --out /tmp/m/chunks_flash4_fp8.json
echo "end t=$(( $(date +%s) - T0 ))s" >> $R
grep -hE "^## |rc=|^prefill|^decode|^breakdown|^end|^compare|^chunk gate|rror|anic|H200" $R | cut -c1-300
grep -A1 -E "^  linear_mma" $R | grep -E "linear_mma|duration" | paste - - | awk '{print $1, $2, $NF}'
# build: main 1e5b7c0 -> target/vC/memra; next/ci31 -> target/vCI/memra (cargo build --release -p memra; strip -o).
# carry: ["target/vC/memra","target/vCI/memra"]; run: bash docs/results/prepared_session31/run112.sh; timeout_s 595
