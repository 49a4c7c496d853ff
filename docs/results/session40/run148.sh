#!/usr/bin/env bash
# fortieth session, run 2: the tensor expert sums with K in parts (target/device/memra, P) against run 1's single
# chain (target/v1/memra, C) and the exact sums (P with --expert-sums exact, E): P's chunk gates (small exact and
# fp8, flash shape 1,256), its teacher-forced gate on small (and its fault), then decode-1k / prefill-4096 rooflines
# of E, C and P alternating, then the flash shape's teacher-forced gate under P against a CPU bank if time is left.
set -u
mkdir -p /tmp/m
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
M=target/device/memra
T=$OUT/run148.txt; T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
g() { echo "## $* (t=$(el)s)" >> $T; local t0=$(date +%s); timeout ${TO:-150} "$@" >> $T 2>&1; local rc=$?; echo "rc=$rc $(( $(date +%s) - t0 ))s" >> $T; return $rc; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >> $T
g $M synth --preset small --seed 1 --out /tmp/m/small
for V in exact fp8; do
  g $M gate chunks /tmp/m/small --variant $V --prompt-len 160 --expert-sums tensor --out $OUT/chunks_small_${V}_tensor.json
done
g $M bank --model /tmp/m/small --prompt-len 32 --n 64 --variant exact --out /tmp/m/bank_small_exact.json
g $M gate tf /tmp/m/small /tmp/m/bank_small_exact.json $OUT/tf_small_tensor --expert-sums tensor
g $M gate tf /tmp/m/small /tmp/m/bank_small_exact.json $OUT/tf_small_tensor_fault --expert-sums tensor --inject-fault drop-shared:1
g $M gate chunks synth:flash-shape,layers=4 --variant exact --prompt-len 256 --widths 1,256 --expert-sums tensor \
  --out $OUT/chunks_flash4_tensor.json
for r in 1 2; do for X in "E $M exact" "C target/v1/memra tensor" "P $M tensor"; do
  set -- $X
  [ $(el) -lt 470 ] || continue
  echo "## roofline $1 round $r" >> $T
  TO=100 g $2 bench roofline --layers 4 --contexts 1024 --prefill 4096 --prefill-reps 1 --expert-sums $3
done; done
F=synth:flash-shape,layers=4
if [ $(el) -lt 380 ]; then
  TO=120 g $M bank --model $F --prompt-len 8 --n 12 --variant exact --out /tmp/m/bank_flash4_exact.json
  TO=90 g $M gate tf $F /tmp/m/bank_flash4_exact.json $OUT/tf_flash4_tensor --expert-sums tensor
fi
grep -E "^(## |rc=|decode b1|prefill|breakdown|chunk gate|tf gate)" $T | cut -c1-300 | tail -70
