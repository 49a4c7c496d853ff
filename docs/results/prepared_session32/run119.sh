#!/usr/bin/env bash
# prepared in the thirty-second session for the next (perf.md "Steps so far", thirty-second session): built,
# never run. What holds the prefill's kernels, from Nsight Compute's sections on main (target/device/memra, the
# build of main): hc_site_rows first (its 4 launches of a layer pair: the site without a post, an attention-post
# site, a MoE-post site; 1.07-1.97 ms each, and mix_mma's faster trees did not shorten them), then one launch of
# each of the largest prefill kernels (the experts' two, linear_mma, attention_mma), each its own process.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
M=target/device/memra
R=$OUT/run119.txt; T0=$(date +%s)
g() { echo "## $* (t=$(( $(date +%s) - T0 ))s)" >> $R; local t0=$(date +%s); timeout 240 "$@" >> $R 2>&1; echo "rc=$? $(( $(date +%s) - t0 ))s" >> $R; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >> $R
S="--section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis"
P="bench roofline --layers 2 --contexts 1024 --steps 1 --prefill 4096 --prefill-reps 1"
# every kernel's time in a 2-layer roofline (its prefill among them), to $OUT/ncu_all.txt; summed by name below
echo "## ncu all kernels (t=$(( $(date +%s) - T0 ))s)" >> $R
timeout 200 /usr/local/cuda/bin/ncu --clock-control none --metrics gpu__time_duration.sum $M $P > $OUT/ncu_all.txt 2>&1
echo "rc=$?" >> $R
awk '/^  [a-z_0-9]+ \(/ {k=$1} /^ +gpu__time_duration.sum/ {v=$NF; if ($2=="us") v/=1000; if ($2=="ns") v/=1e6; s[k]+=v; c[k]++} END {for (k in s) printf "%-28s %5d launches %10.3f ms\n", k, c[k], s[k]}' $OUT/ncu_all.txt | sort -k4 -rn >> $R
g /usr/local/cuda/bin/ncu --clock-control none $S --kernel-name hc_site_rows --launch-count 4 $M $P
for k in expert_gate_up_mma expert_down_mma linear_mma attention_mma; do
  [ $(( $(date +%s) - T0 )) -lt 420 ] && g /usr/local/cuda/bin/ncu --clock-control none $S --kernel-name $k --launch-count 1 $M $P
done
echo "end t=$(( $(date +%s) - T0 ))s" >> $R
grep -hE "^## |rc=|^end|rror| launches |  [a-z_]+ \(|Duration|Throughput|Achieved Occupancy|Registers Per|Stall|Issued Warp|No Eligible|Block Limit|One or More" $R | cut -c1-200
# carry: ["target/device/memra"] (main's build: cargo build --release -p memra; strip -o); timeout_s 500
