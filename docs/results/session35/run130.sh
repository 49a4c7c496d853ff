#!/usr/bin/env bash
# thirty-fifth session, run 4: linear_mma split in two kernels (E, branch next/mma-narrow on b63430a): rows of 1 or
# 2 chunks a lane (wq_b, the indexer's queries) in linear_mma_short, rows of 4 and more in linear_mma, each with
# its own registers; the short rows without b63430a's leaf stack level 0 in registers (run 3: wq_b 9.9 ms a launch
# in b63430a's kernel against 9.6 in cf33079's). ptxas 13.0: linear_mma_short 4 bytes of spill stores (linear_mma
# 540), linear_mma_bf16 back to cf33079's SASS (144 registers; 168 in b63430a).
#   C = main b63430a (target/vC/memra), E = the split (target/vE/memra).
# Order (the session's device time left, ~330 s): a roofline of E (its first process also JIT-compiles its
# kernels), the flash-shape chunk gate exact on E (prefill == decode bit for bit, monolithic, MoE arms, greedy
# steps: the wq_b and indexer rows of 2 chunks a lane go through linear_mma_short), a roofline of C, the fp8 chunk
# gate, then more rooflines while time is left. Not run for lack of time: gpu_gates.sh quick.
set -u
mkdir -p /tmp/m
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
T=$OUT/run130.txt; T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
g() { echo "## $* (t=$(el)s)" >> $T; local t0=$(date +%s); timeout 200 "$@" >> $T 2>&1; local rc=$?; echo "rc=$rc $(( $(date +%s) - t0 ))s" >> $T; return $rc; }
roof() { g target/v$1/memra bench roofline --layers 4 --contexts 1024 --prefill 4096 --prefill-reps 1; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >> $T
D=target/vE; ok=1
roof E
g $D/memra gate chunks synth:flash-shape,layers=4 --variant exact --prompt-len 2176 --widths 256 --out /tmp/m/chunks_flash4_E.json || ok=0
roof C
g $D/memra gate chunks synth:flash-shape,layers=4 --variant fp8 --prompt-len 2176 --widths 256 --out /tmp/m/chunks_flash4_fp8_E.json || ok=0
echo "## chunk gates E ok=$ok (t=$(el)s)" >> $T
[ $(el) -lt 270 ] && roof E
[ $(el) -lt 300 ] && roof C
echo "end t=$(el)s" >> $T
grep -hE "^## |rc=|^prefill|^decode|^breakdown prefill|^compare|^chunk gate|rror|anic|H200|equal to plain|^end" $T | cut -c1-250
# carry: ["target/vC/memra","target/vE/memra"]; run: bash docs/results/session35/run130.sh;
# timeout_s 330 (the session's device time left)
