#!/usr/bin/env bash
# twenty-seventh session, run 3 (perf.md "The gap", item 6 (b)): the prefill's attention on the FP64 tensor cores.
#   M = main a999a46 (target/device/memra), A = next/attn-mma (attention_mma: 16 heads a block, attention_heads'
#   bits; target/vATT/memra).
# Exactness first: the flash-shape chunk gates (2176 tokens in chunks of 256: every chunk on attention_mma, its
# logits against decode's attention_rows_pair and a monolithic prefill, bit for bit; window, CSA and HCA layers),
# exact and fp8; then prefill 4096 rooflines A, M, A.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
M=target/device/memra; A=target/vATT/memra
R=$OUT/run94.txt; T0=$(date +%s)
g() { echo "## $* (t=$(( $(date +%s) - T0 ))s)" >> $R; local t0=$(date +%s); timeout 200 "$@" >> $R 2>&1; echo "rc=$? $(( $(date +%s) - t0 ))s" >> $R; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >> $R
mkdir -p /tmp/m
g $A gate chunks synth:flash-shape,layers=4 --variant exact --prompt-len 2176 --widths 256 --out /tmp/m/chunks_flash4.json
for b in $A $M $A; do
  g $b bench roofline --layers 4 --contexts 1024 --prefill 4096 --prefill-reps 1
done
[ $(( $(date +%s) - T0 )) -lt 330 ] && g $A gate chunks synth:flash-shape,layers=4 --variant fp8 --prompt-len 2176 --widths 256 --out /tmp/m/chunks_flash4_fp8.json
echo "end t=$(( $(date +%s) - T0 ))s" >> $R
grep -hE "^## |rc=|^prefill|^breakdown prefill|^end|^chunk gate|rror|anic|H200" $R | cut -c1-300
# build: main -> target/device/memra; next/attn-mma -> target/vATT/memra (cargo build --release -p memra; strip -o)
# carry: ["target/device/memra","target/vATT/memra"]; run: bash docs/results/prepared_session27/run94.sh; timeout_s 480
