#!/usr/bin/env bash
# prepared in the thirty-second session for the next (perf.md "The gap", item 6): built, never run on a GPU.
# Run after run120.sh, if next/hc-posts measured faster than main.
#   Q  = next/hc-posts (hc-posts.patch on main; target/vQ/memra),
#   Q8 = next/hc-posts8 (hc-posts8.patch on main; target/vQ8/memra): the same with eight tokens a block
#        (HC_ROWS_TOKENS 8: fn's staged rows serve eight tokens; 57.8 KiB of shared memory at Flash widths, so
#        three blocks an SM, __launch_bounds__(256, 3); ptxas 13.0: 80 registers, no spills).
# Exactness of Q8 first (compare small exact and fp8, the chunk gate small, the flash-shape exact chunk gate),
# then rooflines Q8, Q, Q8, Q and Nsight Compute's times of the hc kernels on Q8.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
Q=target/vQ/memra; Q8=target/vQ8/memra
R=$OUT/run121.txt; T0=$(date +%s)
g() { echo "## $* (t=$(( $(date +%s) - T0 ))s)" >> $R; local t0=$(date +%s); timeout 200 "$@" >> $R 2>&1; echo "rc=$? $(( $(date +%s) - t0 ))s" >> $R; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >> $R
mkdir -p /tmp/m
g $Q8 synth --preset small --seed 1 --out /tmp/m/small
g $Q8 gate compare /tmp/m/small --variant exact --prompt-len 160
g $Q8 gate compare /tmp/m/small --variant fp8 --prompt-len 160
g $Q8 gate chunks /tmp/m/small --variant exact --prompt-len 160 --out /tmp/m/chunks_small.json
g $Q8 gate chunks synth:flash-shape,layers=4 --variant exact --prompt-len 2176 --widths 256 --out /tmp/m/chunks_flash4.json
for b in $Q8 $Q $Q8 $Q; do
  g $b bench roofline --layers 4 --contexts 1024 --prefill 4096 --prefill-reps 1
done
[ $(( $(date +%s) - T0 )) -lt 450 ] && g /usr/local/cuda/bin/ncu --clock-control none --metrics gpu__time_duration.sum \
  --kernel-name regex:"hc_site_rows|hc_collapse_rows|hc_post" $Q8 bench roofline --layers 2 --contexts 1024 --steps 1 --prefill 4096 --prefill-reps 1
echo "end t=$(( $(date +%s) - T0 ))s" >> $R
grep -hE "^## |rc=|^prefill|^decode|^breakdown|^end|^compare|^chunk gate|rror|anic|H200" $R | cut -c1-300
grep -A1 -E "^  hc_(site_rows|collapse_rows|post)" $R | grep -E "hc_|duration" | paste - - | awk '{print $1, $2, $NF}'
# build: next/hc-posts -> target/vQ/memra, next/hc-posts8 -> target/vQ8/memra (or git apply the patches on main;
# cargo build --release -p memra; strip -o).
# carry: ["target/vQ/memra","target/vQ8/memra"]; run: bash docs/results/prepared_session32/run121.sh; timeout_s 595
