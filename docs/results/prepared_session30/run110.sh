#!/usr/bin/env bash
# prepared in the thirtieth session for the next (perf.md "The gap", item 6): built, never run on a GPU.
#   M = main (fb3ab63, df306aa's kernels; target/device/memra),
#   C = next/prepared31 (dc4ae56; target/vC/memra): both changes below,
#   F = next/bf16-mma (dd96979; target/vF/memra): linear_mma_bf16, the prefill's BF16 products (the compressors'
#       wkv and wgate, the indexer's compressor and weights_proj, the router's gate: ~7 ms a CSA layer on
#       linear_groups' f64 fmas, run 2) on the FP64 tensor cores, one m16n8k8 step a chunk of 8 values
#       (ptxas 13.0: 144 registers, no spills; the FP8 and FP4 kernels' SASS unchanged),
#   N = next/norm-rope-128 (402737f; target/vN/memra): rms_norm_rope in blocks of 128 threads for rows of 512
#       (2.2 ms a layer, run 2: one 256-thread block a row, half its threads idle), the same bits.
# Exactness of C first (the flash-shape exact chunk gate, compare small exact and fp8, chunk gate small), then
# rooflines C, M, C, M, then F and N once each, Nsight Compute's times of the products and norms on C, the fp8
# flash-shape chunk gate on C. A headline goes in the run that lands it.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
M=target/device/memra; C=target/vC/memra; F=target/vF/memra; N=target/vN/memra
R=$OUT/run110.txt; T0=$(date +%s)
g() { echo "## $* (t=$(( $(date +%s) - T0 ))s)" >> $R; local t0=$(date +%s); timeout 200 "$@" >> $R 2>&1; echo "rc=$? $(( $(date +%s) - t0 ))s" >> $R; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >> $R
mkdir -p /tmp/m
g $C synth --preset small --seed 1 --out /tmp/m/small
g $C gate chunks synth:flash-shape,layers=4 --variant exact --prompt-len 2176 --widths 256 --out /tmp/m/chunks_flash4.json
g $C gate compare /tmp/m/small --variant exact --prompt-len 160
g $C gate compare /tmp/m/small --variant fp8 --prompt-len 160
g $C gate chunks /tmp/m/small --variant exact --prompt-len 160 --out /tmp/m/chunks_small.json
for b in $C $M $C $M; do
  g $b bench roofline --layers 4 --contexts 1024 --prefill 4096 --prefill-reps 1
done
for b in $F $N; do
  [ $(( $(date +%s) - T0 )) -lt 400 ] && g $b bench roofline --layers 4 --contexts 1024 --prefill 4096 --prefill-reps 1
done
[ $(( $(date +%s) - T0 )) -lt 430 ] && g /usr/local/cuda/bin/ncu --clock-control none --metrics gpu__time_duration.sum \
  --kernel-name regex:"linear_mma_bf16|linear_groups|rms_norm_rope" $C bench roofline --layers 2 --contexts 1024 --steps 1 --prefill 4096 --prefill-reps 1
[ $(( $(date +%s) - T0 )) -lt 470 ] && g $C gate chunks synth:flash-shape,layers=4 --variant fp8 --prompt-len 2176 --widths 256 --out /tmp/m/chunks_flash4_fp8.json
echo "end t=$(( $(date +%s) - T0 ))s" >> $R
grep -hE "^## |rc=|^prefill|^decode|^breakdown|^end|^compare|^chunk gate|rror|anic|H200|linear_mma_bf16|linear_groups|rms_norm_rope|duration" $R | cut -c1-300
# build: main -> target/device/memra; next/prepared31 -> target/vC/memra; next/bf16-mma -> target/vF/memra;
# next/norm-rope-128 -> target/vN/memra (cargo build --release -p memra; strip -o). Patches beside this script.
# carry: ["target/device/memra","target/vC/memra","target/vF/memra","target/vN/memra"];
# run: bash docs/results/prepared_session30/run110.sh; timeout_s 595
