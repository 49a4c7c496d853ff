#!/usr/bin/env bash
# twenty-ninth session, run 3: the routed experts' tile (perf.md "The gap", item 6).
#   M = main (2de8c44; target/device/memra),
#   S = next/experts-stride: the threads' stacks of subtrees MMA_BLOCK doubles apart, not blockDim.x, so that their
#       16 addresses are one register and constant offsets (ptxas 13.0: expert_gate_up_mma 168 registers and 56/68
#       bytes of spills -> 150 and none; expert_down_mma 168 and 44/44 -> 146 and none; target/vS/memra),
#   W = next/experts-wide: S plus the pairs of rows up to 2048 values (W2's, at DSV4-Flash widths) staged as scaled
#       f64, so that the tile reads its B fragments as they go into the instruction, instead of 4 F2F.F64.F32 and
#       4 DMUL a tensor-core instruction (run 2, Nsight Compute on expert_gate_up_mma: DMUL 7% of the instructions
#       and 16% of the stall samples, 71% of them math pipe throttle: it waits behind the DMMAs on the shared pipe)
#       (156 registers, no spills; target/vW/memra).
# Exactness first (W: the flash-shape exact chunk gate and compare small exact; S: compare small exact), then
# rooflines W, S, M, W, S (prefill 4096 and decode 1k), then Nsight Compute on W's two expert kernels.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
M=target/device/memra; S=target/vS/memra; W=target/vW/memra
R=$OUT/run103.txt; T0=$(date +%s)
g() { echo "## $* (t=$(( $(date +%s) - T0 ))s)" >> $R; local t0=$(date +%s); timeout 200 "$@" >> $R 2>&1; echo "rc=$? $(( $(date +%s) - t0 ))s" >> $R; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >> $R
mkdir -p /tmp/m
g $W synth --preset small --seed 1 --out /tmp/m/small
g $W gate chunks synth:flash-shape,layers=4 --variant exact --prompt-len 2176 --widths 256 --out /tmp/m/chunks_flash4.json
g $W gate compare /tmp/m/small --variant exact --prompt-len 160
g $S gate compare /tmp/m/small --variant exact --prompt-len 160
for b in $W $S $M $W $S; do
  g $b bench roofline --layers 4 --contexts 1024 --prefill 4096 --prefill-reps 1
done
NCU=/usr/local/cuda/bin/ncu
METRICS="regex:smsp__average_warps_issue_stalled_(math_pipe_throttle|wait|long_scoreboard|short_scoreboard|barrier|not_selected)_per_issue_active\.ratio,sm__pipe_tensor_op_dmma_cycles_active.avg.pct_of_peak_sustained_active,sm__pipe_shared_cycles_active.avg.pct_of_peak_sustained_active,sm__pipe_alu_cycles_active.avg.pct_of_peak_sustained_active,smsp__inst_executed.sum,smsp__issue_active.avg.pct_of_peak_sustained_active,gpu__time_duration.sum"
[ $(( $(date +%s) - T0 )) -lt 470 ] && g $NCU --clock-control none --metrics "$METRICS" --kernel-name regex:expert_.*_mma --launch-count 2 \
  $W bench roofline --layers 1 --contexts 1024 --steps 1 --prefill 4096 --prefill-reps 1
echo "end t=$(( $(date +%s) - T0 ))s" >> $R
grep -hE "^## |rc=|^prefill|^decode|^breakdown|^end|^compare|^chunk gate|rror|anic|H200|stalled|pipe_|inst_executed|issue_active|duration|expert_.*_mma" $R | cut -c1-300
# build: main -> target/device/memra; next/experts-stride -> target/vS/memra; next/experts-wide -> target/vW/memra
# (cargo build --release -p memra; strip -o). The fp8 flash-shape chunk gate and a headline go in the run after.
# carry: ["target/device/memra","target/vS/memra","target/vW/memra"]; run: bash docs/results/prepared_session29/run103.sh
