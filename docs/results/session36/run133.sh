#!/usr/bin/env bash
# thirty-sixth session, after 06b8110 (linear_mma as two kernels): the headline of main (three processes of the
# flash-shape roofline, 4 layers, contexts 1k, 8k, 32k, prefill 4k), then what holds the tensor-core products
# (prepared_session35/run132.sh's profiles, with wq_b now linear_mma_short's first launch and wo_a linear_mma's
# third): Nsight Compute's warp states, scheduler, pipes and instruction mix on one launch each of main's
# linear_mma_short (wq_b: 2 chunks a lane), linear_mma (wo_a: 8) and the experts' kernels, main against a-lo's
# experts (A = prepared_session35/a-lo-experts.patch on 3602438; its expert kernels' SASS is a-lo's).
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
M=target/device/memra; A=target/vA/memra
T=$OUT/run133.txt; T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
g() { echo "## $* (t=$(el)s)" >> $T; local t0=$(date +%s); timeout 200 "$@" >> $T 2>&1; echo "rc=$? $(( $(date +%s) - t0 ))s" >> $T; }
prof() {  # binary, kernel, launches to skip
  [ $(el) -lt 480 ] && g /usr/local/cuda/bin/ncu --clock-control none --section SpeedOfLight --section Occupancy \
    --section WarpStateStats --section SchedulerStats --section ComputeWorkloadAnalysis --section InstructionStats \
    --kernel-name $2 --launch-skip $3 --launch-count 1 $1 bench roofline --layers 2 --contexts 1024 --steps 1 \
    --prefill 4096 --prefill-reps 1
}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >> $T
for i in 1 2 3; do
  g $M bench roofline --layers 4 --contexts 1024,8192,32768 --prefill 4096 --prefill-reps 1 --out $OUT/headline_$i.json
done
prof $M linear_mma_short 0
prof $M linear_mma 2
for b in $M $A; do
  prof $b expert_gate_up_mma 0
  prof $b expert_down_mma 0
done
echo "end t=$(el)s" >> $T
grep -hE "^## |rc=|^prefill|^decode|^breakdown prefill|^ceilings|^  [a-z_]+ \(|Duration|Issued Ipc|Issue Slots Busy|No Eligible|Stall|Warp Cycles Per Issued|Executed Instructions |FP64|Tensor|Theoretical Occupancy|Achieved Occupancy|^end" $T | cut -c1-200
# build: main -> target/device/memra (cargo build --release -p memra; strip -o); a-lo-experts.patch on 3602438 ->
# target/vA/memra. carry: ["target/device/memra","target/vA/memra"]; run: bash docs/results/session36/run133.sh;
# timeout_s 595.
