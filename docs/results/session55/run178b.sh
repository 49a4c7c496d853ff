#!/usr/bin/env bash
# Fifty-fifth session: the last few minutes of device time. run178.sh's first gate alone (trigger first
# in moe.cu and moe_tensor.cu with the launch after each branch join made without the programmatic
# attribute; build_join.sh), then the dataflow overlap probe if time is left.
set -u
R=${OUT:-out}
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader | tee $R/card.txt
timeout 150 target/device/memra_tf_moe_join gate chunks synth:flash-shape,layers=4 --variant exact --prompt-len 2176 \
  --widths 256 --out $R/indexer_tf_moe_join.json > $R/indexer_tf_moe_join.txt 2>&1
echo "tf_moe_join rc=$? elapsed ${SECONDS} s | $(tail -2 $R/indexer_tf_moe_join.txt | head -1 | cut -c1-330)"
[ $SECONDS -lt 130 ] && bash docs/results/session54/overlap_probe.sh overlap_dataflow 60
