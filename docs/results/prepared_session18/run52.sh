#!/usr/bin/env bash
# prepared in the eighteenth session for the next: PK = next/product-kernels (one one-token product kernel per rows a
# warp and format, perf.md "The gap" item 11; target/vPK/memra), M = main (target/device/memra): the flash-shape chunk
# gate on PK, `same` (PK's logits against M's), Nsight Compute's fetch stalls on PK's products (the launches run 4 of
# the eighteenth session profiled on main), rooflines 1k alternating PK, M
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
M=target/device/memra; P=target/vPK/memra
R=$OUT/run52.txt
T0=$(date +%s)
g() { echo "## $* (t=$(( $(date +%s) - T0 ))s)" >> $R; local t0=$(date +%s); timeout 170 "$@" >> $R 2>&1; echo "rc=$? $(( $(date +%s) - t0 ))s" >> $R; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >> $R
g $P gate chunks synth:flash-shape,layers=4 --variant exact --prompt-len 256 --widths 1,256 --out $OUT/chunks_flash4_PK.json
MEMRA=$P BASE=$M OUT=$OUT/same timeout 150 bash scripts/gpu_gates.sh same >> $R 2>&1; echo "same rc=$?" >> $R
NCU=/usr/local/cuda/bin/ncu
MET="smsp__issue_active.avg.pct_of_peak_sustained_active,smsp__inst_executed.sum,gpu__time_duration.sum,smsp__average_warps_issue_stalled_no_instruction_per_issue_active.ratio,smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio"
[ $(( $(date +%s) - T0 )) -lt 330 ] && g $NCU --clock-control none --metrics $MET \
  --kernel-name 'regex:^(expert_(gate_up|down)|linear_t1_r[124]_[a-z0-9]+)$' --launch-skip 30 --launch-count 12 \
  $P bench roofline --layers 4 --contexts 1024 --prefill 0 --steps 3
for b in $P $M $P $M; do
  [ $(( $(date +%s) - T0 )) -lt 480 ] && g $b bench roofline --layers 4 --contexts 1024 --prefill 0
done
echo "end t=$(( $(date +%s) - T0 ))s" >> $R
grep -E "^## |^rc=|^decode b1|^breakdown|^  [a-z_0-9]+ \(|no_instruction|issue_active|inst_executed|gpu__time|^chunk|^end|rror|same |H200" $R | cut -c1-300
# carry: ["target/device/memra","target/vPK/memra","prof/run52.sh"]; timeout_s 590
