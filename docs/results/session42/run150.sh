#!/usr/bin/env bash
# forty-third session, run 1 (prepared in the forty-second): the tensor sums' one-token kernels.
# memra_base: main 34ce2c2. memra (A): the one-token kernels (linear_bf16_one, expert_gate_up_bf16,
# expert_down_bf16) load their ring's first weight blocks before staging the token (linear_bf16_one before
# it waits for the kernel before it), the staging issues four loads at once. memra_b (B, f6641f7): A with
# linear_bf16_one at 4 blocks an SM and its FP8 ring 4 K blocks ahead. memra_c (C, ba3aa0f): B with the FP4
# experts' per-scale tables built once a device and copied by cp.async instead of built in every block.
# The arithmetic is unchanged: the chunk gates (decode == prefill bit for bit) under --sums tensor on C
# (whose kernels are B's but for the tables' source), then decode rooflines alternating the four builds.
set -u
mkdir -p /tmp/m
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
C=target/device/memra_c; M=target/device/memra_b; A=target/device/memra; B=target/device/memra_base
T=$OUT/run150.txt; T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
g() { echo "## $* (t=$(el)s)" >> $T; local t0=$(date +%s); timeout ${TO:-150} "$@" >> $T 2>&1; local rc=$?; echo "rc=$rc $(( $(date +%s) - t0 ))s" >> $T; return $rc; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >> $T
g $C synth --preset small --seed 1 --out /tmp/m/small
g $C gate chunks /tmp/m/small --variant exact --prompt-len 160 --sums tensor --out $OUT/chunks_small_exact.json
F=synth:flash-shape,layers=4
g $C gate chunks $F --variant exact --prompt-len 256 --widths 1,256 --sums tensor --out $OUT/chunks_flash4.json
for r in 1 2; do for X in "$B tensor" "$C tensor" "$M tensor" "$A tensor" "$C exact"; do
  set -- $X
  [ $(el) -lt ${GUARD:-300} ] || continue
  TO=90 g $1 bench roofline --layers 4 --contexts 1024 --prefill 0 --sums $2
done; done
grep -E "^(## |rc=|decode b1|prefill|breakdown|chunk gate|tf gate|error)" $T | cut -c1-300 | tail -70
