#!/usr/bin/env bash
# twenty-ninth session, run 2: main at 2de8c44 (hc-stage-loop landed: run 1 = run100.sh, hc 20.7 -> 19.7 ms).
# Its fp8 flash-shape chunk gate and compare small fp8, the headline (1k, 8k, 32k and prefill 4096), then Nsight
# Compute on the two tensor-core product kernels that hold most of the prefill (expert_gate_up_mma: the routed
# experts' FP4 gate/up; linear_mma: the dense FP8 products), first launch of a 1-layer prefill of 4096: which pipes
# their instructions take (InstructionStats, ComputeWorkloadAnalysis), stall reasons (WarpStateStats) and each SASS
# instruction's executed count and sampled stalls (SourceCounters, as CSV), to choose the next step on them.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
M=${MEMRA:-target/device/memra}
R=$OUT/run102.txt; T0=$(date +%s)
g() { echo "## $* (t=$(( $(date +%s) - T0 ))s)" >> $R; local t0=$(date +%s); timeout 200 "$@" >> $R 2>&1; echo "rc=$? $(( $(date +%s) - t0 ))s" >> $R; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >> $R
mkdir -p /tmp/m
g $M synth --preset small --seed 1 --out /tmp/m/small
g $M gate chunks synth:flash-shape,layers=4 --variant fp8 --prompt-len 2176 --widths 256 --out /tmp/m/chunks_flash4_fp8.json
g $M gate compare /tmp/m/small --variant fp8 --prompt-len 160
g $M bench roofline --layers 4 --contexts 1024,8192,32768 --prefill 4096 --prefill-reps 1 --out $OUT/roofline.json
NCU=/usr/local/cuda/bin/ncu
i=0
for k in expert_gate_up_mma linear_mma; do
  i=$((i + 1))
  [ $(( $(date +%s) - T0 )) -lt 450 ] || break
  g $NCU --clock-control none --section SourceCounters --section WarpStateStats --section InstructionStats \
    --section ComputeWorkloadAnalysis --section SchedulerStats --section LaunchStats --section Occupancy \
    -o /tmp/m/k$i --kernel-name $k --launch-count 1 \
    $M bench roofline --layers 1 --contexts 1024 --steps 1 --prefill 4096 --prefill-reps 1
  $NCU --import /tmp/m/k$i.ncu-rep --page details > $OUT/${k}_details.txt 2>> $R
  $NCU --import /tmp/m/k$i.ncu-rep --page raw --csv > $OUT/${k}_raw.csv 2>> $R
  $NCU --import /tmp/m/k$i.ncu-rep --page source --csv --print-source sass > $OUT/${k}_sass.csv 2>> $R
done
echo "end t=$(( $(date +%s) - T0 ))s" >> $R
grep -hE "^## |rc=|^prefill|^decode|^breakdown|^end|^compare|^chunk gate|rror|anic|H200" $R | cut -c1-300
# build: main -> target/device/memra (cargo build --release -p memra; strip -o)
# carry: ["target/device/memra"]; run: bash docs/results/prepared_session29/run102.sh; timeout_s 595
