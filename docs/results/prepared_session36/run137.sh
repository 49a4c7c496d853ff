#!/usr/bin/env bash
# prepared in the thirty-sixth session for the next: where in the loops the tensor-core tiles wait. The
# thirty-sixth session's runs 2-3 gave the stall reasons per launch (3 warps a scheduler, a warp's instructions
# 7.1-8.6 cycles apart: wait ~2, math pipe throttle ~1.6-1.9, long scoreboard 0.7-1.3, short scoreboard 0.8-1.2,
# barrier 0.2-0.8); this samples them per SASS instruction (Nsight Compute's source counters, warp-state sampling)
# on one launch each of main's linear_mma (wo_a: its third launch of a prefill), linear_mma_short (wq_b: its first)
# and expert_gate_up_mma, and prints the SASS page with each instruction's samples by reason as CSV, so that each
# stall can be put on the instruction that waits (and the one it waits for).
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
M=target/device/memra; NCU=/usr/local/cuda/bin/ncu
T=$OUT/run137.txt; T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
src() {  # name, kernel, launches to skip
  [ $(el) -lt 420 ] || return
  echo "## $1: $2 skip $3 (t=$(el)s)" >> $T
  timeout 150 $NCU --clock-control none --section SourceCounters --section WarpStateStats --import-source no \
    --kernel-name $2 --launch-skip $3 --launch-count 1 -o /tmp/$1 \
    $M bench roofline --layers 2 --contexts 1024 --steps 1 --prefill 4096 --prefill-reps 1 >> $T 2>&1
  echo "rc=$? (t=$(el)s)" >> $T
  timeout 60 $NCU --import /tmp/$1.ncu-rep --page source --print-source sass --csv > $OUT/$1_sass.csv 2>> $T
  echo "page rc=$? lines $(wc -l < $OUT/$1_sass.csv)" >> $T
  timeout 60 $NCU --import /tmp/$1.ncu-rep --page details --section WarpStateStats --section SourceCounters \
    --print-details all >> $T 2>&1
}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >> $T
src wo_a linear_mma 2
src wq_b linear_mma_short 0
src gate_up expert_gate_up_mma 0
echo "end t=$(el)s" >> $T
grep -hE "^## |rc=|Stall|Warp Cycles|Branch|Uncoalesced|^end" $T | cut -c1-200
head -c 3000 $OUT/wo_a_sass.csv
# build: main -> target/device/memra (cargo build --release -p memra; strip -o). carry: ["target/device/memra"];
# run: bash docs/results/prepared_session36/run137.sh; timeout_s 500. The CSVs come back under $OUT (each a line a
# SASS instruction with its sampled stall reasons).
