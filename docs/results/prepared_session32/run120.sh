#!/usr/bin/env bash
# prepared in the thirty-second session for the next (perf.md "Steps so far", thirty-second session): built,
# never run on a GPU.
#   M = main (601af17's kernels; target/device/memra),
#   Q = next/hc-posts (hc-posts.patch on main; target/vQ/memra): the prefill's sites with a post run hc_post
#       first (grid (n, d / 256), no shared memory: many blocks an SM keep the posts' loads in flight; the
#       function that the layer's end already runs, with the same bits), then hc_site_rows over the streams,
#       whose block loads its four tokens' elements at once (main: one token after another, each through the
#       post's loads). hc_site (decode), hc_post, hc_collapse_rows and hc_sinkhorn: SASS unchanged; hc_site_rows
#       64 registers, 4/4 bytes of spills (ptxas 13.0). Nsight Compute (thirty-second session, run 2): the site
#       without a post 1.07 ms, the attention-post sites 1.32, the MoE-post sites 1.97.
# Exactness of Q first (compare small exact and fp8 against the CPU, the chunk gate small, the flash-shape exact
# chunk gate), then rooflines Q, M, Q, M, Nsight Compute's times of the hc kernels on Q, the fp8 chunk gate.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
M=target/device/memra; Q=target/vQ/memra
R=$OUT/run120.txt; T0=$(date +%s)
g() { echo "## $* (t=$(( $(date +%s) - T0 ))s)" >> $R; local t0=$(date +%s); timeout 200 "$@" >> $R 2>&1; echo "rc=$? $(( $(date +%s) - t0 ))s" >> $R; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >> $R
mkdir -p /tmp/m
g $Q synth --preset small --seed 1 --out /tmp/m/small
g $Q gate compare /tmp/m/small --variant exact --prompt-len 160
g $Q gate compare /tmp/m/small --variant fp8 --prompt-len 160
g $Q gate chunks /tmp/m/small --variant exact --prompt-len 160 --out /tmp/m/chunks_small.json
g $Q gate chunks synth:flash-shape,layers=4 --variant exact --prompt-len 2176 --widths 256 --out /tmp/m/chunks_flash4.json
for b in $Q $M $Q $M; do
  g $b bench roofline --layers 4 --contexts 1024 --prefill 4096 --prefill-reps 1
done
[ $(( $(date +%s) - T0 )) -lt 430 ] && g /usr/local/cuda/bin/ncu --clock-control none --metrics gpu__time_duration.sum \
  --kernel-name regex:"hc_site_rows|hc_collapse_rows|hc_post" $Q bench roofline --layers 2 --contexts 1024 --steps 1 --prefill 4096 --prefill-reps 1
[ $(( $(date +%s) - T0 )) -lt 470 ] && g $Q gate chunks synth:flash-shape,layers=4 --variant fp8 --prompt-len 2176 --widths 256 --out /tmp/m/chunks_flash4_fp8.json
echo "end t=$(( $(date +%s) - T0 ))s" >> $R
grep -hE "^## |rc=|^prefill|^decode|^breakdown|^end|^compare|^chunk gate|rror|anic|H200" $R | cut -c1-300
grep -A1 -E "^  hc_(site_rows|collapse_rows|post)" $R | grep -E "hc_|duration" | paste - - | awk '{print $1, $2, $NF}'
# build: main -> target/device/memra; next/hc-posts (or git apply hc-posts.patch on main) -> target/vQ/memra
# (cargo build --release -p memra; strip -o).
# carry: ["target/device/memra","target/vQ/memra"]; run: bash docs/results/prepared_session32/run120.sh; timeout_s 595
