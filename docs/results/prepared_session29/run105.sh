#!/usr/bin/env bash
# prepared in the twenty-ninth session for the next: where a 4096-token prefill's time goes on main b7d2d75, kernel
# by kernel (docs/results/prepared_session28/run101.sh on this main: every launch of a 2-layer prefill timed alone
# under Nsight Compute and summed by name, then expert_gate_up_mma's and linear_mma's per-instruction counts), then
# Nsight Compute on expert_down_mma with W2's pairs as f64 (its pipes, stalls and per-instruction counts), to see
# what holds the down tile now and to split moe.experts between its two kernels.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
M=${MEMRA:-target/device/memra}
T0=$(date +%s); mkdir -p /tmp/m
MEMRA=$M bash docs/results/prepared_session28/run101.sh
R=$OUT/run105.txt
[ $(( $(date +%s) - T0 )) -lt 450 ] && timeout 140 /usr/local/cuda/bin/ncu --clock-control none --section SourceCounters \
  --section WarpStateStats --section InstructionStats --section ComputeWorkloadAnalysis -o /tmp/m/down \
  --kernel-name expert_down_mma --launch-count 1 \
  $M bench roofline --layers 1 --contexts 1024 --steps 1 --prefill 4096 --prefill-reps 1 >> $R 2>&1 && \
  /usr/local/cuda/bin/ncu --import /tmp/m/down.ncu-rep --page details > $OUT/expert_down_mma_details.txt 2>> $R && \
  /usr/local/cuda/bin/ncu --import /tmp/m/down.ncu-rep --page source --csv --print-source sass > $OUT/expert_down_mma_sass.csv 2>> $R
echo "end t=$(( $(date +%s) - T0 ))s" >> $R
grep -vE "^(prefill|decode|breakdown|vram|case|ceilings|==PROF==)" $R | cut -c1-200
# build: main -> target/device/memra (cargo build --release -p memra; strip -o)
# carry: ["target/device/memra"]; run: bash docs/results/prepared_session29/run105.sh; timeout_s 595
