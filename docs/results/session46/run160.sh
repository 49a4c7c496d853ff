#!/usr/bin/env bash
# forty-sixth session, run 3 (the same warm H100 as run159.sh, right after it, whose time guard had left one
# roofline): decode 1k rooflines alternating, the query's norm staged inside wq_b's launch (memra, built with
# docs/results/tried_session46/q-norm-staged.patch on 1e9fdfa) against main 1e9fdfa (memra_base).
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
for X in target/device/memra target/device/memra_base target/device/memra target/device/memra_base; do
  echo "## $X"
  timeout 40 $X bench roofline --layers 4 --contexts 1024 --prefill 0 2>&1 | grep -E "^(decode b1|breakdown|ceilings)"
done | tee $OUT/run160.txt
