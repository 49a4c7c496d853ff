#!/usr/bin/env bash
# Fifty-fifth session: run 178 (the fifty-fourth session's run178.sh with the join probe added).
# Builds from the development machine: docs/results/session54/build_tf_split.sh and
# docs/results/session55/build_join.sh; carried: target/device/memra_main and seven memra_tf_* builds.
# 1. On an H200 only: main's headline (run173.sh, three processes).
# 2. The chunk gate past the indexer's bound (flash shape, exact, 2176 positions, width 256; run 177:
#    fails with the trigger first in moe.cu + moe_tensor.cu) for the whole group with the launch after
#    each branch join made without the programmatic attribute (join-no-pdl.patch).
# 3. The dataflow overlap probe (session54/overlap_dataflow.patch, ~30 s with its build).
# 4. While time is left, the same gate for expert_down alone (the kernel before the join) with and
#    without join-no-pdl, then for the other moe.cu kernels alone.
set -u
R=${OUT:-out}
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader | tee $R/card.txt
bash docs/results/prepared_session52/run173.sh target/device/memra_main  # only on an H200
gate() {
  timeout 110 target/device/memra_tf_$1 gate chunks synth:flash-shape,layers=4 --variant exact --prompt-len 2176 \
    --widths 256 --out $R/indexer_tf_$1.json > $R/indexer_tf_$1.txt 2>&1
  echo "tf_$1 rc=$? elapsed ${SECONDS} s | $(tail -2 $R/indexer_tf_$1.txt | head -1 | cut -c1-330)"
}
gate moe_join
bash docs/results/session54/overlap_probe.sh overlap_dataflow 90
for k in expert_down expert_down_join expert_gate_up moe_group_pairs moe_route swiglu_rows; do
  [ $SECONDS -lt ${GUARD:-480} ] || break
  gate $k
done
