#!/usr/bin/env bash
# forty-fourth session, run 4: the tensor sums' one-token kernels (expert_gate_up_bf16, expert_down_bf16,
# linear_bf16_one) as one wave of blocks, each streaming its units (a tile's warps, one K part each) through
# its warps' rings one after another, instead of one block a unit (run 3's Nsight Compute: long-scoreboard
# stalls, the blocks' short lives). memra: the change; memra_base: main 2c579aa. The sums do not change:
# chunk gates (decode == prefill bit for bit; prefill's kernels unchanged), then decode rooflines alternating.
set -u
mkdir -p /tmp/m
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
M=target/device/memra; B=target/device/memra_base
T=$OUT/run154.txt; T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
g() { echo "## $* (t=$(el)s)" >> $T; local t0=$(date +%s); timeout ${TO:-150} "$@" >> $T 2>&1; local rc=$?; echo "rc=$rc $(( $(date +%s) - t0 ))s" >> $T; return $rc; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >> $T
g $M synth --preset small --seed 1 --out /tmp/m/small
TO=110 g $M gate chunks /tmp/m/small --variant exact --prompt-len 160 --sums tensor --out $OUT/chunks_small_exact.json
F=synth:flash-shape,layers=4
TO=60 g $M gate chunks $F --variant exact --prompt-len 256 --widths 1,256 --sums tensor --out $OUT/chunks_flash4.json
first_b=110
for r in 1 2; do for X in "$M" "$B"; do
  [ $(el) -lt ${GUARD:-250} ] || continue
  to=40; [ "$X" = "$B" ] && { to=$first_b; first_b=40; }
  TO=$to g $X bench roofline --layers 4 --contexts 1024 --prefill 0 --sums tensor
done; done
[ $(el) -lt ${GUARD:-250} ] && TO=20 g $M gate chunks /tmp/m/small --variant fp8 --prompt-len 160 --sums tensor --out $OUT/chunks_small_fp8.json
grep -E "^(## |rc=|decode b1|prefill|breakdown|chunk gate|tf gate|error)" $T | cut -c1-300 | tail -70
