#!/usr/bin/env bash
# prepared in the thirty-fifth session for the next: linear_mma in two kernels (E = mma-short.patch on main, branch
# next/mma-narrow): rows of 1 or 2 chunks a lane (wq_b, the indexer's queries) in linear_mma_short, without
# b63430a's leaf stack level 0 in registers; rows of 4 and more in linear_mma; each kernel with registers of its own.
# Why (thirty-fifth session, run 3, Nsight Compute by launch): in the one kernel that holds every round, the kept
# zeros of the long rows cost the short rows' rounds ~2% (wq_b 9.53 -> 9.75 ms a launch) and the leaf pairs 2%
# more (9.96), while the long rows got 5-6% faster. ptxas 13.0: linear_mma_short 168 registers, 4 bytes of spill
# stores, its loops 54.8 (K = 1) and 62.1 (K = 2) instructions a DMMA (cf33079's 54.4, 61.6); linear_mma's FP8 loops
# 59.4, 57.1, 59.8 (K = 4, 8, 16; b63430a's 60.0, 57.0, 60.3); linear_mma_bf16 back to cf33079's SASS (144
# registers; 168 in b63430a). Predicted: wq_b and the indexer's queries back to cf33079's times, the rest as
# b63430a: ~2 ms off the prefill (launch sums, 4 layers).
#   M = main (target/device/memra), E = mma-short.patch on main (target/vE/memra, target/vE/libdspark.so).
# Order: the quick gates on E (every step passes but the faults, which must fail), the flash-shape chunk gates exact
# and fp8 on E, rooflines E, M, E, M (each build's first process also JIT-compiles its kernels), Nsight Compute's
# duration of every tensor-core product launch of E and M, then, if E's mean prefill is shorter and time is left,
# E's headline (three processes; else run it in a second call).
set -u
mkdir -p /tmp/m
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
T=$OUT/run131.txt; T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
g() { echo "## $* (t=$(el)s)" >> $T; local t0=$(date +%s); timeout 200 "$@" >> $T 2>&1; local rc=$?; echo "rc=$rc $(( $(date +%s) - t0 ))s" >> $T; return $rc; }
bin() { [ $1 = M ] && echo target/device/memra || echo target/v$1/memra; }
roof() { g $(bin $1) bench roofline --layers 4 --contexts 1024 --prefill 4096 --prefill-reps 1; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >> $T
D=target/vE; ok=1
echo "## quick on E (t=$(el)s)" >> $T
OUT=$OUT/quick_E MEMRA=$D/memra PLUGINS=$D timeout 280 bash scripts/gpu_gates.sh quick > $OUT/quick_E.txt 2>&1 || ok=0
cat $OUT/quick_E.txt >> $T
# every step rc=0 but the FAULT steps, which must fail (rc=1); speculative tokens equal to plain greedy
awk '/ rc=[0-9]+ /{match($0, / rc=[0-9]+ /); rc = substr($0, RSTART + 4, RLENGTH - 5) + 0;
  if (($0 ~ /FAULT/) != (rc != 0)) bad++} END{exit bad > 0}' $OUT/quick_E/summary.txt || ok=0
grep -q "equal to plain greedy True" $OUT/quick_E.txt || ok=0
g $D/memra gate chunks synth:flash-shape,layers=4 --variant exact --prompt-len 2176 --widths 256 --out /tmp/m/chunks_flash4_E.json || ok=0
g $D/memra gate chunks synth:flash-shape,layers=4 --variant fp8 --prompt-len 2176 --widths 256 --out /tmp/m/chunks_flash4_fp8_E.json || ok=0
echo "## gates E ok=$ok (t=$(el)s)" >> $T
for X in E M E M; do [ $(el) -lt 450 ] && roof $X; done
for X in E M; do
  [ $(el) -lt 520 ] || continue
  echo "## ncu $X (t=$(el)s)" >> $T
  timeout 60 /usr/local/cuda/bin/ncu --clock-control none --kernel-name regex:'^linear_mma' \
    --metrics gpu__time_duration.sum,launch__grid_size,launch__registers_per_thread --csv --page raw \
    $(bin $X) bench roofline --layers 2 --contexts 1024 --steps 1 --prefill 4096 --prefill-reps 1 > $OUT/ncu_$X.csv 2> $OUT/ncu_$X.err
  echo "rc=$? launches $(grep -c '"linear_mma' $OUT/ncu_$X.csv)" >> $T
done
for X in E M; do
  p=$(awk -v b="## $(bin $X) bench roofline" 'index($0, "## ") == 1 {on = index($0, b) == 1} on && /^prefill 4096/{s+=$3; n++} END{print (n ? s/n : 1e9)}' $T)
  echo "## prefill mean $X $p" >> $T
done
echo "end t=$(el)s" >> $T
grep -hE "^## |rc=|^prefill|^decode|^breakdown prefill|^compare|^chunk gate|rror|anic|H200|equal to plain|^end" $T | cut -c1-250
# build: main -> target/device/memra (cargo build --release -p memra; strip -o); git apply
# docs/results/prepared_session35/mma-short.patch on main -> target/vE/memra and target/vE/libdspark.so (cargo build
# --release --workspace; strip -o; git apply -R). carry: ["target/device/memra","target/vE/memra",
# "target/vE/libdspark.so"]; run: bash docs/results/prepared_session35/run131.sh; timeout_s 595. If E passes and is
# faster: merge the patch, then the headline (three processes of `bench roofline --layers 4 --contexts
# 1024,8192,32768 --prefill 4096 --prefill-reps 1 --out ...`) in a second call.
