#!/usr/bin/env bash
# forty-eighth session, run 3 (right after run163.sh on the same warm H100): decode 1k rooflines of the
# rotations-from-a-table build (memra, heads-in-attention-rot.patch on ee5559c) and main (memra_base),
# alternating, one process each. Output: run165.txt.
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
for X in target/device/memra target/device/memra_base target/device/memra target/device/memra_base target/device/memra; do
  echo "## $X"; timeout 50 $X bench roofline --layers 4 --contexts 1024 --prefill 0 2>&1 | grep -E "^(decode b1|breakdown)"
done
