#!/usr/bin/env bash
# twenty-third session: main (decode_block, 45d23ba) against two variants:
#   WT = next/ring-warps-3: main with a 3-stage ring for warps of 2 or 4 rows (target/vWT/memra);
#   E7 = next/expert-warps-7: the one-pair expert kernels in blocks of 7 warps (3 blocks, 21 warps an SM;
#        target/vE7/memra).
# Exactness of each on small (compare exact, chunk gate fp8), then decode-1k rooflines alternating.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
M=target/device/memra; A=target/vWT/memra; B=target/vE7/memra
R=$OUT/run73.txt; T0=$(date +%s)
g() { echo "## $* (t=$(( $(date +%s) - T0 ))s)" >> $R; local t0=$(date +%s); timeout 150 "$@" >> $R 2>&1; echo "rc=$? $(( $(date +%s) - t0 ))s" >> $R; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >> $R
mkdir -p /tmp/m
g $A synth --preset small --seed 1 --out /tmp/m/small
for b in $A $B; do
  g $b gate compare /tmp/m/small --variant exact --prompt-len 160
  g $b gate chunks /tmp/m/small --variant fp8 --prompt-len 160 --out /tmp/m/chunks.json
done
for b in $M $A $B $M $A $B $M $A $B; do
  [ $(( $(date +%s) - T0 )) -lt 500 ] || break
  g $b bench roofline --layers 4 --contexts 1024 --prefill 0
done
echo "end t=$(( $(date +%s) - T0 ))s" >> $R
grep -hE "^## |rc=|^decode b1|^breakdown|^end|^compare|^chunk gate|rror|anic|H200" $R | cut -c1-300
# carry: ["target/device/memra","target/vWT/memra","target/vE7/memra","docs/results/prepared_session23/run73.sh"]
# run: bash docs/results/prepared_session23/run73.sh; timeout_s 595
