#!/usr/bin/env bash
# prepared in the eighteenth session for the next: every kernel of a decode-1k step of main (target/device/memra) under
# Nsight Compute, metrics only: duration, issue rate, warps, and the stalls per issued instruction on instruction fetch
# (no_instruction) and long-scoreboard, to rank the kernels by what perf.md "The gap" items 10 and 11 would be worth
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
M=target/device/memra
R=$OUT/run53.txt
T0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >> $R
NCU=/usr/local/cuda/bin/ncu
MET="gpu__time_duration.sum,smsp__issue_active.avg.pct_of_peak_sustained_active,smsp__warps_active.avg.per_cycle_active,smsp__inst_executed.sum,smsp__average_warps_issue_stalled_no_instruction_per_issue_active.ratio,smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio"
timeout 400 $NCU --clock-control none --metrics $MET --launch-skip 300 --launch-count 130 -o $OUT/step \
  $M bench roofline --layers 4 --contexts 1024 --prefill 0 --steps 4 >> $R 2>&1; echo "ncu rc=$?" >> $R
[ -f $OUT/step.ncu-rep ] && $NCU -i $OUT/step.ncu-rep --page raw --csv --metrics $MET > $OUT/step_metrics.csv 2>&1
rm -f $OUT/step.ncu-rep
echo "end t=$(( $(date +%s) - T0 ))s" >> $R
tail -5 $R; wc -l $OUT/step_metrics.csv
# carry: ["target/device/memra","prof/run53.sh"]; timeout_s 450
