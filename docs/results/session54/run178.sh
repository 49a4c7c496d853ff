#!/usr/bin/env bash
# Superseded by docs/results/session55/run178.sh (the same steps, with the join probe first).
# Prepared in the fifty-fourth session for the next one (not run). Builds: run build_tf_split.sh
# (beside this script) on the development machine first; carry target/device/memra_main and the five
# target/device/memra_tf_<kernel> (~39 MB together).
# 1. overlap_dataflow.patch on prepared_session47/overlap.cu (~30 s with its build): does a persistent
#    kernel with flags instead of grid barriers, the launches' bytes in flight, and the next segment's
#    first S KiB copied into shared memory during the latency op hide the op? (perf.md, fifty-fourth
#    session.)
# 2. On an H200 only: main's headline (run173.sh).
# 3. While time is left: the chunk gate past the indexer's bound (flash shape, exact, 2176 positions,
#    width 256) for each moe.cu kernel alone with the trigger first (run 177 found the failure in
#    moe.cu's group).
set -u
R=${OUT:-out}
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader | tee $R/card.txt
bash docs/results/session54/overlap_probe.sh overlap_dataflow 90
bash docs/results/prepared_session52/run173.sh target/device/memra_main  # only on an H200
for k in expert_gate_up expert_down moe_group_pairs moe_route swiglu_rows; do
  [ $SECONDS -lt ${GUARD:-440} ] || break
  timeout 150 target/device/memra_tf_$k gate chunks synth:flash-shape,layers=4 --variant exact --prompt-len 2176 \
    --widths 256 --out $R/indexer_tf_$k.json > $R/indexer_tf_$k.txt 2>&1
  echo "tf_$k rc=$? elapsed ${SECONDS} s | $(tail -2 $R/indexer_tf_$k.txt | head -1 | cut -c1-330)"
done
