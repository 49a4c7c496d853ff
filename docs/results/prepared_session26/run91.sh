#!/usr/bin/env bash
# prepared in the twenty-sixth session for the next (perf.md "The gap", item 6):
#   M = main (target/device/memra), P = next/mma-prefetch (mma-prefetch.patch on main: a round of linear_mma stages the
#   next round's first stage during its last, instead of waiting for it at the round's start; target/vPF/memra).
# Exactness first (the chunk gates small exact and flash-shape; `same` against M), then prefill 4096 rooflines P, M, P,
# then Nsight Compute's stall reasons and pipes for main's tensor-core kernels (linear_mma, the experts' 8-pair tile).
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
M=target/device/memra; P=target/vPF/memra
R=$OUT/run91.txt; T0=$(date +%s)
g() { echo "## $* (t=$(( $(date +%s) - T0 ))s)" >> $R; local t0=$(date +%s); timeout 200 "$@" >> $R 2>&1; echo "rc=$? $(( $(date +%s) - t0 ))s" >> $R; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >> $R
mkdir -p /tmp/m
g $P synth --preset small --seed 1 --out /tmp/m/small
g $P gate chunks /tmp/m/small --variant exact --prompt-len 160 --out /tmp/m/chunks_exact.json
g $P gate chunks synth:flash-shape,layers=4 --variant exact --prompt-len 2176 --widths 256 --out /tmp/m/chunks_flash4.json
for b in $P $M $P; do
  g $b bench roofline --layers 4 --contexts 1024 --prefill 4096 --prefill-reps 1
done
mkdir -p $OUT/same; MEMRA=$P BASE=$M OUT=$OUT/same timeout 200 bash scripts/gpu_gates.sh same > /dev/null 2>&1
cat $OUT/same/summary.txt >> $R 2>/dev/null
# what holds the tensor-core kernels: each warp's stall reasons a issued instruction, the pipes' busy cycles, the
# instructions, on a 4096-token prefill of one layer (the second launch of each: a wq_b-sized linear_mma, the experts)
NCU="/usr/local/cuda/bin/ncu --clock-control none --cache-control none --metrics regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,regex:sm__pipe_.*_cycles_active\.avg\.pct_of_peak_sustained_active,smsp__inst_executed.sum,smsp__issue_active.avg.pct_of_peak_sustained_active,gpu__time_duration.sum"
for k in linear_mma expert_gate_up_mma expert_down_mma; do
  [ $(( $(date +%s) - T0 )) -lt 480 ] && g $NCU --kernel-name $k --launch-skip 1 --launch-count 1 \
    $M bench roofline --layers 1 --contexts 1024 --prefill 4096 --prefill-reps 1 --steps 3
done
echo "end t=$(( $(date +%s) - T0 ))s" >> $R
grep -hE "^## |rc=|^prefill|^breakdown prefill|^end|^chunk gate|^same|rror|anic|H200|stalled|pipe_|inst_executed|issue_active|duration|^  [a-z_]+ \(" $R | cut -c1-300
# build: main -> target/device/memra; next/mma-prefetch -> target/vPF/memra (cargo build --release -p memra; strip -o)
# carry: ["target/device/memra","target/vPF/memra"]; run: bash docs/results/prepared_session26/run91.sh; timeout_s 595
