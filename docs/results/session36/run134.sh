#!/usr/bin/env bash
# thirty-sixth session: why the tensor-core products issue an instruction only every ~2.9 cycles a scheduler
# (run133: wo_a 1.39 instructions a cycle an SM, 3 warps a scheduler, 8.6 cycles a warp between issues; the FP64
# tensor pipe 47% busy). Nsight Compute's stall reasons (per issued instruction) and pipe utilization, raw, on one
# launch each of main's linear_mma (wo_a: linear_mma's third launch), linear_mma_short (wq_b) and
# expert_gate_up_mma; then the same sections' details printed in full for wo_a (the instruction mix by opcode).
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
M=target/device/memra
T=$OUT/run134.txt; T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
NCU=/usr/local/cuda/bin/ncu
run() { $M bench roofline --layers 2 --contexts 1024 --steps 1 --prefill 4096 --prefill-reps 1; }
raw() {  # kernel, launches to skip
  echo "## raw $1 skip $2 (t=$(el)s)" >> $T
  timeout 150 $NCU --clock-control none --kernel-name $1 --launch-skip $2 --launch-count 1 --csv --page raw \
    --metrics 'regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio$,regex:sm__inst_executed_pipe_.*\.avg\.pct_of_peak_sustained_active$,regex:sm__pipe_.*_cycles_active\.avg\.pct_of_peak_sustained_active$,smsp__inst_executed.sum,gpu__time_duration.sum' \
    $M bench roofline --layers 2 --contexts 1024 --steps 1 --prefill 4096 --prefill-reps 1 > $OUT/raw_$1_$2.csv 2>> $T
  echo "rc=$?" >> $T
}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >> $T
raw linear_mma 2
raw expert_gate_up_mma 0
raw linear_mma_short 0
echo "## details linear_mma skip 2 (t=$(el)s)" >> $T
timeout 150 $NCU --clock-control none --kernel-name linear_mma --launch-skip 2 --launch-count 1 --section WarpStateStats \
  --section InstructionStats --print-details all \
  $M bench roofline --layers 2 --contexts 1024 --steps 1 --prefill 4096 --prefill-reps 1 >> $T 2>&1
echo "rc=$? end t=$(el)s" >> $T
tail -c 6000 $T
# carry: ["target/device/memra"]; run: bash docs/results/session36/run134.sh; timeout_s 400.
