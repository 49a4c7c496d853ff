#!/usr/bin/env bash
# prepared in the thirty-first session for the next (perf.md "The gap", item 6): built, never run on a GPU.
#   M = main (1e5b7c0; target/device/memra),
#   X = next/hc-tokens (hc-tokens.patch on main; target/vH4/memra): hc_site_rows with four tokens a block, so that
#       fn's 24 KiB staged a block serve four tokens' 256 elements (one token a block staged them for one: 6.4 GB
#       of fn through L2 a site at 4096 tokens), then hc_collapse_rows (grid n) for each token's collapse instead
#       of the last block's ticket; the same code and bits per token (ptxas 13.0: hc_site_rows 64 registers, 4/8
#       bytes of spills; hc_collapse_rows 76, none; hc_site, decode's, 133 registers against 134, 4464
#       instructions against 4456, from the shared helpers).
# Exactness of X first: the flash-shape exact chunk gate (chunks of 256 and the monolithic 2176 take the rows
# kernels, decode hc_site), compare small exact and fp8 (against the CPU), the chunk gate small; then rooflines X,
# M, X, M, Nsight Compute's times of the hc kernels on X, and the fp8 flash-shape chunk gate on X.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
M=target/device/memra; X=target/vH4/memra
R=$OUT/run116.txt; T0=$(date +%s)
g() { echo "## $* (t=$(( $(date +%s) - T0 ))s)" >> $R; local t0=$(date +%s); timeout 200 "$@" >> $R 2>&1; echo "rc=$? $(( $(date +%s) - t0 ))s" >> $R; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >> $R
mkdir -p /tmp/m
g $X synth --preset small --seed 1 --out /tmp/m/small
g $X gate chunks synth:flash-shape,layers=4 --variant exact --prompt-len 2176 --widths 256 --out /tmp/m/chunks_flash4.json
g $X gate compare /tmp/m/small --variant exact --prompt-len 160
g $X gate compare /tmp/m/small --variant fp8 --prompt-len 160
g $X gate chunks /tmp/m/small --variant exact --prompt-len 160 --out /tmp/m/chunks_small.json
for b in $X $M $X $M; do
  g $b bench roofline --layers 4 --contexts 1024 --prefill 4096 --prefill-reps 1
done
[ $(( $(date +%s) - T0 )) -lt 430 ] && g /usr/local/cuda/bin/ncu --clock-control none --metrics gpu__time_duration.sum \
  --kernel-name regex:"hc_site_rows|hc_collapse_rows" $X bench roofline --layers 2 --contexts 1024 --steps 1 --prefill 4096 --prefill-reps 1
[ $(( $(date +%s) - T0 )) -lt 470 ] && g $X gate chunks synth:flash-shape,layers=4 --variant fp8 --prompt-len 2176 --widths 256 --out /tmp/m/chunks_flash4_fp8.json
echo "end t=$(( $(date +%s) - T0 ))s" >> $R
grep -hE "^## |rc=|^prefill|^decode|^breakdown|^end|^compare|^chunk gate|rror|anic|H200" $R | cut -c1-300
grep -A1 -E "^  hc_(site_rows|collapse_rows)" $R | grep -E "hc_|duration" | paste - - | awk '{print $1, $2, $NF}'
# build: main -> target/device/memra; next/hc-tokens (or git apply hc-tokens.patch on main) -> target/vH4/memra
# (cargo build --release -p memra; strip -o).
# carry: ["target/device/memra","target/vH4/memra"]; run: bash docs/results/prepared_session31/run116.sh; timeout_s 595
