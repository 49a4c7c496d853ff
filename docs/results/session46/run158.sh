#!/usr/bin/env bash
# Prepared in the forty-fifth session, not run: `moe_route` taking the top k of each warp by shuffles and
# then the top k of those in warp 0 (route-warps.patch against c4993c3, with a CPU model test of the selection: one barrier instead of 2 a pass; the
# same experts in the same order, so every bit the same). Build memra with the patch applied and
# memra_base from main, carry both. Checks: the logits of every position against main's (small exact
# and fp8, flash shape 4 layers), the chunk gates, then decode 1k rooflines alternating (the predicted
# gain, ~1-2 us a layer on moe.router's path, is below the spread of processes: read moe.router in the
# breakdown lines).
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
M=target/device/memra; B=target/device/memra_base
T=$OUT/run158.txt; T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
g() { echo "## $* (t=$(el)s)" >> $T; local t0=$(date +%s); timeout ${TO:-150} "$@" >> $T 2>&1; local rc=$?; echo "rc=$rc $(( $(date +%s) - t0 ))s" >> $T; return $rc; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >> $T
TO=300 g env MEMRA=$M BASE=$B OUT=$OUT/same bash scripts/gpu_gates.sh same
cat $OUT/same/summary.txt >> $T
TO=90 g $M gate chunks /tmp/m/small --variant exact --prompt-len 160 --out $OUT/chunks_small_exact.json
TO=90 g $M gate chunks synth:flash-shape,layers=4 --variant exact --prompt-len 256 --widths 1,256 --out $OUT/chunks_flash4.json
for r in 1 2 3; do for X in "$B" "$M"; do
  [ $(el) -lt ${GUARD:-460} ] || continue
  TO=70 g $X bench roofline --layers 4 --contexts 1024 --prefill 0
done; done
grep -E "^(## |rc=|decode b1|breakdown|chunk gate|same |error)" $T | cut -c1-260 | tail -60
