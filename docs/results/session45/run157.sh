#!/usr/bin/env bash
# forty-fifth session, run 3: the exact and the tensor sums' decode 1k in one process each, alternating on
# one machine, on eeb0f10 (the experts in row tiles under the tensor sums): which arm decodes faster.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
M=target/device/memra
T=$OUT/run157.txt; T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
g() { echo "## $* (t=$(el)s)" >> $T; local t0=$(date +%s); timeout ${TO:-150} "$@" >> $T 2>&1; local rc=$?; echo "rc=$rc $(( $(date +%s) - t0 ))s" >> $T; return $rc; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >> $T
to=150
for r in 1 2; do for S in exact tensor; do
  [ $(el) -lt ${GUARD:-200} ] || continue
  TO=$to g $M bench roofline --layers 4 --contexts 1024 --prefill 0 --sums $S; to=60
done; done
grep -E "^(## |rc=|decode b1|breakdown|ceilings|error)" $T | cut -c1-260
