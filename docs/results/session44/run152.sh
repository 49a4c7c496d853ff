#!/usr/bin/env bash
# forty-fourth session, run 2: the tensor sums' one-token expert kernels read their inputs' limb rows written
# once (the token's by a `limb_rows` launch, the middles by expert_gate_up_bf16 under the exact variant, by
# `limb_rows` after the quantizer under fp8) instead of splitting the row in each of a pair's blocks.
# memra: the change; memra_base: main 522f91e. The sums do not change: the chunk gates (decode == prefill bit
# for bit: prefill's group kernels read `limb_rows`' output) on small exact and fp8 and the flash shape,
# the teacher-forced gate on small exact under --sums tensor, then decode rooflines alternating the builds.
set -u
mkdir -p /tmp/m
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
M=target/device/memra; B=target/device/memra_base
T=$OUT/run152.txt; T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
g() { echo "## $* (t=$(el)s)" >> $T; local t0=$(date +%s); timeout ${TO:-150} "$@" >> $T 2>&1; local rc=$?; echo "rc=$rc $(( $(date +%s) - t0 ))s" >> $T; return $rc; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >> $T
g $M synth --preset small --seed 1 --out /tmp/m/small
g $M gate chunks /tmp/m/small --variant exact --prompt-len 160 --sums tensor --out $OUT/chunks_small_exact.json
g $M gate chunks /tmp/m/small --variant fp8 --prompt-len 160 --sums tensor --out $OUT/chunks_small_fp8.json
g $M bank --model /tmp/m/small --prompt-len 32 --n 64 --variant exact --out /tmp/m/bank_small_exact.json
g $M gate tf /tmp/m/small /tmp/m/bank_small_exact.json $OUT/tf_small_exact --sums tensor
F=synth:flash-shape,layers=4
TO=120 g $M gate chunks $F --variant exact --prompt-len 256 --widths 1,256 --sums tensor --out $OUT/chunks_flash4.json
first_b=150
for r in 1 2 3; do for X in "$B" "$M"; do
  [ $(el) -lt ${GUARD:-480} ] || continue
  to=70; [ "$X" = "$B" ] && { to=$first_b; first_b=70; }
  TO=$to g $X bench roofline --layers 4 --contexts 1024 --prefill 0 --sums tensor
done; done
grep -E "^(## |rc=|decode b1|prefill|breakdown|chunk gate|tf gate|error)" $T | cut -c1-300 | tail -70
