#!/usr/bin/env bash
# Fifty-fourth session: every kernel lets the next one schedule its blocks before it waits
# (`await_inputs`: launch_dependents, then wait; trigger-first) against main 49e3d8f (wait, then
# launch_dependents). Builds, release on the development machine, stripped, carried:
#   target/device/memra_main   main 49e3d8f
#   target/device/memra_trig   main with kernels/common.cuh's two lines swapped
# On an H200: three alternating rounds of the headline roofline (decode 1k, 8k, 32k, prefill 4096)
# of each, main's the headline with the L2 policy (run173.sh's question). On any other card: three
# alternating rounds of decode 1k and prefill 4096. Then the flash-shape chunk gates of trig (exact widths 1 and 256,
# fp8 widths 1 and 256) and, while time is left, the exact chunk gate past the indexer's bound.
# First, the overlap probe's launches in both orders: overlap_trigger.patch (beside this script) on
# prepared_session47/overlap.cu, through overlap_probe.sh (as run, the patched file sat beside this
# script and the same lines were inline here; the same code).
set -u
R=${OUT:-out}
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader | tee $R/card.txt
# the launches-mode overlap probe in both orders (~20 s with its build)
bash docs/results/session54/overlap_probe.sh overlap_trigger
if grep -q H200 $R/card.txt; then ARGS="--contexts 1024,8192,32768 --prefill 4096 --prefill-reps 1"; else ARGS="--contexts 1024 --prefill 4096 --prefill-reps 1"; fi
for r in 1 2 3; do
  for b in main trig; do
    [ $SECONDS -lt 420 ] || break 2
    echo "## round $r $b" >> $R/roofline.txt
    timeout 170 target/device/memra_$b bench roofline --layers 4 $ARGS --out $R/roofline_${b}_$r.json >> $R/roofline.txt 2>&1
    echo "rc=$? elapsed ${SECONDS} s" >> $R/roofline.txt
  done
done
grep -E "^(## |rc=|ceilings|decode b1|prefill|breakdown|error)" $R/roofline.txt | cut -c1-300
M=target/device/memra_trig
g() { # name, args...
  local n=$1; shift
  timeout 120 $M gate chunks synth:flash-shape,layers=4 "$@" --out $R/chunks_$n.json > $R/chunks_$n.txt 2>&1
  echo "chunks $n rc=$? elapsed ${SECONDS} s | $(tail -1 $R/chunks_$n.txt | cut -c1-330)"
}
g exact --variant exact --prompt-len 256 --widths 1,256
[ $SECONDS -lt 520 ] && g fp8 --variant fp8 --prompt-len 256 --widths 1,256
[ $SECONDS -lt 470 ] && g indexer --variant exact --prompt-len 2176 --widths 256
echo "elapsed ${SECONDS} s"
