#!/usr/bin/env bash
# Prepared in the forty-seventh session, not run: the overlap probe (overlap.cu beside this script; ~20 s
# with its build). Whether a persistent decode kernel, reading each next product's weights into shared
# memory while the latency work between products runs, streams the step's bytes faster than launches with
# programmatic dependent launch do (perf.md "The gap", items 16-17, and the forty-seventh block).
set -u
export PATH=/usr/local/cuda/bin:$PATH LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
T=$OUT/run164.txt
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >> $T
nvcc -O2 -arch=sm_90 -o /tmp/overlap docs/results/prepared_session47/overlap.cu >> $T 2>&1 && timeout 120 /tmp/overlap >> $T 2>&1
echo "rc=$?" >> $T
cat $T
