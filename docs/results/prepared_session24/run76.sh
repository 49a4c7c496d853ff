#!/usr/bin/env bash
# run 2 (twenty-fourth session): main 11d949b (target/device/memra and its drafter plugins): the gate sections
# not run since 022f9cc (`quick`, `hostcache`) and the transformers peer on the current kernels
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
N=target/device/memra
R=$OUT/run76.txt
T0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >> $R
MEMRA=$N PLUGINS=target/device OUT=$OUT/quick timeout 200 bash scripts/gpu_gates.sh quick >> $R 2>&1; echo "quick rc=$? t=$(( $(date +%s) - T0 ))s" >> $R
MEMRA=$N OUT=$OUT/peer timeout 250 bash scripts/gpu_gates.sh peer >> $R 2>&1; echo "peer rc=$? t=$(( $(date +%s) - T0 ))s" >> $R
[ $(( $(date +%s) - T0 )) -lt 420 ] && { MEMRA=$N OUT=$OUT/hostcache timeout 150 bash scripts/gpu_gates.sh hostcache >> $R 2>&1; echo "hostcache rc=$? t=$(( $(date +%s) - T0 ))s" >> $R; }
echo "end t=$(( $(date +%s) - T0 ))s" >> $R
cat $R | cut -c1-400
# carry: ["target/device","docs/results/prepared_session24/run76.sh"]; timeout_s 595
