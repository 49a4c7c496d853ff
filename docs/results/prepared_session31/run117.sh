#!/usr/bin/env bash
# prepared in the thirty-first session for the next (perf.md "The gap", item 6): built, never run on a GPU.
# To run after run115.sh and run116.sh, if both measure faster than main:
#   M = main (1e5b7c0; target/device/memra),
#   P = next/prepared32 (indexer-mma and hc-tokens together on main; target/vP/memra).
# Exactness of P (the flash-shape exact chunk gate, compare small exact and fp8, the chunk gate small), its
# headline in three processes (JSON each: perf.json takes the process whose 1k median is the middle one), main
# once in the same run, the fp8 flash-shape chunk gate on P.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
M=target/device/memra; P=target/vP/memra
R=$OUT/run117.txt; T0=$(date +%s)
g() { echo "## $* (t=$(( $(date +%s) - T0 ))s)" >> $R; local t0=$(date +%s); timeout 200 "$@" >> $R 2>&1; echo "rc=$? $(( $(date +%s) - t0 ))s" >> $R; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >> $R
mkdir -p /tmp/m
g $P synth --preset small --seed 1 --out /tmp/m/small
g $P gate chunks synth:flash-shape,layers=4 --variant exact --prompt-len 2176 --widths 256 --out /tmp/m/chunks_flash4.json
g $P gate compare /tmp/m/small --variant exact --prompt-len 160
g $P gate compare /tmp/m/small --variant fp8 --prompt-len 160
g $P gate chunks /tmp/m/small --variant exact --prompt-len 160 --out /tmp/m/chunks_small.json
for i in 1 2 3; do
  g $P bench roofline --layers 4 --contexts 1024,8192,32768 --prefill 4096 --prefill-reps 1 --out $OUT/roofline_P_$i.json
done
g $M bench roofline --layers 4 --contexts 1024 --prefill 4096 --prefill-reps 1
[ $(( $(date +%s) - T0 )) -lt 480 ] && g $P gate chunks synth:flash-shape,layers=4 --variant fp8 --prompt-len 2176 --widths 256 --out /tmp/m/chunks_flash4_fp8.json
echo "end t=$(( $(date +%s) - T0 ))s" >> $R
grep -hE "^## |rc=|^prefill|^decode|^breakdown|^end|^ceilings|^compare|^chunk gate|rror|anic|H200" $R | cut -c1-300
# build: main -> target/device/memra; next/prepared32 (prepared32.patch on main: the two patches together; they do
# not apply one after the other) -> target/vP/memra (cargo build --release -p memra; strip -o).
# carry: ["target/device/memra","target/vP/memra"]; run: bash docs/results/prepared_session31/run117.sh; timeout_s 595
