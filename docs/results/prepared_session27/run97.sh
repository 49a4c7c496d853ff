#!/usr/bin/env bash
# prepared in the twenty-seventh session for the next (perf.md "The gap", item 6):
#   M = main (target/device/memra), B = next/mma-block256 (mma-block-256.patch on main: the tensor-core products'
#   and experts' blocks of 8 warps instead of 12; ptxas 13.0: linear_mma 255 registers and 76/156 bytes of spills
#   instead of 168 and 336/584, the experts 148-150 and none instead of 168 and 44-68; one block an SM either way;
#   target/vB256/memra). The sums are per warp, so the bits do not depend on the block's warps.
# Exactness first (compare small exact and fp8; the flash-shape chunk gate, exact), then prefill 4096 rooflines B, M, B,
# then Nsight Compute on B's linear_mma and expert_gate_up_mma.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
M=target/device/memra; B=target/vB256/memra
R=$OUT/run97.txt; T0=$(date +%s)
g() { echo "## $* (t=$(( $(date +%s) - T0 ))s)" >> $R; local t0=$(date +%s); timeout 200 "$@" >> $R 2>&1; echo "rc=$? $(( $(date +%s) - t0 ))s" >> $R; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >> $R
mkdir -p /tmp/m
g $B synth --preset small --seed 1 --out /tmp/m/small
for v in exact fp8; do g $B gate compare /tmp/m/small --variant $v --prompt-len 160; done
g $B gate chunks synth:flash-shape,layers=4 --variant exact --prompt-len 2176 --widths 256 --out /tmp/m/chunks_flash4.json
for b in $B $M $B; do
  g $b bench roofline --layers 4 --contexts 1024 --prefill 4096 --prefill-reps 1
done
NCU="/usr/local/cuda/bin/ncu --clock-control none --cache-control none --metrics regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,regex:sm__pipe_(alu|fma|fp64|shared|tensor_op_dmma)_cycles_active\.avg\.pct_of_peak_sustained_active,smsp__inst_executed.sum,smsp__issue_active.avg.pct_of_peak_sustained_active,gpu__time_duration.sum"
for k in linear_mma expert_gate_up_mma; do
  [ $(( $(date +%s) - T0 )) -lt 480 ] && g $NCU --kernel-name $k --launch-skip 1 --launch-count 1 \
    $B bench roofline --layers 1 --contexts 1024 --prefill 4096 --prefill-reps 1 --steps 3
done
echo "end t=$(( $(date +%s) - T0 ))s" >> $R
grep -hE "^## |rc=|^prefill|^breakdown prefill|^end|^compare|^chunk gate|rror|anic|H200|stalled|pipe_|inst_executed|issue_active|duration|^  [a-z_]+ \(" $R | cut -c1-300
# build: main -> target/device/memra; next/mma-block256 (or git apply docs/results/prepared_session27/mma-block-256.patch
# on main) -> target/vB256/memra (cargo build --release -p memra; strip -o)
# carry: ["target/device/memra","target/vB256/memra"]; run: bash docs/results/prepared_session27/run97.sh; timeout_s 595
