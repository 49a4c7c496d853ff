#!/usr/bin/env bash
# thirty-second session: hc_site_rows' mixes on the FP64 tensor cores (branch next/hc-mma; target/vM/memra)
# against main 601af17 (target/device/memra). mix_mma: 16 rows of fn by 8 tokens a warp, one m16n8k4
# instruction a pair leaf (k = j, j + 16 from -0; k = 2, 3 add 0 x -0), the 16 leaves onto a register stack in
# bit-reversed order (warp_sum's tree: the CPU model test hc_site_rows_mma_gives_the_tree_bits); fn staged as
# f64 a tile of 16 rows, 8 tokens a block, 3 blocks an SM (ptxas 13.0: 80 registers, 4/4 bytes of spills).
# Exactness first (the flash-shape exact chunk gate: chunks of 256 and the monolithic 2176 take hc_site_rows,
# decode hc_site; compare small exact and fp8 against the CPU; the chunk gate small), then rooflines H, M, H, M
# and Nsight Compute's times of the hc kernels on H.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
M=target/device/memra; H=target/vM/memra
R=$OUT/run118.txt; T0=$(date +%s)
g() { echo "## $* (t=$(( $(date +%s) - T0 ))s)" >> $R; local t0=$(date +%s); timeout 200 "$@" >> $R 2>&1; echo "rc=$? $(( $(date +%s) - t0 ))s" >> $R; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >> $R
mkdir -p /tmp/m
g $H synth --preset small --seed 1 --out /tmp/m/small
g $H gate compare /tmp/m/small --variant exact --prompt-len 160
g $H gate compare /tmp/m/small --variant fp8 --prompt-len 160
g $H gate chunks /tmp/m/small --variant exact --prompt-len 160 --out /tmp/m/chunks_small.json
g $H gate chunks synth:flash-shape,layers=4 --variant exact --prompt-len 2176 --widths 256 --out /tmp/m/chunks_flash4.json
for b in $H $M $H $M; do
  [ $(( $(date +%s) - T0 )) -lt 330 ] && g $b bench roofline --layers 4 --contexts 1024 --prefill 4096 --prefill-reps 1
done
[ $(( $(date +%s) - T0 )) -lt 340 ] && g /usr/local/cuda/bin/ncu --clock-control none --metrics gpu__time_duration.sum \
  --kernel-name regex:"hc_site_rows|hc_collapse_rows" $H bench roofline --layers 2 --contexts 1024 --steps 1 --prefill 4096 --prefill-reps 1
echo "end t=$(( $(date +%s) - T0 ))s" >> $R
grep -hE "^## |rc=|^prefill|^decode|^breakdown|^end|^compare|^chunk gate|rror|anic|H200" $R | cut -c1-300
grep -A1 -E "^  hc_(site_rows|collapse_rows)" $R | grep -E "hc_|duration" | paste - - | awk '{print $1, $2, $NF}'
# build: main -> target/device/memra; next/hc-mma -> target/vM/memra (cargo build --release -p memra; strip -o).
# carry: ["target/device/memra","target/vM/memra"]; run: bash docs/results/prepared_session32/run118.sh; timeout_s 390
