#!/usr/bin/env bash
# prepared in the eighteenth session for the next (perf.md "The gap" item 11): PK = next/product-kernels e0c6582 (a
# one-token product kernel per rows a warp and format; target/vPK/memra), PK2 = next/product-rows2 9221c36 (built at 7828894, a comment apart; PK with FP8
# products at most 2 rows a warp; target/vPK2/memra), M = main (target/device/memra): the flash-shape chunk gate on
# both, Nsight Compute's fetch stalls on both (the launches run 4 of the eighteenth session profiled on main), rooflines
# 1k alternating PK2, PK, M; `same` for the faster is the next run's
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
M=target/device/memra; P=target/vPK/memra; Q=target/vPK2/memra
R=$OUT/run52.txt
T0=$(date +%s)
g() { echo "## $* (t=$(( $(date +%s) - T0 ))s)" >> $R; local t0=$(date +%s); timeout 170 "$@" >> $R 2>&1; echo "rc=$? $(( $(date +%s) - t0 ))s" >> $R; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >> $R
g $Q gate chunks synth:flash-shape,layers=4 --variant exact --prompt-len 256 --widths 1,256 --out $OUT/chunks_flash4_PK2.json
g $P gate chunks synth:flash-shape,layers=4 --variant exact --prompt-len 256 --widths 1,256 --out $OUT/chunks_flash4_PK.json
NCU=/usr/local/cuda/bin/ncu
MET="smsp__issue_active.avg.pct_of_peak_sustained_active,smsp__inst_executed.sum,gpu__time_duration.sum,smsp__average_warps_issue_stalled_no_instruction_per_issue_active.ratio,smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio"
for b in $Q $P; do
  [ $(( $(date +%s) - T0 )) -lt 300 ] && g $NCU --clock-control none --metrics $MET \
    --kernel-name 'regex:^(expert_(gate_up|down)|linear_t1_r[124]_[a-z0-9]+)$' --launch-skip 30 --launch-count 12 \
    $b bench roofline --layers 4 --contexts 1024 --prefill 0 --steps 3
done
for b in $Q $P $M $Q $P $M; do
  [ $(( $(date +%s) - T0 )) -lt 500 ] && g $b bench roofline --layers 4 --contexts 1024 --prefill 0
done
echo "end t=$(( $(date +%s) - T0 ))s" >> $R
grep -E "^## |^rc=|^decode b1|^breakdown|^  [a-z_0-9]+ \(|no_instruction|issue_active|inst_executed|gpu__time|^chunk|^end|rror|H200" $R | cut -c1-300
# carry: ["target/device/memra","target/vPK/memra","target/vPK2/memra","prof/run52.sh"]; timeout_s 590
