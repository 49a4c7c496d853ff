#!/usr/bin/env bash
# Fiftieth session, the third call on the warm H200 (after run167.sh and run168.sh of
# docs/results/prepared_session49/): main 191361e's chunk gates that 56dcf57's sessions could not run
# (flash shape fp8 widths 1 and 256, exact at 2112 positions widths 1 and 1056, small exact), then the
# exact and the tensor sums' decode 1k alternating (session45/run157.sh's question), two rounds.
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$LD_LIBRARY_PATH
M=target/device/memra_base; T=$OUT/run169.txt; mkdir -p /tmp/m
g() { echo "## $*" >> $T; local t0=$(date +%s); timeout 120 "$@" >> $T 2>&1; echo "rc=$? $(( $(date +%s) - t0 ))s" >> $T; }
g $M gate chunks synth:flash-shape,layers=4 --variant fp8 --prompt-len 256 --widths 1,256 --out $OUT/m_chunks_flash4_fp8.json
g $M gate chunks synth:flash-shape,layers=4 --variant exact --prompt-len 2112 --widths 1,1056 --out $OUT/m_chunks_flash4_2112.json
g $M synth --preset small --seed 1 --out /tmp/m/small
g $M gate chunks /tmp/m/small --variant exact --prompt-len 160 --out $OUT/m_chunks_small_exact.json
for r in 1 2; do for S in exact tensor; do g $M bench roofline --layers 4 --contexts 1024 --prefill 0 --sums $S; done; done
grep -E "^(## |rc=|chunk gate|decode b1|breakdown|error)" $T | cut -c1-250
