#!/usr/bin/env bash
# prepared in the twentieth session for the next (perf.md "The gap", item 15): what the one-token hc_site launches cost
# on a decode step's path. P = next/probe-hc-site (target/vPHC/memra; MEMRA_PROBE_SKIP=hcsite leaves every one-token
# hc_site out, hctail only each launch's last-block tail; results wrong, timing only) against M = main
# (target/device/memra): decode-1k rooflines alternating M, P hctail, P hcsite, twice, then P with nothing skipped
# (P's kernels must then time as main's)
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
M=target/device/memra; P=target/vPHC/memra
R=$OUT/run62.txt
T0=$(date +%s)
g() { echo "## $* (t=$(( $(date +%s) - T0 ))s)" >> $R; local t0=$(date +%s); timeout 120 "$@" >> $R 2>&1; echo "rc=$? $(( $(date +%s) - t0 ))s" >> $R; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >> $R
for s in main hctail hcsite main hctail hcsite none; do
  [ $(( $(date +%s) - T0 )) -lt 500 ] || break
  if [ $s = main ]; then g $M bench roofline --layers 4 --contexts 1024 --prefill 0
  else g env MEMRA_PROBE_SKIP=$s $P bench roofline --layers 4 --contexts 1024 --prefill 0; fi
done
echo "end t=$(( $(date +%s) - T0 ))s" >> $R
grep -hE "^## |rc=|^decode b1|^breakdown|^end|rror|H200" $R | cut -c1-300
# carry: ["target/device/memra","target/vPHC/memra","prof/run62.sh"]; timeout_s 560
