#!/usr/bin/env bash
# prepared in the twenty-seventh session for the next (perf.md "The gap", item 6):
#   M = main (attention_mma of 924834a; target/device/memra), S = next/attn-stage (attention-staged.patch on main:
#   attention_mma's key values through per-warp cp.async rings in shared memory, the logits 4 leaves ahead and the
#   outputs 4 steps ahead, and the logits' stack of subtrees in registers (ptxas 13.0: 224 -> 48 bytes of stack, no
#   local memory in the logits loop); att_keys shared by attention_heads and attention_mma; target/vST/memra).
# Exactness first (the flash-shape chunk gates, 2176 tokens in chunks of 256 on attention_mma, against decode's
# attention_rows_pair and a monolithic prefill, exact and fp8; compare small exact: attention_heads' new helper),
# then prefill 4096 rooflines S, M, S, then Nsight Compute on S's attention_mma (a CSA layer).
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
M=target/device/memra; S=target/vST/memra
R=$OUT/run96.txt; T0=$(date +%s)
g() { echo "## $* (t=$(( $(date +%s) - T0 ))s)" >> $R; local t0=$(date +%s); timeout 200 "$@" >> $R 2>&1; echo "rc=$? $(( $(date +%s) - t0 ))s" >> $R; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >> $R
mkdir -p /tmp/m
g $S gate chunks synth:flash-shape,layers=4 --variant exact --prompt-len 2176 --widths 256 --out /tmp/m/chunks_flash4.json
g $S synth --preset small --seed 1 --out /tmp/m/small
g $S gate compare /tmp/m/small --variant exact --prompt-len 160
for b in $S $M $S; do
  g $b bench roofline --layers 4 --contexts 1024 --prefill 4096 --prefill-reps 1
done
g $S gate chunks synth:flash-shape,layers=4 --variant fp8 --prompt-len 2176 --widths 256 --out /tmp/m/chunks_flash4_fp8.json
NCU="/usr/local/cuda/bin/ncu --clock-control none --cache-control none --metrics regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,regex:sm__pipe_(alu|fma|fp64|shared|tensor_op_dmma)_cycles_active\.avg\.pct_of_peak_sustained_active,smsp__inst_executed.sum,smsp__issue_active.avg.pct_of_peak_sustained_active,gpu__time_duration.sum,l1tex__t_sector_hit_rate.pct,lts__t_sector_hit_rate.pct"
[ $(( $(date +%s) - T0 )) -lt 450 ] && g $NCU --kernel-name attention_mma --launch-skip 1 --launch-count 1 \
    $S bench roofline --layers 2 --contexts 1024 --prefill 4096 --prefill-reps 1 --steps 3
echo "end t=$(( $(date +%s) - T0 ))s" >> $R
grep -hE "^## |rc=|^prefill|^breakdown prefill|^end|^compare|^chunk gate|rror|anic|H200|stalled|pipe_|inst_executed|issue_active|duration|hit_rate|^  [a-z_]+ \(" $R | cut -c1-300
# build: main -> target/device/memra; next/attn-stage (or git apply docs/results/prepared_session27/attention-staged.patch
# on main) -> target/vST/memra (cargo build --release -p memra; strip -o)
# carry: ["target/device/memra","target/vST/memra"]; run: bash docs/results/prepared_session27/run96.sh; timeout_s 595
