#!/usr/bin/env bash
# twenty-fifth session: the prefill's scaled FP8 products on the FP64 tensor cores (linear_mma, branch
# next/mma-linear = target/vMMA/memra) against main (target/device/memra): exactness first (compare against the
# CPU, chunk gates: prefill == decode bit for bit), then prefill 4096 rooflines, then `same` (every position's
# logits against main's, bit for bit) and the flash-shape chunk gate.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
M=target/device/memra; V=target/vMMA/memra
R=$OUT/run83.txt; T0=$(date +%s)
g() { echo "## $* (t=$(( $(date +%s) - T0 ))s)" >> $R; local t0=$(date +%s); timeout 200 "$@" >> $R 2>&1; echo "rc=$? $(( $(date +%s) - t0 ))s" >> $R; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >> $R
mkdir -p /tmp/m
g $V synth --preset small --seed 1 --out /tmp/m/small
g $V gate compare /tmp/m/small --variant exact --prompt-len 96
g $V gate chunks /tmp/m/small --variant exact --prompt-len 160 --out /tmp/m/chunks_e.json
g $V gate chunks /tmp/m/small --variant fp8 --prompt-len 160 --out /tmp/m/chunks_f.json
for b in $V $M; do
  g $b bench roofline --layers 4 --contexts 1024 --prefill 4096 --prefill-reps 1
done
MEMRA=$V BASE=$M OUT=$OUT timeout 240 bash scripts/gpu_gates.sh same >> $R 2>&1
[ $(( $(date +%s) - T0 )) -lt 480 ] && g $V gate chunks synth:flash-shape,layers=4 --variant exact --prompt-len 2176 --widths 256 --out /tmp/m/chunks_flash4.json
echo "end t=$(( $(date +%s) - T0 ))s" >> $R
grep -hE "^## |rc=|^decode b1|^prefill|^breakdown|^end|^compare|^chunk gate|^same|rror|anic|H200" $R | cut -c1-300
# carry: ["target/device/memra","target/vMMA/memra"]; timeout_s 595
