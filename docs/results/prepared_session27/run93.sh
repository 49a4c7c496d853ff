#!/usr/bin/env bash
# twenty-seventh session, run 2 (perf.md "The gap", item 6):
#   M = main a999a46 (the prefetch; target/device/memra), F = next/pf-fw (fp8-wide.patch on a999a46: mma_round decodes FP8 codes by a byte permute and a 64-bit
#   multiply, 3 instructions a code instead of 4 (no zeroing move), for the dense products only; target/vPFW/memra).
# Exactness first (compare small exact and fp8 against the CPU oracle; the chunk gates small fp8 and flash-shape;
# `same` against M), then prefill 4096 rooflines F, M, F.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
M=target/device/memra; F=target/vPFW/memra
R=$OUT/run93.txt; T0=$(date +%s)
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
# then main's quick battery (exactness on the small models, the faults, the drafters) if time is left
[ $(( $(date +%s) - T0 )) -lt 420 ] && { MEMRA=$M PLUGINS=target/device OUT=$OUT/quick timeout 170 bash scripts/gpu_gates.sh quick > /dev/null 2>&1; echo "quick rc=$? t=$(( $(date +%s) - T0 ))s" >> $R; cat $OUT/quick/summary.txt >> $R 2>/dev/null; }
echo "end t=$(( $(date +%s) - T0 ))s" >> $R
grep -hE "^## |rc=|^prefill|^breakdown prefill|^end|^compare|^chunk gate|^same|^quick|FAULT|PASS|FAIL|rror|anic|H200|stalled|pipe_|inst_executed|issue_active|duration|^  [a-z_]+ \(" $R | cut -c1-300
# build: main -> target/device/memra; next/pf-fw -> target/vPFW/memra (cargo build --release -p memra; strip -o)
# carry: ["target/device","target/vPFW/memra"]; run: bash docs/results/prepared_session27/run93.sh; timeout_s 595
