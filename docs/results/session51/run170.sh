#!/usr/bin/env bash
# Fifty-first session, run 170 (NVIDIA H200): the peer ratio on main cd25af1
# (target/device/memra), then the layer_ops split (63adc75,
# target/device/memra_new) against main, logits bit for bit.
set -u
R=${OUT:-out}
OUT=$R/peer MEMRA=target/device/memra bash scripts/gpu_gates.sh peer > $R/peer_stdout.txt 2>&1
cat $R/peer/summary.txt
OUT=$R/same MEMRA=target/device/memra_new BASE=target/device/memra bash scripts/gpu_gates.sh same > $R/same_stdout.txt 2>&1
cat $R/same/summary.txt
