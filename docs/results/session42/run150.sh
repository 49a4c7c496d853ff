#!/usr/bin/env bash
# forty-second session, run 1: the tensor sums' one-token kernels (linear_bf16_one, expert_gate_up_bf16,
# expert_down_bf16) load their ring's first weight blocks before staging the token (linear_bf16_one before it
# waits for the kernel before it), and the staging issues four loads at once (37add34, memra); then
# linear_bf16_one at 4 blocks an SM with its FP8 ring 4 K blocks ahead (fcec743, memra_b). The arithmetic is
# unchanged: the chunk gate (decode == prefill bit for bit) under --sums tensor on fcec743; then decode
# rooflines, alternating the build of main 34ce2c2 (memra_base) and these.
set -u
mkdir -p /tmp/m
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
M=target/device/memra_b; A=target/device/memra; B=target/device/memra_base
T=$OUT/run150.txt; T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
g() { echo "## $* (t=$(el)s)" >> $T; local t0=$(date +%s); timeout ${TO:-150} "$@" >> $T 2>&1; local rc=$?; echo "rc=$rc $(( $(date +%s) - t0 ))s" >> $T; return $rc; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >> $T
g $M synth --preset small --seed 1 --out /tmp/m/small
g $M gate chunks /tmp/m/small --variant exact --prompt-len 160 --sums tensor --out $OUT/chunks_small_exact.json
F=synth:flash-shape,layers=4
g $M gate chunks $F --variant exact --prompt-len 256 --widths 1,256 --sums tensor --out $OUT/chunks_flash4.json
for r in 1 2; do for X in "$B tensor" "$A tensor" "$M tensor" "$M exact"; do
  set -- $X
  [ $(el) -lt 460 ] || continue
  TO=90 g $1 bench roofline --layers 4 --contexts 1024 --prefill 0 --sums $2
done; done
if [ $(el) -lt 400 ]; then
  g $M bank --model /tmp/m/small --prompt-len 32 --n 64 --variant exact --out /tmp/m/bank_small_exact.json
  g $M gate tf /tmp/m/small /tmp/m/bank_small_exact.json $OUT/tf_small_exact --variant exact --sums tensor
fi
grep -E "^(## |rc=|decode b1|prefill|breakdown|chunk gate|tf gate|error)" $T | cut -c1-300 | tail -70
