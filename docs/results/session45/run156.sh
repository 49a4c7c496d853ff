#!/usr/bin/env bash
# forty-fifth session, run 2: the routed experts in row tiles under --sums tensor (gpu/weights.rs
# `MatLayout::RowTiles`, kernels/moe_tensor.cu `Fp4Limbs`), after run155's probe (the same reads with wrong
# results: moe.experts -0.02 ms on an H200). memra: the change; memra_base: main e045898. Only the
# addresses change, so the logits must be main's bit for bit under the tensor sums (small exact and fp8,
# flash shape 4 layers: prefill's group kernels), and decode must equal prefill (the chunk gates: the
# one-token kernels); then decode 1k and prefill 4096 rooflines alternating the builds.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
M=target/device/memra; B=target/device/memra_base
T=$OUT/run156.txt; T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
g() { echo "## $* (t=$(el)s)" >> $T; local t0=$(date +%s); timeout ${TO:-150} "$@" >> $T 2>&1; local rc=$?; echo "rc=$rc $(( $(date +%s) - t0 ))s" >> $T; return $rc; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >> $T
TO=300 g env MEMRA=$M BASE=$B SUMS=tensor OUT=$OUT/same bash scripts/gpu_gates.sh same
cat $OUT/same/summary.txt >> $T
TO=90 g $M gate chunks /tmp/m/small --variant exact --prompt-len 160 --sums tensor --out $OUT/chunks_small_exact.json
TO=90 g $M gate chunks synth:flash-shape,layers=4 --variant exact --prompt-len 256 --widths 1,256 --sums tensor --out $OUT/chunks_flash4.json
for r in 1 2; do for X in "$B" "$M"; do
  [ $(el) -lt ${GUARD:-440} ] || continue
  p=0; [ $r = 1 ] && p=4096
  TO=70 g $X bench roofline --layers 4 --contexts 1024 --prefill $p --prefill-reps 1 --sums tensor
done; done
grep -E "^(## |rc=|decode b1|prefill|breakdown|chunk gate|same |error)|logits .*rc=" $T | cut -c1-260 | tail -60
