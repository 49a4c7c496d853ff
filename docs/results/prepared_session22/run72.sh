#!/usr/bin/env bash
# prepared in the twenty-second session for the next (perf.md "The gap", item 17): two variants of the
# one-token products' shared-memory ring against main (78f85dd or later; target/device/memra):
#   W = next/ring-warps (ring-warps.patch): blocks of 4, 8 or 16 warps, whichever lets an SM hold the most
#       warps with their rings (target/vRW/memra);
#   T = next/ring-3 (ring-3.patch): 3 stages (2 ahead) for warps of 2 or 4 rows (target/vR3/memra).
# Exactness of each on small (compare exact, chunk gate fp8), then decode-1k rooflines alternating, then the
# flash-shape tf gate of W. Build each branch, strip to its folder, rebuild main last.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
M=target/device/memra; W=target/vRW/memra; T=target/vR3/memra
R=$OUT/run72.txt; T0=$(date +%s)
g() { echo "## $* (t=$(( $(date +%s) - T0 ))s)" >> $R; local t0=$(date +%s); timeout 150 "$@" >> $R 2>&1; echo "rc=$? $(( $(date +%s) - t0 ))s" >> $R; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >> $R
mkdir -p /tmp/m
g $W synth --preset small --seed 1 --out /tmp/m/small
for b in $W $T; do
  g $b gate compare /tmp/m/small --variant exact --prompt-len 160
  g $b gate chunks /tmp/m/small --variant fp8 --prompt-len 160 --out /tmp/m/chunks.json
done
for b in $M $W $T $M $W $T $M $W $T; do
  [ $(( $(date +%s) - T0 )) -lt 440 ] || break
  g $b bench roofline --layers 4 --contexts 1024 --prefill 0
done
if [ $(( $(date +%s) - T0 )) -lt 480 ]; then
  g $W bank --model synth:flash-shape,layers=4 --prompt-len 8 --n 12 --variant exact --out /tmp/m/bank_flash4.json
  g $W gate tf synth:flash-shape,layers=4 /tmp/m/bank_flash4.json /tmp/m/tf_flash4
fi
echo "end t=$(( $(date +%s) - T0 ))s" >> $R
grep -hE "^## |rc=|^decode b1|^breakdown|^end|^compare|^chunk gate|^tf gate|rror|anic|H200" $R | cut -c1-300
# carry: ["target/device/memra","target/vRW/memra","target/vR3/memra","docs/results/prepared_session22/run72.sh"]
# run: bash docs/results/prepared_session22/run72.sh; timeout_s 595
