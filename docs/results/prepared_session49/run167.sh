#!/usr/bin/env bash
# Prepared in the forty-ninth session, not run (no device machine started: thirteen failed or refused
# starts spent its 30 minutes). The one-token products' weight rings run on across a warp's row groups
# (ring-across-groups.patch on main: build, strip to target/device/memra) against main
# (target/device/memra_base). First the chunk gates on the change (decode steps against the prefill's
# logits, bit for bit: the flash shape exact widths 1 and 256, small exact), then decode 1k in
# alternating processes of the two builds, then (LATE) the flash shape fp8 widths 1 and 256 and exact
# at 2112 positions widths 1 and 1056. GUARD, LATE and SMALL=0 shorten it for a small device budget.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
R=target/device/memra; M=target/device/memra_base
T=$OUT/run167.txt; T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
g() { echo "## $* (t=$(el)s)" >> $T; local t0=$(date +%s); timeout ${TO:-150} "$@" >> $T 2>&1; local rc=$?; echo "rc=$rc $(( $(date +%s) - t0 ))s" >> $T; return $rc; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >> $T
mkdir -p /tmp/m
TO=170 g $R gate chunks synth:flash-shape,layers=4 --variant exact --prompt-len 256 --widths 1,256 --out $OUT/chunks_flash4_exact.json
[ ${SMALL:-1} = 1 ] && TO=30 g $R synth --preset small --seed 1 --out /tmp/m/small
[ ${SMALL:-1} = 1 ] && TO=90 g $R gate chunks /tmp/m/small --variant exact --prompt-len 160 --out $OUT/chunks_small_exact.json
for r in 1 2 3; do
  for B in $M $R; do
    [ $(el) -lt ${GUARD:-440} ] || continue
    TO=90 g $B bench roofline --layers 4 --contexts 1024 --prefill 0
  done
done
[ $(el) -lt ${LATE:-470} ] && TO=100 g $R gate chunks synth:flash-shape,layers=4 --variant fp8 --prompt-len 256 --widths 1,256 --out $OUT/chunks_flash4_fp8.json
[ $(el) -lt $(( ${LATE:-470} + 30 )) ] && TO=80 g $R gate chunks synth:flash-shape,layers=4 --variant exact --prompt-len 2112 --widths 1,1056 --out $OUT/chunks_flash4_2112.json
grep -E "^(## |rc=|ceilings|decode b1|breakdown|chunk gate|PASS|FAIL|error)" $T | cut -c1-240 | tail -60
