#!/usr/bin/env bash
# thirty-first session, run 3: main 1e5b7c0 (target/device/memra): the headline roofline twice more (run 2's
# process ran slow throughout: ceilings and every op ~1% off), so that perf.json takes the median of three processes.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
M=target/device/memra
R=$OUT/run114.txt; T0=$(date +%s)
g() { echo "## $* (t=$(( $(date +%s) - T0 ))s)" >> $R; local t0=$(date +%s); timeout 200 "$@" >> $R 2>&1; echo "rc=$? $(( $(date +%s) - t0 ))s" >> $R; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >> $R
for i in 1 2; do
  g $M bench roofline --layers 4 --contexts 1024,8192,32768 --prefill 4096 --prefill-reps 1 --out $OUT/roofline_main_$i.json
done
echo "end t=$(( $(date +%s) - T0 ))s" >> $R
grep -hE "^## |rc=|^prefill|^decode|^breakdown|^end|^ceilings|rror|anic|H200" $R | cut -c1-400
# carry: ["target/device/memra"]; run: bash docs/results/prepared_session31/run114.sh; timeout_s 250
