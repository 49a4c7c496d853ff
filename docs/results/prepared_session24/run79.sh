#!/usr/bin/env bash
# run 5 (twenty-fourth session): the headline on main after the indexer's two changes (a47aaf3, 0a13546; the
# binary as run 4's ST), three roofline processes as run74.sh, then `same` (every position's logits against
# 022f9cc, bit for bit: small exact and fp8, where the indexer runs from position 64, and the flash shape).
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
N=target/device/memra
R=$OUT/run79.txt; T0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >> $R
for i in 1 2 3; do
  echo "## headline $i (t=$(( $(date +%s) - T0 ))s)" >> $R
  [ $(( $(date +%s) - T0 )) -lt 220 ] && timeout 120 $N bench roofline --layers 4 --contexts 1024,8192,32768 --prefill 4096 --prefill-reps 1 --out $OUT/roofline_headline_$i.json >> $R 2>&1
done
export MEMRA=$N BASE=target/base/memra
mkdir -p $OUT/same
[ $(( $(date +%s) - T0 )) -lt 250 ] && { OUT=$OUT/same timeout $(( 380 - ($(date +%s) - T0) )) bash scripts/gpu_gates.sh same >> $R 2>&1; echo "same rc=$? t=$(( $(date +%s) - T0 ))s" >> $R; }
rm -f $OUT/*/results.tgz
echo "end t=$(( $(date +%s) - T0 ))s" >> $R
grep -hE "^## |^decode b1|^prefill|^ceilings|^breakdown|^end|rc=|rror|PASS|FAIL|identical" $R | cut -c1-300
# carry: ["target/device/memra","target/base/memra","docs/results/prepared_session24/run79.sh"]; timeout_s 390
