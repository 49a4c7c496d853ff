#!/usr/bin/env bash
# forty-fourth session, run 3: what holds the tensor sums' one-token kernels (main 2c579aa's kernels; a
# measurement, nothing changes). Nsight Compute: every kernel of one decode step at 1k alone (4 layers,
# --sums tensor, then --sums exact), then the one-token tensor expert kernels' and linear_bf16_one's
# throughputs, occupancy and stall reasons, and the exact expert kernels' for comparison.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
M=target/device/memra; NCU=${NCU:-/usr/local/cuda/bin/ncu}
T=$OUT/run153.txt; T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
g() { echo "## $* (t=$(el)s)" >> $T; local t0=$(date +%s); timeout ${TO:-150} "$@" >> $T 2>&1; local rc=$?; echo "rc=$rc $(( $(date +%s) - t0 ))s" >> $T; return $rc; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >> $T
for S in tensor exact; do
  [ $(el) -lt ${GUARD:-300} ] || continue
  TO=170 g sh -c "$NCU --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv --launch-skip 300 --launch-count 300 $M bench roofline --layers 4 --contexts 1024 --prefill 0 --steps 3 --sums $S > $OUT/ncu_1k_$S.csv"
  awk -v launches=$OUT/kernels_1k_$S.txt -f scripts/ncu_step.awk $OUT/ncu_1k_$S.csv >> $T
done
for k in "tensor ^(expert_gate_up_bf16|expert_down_bf16|linear_bf16_one)$ 6" "exact ^(expert_gate_up|expert_down)$ 2"; do
  set -- $k
  [ $(el) -lt ${GUARD:-300} ] || continue
  TO=90 g sh -c "$NCU --clock-control none --section SpeedOfLight --section Occupancy --section LaunchStats \
    --section WarpStateStats --section SchedulerStats \
    --metrics 'regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio' \
    --kernel-name 'regex:$2' --launch-skip 20 --launch-count $3 \
    $M bench roofline --layers 4 --contexts 1024 --prefill 0 --steps 2 --sums $1 > $OUT/ncu_detail_$1.txt"
  grep -E '^  [a-z_0-9]+.*\(|Duration|Registers Per|Achieved Occupancy|Theoretical Occupancy|Warp Cycles Per Issued|Issue Slots Busy|No Eligible|stalled_[a-z_]+_per_issue_active.ratio +[a-z]* +[0-9.]*[1-9]|DRAM Throughput|Memory Throughput|Compute \(SM\) Throughput' \
    $OUT/ncu_detail_$1.txt >> $T
done
cat $T | cut -c1-200 | grep -v "^rc=0" | tail -150
