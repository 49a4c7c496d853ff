#!/usr/bin/env bash
# prepared in the thirty-fourth session for the next, after run126.sh: rooflines of the builds whose gates passed
# there (arguments: C, B or both) against main M, alternating, then the headline (three processes, 1k/8k/32k and
# prefill 4096) of the one with the shortest prefill.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
T=$OUT/run128.txt; T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
g() { echo "## $* (t=$(el)s)" >> $T; local t0=$(date +%s); timeout 200 "$@" >> $T 2>&1; local rc=$?; echo "rc=$rc $(( $(date +%s) - t0 ))s" >> $T; return $rc; }
bin() { [ $1 = M ] && echo target/device/memra || echo target/v$1/memra; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >> $T
for round in 1 2; do
  for X in "$@" M; do
    [ $(el) -lt 380 ] && g $(bin $X) bench roofline --layers 4 --contexts 1024 --prefill 4096 --prefill-reps 1
  done
done
# each build's mean prefill over its rooflines
best=M; bestp=1e9
for X in "$@" M; do
  p=$(awk -v b="## $(bin $X) bench roofline" 'index($0, "## ") == 1 {on = index($0, b) == 1} on && /^prefill 4096/{s+=$3; n++} END{print (n ? s/n : 1e9)}' $T)
  echo "## prefill mean $X $p" >> $T
  awk -v a=$p -v m=$bestp 'BEGIN{exit !(a < m)}' && best=$X && bestp=$p
done
echo "## headline on $best (t=$(el)s)" >> $T
for i in 1 2 3; do
  [ $(el) -lt 500 ] && g $(bin $best) bench roofline --layers 4 --contexts 1024,8192,32768 --prefill 4096 --prefill-reps 1 --out $OUT/headline_$i.json
done
echo "end t=$(el)s" >> $T
grep -hE "^## |rc=|^prefill|^decode|^breakdown|^end|rror|anic|H200|ceilings" $T | cut -c1-300
# carry: ["target/device/memra","target/vB/memra","target/vC/memra"]; run:
# bash docs/results/prepared_session34/run128.sh C B   (only the builds whose gates passed in run126.sh); timeout_s 595
