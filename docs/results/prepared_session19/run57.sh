#!/usr/bin/env bash
# prepared in the nineteenth session for the next (perf.md "The gap", item 13): QP = next/q-pair (the indexer's query
# product in wq_b's launch; target/vQP/memra) against M = main (target/device/memra): the flash-shape chunk gates (exact,
# fp8), `same` (logits bit for bit), then decode-1k rooflines alternating QP, M three times
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
M=target/device/memra; Q=target/vQP/memra
R=$OUT/run57.txt
T0=$(date +%s)
g() { echo "## $* (t=$(( $(date +%s) - T0 ))s)" >> $R; local t0=$(date +%s); timeout 170 "$@" >> $R 2>&1; echo "rc=$? $(( $(date +%s) - t0 ))s" >> $R; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >> $R
for v in exact fp8; do
  g $Q gate chunks synth:flash-shape,layers=4 --variant $v --prompt-len 256 --widths 1,256 --out $OUT/chunks_flash4_QP_$v.json
done
MEMRA=$Q BASE=$M OUT=$OUT/same timeout 200 bash scripts/gpu_gates.sh same >> $R 2>&1; echo "same rc=$? t=$(( $(date +%s) - T0 ))s" >> $R
for b in $Q $M $Q $M $Q $M; do
  [ $(( $(date +%s) - T0 )) -lt 530 ] && g $b bench roofline --layers 4 --contexts 1024 --prefill 0
done
echo "end t=$(( $(date +%s) - T0 ))s" >> $R
grep -hE "^## |rc=|^same|^decode b1|^breakdown|^chunk|^end|rror|H200" $R | cut -c1-300
# carry: ["target/device/memra","target/vQP/memra","prof/run57.sh"]; timeout_s 590
