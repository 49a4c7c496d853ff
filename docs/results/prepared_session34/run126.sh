#!/usr/bin/env bash
# prepared in the thirty-fourth session for the next: the gates of a-lo4.patch, which that session measured
# (run 3: prefill 388.6, 388.7 ms against main 6b1830a's 391.1, 391.5 in the same run; attn.out 78.1 against
# 80.3) but whose chunk gate could not finish (its output directory missing on the bare machine).
#   M = main (target/device/memra),
#   B = a-lo4.patch on main (target/vB/memra, target/vB/libdspark.so): linear_mma's rounds of K >= 4 chunks a
#       lane write only the high words of A fragments whose low words stay zero (mma_a_fragment_high).
# Exactness of B first (scripts/gpu_gates.sh quick; the flash-shape chunk gates exact and fp8), then rooflines
# B, M, B, M, then, if every gate passed and B's prefill is the shorter, B's headline (three processes).
set -u
mkdir -p /tmp/m
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
M=target/device/memra; B=target/vB/memra
T=$OUT/run126.txt; T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
g() { echo "## $* (t=$(el)s)" >> $T; local t0=$(date +%s); timeout 200 "$@" >> $T 2>&1; local rc=$?; echo "rc=$rc $(( $(date +%s) - t0 ))s" >> $T; return $rc; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >> $T
ok=1
echo "## quick on B (t=$(el)s)" >> $T
OUT=$OUT/quick MEMRA=$B PLUGINS=target/vB timeout 300 bash scripts/gpu_gates.sh quick >> $T 2>&1 || ok=0
# every step rc=0 but the FAULT steps, which must fail (rc=1); speculative tokens equal to plain greedy
awk '/ rc=[0-9]+ /{match($0, / rc=[0-9]+ /); rc = substr($0, RSTART + 4, RLENGTH - 5) + 0;
  if (($0 ~ /FAULT/) != (rc != 0)) bad++} END{exit bad > 0}' $OUT/quick/summary.txt || ok=0
grep -q "equal to plain greedy True" $T || ok=0
g $B gate chunks synth:flash-shape,layers=4 --variant exact --prompt-len 2176 --widths 256 --out /tmp/m/chunks_flash4.json || ok=0
g $B gate chunks synth:flash-shape,layers=4 --variant fp8 --prompt-len 2176 --widths 256 --out /tmp/m/chunks_flash4_fp8.json || ok=0
for b in $B $M $B $M; do
  [ $(el) -lt 400 ] && g $b bench roofline --layers 4 --contexts 1024 --prefill 4096 --prefill-reps 1
done
# the rooflines' prefills, by build
pb=$(awk '/^## target\/vB\/memra bench roofline/{on=1} /^## target\/device\/memra/{on=0} on && /^prefill 4096/{s+=$3; n++} END{print (n ? s/n : 1e9)}' $T)
pm=$(awk '/^## target\/device\/memra bench roofline/{on=1} /^## target\/vB\/memra/{on=0} on && /^prefill 4096/{s+=$3; n++} END{print (n ? s/n : 1e9)}' $T)
H=$M; [ $ok = 1 ] && awk -v a=$pb -v m=$pm 'BEGIN{exit !(a < m)}' && H=$B
echo "## gates ok=$ok; prefill B $pb M $pm: headline on $H (t=$(el)s)" >> $T
for i in 1 2 3; do
  [ $(el) -lt 500 ] && g $H bench roofline --layers 4 --contexts 1024,8192,32768 --prefill 4096 --prefill-reps 1 --out $OUT/headline_$i.json
done
echo "end t=$(el)s" >> $T
grep -hE "^## |rc=|^prefill|^decode|^breakdown|^end|^compare|^chunk gate|rror|anic|H200|equal to plain|ceilings" $T | cut -c1-300
# build: main -> target/device/memra; git apply docs/results/prepared_session34/a-lo4.patch on main ->
# target/vB/memra and target/vB/libdspark.so (cargo build --release --workspace; strip -o; then git apply -R).
# carry: ["target/device/memra","target/vB/memra","target/vB/libdspark.so"]; run:
# bash docs/results/prepared_session34/run126.sh; timeout_s 595
