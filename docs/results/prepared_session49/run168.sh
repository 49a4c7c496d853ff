#!/usr/bin/env bash
# Prepared in the forty-ninth session, not run; the call after run167.sh, while the machine is warm: on an H200, the headline roofline
# (decode 1k, 8k, 32k and the 4096-token prefill) in three processes of build $1 (default
# target/device/memra); on any other card, the exact and the tensor sums' decode 1k alternating
# (session45/run157.sh's question) instead.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
B=${1:-target/device/memra}
T=$OUT/run168.txt; T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
g() { echo "## $* (t=$(el)s)" >> $T; local t0=$(date +%s); timeout ${TO:-150} "$@" >> $T 2>&1; local rc=$?; echo "rc=$rc $(( $(date +%s) - t0 ))s" >> $T; return $rc; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >> $T
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  for r in 1 2 3; do
    [ $(el) -lt ${GUARD:-330} ] || continue
    TO=150 g $B bench roofline --layers 4 --contexts 1024,8192,32768 --prefill 4096 --prefill-reps 1 --out $OUT/roofline_$r.json
  done
else
  for r in 1 2; do for S in exact tensor; do
    [ $(el) -lt ${GUARD:-330} ] || continue
    TO=90 g $B bench roofline --layers 4 --contexts 1024 --prefill 0 --sums $S
  done; done
fi
grep -E "^(## |rc=|ceilings|decode b1|prefill|breakdown|error)" $T | cut -c1-260 | tail -40
