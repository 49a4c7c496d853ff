#!/usr/bin/env bash
# twenty-third session: the headline on main 45d23ba (decode_block: the one-token products in blocks of 4-16 warps; the
# shared-memory weight ring of 78f85dd), three roofline processes as the twentieth session's run60.sh, then the DSpark gates (not run since
# 2df91ee) and `same` (every position's logits of 45d23ba against 022f9cc, bit for bit).
# Build: main -> target/device/memra (strip) and target/device/libdspark.so (strip); 022f9cc -> target/base/memra.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
N=target/device/memra
R=$OUT/run74.txt; T0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >> $R
for i in 1 2 3; do
  echo "## headline $i (t=$(( $(date +%s) - T0 ))s)" >> $R
  [ $(( $(date +%s) - T0 )) -lt 300 ] && timeout 120 $N bench roofline --layers 4 --contexts 1024,8192,32768 --prefill 4096 --prefill-reps 1 --out $OUT/roofline_headline_$i.json >> $R 2>&1
done
export MEMRA=$N PLUGINS=target/device BASE=target/base/memra
for s in dspark same; do
  [ $(( $(date +%s) - T0 )) -lt 380 ] || { echo "skip $s" >> $R; continue; }
  mkdir -p $OUT/$s
  OUT=$OUT/$s timeout $(( 580 - ($(date +%s) - T0) )) bash scripts/gpu_gates.sh $s >> $R 2>&1
  echo "$s rc=$? t=$(( $(date +%s) - T0 ))s" >> $R
done
rm -f $OUT/*/results.tgz
echo "end t=$(( $(date +%s) - T0 ))s" >> $R
grep -hE "^## |^decode b1|^prefill|^ceilings|^end|rc=|rror|PASS|FAIL|identical" $R | cut -c1-300
# carry: ["target/device/memra","target/device/libdspark.so","target/base/memra","docs/results/prepared_session23/run74.sh"]
# run: bash docs/results/prepared_session23/run74.sh; timeout_s 595
