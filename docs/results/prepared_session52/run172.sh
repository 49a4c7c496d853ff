#!/usr/bin/env bash
# Prepared in the fifty-second session for the next: the stream priorities
# (prio.patch, beside this script) on top of the L2 evict-first policy.
# Builds, on the development machine:
#   target/device/memra_main: main at eb84de3 or later (the policy in)
#   target/device/memra_prio: prio.patch applied to the same main
# Decode 1k, three rounds of one roofline each, alternating, then the
# flash-shape chunk gate for memra_prio (decode == prefill bit for bit,
# the greedy steps through the CUDA graphs the patch instantiates).
# Run 171 measured the patch alone on main 3715c33 (one H100): 1.041,
# 1.039, 1.038 ms against 1.056, 1.060, 1.063.
set -u
R=${OUT:-out}
OUT=$R/ab ROUNDS=3 MEMRA=target/device/memra_prio BASE=target/device/memra_main bash scripts/gpu_gates.sh ab > $R/ab_stdout.txt 2>&1
cat $R/ab/summary.txt
