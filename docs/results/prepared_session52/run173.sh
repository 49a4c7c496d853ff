#!/usr/bin/env bash
# Prepared in the fifty-second session: the H200 headline with the weights'
# L2 evict-first policy (main eb84de3 or later, target/device/memra_main),
# three processes of the headline roofline (decode 1k, 8k, 32k and the
# 4096-token prefill); perf.md's headline is the middle one. Only on an
# H200: on any other card it says so and stops (run172.sh is the call
# that any card can answer).
set -u
R=${OUT:-out}
B=${1:-target/device/memra_main}
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee $R/run173.txt
if ! nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  echo "not an H200: no headline" | tee -a $R/run173.txt
  exit 0
fi
for r in 1 2 3; do
  echo "## process $r" >> $R/run173.txt
  timeout 150 $B bench roofline --layers 4 --contexts 1024,8192,32768 --prefill 4096 --prefill-reps 1 \
    --out $R/roofline_$r.json >> $R/run173.txt 2>&1
  echo "rc=$?" >> $R/run173.txt
done
grep -E "^(## |rc=|ceilings|decode b1|prefill|breakdown|error)" $R/run173.txt | cut -c1-260
