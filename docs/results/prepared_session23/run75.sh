#!/usr/bin/env bash
# prepared in the twenty-third session for the next (perf.md "The gap", item 17): the one-pair expert kernels'
# warps an SM. At 96 registers a warp, each SM sub-partition holds 5 warps (20 an SM), which is why blocks of 7
# warps (run 2 of the twenty-third session) held only 2 blocks (14 warps) and were 0.05 ms slower. Against main
# (target/device/memra). (expert-lb7.patch, 72 registers, is prepared too but not in this run: more spills, and
# gate/up's staged row holds it to 6 blocks anyway.)
#   L6  = next/expert-lb6 (expert-lb6.patch): __launch_bounds__(128, 6): 80 registers, 24 warps an SM
#         (ptxas 13.0: 84-96 bytes of spills, 5 spill loads in gate/up's FP4 loop of 673 instructions; target/vELB6/memra);
#   T96 = next/t1-maxnreg96 (t1-maxnreg96.patch): the FP8 and FP4 one-token kernels of 4 rows a warp capped at 96
#         registers (__maxnreg__; ptxas 13.0: 94 against 120-122, no spills; the FP8 loop 366 -> 378 instructions
#         for 64 weights): 5 warps a sub-partition instead of 4 (wq_b: 20 warps an SM instead of 16;
#         target/vT96/memra).
#   E10 = next/expert-warps-10 (expert-warps-10.patch): blocks of 10 warps, 2 an SM (20 warps, as today, but each
#         SM stages a pair's row 2 times where it staged it 5; target/vE10/memra).
# Exactness: L6 and E10 on small (compare exact, chunk gate fp8), T96 the flash-shape tf gate; then decode-1k
# rooflines alternating.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
M=target/device/memra; A=target/vELB6/memra; B=target/vT96/memra; C=target/vE10/memra
R=$OUT/run75.txt; T0=$(date +%s)
g() { echo "## $* (t=$(( $(date +%s) - T0 ))s)" >> $R; local t0=$(date +%s); timeout 150 "$@" >> $R 2>&1; echo "rc=$? $(( $(date +%s) - t0 ))s" >> $R; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >> $R
mkdir -p /tmp/m
g $A synth --preset small --seed 1 --out /tmp/m/small
for b in $A $C; do
  g $b gate compare /tmp/m/small --variant exact --prompt-len 96
  g $b gate chunks /tmp/m/small --variant fp8 --prompt-len 160 --out /tmp/m/chunks.json
done
# T96's kernels of 4 FP8 rows a warp run at flash-shape widths (wq_b, wo_a), not at small's
g $B bank --model synth:flash-shape,layers=4 --prompt-len 8 --n 12 --variant exact --out /tmp/m/bank_flash4.json
g $B gate tf synth:flash-shape,layers=4 /tmp/m/bank_flash4.json /tmp/m/tf_flash4
for b in $M $A $B $C $M $A $B $C; do
  [ $(( $(date +%s) - T0 )) -lt 510 ] || break
  g $b bench roofline --layers 4 --contexts 1024 --prefill 0
done
echo "end t=$(( $(date +%s) - T0 ))s" >> $R
grep -hE "^## |rc=|^decode b1|^breakdown|^end|^compare|^chunk gate|^tf gate|rror|anic|H200" $R | cut -c1-300
# build: main -> target/device/memra; each branch -> its folder (cargo build --release -p memra; strip -o)
# carry: ["target/device/memra","target/vELB6/memra","target/vT96/memra","target/vE10/memra","docs/results/prepared_session23/run75.sh"]
# run: bash docs/results/prepared_session23/run75.sh; timeout_s 595
