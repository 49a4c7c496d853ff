#!/usr/bin/env bash
# run 3 (twenty-fourth session): main 11d949b (target/device/memra): each kernel of a decode step at 32k alone
# (Nsight Compute, one at a time: where attn.indexer's 0.136 ms go), then `scripts/gpu_gates.sh flash`
# (not run since 022f9cc)
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
N=target/device/memra
R=$OUT/run77.txt
T0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >> $R
timeout 200 /usr/local/cuda/bin/ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum,launch__grid_size,launch__block_size --csv \
  --launch-skip 300 --launch-count 300 $N bench roofline --layers 4 --contexts 32768 --prefill 0 --steps 3 > $OUT/ncu_32k.csv 2>> $R
echo "ncu rc=$? t=$(( $(date +%s) - T0 ))s" >> $R
MEMRA=$N OUT=$OUT/flash timeout 380 bash scripts/gpu_gates.sh flash >> $R 2>&1; echo "flash rc=$? t=$(( $(date +%s) - T0 ))s" >> $R
echo "end t=$(( $(date +%s) - T0 ))s" >> $R
cat $R | cut -c1-400
# carry: ["target/device/memra","docs/results/prepared_session24/run77.sh"]; timeout_s 595
