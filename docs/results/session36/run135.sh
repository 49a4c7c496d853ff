#!/usr/bin/env bash
# thirty-sixth session: F = branch next/mma-all (target/vF/memra) against E = 06b8110 (target/device/memra).
# run131's Nsight Compute sums by kernel: 06b8110's split took the short rows (wq_b, the indexer's queries) 3.84 ms
# less a 4-layer prefill, but its linear_mma (rows of 4+ chunks) 1.33 ms more and linear_mma_bf16 0.14 more than
# b63430a's. F keeps b63430a's linear_mma and linear_mma_bf16 (every count's rounds, leaf pairs; NVRTC 13.0 +
# nvdisasm: SASS equal to 3602438's, kernel for kernel) and 06b8110's linear_mma_short (SASS equal). Predicted:
# ~1.5 ms off 06b8110's prefill. Both kernels' SASS passed the gates in run126 (b63430a's) and run131 (06b8110's);
# the host's pick is 06b8110's. Order: flash-shape chunk gate exact on F, rooflines F, E, F, E, Nsight Compute's
# duration of every tensor-core product launch of F.
set -u
mkdir -p /tmp/m
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
T=$OUT/run135.txt; T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
g() { echo "## $* (t=$(el)s)" >> $T; local t0=$(date +%s); timeout 200 "$@" >> $T 2>&1; local rc=$?; echo "rc=$rc $(( $(date +%s) - t0 ))s" >> $T; return $rc; }
bin() { [ $1 = E ] && echo target/device/memra || echo target/v$1/memra; }
roof() { g $(bin $1) bench roofline --layers 4 --contexts 1024 --prefill 4096 --prefill-reps 1; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >> $T
g target/vF/memra gate chunks synth:flash-shape,layers=4 --variant exact --prompt-len 2176 --widths 256 --out /tmp/m/chunks_flash4_F.json
for X in F E F E; do [ $(el) -lt 300 ] && roof $X; done
echo "## ncu F (t=$(el)s)" >> $T
timeout 60 /usr/local/cuda/bin/ncu --clock-control none --kernel-name regex:'^linear_mma' \
  --metrics gpu__time_duration.sum,launch__grid_size,launch__registers_per_thread --csv --page raw \
  target/vF/memra bench roofline --layers 2 --contexts 1024 --steps 1 --prefill 4096 --prefill-reps 1 > $OUT/ncu_F.csv 2> $OUT/ncu_F.err
echo "rc=$? launches $(grep -c '"linear_mma' $OUT/ncu_F.csv)" >> $T
for X in F E; do
  p=$(awk -v b="## $(bin $X) bench roofline" 'index($0, "## ") == 1 {on = index($0, b) == 1} on && /^prefill 4096/{s+=$3; n++} END{print (n ? s/n : 1e9)}' $T)
  echo "## prefill mean $X $p" >> $T
done
echo "end t=$(el)s" >> $T
grep -hE "^## |rc=|^prefill|^decode|^breakdown prefill|^chunk gate|rror|anic|H200|^end" $T | cut -c1-250
# build: next/mma-all -> target/vF/memra; main (06b8110) -> target/device/memra. carry: ["target/device/memra",
# "target/vF/memra"]; run: bash docs/results/session36/run135.sh; timeout_s 400.
