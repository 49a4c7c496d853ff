#!/usr/bin/env bash
# twenty-fifth session: the headline on main 02e6447 (linear_mma): the roofline twice in separate processes
# (decode 1k, 8k, 32k and prefill 4096, JSON kept), then `gpu_gates.sh quick` (compare and chunk gates on small
# exact and fp8, the faults, DSpark GPU against CPU, speculative == plain).
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
M=target/device/memra
R=$OUT/run86.txt; T0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >> $R
for i in 1 2; do
  echo "## roofline $i (t=$(( $(date +%s) - T0 ))s)" >> $R
  timeout 150 $M bench roofline --layers 4 --contexts 1024,8192,32768 --prefill 4096 --prefill-reps 1 --out $OUT/roofline_$i.json >> $R 2>&1
  echo "rc=$?" >> $R
done
mkdir -p $OUT/quick; MEMRA=$M PLUGINS=target/device OUT=$OUT/quick timeout 230 bash scripts/gpu_gates.sh quick > /dev/null 2>&1
cat $OUT/quick/summary.txt >> $R 2>/dev/null
echo "end t=$(( $(date +%s) - T0 ))s" >> $R
grep -hE "^## |rc=|^ceilings|^decode b1|^prefill|^breakdown|^end|rror|anic|H200" $R | cut -c1-300
tail -22 $OUT/quick/summary.txt
# carry: ["target/device/memra","target/device/libdspark.so","target/device/libngram_drafter.so","target/device/libreplay_drafter.so"]; timeout_s 560
