#!/usr/bin/env bash
# Fifty-second session, run 171, two builds against main 3715c33
# (target/device/memra_base52), decode 1k, ROUNDS (3) rounds of one roofline each,
# alternating main, P, L:
#   P = target/device/memra_prio: prio.patch (the stage's stream at the
#       device's greatest priority, the captured step's kernels at their
#       streams' priorities)
#   L = target/device/memra_l2: l2-evict-first.patch (the decode products'
#       and experts' weight loads under an L2 evict-first policy)
# then the flash-shape chunk gate for L, then for P.
set -u
R=${OUT:-out}
OUT=$R/ab ROUNDS=${ROUNDS:-3} MEMRA=target/device/memra_l2 BASE="target/device/memra_base52 target/device/memra_prio" \
  bash scripts/gpu_gates.sh ab > $R/ab_stdout.txt 2>&1
cat $R/ab/summary.txt
OUT=$R/gate_prio MEMRA=target/device/memra_prio bash scripts/gpu_gates.sh chunks_flash4 > $R/gate_prio_stdout.txt 2>&1
cat $R/gate_prio/summary.txt
