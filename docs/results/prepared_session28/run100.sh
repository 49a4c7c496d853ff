#!/usr/bin/env bash
# prepared in the twenty-eighth session for the next (perf.md "The gap", item 6):
#   M = main (hc_site_rows' trees and early staging, a767ef7's kernels; target/device/memra),
#   L = next/hc-stage-loop (hc-stage-loop.patch on main: the staging loop steps its addresses, the whole-float4 case
#       a loop of its own that ptxas unrolls by 4: ~8 instructions a cp.async instead of ~35; target/vL/memra),
#   F = next/hc-fence (L + hc-ticket-fence.patch: thread 0 alone fences around its ticket, as a grid barrier does, in
#       hc_site and hc_site_rows, so decode's sites change too; target/vF/memra).
# Nsight Compute (run 4) had hc_site_rows issuing on 80% of its cycles (so fewer instructions should be less time)
# and stalled on membar 0.8 an issue.
# Exactness first (the flash-shape chunk gates exact, compare small exact, for L and F; compare and chunks on
# synth:tiny,hc=6 and synth:small,hc=6 for M and F), then rooflines L, M, F, L, F
# (prefill 4096 and decode 1k), then Nsight Compute on L's hc_site_rows: the usual metrics, and the per-instruction
# executed counts (SourceCounters) as CSV, to see where the rest of its instructions go.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
M=target/device/memra; L=target/vL/memra; F=target/vF/memra
R=$OUT/run100.txt; T0=$(date +%s)
g() { echo "## $* (t=$(( $(date +%s) - T0 ))s)" >> $R; local t0=$(date +%s); timeout 200 "$@" >> $R 2>&1; echo "rc=$? $(( $(date +%s) - t0 ))s" >> $R; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >> $R
mkdir -p /tmp/m
g $L synth --preset small --seed 1 --out /tmp/m/small
for b in $L $F; do
  g $b gate chunks synth:flash-shape,layers=4 --variant exact --prompt-len 2176 --widths 256 --out /tmp/m/chunks_flash4.json
  g $b gate compare /tmp/m/small --variant exact --prompt-len 160
done
# six hyper-connection streams (48 mixes a site: hc_site_rows stages fn twice, hc_site sums two rounds of 32; on
# tiny, width 6 x 64 leaves the second slice half past the streams): never run on a GPU before, main's kernels included
for b in $M $F; do
  for p in tiny small; do
    g $b gate compare synth:$p,hc=6 --variant exact --prompt-len 160
    g $b gate chunks synth:$p,hc=6 --variant exact --prompt-len 160 --out /tmp/m/chunks_${p}_hc6.json
  done
done
for b in $L $M $F $L $F; do
  g $b bench roofline --layers 4 --contexts 1024 --prefill 4096 --prefill-reps 1
done
NCU=/usr/local/cuda/bin/ncu
METRICS="regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,regex:sm__pipe_(alu|fma|fp64|shared)_cycles_active\.avg\.pct_of_peak_sustained_active,smsp__inst_executed.sum,smsp__issue_active.avg.pct_of_peak_sustained_active,gpu__time_duration.sum"
[ $(( $(date +%s) - T0 )) -lt 480 ] && g $NCU --clock-control none --cache-control none --metrics "$METRICS" \
    --section SourceCounters -o /tmp/m/hc --kernel-name hc_site_rows --launch-skip 1 --launch-count 1 \
    $L bench roofline --layers 1 --contexts 1024 --prefill 4096 --prefill-reps 1 --steps 3 && \
  g $NCU --import /tmp/m/hc.ncu-rep --page details && \
  $NCU --import /tmp/m/hc.ncu-rep --page source --csv --print-source sass > $OUT/hc_site_rows_sass.csv 2>> $R
echo "end t=$(( $(date +%s) - T0 ))s" >> $R
grep -hE "^## |rc=|^prefill|^decode|^breakdown|^end|^compare|^chunk gate|rror|anic|H200|stalled|pipe_|inst_executed|issue_active|duration|^  [a-z_]+ \(" $R | cut -c1-300
# build: main -> target/device/memra; next/hc-stage-loop (or git apply docs/results/prepared_session28/hc-stage-loop.patch
# on main) -> target/vL/memra; next/hc-fence (or both patches on main) -> target/vF/memra (cargo build --release -p
# memra; strip -o). The fp8 flash-shape chunk gate and a headline go in the run that lands a winner.
# carry: ["target/device/memra","target/vL/memra","target/vF/memra"]; run: bash docs/results/prepared_session28/run100.sh;
# timeout_s 595
