#!/usr/bin/env bash
# thirty-sixth session, run 6: the headline of next/mma-all (a4df0de, merged as 51f49e9; target/vF/memra), three
# processes of the flash-shape roofline, run on the machine run135.sh had left warm (no start, the session's last
# 185 s of device time); each process starts only if 125 s have not passed.
T0=$(date +%s)
for i in 1 2 3; do
  [ $(( $(date +%s) - T0 )) -lt 125 ] || break
  echo "## headline $i t=$(( $(date +%s) - T0 ))"
  timeout 100 target/vF/memra bench roofline --layers 4 --contexts 1024,8192,32768 --prefill 4096 --prefill-reps 1 \
    --out $OUT/headline_F_$i.json 2>&1 | grep -E "^ceilings|^decode|^prefill|^breakdown"
done
echo end $(( $(date +%s) - T0 ))
# carry: ["target/vF/memra"]; timeout_s 185.
