#!/usr/bin/env bash
# Prepared in the forty-eighth session, not run (its device time ran out): the chunk gates that
# 56dcf57 (the heads' norm and rotation in the decode attention, rotations from a table) has not yet
# passed on itself (the forty-seventh session's v1 passed them; the forty-eighth ran only flash shape exact,
# widths 1 and 256), then, where the machine is an H200, the full roofline for the headline (perf.md's
# table is d8ba9a1's). Build main, strip to target/device/memra, carry it.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
M=target/device/memra
T=$OUT/run166.txt; T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
g() { echo "## $* (t=$(el)s)" >> $T; local t0=$(date +%s); timeout ${TO:-150} "$@" >> $T 2>&1; local rc=$?; echo "rc=$rc $(( $(date +%s) - t0 ))s" >> $T; return $rc; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >> $T
mkdir -p /tmp/m
TO=200 g $M gate chunks synth:flash-shape,layers=4 --variant fp8 --prompt-len 256 --widths 1,256 --out $OUT/chunks_flash4_fp8.json
TO=120 g $M gate chunks synth:flash-shape,layers=4 --variant exact --prompt-len 2112 --widths 1,1056 --out $OUT/chunks_flash4_2112.json
TO=30 g $M synth --preset small --seed 1 --out /tmp/m/small
TO=120 g $M gate chunks /tmp/m/small --variant exact --prompt-len 160 --out $OUT/chunks_small_exact.json
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  for r in 1 2 3; do
    [ $(el) -lt ${GUARD:-400} ] || continue
    TO=150 g $M bench roofline --layers 4 --out $OUT/roofline_$r.json
  done
else
  for r in 1 2 3; do
    [ $(el) -lt ${GUARD:-400} ] || continue
    TO=60 g $M bench roofline --layers 4 --contexts 1024 --prefill 0
  done
fi
grep -E "^(## |rc=|ceilings|decode b1|prefill|breakdown|chunk gate|error)" $T | cut -c1-260 | tail -40
