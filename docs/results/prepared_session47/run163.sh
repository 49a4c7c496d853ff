#!/usr/bin/env bash
# Prepared in the forty-seventh session, not run (its device time ran out): run 1's heads-in-attention
# with its rotations from a table (heads-in-attention-rot.patch on main 1f4f62c: build memra with it and
# memra_base from main, carry both). The key's launch (rms_norm_f32_key_rope) writes the token's (cos, sin)
# pairs beside the key (sc.rot), and attention_rows_pair_normed takes the queries' rotations and the
# output's inverse ones from it instead of f64 trigonometry in every lane (runs 161-162: attn.core ~+10 us
# a step, attn.q_kv ~-7). Run 161's early inverse angles (memra_p1, no measurable change) are dropped.
# Checks: the logits of every position against main's (prefill), the chunk gates (decode, the new kernels
# at flash shape, against prefill), then decode 1k rooflines alternating.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
M=target/device/memra; B=target/device/memra_base
T=$OUT/run163.txt; T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
g() { echo "## $* (t=$(el)s)" >> $T; local t0=$(date +%s); timeout ${TO:-150} "$@" >> $T 2>&1; local rc=$?; echo "rc=$rc $(( $(date +%s) - t0 ))s" >> $T; return $rc; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >> $T
TO=300 g env MEMRA=$M BASE=$B OUT=$OUT/same bash scripts/gpu_gates.sh same
cat $OUT/same/summary.txt >> $T
TO=120 g $M gate chunks synth:flash-shape,layers=4 --variant exact --prompt-len 256 --widths 1,256 --out $OUT/chunks_flash4.json
for r in 1 2 3; do for X in "$B" "$M"; do
  [ $(el) -lt ${GUARD:-420} ] || continue
  TO=60 g $X bench roofline --layers 4 --contexts 1024 --prefill 0
done; done
[ $(el) -lt ${GUARD:-420} ] && TO=60 g $M gate chunks synth:flash-shape,layers=4 --variant fp8 --prompt-len 256 --widths 1,256 --out $OUT/chunks_flash4_fp8.json
grep -E "^(## |rc=|decode b1|breakdown|chunk gate|same |error)" $T | cut -c1-260 | tail -40
