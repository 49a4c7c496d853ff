#!/usr/bin/env bash
# prepared in the thirty-fourth session for the next: why keeping the A fragments' low words zero across chunks
# made expert_gate_up_mma 7.7% slower with ~5% fewer instructions a DMMA (run 2 of that session), where
# linear_mma got 2% faster. Nsight Compute's warp states, scheduler, pipes and instruction mix on one launch of
# each expert kernel, main against the tried build.
#   M = main (target/device/memra), A = docs/results/tried_session34/a-lo.patch on main (target/vA/memra).
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
M=target/device/memra; A=target/vA/memra
T=$OUT/run127.txt; T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
g() { echo "## $* (t=$(el)s)" >> $T; local t0=$(date +%s); timeout 200 "$@" >> $T 2>&1; echo "rc=$? $(( $(date +%s) - t0 ))s" >> $T; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >> $T
for b in $M $A; do
  for k in expert_gate_up_mma expert_down_mma; do
    [ $(el) -lt 480 ] && g /usr/local/cuda/bin/ncu --clock-control none --section SpeedOfLight --section Occupancy \
      --section WarpStateStats --section SchedulerStats --section ComputeWorkloadAnalysis --section InstructionStats \
      --kernel-name $k --launch-count 1 $b bench roofline --layers 2 --contexts 1024 --steps 1 --prefill 4096 --prefill-reps 1
  done
done
echo "end t=$(el)s" >> $T
grep -hE "^## |rc=|^  [a-z_]+ \(|Duration|Issued Ipc|Issue Slots Busy|No Eligible|Stall|Warp Cycles Per Issued|Executed Instructions |FP64|Tensor|^end" $T | cut -c1-200
# build: main -> target/device/memra; git apply docs/results/tried_session34/a-lo.patch on main -> target/vA/memra
# (cargo build --release -p memra; strip -o; then git apply -R). carry: ["target/device/memra","target/vA/memra"];
# run: bash docs/results/prepared_session34/run127.sh; timeout_s 595
