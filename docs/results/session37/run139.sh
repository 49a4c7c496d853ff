#!/usr/bin/env bash
# thirty-seventh session: main d8ba9a1's headline (N = run138's B merged: the experts' f32 pairs scaled by an integer
# add to the exponent field, expert_gate_up_mma 27.9 -> 24.7 ms a launch in run138) and D = ab6754e (branch
# next/stage-int: linear_mma's stages scale FP8 and FP4 rows' token values the same way; ptxas 13.0: the loops as
# d8ba9a1's but 12 DMUL -> VIADD a stage, registers and spills unchanged, linear_mma_bf16 unchanged).
# Order: the flash-shape chunk gate exact on N; rooflines N D N D N (1k, 8k, 32k, prefill 4096); Nsight Compute's
# duration of every linear_mma* launch of N and D; the flash-shape chunk gate exact on D.
set -u
mkdir -p /tmp/m
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
T=$OUT/run139.txt; T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
g() { echo "## $* (t=$(el)s)" >> $T; local t0=$(date +%s); timeout 200 "$@" >> $T 2>&1; local rc=$?; echo "rc=$rc $(( $(date +%s) - t0 ))s" >> $T; return $rc; }
bin() { [ $1 = N ] && echo target/device/memra || echo target/v$1/memra; }
roof() { g $(bin $1) bench roofline --layers 4 --contexts 1024,8192,32768 --prefill 4096 --prefill-reps 1; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >> $T
g target/device/memra gate chunks synth:flash-shape,layers=4 --variant exact --prompt-len 2176 --widths 256 --out /tmp/m/chunks_flash4_N.json
for X in N D N D N; do [ $(el) -lt 400 ] && roof $X; done
for X in N D; do
  [ $(el) -lt 440 ] || continue
  echo "## ncu $X (t=$(el)s)" >> $T
  timeout 60 /usr/local/cuda/bin/ncu --clock-control none --kernel-name regex:'^linear_mma' \
    --metrics gpu__time_duration.sum,launch__registers_per_thread --csv --page raw \
    $(bin $X) bench roofline --layers 2 --contexts 1024 --steps 1 --prefill 4096 --prefill-reps 1 > $OUT/ncu_$X.csv 2> $OUT/ncu_$X.err
  echo "rc=$? launches $(grep -c '"linear_mma' $OUT/ncu_$X.csv)" >> $T
done
[ $(el) -lt 490 ] && g target/vD/memra gate chunks synth:flash-shape,layers=4 --variant exact --prompt-len 2176 --widths 256 --out /tmp/m/chunks_flash4_D.json
for X in N D; do
  p=$(awk -v b="## $(bin $X) bench roofline" 'index($0, "## ") == 1 {on = index($0, b) == 1} on && /^prefill 4096/{s+=$3; n++} END{print (n ? s/n : 1e9)}' $T)
  echo "## prefill mean $X $p" >> $T
done
echo "end t=$(el)s" >> $T
grep -hE "^## |rc=|^prefill|^decode|^breakdown|^chunk gate|^ceilings|rror|anic|H200|^end" $T | cut -c1-250
# build: main d8ba9a1 -> target/device/memra; next/stage-int ab6754e -> target/vD/memra.
# carry: ["target/device/memra", "target/vD/memra"]; run: bash docs/results/session37/run139.sh; timeout_s 560.
