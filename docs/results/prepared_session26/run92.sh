#!/usr/bin/env bash
# prepared in the twenty-sixth session for the next (perf.md "The gap", item 6):
#   M = main (target/device/memra), F = next/fp8-wide (fp8-wide.patch on main: mma_round decodes FP8 codes by a byte permute and a 64-bit
#   multiply, 3 instructions a code instead of 4 (no zeroing move), for the dense products only; target/vFW/memra).
# Exactness first (compare small exact and fp8 against the CPU oracle; the chunk gates small fp8 and flash-shape;
# `same` against M), then prefill 4096 rooflines F, M, F.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
M=target/device/memra; F=target/vFW/memra
R=$OUT/run92.txt; T0=$(date +%s)
g() { echo "## $* (t=$(( $(date +%s) - T0 ))s)" >> $R; local t0=$(date +%s); timeout 200 "$@" >> $R 2>&1; echo "rc=$? $(( $(date +%s) - t0 ))s" >> $R; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >> $R
mkdir -p /tmp/m
g $F synth --preset small --seed 1 --out /tmp/m/small
for v in exact fp8; do g $F gate compare /tmp/m/small --variant $v --prompt-len 160; done
g $F gate chunks /tmp/m/small --variant fp8 --prompt-len 160 --out /tmp/m/chunks_fp8.json
g $F gate chunks synth:flash-shape,layers=4 --variant exact --prompt-len 2176 --widths 256 --out /tmp/m/chunks_flash4.json
for b in $F $M $F; do
  g $b bench roofline --layers 4 --contexts 1024 --prefill 4096 --prefill-reps 1
done
mkdir -p $OUT/same; MEMRA=$F BASE=$M OUT=$OUT/same timeout 200 bash scripts/gpu_gates.sh same > /dev/null 2>&1
cat $OUT/same/summary.txt >> $R 2>/dev/null
echo "end t=$(( $(date +%s) - T0 ))s" >> $R
grep -hE "^## |rc=|^prefill|^breakdown prefill|^end|^compare|^chunk gate|^same|rror|anic|H200|stalled|pipe_|inst_executed|issue_active|duration|^  [a-z_]+ \(" $R | cut -c1-300
# build: main -> target/device/memra; next/fp8-wide -> target/vFW/memra (cargo build --release -p memra; strip -o)
# carry: ["target/device/memra","target/vFW/memra"]; run: bash docs/results/prepared_session26/run92.sh; timeout_s 595
