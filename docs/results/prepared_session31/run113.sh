#!/usr/bin/env bash
# thirty-first session, run 2: main 1e5b7c0 (the thirtieth session's bf16-mma and norm-rope-128, landed after
# run 1 of this session; target/device/memra): the headline roofline (3 contexts, JSON), the transformers peer on
# the same weights (gpu_gates.sh peer), then the host-cache gates if time is left.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
M=target/device/memra
R=$OUT/run113.txt; T0=$(date +%s)
g() { echo "## $* (t=$(( $(date +%s) - T0 ))s)" >> $R; local t0=$(date +%s); timeout 200 "$@" >> $R 2>&1; echo "rc=$? $(( $(date +%s) - t0 ))s" >> $R; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >> $R
g $M bench roofline --layers 4 --contexts 1024,8192,32768 --prefill 4096 --prefill-reps 1 --out $OUT/roofline_main.json
MEMRA=$M OUT=$OUT/peer timeout 300 bash scripts/gpu_gates.sh peer >> $R 2>&1; echo "peer rc=$? t=$(( $(date +%s) - T0 ))s" >> $R
[ $(( $(date +%s) - T0 )) -lt 450 ] && { MEMRA=$M OUT=$OUT/hostcache timeout 120 bash scripts/gpu_gates.sh hostcache >> $R 2>&1; echo "hostcache rc=$? t=$(( $(date +%s) - T0 ))s" >> $R; }
echo "end t=$(( $(date +%s) - T0 ))s" >> $R
grep -hE "^## |rc=|^prefill|^decode|^breakdown|^end|^ceilings|rror|anic|H200|transformers|host-cache|memra decode" $R | cut -c1-400
# carry: ["target/device/memra"]; run: bash docs/results/prepared_session31/run113.sh; timeout_s 570
