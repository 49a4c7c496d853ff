#!/usr/bin/env bash
# Prepared in the fifty-second session for the next: two changes, each
# against main with the weights' L2 evict-first policy (eb84de3 or later).
# Builds, release on the development machine, stripped, carried:
#   target/device/memra_main:   main
#   target/device/memra_prio:   prio.patch on main (the stage's stream at the
#     greatest priority, the step's graph at its nodes' priorities)
#   target/device/memra_scales: scales-prefetch.patch on main (each warp's
#     rows' scales prefetched into L2 with its first chunks, one-token sums
#     only; expert_down bounded to 5 blocks an SM, 96 registers as main's)
# Decode 1k, three rounds of one roofline each, alternating main, prio,
# scales; then the flash-shape chunk gate for scales (in ab) and for prio.
# Run 171 measured prio.patch alone on main 3715c33 (one H100): 1.041,
# 1.039, 1.038 ms against 1.056, 1.060, 1.063.
set -u
R=${OUT:-out}
OUT=$R/ab ROUNDS=${ROUNDS:-3} MEMRA=target/device/memra_scales \
  BASE="target/device/memra_main target/device/memra_prio" bash scripts/gpu_gates.sh ab > $R/ab_stdout.txt 2>&1
cat $R/ab/summary.txt
OUT=$R/gate_prio MEMRA=target/device/memra_prio bash scripts/gpu_gates.sh chunks_flash4 > $R/gate_prio_stdout.txt 2>&1
cat $R/gate_prio/summary.txt
