#!/usr/bin/env bash
# prepared in the thirty-first session for the next (perf.md "The gap", item 6): built, never run on a GPU.
#   M = main (1e5b7c0; target/device/memra),
#   X = next/indexer-mma (indexer-mma.patch on main; target/vX/memra): indexer_scores_mma, the prefill's indexer
#       scores (4.35 ms a CSA layer at 4096 tokens on indexer_scores' f64 fmas, ~4 TFMA/s) on the FP64 tensor cores:
#       16 heads of a token a warp, one m16n8k4 instruction a leaf for 8 keys, the leaves onto a stack of subtrees
#       in registers (indexer_scores' bits: the CPU model test indexer_mma_fragments_give_the_scores_bits; ptxas
#       13.0: 128 registers, 16/16 bytes of spills, ~9.9 instructions a DMMA); for heads of
#       128 values, whole tiles of 16 heads and at least as many tokens as SMs (decode keeps indexer_scores, so
#       the chunk gates compare the two). attention_mma's SASS is unchanged by the shared helpers.
# Exactness of X first: the flash-shape exact chunk gate (chunks of 256 and the monolithic 2176 take the new
# kernel, decode the old), compare small exact and fp8 (16 heads of 128: the 160-token prefill takes the new
# kernel, against the CPU), the chunk gate small (its monolithic 160 the new kernel); then rooflines X, M, X, M,
# Nsight Compute's times of both indexer kernels on X, and the fp8 flash-shape chunk gate on X.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
M=target/device/memra; X=target/vX/memra
R=$OUT/run115.txt; T0=$(date +%s)
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
  --kernel-name regex:"indexer_scores" $X bench roofline --layers 2 --contexts 1024 --steps 1 --prefill 4096 --prefill-reps 1
[ $(( $(date +%s) - T0 )) -lt 470 ] && g $X gate chunks synth:flash-shape,layers=4 --variant fp8 --prompt-len 2176 --widths 256 --out /tmp/m/chunks_flash4_fp8.json
echo "end t=$(( $(date +%s) - T0 ))s" >> $R
grep -hE "^## |rc=|^prefill|^decode|^breakdown|^end|^compare|^chunk gate|rror|anic|H200" $R | cut -c1-300
grep -A1 -E "^  indexer_scores" $R | grep -E "indexer_scores|duration" | paste - - | awk '{print $1, $2, $NF}'
# build: main -> target/device/memra; next/indexer-mma (or git apply indexer-mma.patch on main) -> target/vX/memra
# (cargo build --release -p memra; strip -o).
# carry: ["target/device/memra","target/vX/memra"]; run: bash docs/results/prepared_session31/run115.sh; timeout_s 595
