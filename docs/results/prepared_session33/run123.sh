#!/usr/bin/env bash
# prepared in the thirty-third session for the next (perf.md "Steps so far", thirty-third session): built,
# never run on a GPU.
#   M = main (2a65161's kernels; target/device/memra),
#   R = next/norm-rope-warps (norm-rope-warps.patch on main; target/vR/memra and target/vR/libdspark.so):
#       rms_norm_rope_warps, a warp a row for the heads' rows of at most 512 values (lane l does threads l, l + 32,
#       l + 64, l + 96 of rms_norm_rope's 128-thread block: the same chains, butterflies and totals; the rotation in
#       registers, no barrier, one write). Every rms_norm_rope launch that it takes (decode and prefill: the
#       queries' heads and the key, DSpark's window rows) goes to it. ptxas 13.0: 80 registers, no spills
#       (rms_norm_rope: 94). Nsight Compute (this session, run 3): rms_norm_rope 0.96 ms a prefill layer
#       (4096 x 65 rows of 512, ~1.1 TB/s).
#       With hc-partials.patch on top (the same branch and binary): hc_site_rows writes its tokens' slice
#       partials at once, a (token, value) a thread (site_partials' sums), where a token at a time took nm + 1
#       threads of 256 eight times over. ptxas 13.0: 80 registers, 20/16 bytes of spills (4/4 before).
#       Nsight Compute (this session, run 4): hc_site_rows 0.586 ms a site.
#       And embed-float4.patch on top (the same branch and binary): embed_rows writes a thread's 8 values as two
#       float4s (was 8 scalar stores); Nsight Compute (run 3): embed_rows 0.48 ms a 4096-token prefill (268 MB of
#       streams written, ~0.6 TB/s).
# Exactness of R first (scripts/gpu_gates.sh quick: compare and chunk gates small exact and fp8, the chunk gate's
# fault, tf tiny and its fault, DSpark GPU against CPU and speculative against plain greedy; then the flash-shape
# chunk gates exact and fp8), rooflines R, M, R, M, Nsight Compute's times of the norm kernels on R and of hc_site_rows'
# sections (what holds it now). The three changes' kernels are timed apart by Nsight Compute (rms_norm_rope_warps
# against rms_norm_rope's 0.96 ms, hc_site_rows against its 0.586, embed_rows against 0.48): one that is slower there
# is left out of the merge.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
M=target/device/memra; R=target/vR/memra
T=$OUT/run123.txt; T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
g() { echo "## $* (t=$(el)s)" >> $T; local t0=$(date +%s); timeout 200 "$@" >> $T 2>&1; echo "rc=$? $(( $(date +%s) - t0 ))s" >> $T; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >> $T
echo "## quick on R (t=$(el)s)" >> $T
OUT=$OUT/quick MEMRA=$R PLUGINS=target/vR timeout 300 bash scripts/gpu_gates.sh quick >> $T 2>&1
echo "rc=$?" >> $T
g $R gate chunks synth:flash-shape,layers=4 --variant exact --prompt-len 2176 --widths 256 --out /tmp/m/chunks_flash4.json
for b in $R $M $R $M; do
  [ $(el) -lt 470 ] && g $b bench roofline --layers 4 --contexts 1024 --prefill 4096 --prefill-reps 1
done
[ $(el) -lt 500 ] && g /usr/local/cuda/bin/ncu --clock-control none --metrics gpu__time_duration.sum \
  --kernel-name regex:"rms_norm_rope|hc_site_rows|embed_rows" $R bench roofline --layers 2 --contexts 1024 --steps 1 --prefill 4096 --prefill-reps 1
[ $(el) -lt 520 ] && g $R gate chunks synth:flash-shape,layers=4 --variant fp8 --prompt-len 2176 --widths 256 --out /tmp/m/chunks_flash4_fp8.json
echo "end t=$(el)s" >> $T
grep -hE "^## |rc=|^prefill|^decode|^breakdown|^end|^compare|^chunk gate|rror|anic|H200|equal to plain" $T | cut -c1-300
grep -A1 -E "^  (rms_norm_rope|hc_site_rows|embed_rows)" $T | grep -E "rms_|hc_|embed_|duration" | paste - - | awk '{print $1, $2, $NF}' | sort | uniq -c
# build: main -> target/device/memra; next/norm-rope-warps (or git apply norm-rope-warps.patch, hc-partials.patch and
# embed-float4.patch, in that order, on main) ->
# target/vR/memra and target/vR/libdspark.so (cargo build --release --workspace; strip -o).
# carry: ["target/device/memra","target/vR/memra","target/vR/libdspark.so"]; run:
# bash docs/results/prepared_session33/run123.sh; timeout_s 595
