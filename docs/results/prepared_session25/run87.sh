#!/usr/bin/env bash
# prepared in the twenty-fifth session for the next (perf.md "The gap", item 6): the routed experts of the prefill
# on the FP64 tensor cores (branch next/mma-experts, mma-experts.patch: expert_gate_up_mma and expert_down_mma,
# groups of 8 pairs of one expert through linear_mma's tile) against main.
#   M = main (target/device/memra), E = next/mma-experts (target/vMMAE/memra)
# Exactness first (compare small exact and fp8; the chunk gates, whose "MoE arms identical" compares the fused
# experts with the per-pair kernels bit for bit; the flash-shape chunk gate; `same` against main), then prefill 4096
# rooflines alternating E, M, E; then Nsight Compute's stall reasons for main's linear_mma.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
M=target/device/memra; E=target/vMMAE/memra
R=$OUT/run87.txt; T0=$(date +%s)
g() { echo "## $* (t=$(( $(date +%s) - T0 ))s)" >> $R; local t0=$(date +%s); timeout 200 "$@" >> $R 2>&1; echo "rc=$? $(( $(date +%s) - t0 ))s" >> $R; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >> $R
mkdir -p /tmp/m
g $E synth --preset small --seed 1 --out /tmp/m/small
for v in exact fp8; do
  g $E gate compare /tmp/m/small --variant $v --prompt-len 160
  g $E gate chunks /tmp/m/small --variant $v --prompt-len 160 --out /tmp/m/chunks_$v.json
done
for b in $E $M $E; do
  g $b bench roofline --layers 4 --contexts 1024 --prefill 4096 --prefill-reps 1
done
g $E gate chunks synth:flash-shape,layers=4 --variant exact --prompt-len 2176 --widths 256 --out /tmp/m/chunks_flash4.json
mkdir -p $OUT/same; MEMRA=$E BASE=$M OUT=$OUT/same timeout 200 bash scripts/gpu_gates.sh same > /dev/null 2>&1
cat $OUT/same/summary.txt >> $R 2>/dev/null
# what holds linear_mma (104 instructions a tensor-core instruction, 46% issue on wq_b in the twenty-fifth session):
# its warps' stall reasons on the first launches of a 512-token prefill
[ $(( $(date +%s) - T0 )) -lt 420 ] && g /usr/local/cuda/bin/ncu --clock-control none --cache-control none \
  --kernel-name linear_mma --launch-skip 2 --launch-count 2 --section WarpStateStats --section SchedulerStats \
  --section Occupancy $M bench roofline --layers 1 --contexts 1024 --prefill 512 --prefill-reps 1 --steps 3
echo "end t=$(( $(date +%s) - T0 ))s" >> $R
grep -hE "^## |rc=|^decode b1|^prefill|^breakdown|^end|^compare|^chunk gate|^same|rror|anic|H200|Stall|Issue|Warp Cycles|Eligible|Active Warps|Occupancy" $R | cut -c1-300
# build: main -> target/device/memra; next/mma-experts -> target/vMMAE/memra (cargo build --release -p memra; strip -o)
# carry: ["target/device/memra","target/vMMAE/memra"]; run: bash docs/results/prepared_session25/run87.sh; timeout_s 595
