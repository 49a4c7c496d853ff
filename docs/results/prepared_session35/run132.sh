#!/usr/bin/env bash
# prepared in the thirty-fifth session for the next (supersedes prepared_session34/run127.sh, which it contains):
# what holds the tensor-core products. Each `mma.sync` f64 m16n8k16 is 2048 multiply-adds, 64 cycles of an SM
# sub-partition's share of the FP64 tensor rate (67 TFLOP/s), and the loops issue ~50-64 instructions a DMMA, so
# a sub-partition at one instruction a cycle would keep its tensor pipe near full; the products run at ~42% of that
# (wo_a: 33.5M multiply-adds a token, 4096 tokens in ~9.9 ms). With 12 warps an SM (168 registers) and each warp's
# sums a fixed chain (the leaf tree), the stalls say whether the chains' latency, the shared-memory loads or the
# issue rate holds them. Nsight Compute's warp states, scheduler, pipes and instruction mix on one launch each of
# main's linear_mma (wq_b: 2 chunks a lane, wo_a: 8) and of the experts' kernels, main against the tried a-lo's
# experts (the kept zeros made expert_gate_up_mma 7.7% slower with ~5% fewer instructions a DMMA).
#   M = main (target/device/memra), A = docs/results/prepared_session35/a-lo-experts.patch on main (target/vA/memra):
#   a-lo's experts' tile alone (tried_session34/a-lo.patch no longer applies on b63430a, which has its linear_mma
#   part for rows of 4 and more chunks a lane; NVRTC 13.0 + nvdisasm: both expert kernels' SASS equal to a-lo's).
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
M=target/device/memra; A=target/vA/memra
T=$OUT/run132.txt; T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
g() { echo "## $* (t=$(el)s)" >> $T; local t0=$(date +%s); timeout 200 "$@" >> $T 2>&1; echo "rc=$? $(( $(date +%s) - t0 ))s" >> $T; }
prof() {  # binary, kernel, launches to skip
  [ $(el) -lt 480 ] && g /usr/local/cuda/bin/ncu --clock-control none --section SpeedOfLight --section Occupancy \
    --section WarpStateStats --section SchedulerStats --section ComputeWorkloadAnalysis --section InstructionStats \
    --kernel-name $2 --launch-skip $3 --launch-count 1 $1 bench roofline --layers 2 --contexts 1024 --steps 1 \
    --prefill 4096 --prefill-reps 1
}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >> $T
# linear_mma's launches in a prefill (run129.sh's order): wq_a, wkv, wq_b, wo_a, wo_b, the shared expert's three
prof $M linear_mma 2
prof $M linear_mma 3
for b in $M $A; do
  prof $b expert_gate_up_mma 0
  prof $b expert_down_mma 0
done
echo "end t=$(el)s" >> $T
grep -hE "^## |rc=|^  [a-z_]+ \(|Duration|Issued Ipc|Issue Slots Busy|No Eligible|Stall|Warp Cycles Per Issued|Executed Instructions |FP64|Tensor|Theoretical Occupancy|Achieved Occupancy|^end" $T | cut -c1-200
# build: main -> target/device/memra; git apply docs/results/prepared_session35/a-lo-experts.patch on main ->
# target/vA/memra (cargo build --release -p memra; strip -o; then git apply -R). carry: ["target/device/memra","target/vA/memra"]; run: bash docs/results/prepared_session35/run132.sh;
# timeout_s 595. If mma-short.patch is merged first, linear_mma's wq_b launch moves to linear_mma_short (skip 0).
