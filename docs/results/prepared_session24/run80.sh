#!/usr/bin/env bash
# prepared in the twenty-fourth session for the next (perf.md "The gap", item 5): the indexer's kernels alone after
# a47aaf3 and 0a13546 (not measured: no device time was left), and a top-k with one block scan for its write offsets.
#   M  = main (target/device/memra; the kernels of 4fb5533)
#   OS = next/topk-one-scan (topk-one-scan.patch): indexer_topk's offsets from one scan of the packed (above, equal)
#        counts instead of a sum and two scans (4 block barriers fewer a launch; target/vOS/memra)
# Nsight Compute on the indexer's kernels at 32k (2 layers: one CSA layer), exactness of OS on tiny/small and the
# flash-shape chunk gate past the indexer's bound, then 32k rooflines alternating.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
M=target/device/memra; OS=target/vOS/memra
R=$OUT/run80.txt; T0=$(date +%s)
g() { echo "## $* (t=$(( $(date +%s) - T0 ))s)" >> $R; local t0=$(date +%s); timeout 150 "$@" >> $R 2>&1; echo "rc=$? $(( $(date +%s) - t0 ))s" >> $R; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >> $R
mkdir -p /tmp/m
for b in $M $OS; do
  g /usr/local/cuda/bin/ncu --clock-control none --cache-control none --kernel-name regex:indexer --launch-count 8 \
    --metrics gpu__time_duration.sum --csv $b bench roofline --layers 2 --contexts 32768 --prefill 0 --steps 3
done
g $OS synth --preset tiny --seed 0 --out /tmp/m/tiny
g $OS synth --preset small --seed 1 --out /tmp/m/small
g $OS gate compare /tmp/m/tiny --variant exact --prompt-len 160
g $OS gate compare /tmp/m/small --variant exact --prompt-len 96
g $OS gate chunks /tmp/m/small --variant fp8 --prompt-len 160 --out /tmp/m/chunks_f.json
g $OS gate chunks synth:flash-shape,layers=4 --variant exact --prompt-len 2176 --widths 256 --out /tmp/m/chunks_flash4_indexer.json
for b in $M $OS $M $OS; do
  [ $(( $(date +%s) - T0 )) -lt 500 ] || break
  g $b bench roofline --layers 4 --contexts 32768 --prefill 0
done
echo "end t=$(( $(date +%s) - T0 ))s" >> $R
grep -hE "^## |rc=|^decode b1|^breakdown|^end|^compare|^chunk gate|indexer_|rror|anic|H200" $R | cut -c1-300
# build: main -> target/device/memra; next/topk-one-scan -> target/vOS/memra (cargo build --release -p memra; strip -o)
# carry: ["target/device/memra","target/vOS/memra","docs/results/prepared_session24/run80.sh"]
# run: bash docs/results/prepared_session24/run80.sh; timeout_s 595
