#!/usr/bin/env bash
# run 4 (twenty-fourth session): the indexer at 32k. Against main 11d949b (M, target/device/memra):
#   S  = a47aaf3: indexer_scores stages each key group as f64 (no F2F in its loop; target/vS/memra)
#   ST = 0a13546: S + indexer_topk stopping once the chosen byte's bin is wholly selected, and counting a
#        warp's candidates without match_any (target/vST/memra)
# Exactness (ST): compare tiny exact/fp8 and small exact (the indexer runs from position 64 on small) against the
# CPU oracle, chunk gates small and the flash-shape chunk gate past the indexer's bound; then rooflines at 32k with
# the 4096 prefill, alternating.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
M=target/device/memra; S=target/vS/memra; ST=target/vST/memra
R=$OUT/run78.txt; T0=$(date +%s)
g() { echo "## $* (t=$(( $(date +%s) - T0 ))s)" >> $R; local t0=$(date +%s); timeout 150 "$@" >> $R 2>&1; echo "rc=$? $(( $(date +%s) - t0 ))s" >> $R; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >> $R
mkdir -p /tmp/m
g $ST synth --preset tiny --seed 0 --out /tmp/m/tiny
g $ST synth --preset small --seed 1 --out /tmp/m/small
g $ST gate compare /tmp/m/tiny --variant exact --prompt-len 160
g $ST gate compare /tmp/m/tiny --variant fp8 --prompt-len 160
g $ST gate compare /tmp/m/small --variant exact --prompt-len 96
g $ST gate chunks /tmp/m/small --variant exact --prompt-len 160 --out /tmp/m/chunks_e.json
g $ST gate chunks /tmp/m/small --variant fp8 --prompt-len 160 --out /tmp/m/chunks_f.json
g $ST gate chunks synth:flash-shape,layers=4 --variant exact --prompt-len 2176 --widths 256 --out /tmp/m/chunks_flash4_indexer.json
for b in $M $S $ST $M $S $ST; do
  [ $(( $(date +%s) - T0 )) -lt 500 ] || break
  g $b bench roofline --layers 4 --contexts 32768 --prefill 4096 --prefill-reps 1
done
echo "end t=$(( $(date +%s) - T0 ))s" >> $R
grep -hE "^## |rc=|^decode b1|^prefill|^breakdown|^end|^compare|^chunk gate|^tf gate|rror|anic|H200" $R | cut -c1-300
# carry: ["target/device/memra","target/vS/memra","target/vST/memra","docs/results/prepared_session24/run78.sh"]; timeout_s 580
