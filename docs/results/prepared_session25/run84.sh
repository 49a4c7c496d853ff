#!/usr/bin/env bash
# twenty-fifth session: which product kernels the prefill launches, and their times, main against next/mma-linear
# (Nsight Compute on the first launches of linear_groups / linear_mma in a 512-token prefill of 2 layers; V = the
# second form, two leaves a step), then V's prefill 4096 roofline and its chunk gate on small.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
M=target/device/memra; V=target/vMMA2/memra
R=$OUT/run84.txt; T0=$(date +%s)
for b in $V $M; do
  echo "## $b (t=$(( $(date +%s) - T0 ))s)" >> $R
  timeout 200 /usr/local/cuda/bin/ncu --clock-control none --cache-control none --kernel-name regex:"linear_(mma|groups)" \
    --launch-count 16 --metrics gpu__time_duration.sum,smsp__inst_executed.sum,smsp__issue_active.avg.pct_of_peak_sustained_active,launch__grid_size,launch__registers_per_thread \
    --csv $b bench roofline --layers 2 --contexts 1024 --prefill 512 --prefill-reps 1 --steps 3 >> $R 2>&1
  echo "rc=$?" >> $R
done
echo "## roofline V" >> $R; timeout 150 $V bench roofline --layers 4 --contexts 1024 --prefill 4096 --prefill-reps 1 >> $R 2>&1
mkdir -p /tmp/m; $V synth --preset small --seed 1 --out /tmp/m/small >> $R 2>&1
timeout 60 $V gate chunks /tmp/m/small --variant exact --prompt-len 160 --out /tmp/m/c.json >> $R 2>&1
echo "end t=$(( $(date +%s) - T0 ))s" >> $R
grep -E "linear_" $R | awk -F'","' '{print $5, $13, $15}' | cut -c1-200
grep -E "^## |rc=|^end|rror|^prefill|^breakdown|^chunk" $R | cut -c1-300
