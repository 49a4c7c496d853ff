#!/usr/bin/env bash
# Fifty-fourth session, second call: where trigger-first (run176: launch_dependents before wait in
# every kernel) breaks the chunk gate past the indexer's bound (2176 positions at width 256). Four
# builds each with trigger-first in one group of kernel files only (kernels/common.cuh gains
# `await_inputs_tf`, and the group's files call it), release from the development machine, carried:
#   target/device/memra_tf_att   attention.cu, indexer.cu, compressor.cu
#   target/device/memra_tf_rest  hc.cu, norm.cu, quant.cu, rope.cu, embed.cu, argmax.cu
#   target/device/memra_tf_moe   moe.cu, moe_tensor.cu
#   target/device/memra_tf_lin   linear.cu, linear_tensor.cu
# On an H200 first the headline of main (run173.sh's question: decode 1k, 8k, 32k, prefill 4096, three
# processes). Then each build's chunk gate (flash shape, exact, 2176 positions, width 256) while time is left.
set -u
R=${OUT:-out}
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader | tee $R/card.txt
bash docs/results/prepared_session52/run173.sh target/device/memra_main  # only on an H200
for n in att rest moe lin; do
  [ $SECONDS -lt ${GUARD:-440} ] || break
  timeout 150 target/device/memra_tf_$n gate chunks synth:flash-shape,layers=4 --variant exact --prompt-len 2176 \
    --widths 256 --out $R/indexer_tf_$n.json > $R/indexer_tf_$n.txt 2>&1
  echo "tf_$n rc=$? elapsed ${SECONDS} s | $(tail -2 $R/indexer_tf_$n.txt | head -1 | cut -c1-330)"
done
