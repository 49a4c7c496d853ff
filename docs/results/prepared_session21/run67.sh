#!/usr/bin/env bash
# prepared in the twenty-first session for the next (perf.md "The gap", item 16): which of the step's other kernels
# make up the ~0.05-0.07 ms of the path not yet attributed. P = next/probe-product-math 6767299 (target/vPPM/memra;
# MEMRA_PROBE=drop=<prefix> leaves out every kernel whose name starts with it; results wrong, timing only) against
# M = main (target/device/memra): decode-1k rooflines, M then each drop, M again after every two.
# (moe_route is not dropped: stale expert indices would change the experts' bytes.)
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
M=target/device/memra; P=target/vPPM/memra
R=$OUT/run67.txt
T0=$(date +%s)
g() { echo "## $* (t=$(( $(date +%s) - T0 ))s)" >> $R; local t0=$(date +%s); timeout 100 "$@" >> $R 2>&1; echo "rc=$? $(( $(date +%s) - t0 ))s" >> $R; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >> $R
for s in main drop=rms_norm_rope drop=hc_ main drop=embed_rows drop=argmax_ main drop=swiglu_rows drop=ring_append main \
         drop=compress_; do
  [ $(( $(date +%s) - T0 )) -lt 500 ] || break
  if [ $s = main ]; then g $M bench roofline --layers 4 --contexts 1024 --prefill 0
  else g env MEMRA_PROBE=$s $P bench roofline --layers 4 --contexts 1024 --prefill 0; fi
done
echo "end t=$(( $(date +%s) - T0 ))s" >> $R
grep -hE "^## |rc=|^decode b1|^breakdown|^end|rror|anic|H200" $R | cut -c1-300
# carry: ["target/device/memra","target/vPPM/memra","prof/run67.sh"]; timeout_s 590
