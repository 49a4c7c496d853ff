#!/usr/bin/env bash
# prepared in the thirty-fourth session for the next: the GPU gates of two linear_mma builds (run128.sh then
# times the builds that pass). The thirty-fourth session measured B (run 3: prefill 388.6, 388.7 ms against main
# 6b1830a's 391.1, 391.5; attn.out 78.1 against 80.3) but its chunk gate could not finish (its output directory
# missing on the bare machine); C was built after the session's device time was spent.
#   B = a-lo4.patch on main (target/vB/memra, target/vB/libdspark.so): linear_mma's rounds of K >= 4 chunks a
#       lane write only the high words of A fragments whose low words stay zero (mma_a_fragment_high).
#   C = a-lo4-pairs.patch on main (target/vC/...): B and, where K <= 2 (wq_b), the leaf stack's level 0 in
#       registers (ptxas 13.0: wq_b's loop 61.6 -> 58.3 instructions a DMMA; K = 4, 8, 16: 60.0, 57.0, 60.3
#       against main's 64.0, 62.4, 63.6).
# Each: scripts/gpu_gates.sh quick (every step passes but the faults, which must fail; DSpark GPU against CPU,
# speculative equal to plain greedy), the flash-shape chunk gates exact and fp8.
set -u
mkdir -p /tmp/m
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
T=$OUT/run126.txt; T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
g() { echo "## $* (t=$(el)s)" >> $T; local t0=$(date +%s); timeout 200 "$@" >> $T 2>&1; local rc=$?; echo "rc=$rc $(( $(date +%s) - t0 ))s" >> $T; return $rc; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >> $T
for X in C B; do
  D=target/v$X; ok=1
  [ $(el) -lt 300 ] || { echo "## $X not gated: no time (t=$(el)s)" >> $T; continue; }
  echo "## quick on $X (t=$(el)s)" >> $T
  OUT=$OUT/quick_$X MEMRA=$D/memra PLUGINS=$D timeout 280 bash scripts/gpu_gates.sh quick > $OUT/quick_$X.txt 2>&1 || ok=0
  cat $OUT/quick_$X.txt >> $T
  # every step rc=0 but the FAULT steps, which must fail (rc=1); speculative tokens equal to plain greedy
  awk '/ rc=[0-9]+ /{match($0, / rc=[0-9]+ /); rc = substr($0, RSTART + 4, RLENGTH - 5) + 0;
    if (($0 ~ /FAULT/) != (rc != 0)) bad++} END{exit bad > 0}' $OUT/quick_$X/summary.txt || ok=0
  grep -q "equal to plain greedy True" $OUT/quick_$X.txt || ok=0
  g $D/memra gate chunks synth:flash-shape,layers=4 --variant exact --prompt-len 2176 --widths 256 --out /tmp/m/chunks_flash4_$X.json || ok=0
  g $D/memra gate chunks synth:flash-shape,layers=4 --variant fp8 --prompt-len 2176 --widths 256 --out /tmp/m/chunks_flash4_fp8_$X.json || ok=0
  echo "## gates $X ok=$ok (t=$(el)s)" >> $T
done
echo "end t=$(el)s" >> $T
grep -hE "^## |rc=|^compare|^chunk gate|rror|anic|H200|equal to plain" $T | cut -c1-300
# build: main -> target/device/memra; git apply docs/results/prepared_session34/a-lo4.patch on main ->
# target/vB/memra and target/vB/libdspark.so (cargo build --release --workspace; strip -o; git apply -R);
# a-lo4-pairs.patch on main -> target/vC/memra and target/vC/libdspark.so the same way.
# carry: ["target/vB/memra","target/vB/libdspark.so","target/vC/memra","target/vC/libdspark.so"]; run:
# bash docs/results/prepared_session34/run126.sh; timeout_s 595. Then run128.sh with the builds whose gates passed.
