#!/usr/bin/env bash
# thirty-fourth session, run 3 (the session's last 429 s of device time).
#   M = main 6b1830a (target/device/memra),
#   B = next/a-lo4 (target/vB/memra): run 2's change (next/a-lo) for linear_mma's rounds of K >= 4 chunks a lane
#       only (wo_a, wo_b, wq_a, wkv, the shared expert: mma_a_fragment_high into A fragments whose low words
#       stay zero); the experts' tile and linear_mma_bf16 keep main's SASS (ptxas 13.0, checked), K <= 2 main's
#       source (its SASS moves by the kernel's register allocation: ~1.6% more instructions in the K = 2 loop).
# B's first roofline (with the NVRTC compile), the flash-shape chunk gate exact on B, then M, B, M.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
M=target/device/memra; B=target/vB/memra
T=$OUT/run125.txt; T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
g() { echo "## $* (t=$(el)s)" >> $T; local t0=$(date +%s); timeout 200 "$@" >> $T 2>&1; echo "rc=$? $(( $(date +%s) - t0 ))s" >> $T; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >> $T
g $B bench roofline --layers 4 --contexts 1024,8192,32768 --prefill 4096 --prefill-reps 1 --out $OUT/b1.json
g $B gate chunks synth:flash-shape,layers=4 --variant exact --prompt-len 2176 --widths 256 --out /tmp/m/chunks_flash4.json
g $M bench roofline --layers 4 --contexts 1024 --prefill 4096 --prefill-reps 1
g $B bench roofline --layers 4 --contexts 1024,8192,32768 --prefill 4096 --prefill-reps 1 --out $OUT/b2.json
g $M bench roofline --layers 4 --contexts 1024 --prefill 4096 --prefill-reps 1
echo "end t=$(el)s" >> $T
grep -hE "^## |rc=|^prefill|^decode|^breakdown|^end|^chunk gate|rror|anic|H200|ceilings" $T | cut -c1-300
# carry: ["target/device/memra","target/vB/memra"]; run: bash docs/results/session34/run125.sh
