#!/usr/bin/env bash
# thirty-seventh session: the experts' gate/up tile (expert_gate_up_mma), after run137's source counters put 27% of
# its stall samples on the B fragments' conversions (4 F2F.F64.F32 + 4 DMUL a DMMA; the DMULs wait on the FP64 pipe
# the DMMAs hold) and 3.7% on the scale bytes' loads.
#   M = main db87625 (target/device/memra); B = d353ee4: the DMUL by 2^(P - 127) as an integer add to the f64's
#   exponent field (target/vB); C = 801bbc7 = B + the weights' chunks read with ld.global.nc.L1::no_allocate in
#   the f32-pairs tile (target/vC). ptxas 13.0, gate/up: M 168 registers, 56 B of spill stores; B 168, 112 B;
#   C 146, none; hot loop (FP4, 4 chunks a lane) 58.6, 59.7, 64.3 instructions a DMMA.
# Order: the flash-shape chunk gate exact on C; rooflines B C M B C M (prefill 4096); Nsight Compute's duration of
# every expert_*_mma launch of M, B, C; the quick gates on C (the faults must fail); the flash-shape gate fp8 on C.
set -u
mkdir -p /tmp/m
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
T=$OUT/run138.txt; T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
g() { echo "## $* (t=$(el)s)" >> $T; local t0=$(date +%s); timeout 200 "$@" >> $T 2>&1; local rc=$?; echo "rc=$rc $(( $(date +%s) - t0 ))s" >> $T; return $rc; }
bin() { [ $1 = M ] && echo target/device/memra || echo target/v$1/memra; }
roof() { g $(bin $1) bench roofline --layers 4 --contexts 1024 --prefill 4096 --prefill-reps 1; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >> $T
D=target/vC; ok=1
g $D/memra gate chunks synth:flash-shape,layers=4 --variant exact --prompt-len 2176 --widths 256 --out /tmp/m/chunks_flash4_C.json || ok=0
for X in B C M B C M; do [ $(el) -lt 300 ] && roof $X; done
for X in M B C; do
  [ $(el) -lt 420 ] || continue
  echo "## ncu $X (t=$(el)s)" >> $T
  timeout 60 /usr/local/cuda/bin/ncu --clock-control none --kernel-name regex:'^expert_.*_mma' \
    --metrics gpu__time_duration.sum,launch__registers_per_thread --csv --page raw \
    $(bin $X) bench roofline --layers 2 --contexts 1024 --steps 1 --prefill 4096 --prefill-reps 1 > $OUT/ncu_$X.csv 2> $OUT/ncu_$X.err
  echo "rc=$? launches $(grep -c '"expert_' $OUT/ncu_$X.csv)" >> $T
done
if [ $(el) -lt 440 ]; then
  echo "## quick on C (t=$(el)s)" >> $T
  OUT=$OUT/quick_C MEMRA=$D/memra PLUGINS=$D timeout 150 bash scripts/gpu_gates.sh quick > $OUT/quick_C.txt 2>&1 || ok=0
  cat $OUT/quick_C.txt >> $T
  awk '/ rc=[0-9]+ /{match($0, / rc=[0-9]+ /); rc = substr($0, RSTART + 4, RLENGTH - 5) + 0;
    if (($0 ~ /FAULT/) != (rc != 0)) bad++} END{exit bad > 0}' $OUT/quick_C/summary.txt || ok=0
  grep -q "equal to plain greedy True" $OUT/quick_C.txt || ok=0
fi
[ $(el) -lt 530 ] && { g $D/memra gate chunks synth:flash-shape,layers=4 --variant fp8 --prompt-len 2176 --widths 256 --out /tmp/m/chunks_flash4_fp8_C.json || ok=0; }
echo "## gates ok=$ok (t=$(el)s)" >> $T
for X in B C M; do
  p=$(awk -v b="## $(bin $X) bench roofline" 'index($0, "## ") == 1 {on = index($0, b) == 1} on && /^prefill 4096/{s+=$3; n++} END{print (n ? s/n : 1e9)}' $T)
  echo "## prefill mean $X $p" >> $T
done
echo "end t=$(el)s" >> $T
grep -hE "^## |rc=|^prefill|^breakdown prefill|^chunk gate|^ncu|rror|anic|H200|^end" $T | cut -c1-250
# build: d353ee4 -> target/vB/memra, 801bbc7 -> target/vC/memra (+ libdspark.so), main db87625 -> target/device/memra.
# carry: ["target/device/memra", "target/vB/memra", "target/vC/memra", "target/vC/libdspark.so"]; timeout_s 600.
