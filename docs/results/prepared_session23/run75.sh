#!/usr/bin/env bash
# prepared in the twenty-third session for the next (perf.md "The gap", item 17): the one-pair expert kernels'
# warps an SM. At 96 registers a warp, each SM sub-partition holds 5 warps (20 an SM), which is why blocks of 7
# warps (run 2 of the twenty-third session) held only 2 blocks (14 warps) and were 0.05 ms slower. Against main
# (target/device/memra):
#   L6  = next/expert-lb6 (expert-lb6.patch): __launch_bounds__(128, 6): 80 registers, 24 warps an SM
#         (ptxas 13.0: 84-96 bytes of spills, 5 spill loads in gate/up's FP4 loop of 673 instructions; target/vELB6/memra);
#   L7  = next/expert-lb7 (expert-lb7.patch): __launch_bounds__(128, 7): 72 registers, 28 warps an SM where shared
#         memory lets (the down kernel's row of 2048; gate/up stays at 6 blocks; 168-172 bytes of spills;
#         target/vELB7/memra);
#   E10 = next/expert-warps-10 (expert-warps-10.patch): blocks of 10 warps, 2 an SM (20 warps, as today, but each
#         SM stages a pair's row 2 times where it staged it 5; target/vE10/memra).
# Exactness of each on small (compare exact, chunk gate fp8), then decode-1k rooflines alternating.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
M=target/device/memra; A=target/vELB6/memra; B=target/vELB7/memra; C=target/vE10/memra
R=$OUT/run75.txt; T0=$(date +%s)
g() { echo "## $* (t=$(( $(date +%s) - T0 ))s)" >> $R; local t0=$(date +%s); timeout 150 "$@" >> $R 2>&1; echo "rc=$? $(( $(date +%s) - t0 ))s" >> $R; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >> $R
mkdir -p /tmp/m
g $A synth --preset small --seed 1 --out /tmp/m/small
for b in $A $B $C; do
  g $b gate compare /tmp/m/small --variant exact --prompt-len 96
  g $b gate chunks /tmp/m/small --variant fp8 --prompt-len 160 --out /tmp/m/chunks.json
done
for b in $M $A $B $C $M $A $B $C; do
  [ $(( $(date +%s) - T0 )) -lt 510 ] || break
  g $b bench roofline --layers 4 --contexts 1024 --prefill 0
done
echo "end t=$(( $(date +%s) - T0 ))s" >> $R
grep -hE "^## |rc=|^decode b1|^breakdown|^end|^compare|^chunk gate|rror|anic|H200" $R | cut -c1-300
# build: main -> target/device/memra; each branch -> its folder (cargo build --release -p memra; strip -o)
# carry: ["target/device/memra","target/vELB6/memra","target/vELB7/memra","target/vE10/memra","docs/results/prepared_session23/run75.sh"]
# run: bash docs/results/prepared_session23/run75.sh; timeout_s 595
