#!/usr/bin/env bash
# forty-sixth session, run 2 (tried, not merged: docs/results/tried_session46/q-norm-staged.patch): the query's RMSNorm taken inside wq_b's one-token launch (`lin_normed`:
# each warp takes rms_norm_f32's factor with the block's sums, kernels/norm.cu `norm_factor_warp`, and the
# row is staged normalized, rows.cuh `stage_row_normed`), against main 1e9fdfa. Build memra with the change
# and memra_base from main; carry both. Checks: the logits of every position against main's (small exact
# and fp8, flash shape 4 layers), the chunk gates (decode, which takes the fused norm, against prefill,
# which keeps rms_norm_f32: the same bits or FAIL), one of them past 2048 positions where the indexer's
# query product shares the launch; then decode 1k rooflines alternating (predicted: rms_norm_f32's ~4 us
# a layer less on the path, less what the staging adds; read attn.q_kv in the breakdown).
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
M=target/device/memra; B=target/device/memra_base
T=$OUT/run159.txt; T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
g() { echo "## $* (t=$(el)s)" >> $T; local t0=$(date +%s); timeout ${TO:-150} "$@" >> $T 2>&1; local rc=$?; echo "rc=$rc $(( $(date +%s) - t0 ))s" >> $T; return $rc; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >> $T
TO=300 g env MEMRA=$M BASE=$B OUT=$OUT/same bash scripts/gpu_gates.sh same
cat $OUT/same/summary.txt >> $T
TO=90 g $M gate chunks /tmp/m/small --variant exact --prompt-len 160 --out $OUT/chunks_small_exact.json
TO=90 g $M gate chunks synth:flash-shape,layers=4 --variant exact --prompt-len 256 --widths 1,256 --out $OUT/chunks_flash4.json
TO=120 g $M gate chunks synth:flash-shape,layers=4 --variant exact --prompt-len 2112 --widths 1,1056 --out $OUT/chunks_flash4_2112.json
for r in 1 2 3; do for X in "$B" "$M"; do
  [ $(el) -lt ${GUARD:-480} ] || continue
  TO=70 g $X bench roofline --layers 4 --contexts 1024 --prefill 0
done; done
# then, time left, the tensor sums' decode in the same machine (the exact arm's figures above)
[ $(el) -lt ${GUARD:-480} ] && TO=60 g $M bench roofline --layers 4 --contexts 1024 --prefill 0 --sums tensor
grep -E "^(## |rc=|decode b1|breakdown|chunk gate|same |error)" $T | cut -c1-260 | tail -60
