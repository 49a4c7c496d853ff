#!/usr/bin/env bash
# twenty-fifth session: linear_mma's third form (V3 = target/vMMA3/memra: blocks of 12 warps, the subtree stacks in
# shared memory) against its second (V2 = target/vMMA2/memra: 8 warps) and main (M): V3's exactness (compare and
# chunk gates on small, `same` against main, the flash-shape chunk gate), then prefill 4096 rooflines V3, V2, V3.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
M=target/device/memra; V2=target/vMMA2/memra; V=target/vMMA3/memra
R=$OUT/run85.txt; T0=$(date +%s)
g() { echo "## $* (t=$(( $(date +%s) - T0 ))s)" >> $R; local t0=$(date +%s); timeout 200 "$@" >> $R 2>&1; echo "rc=$? $(( $(date +%s) - t0 ))s" >> $R; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >> $R
mkdir -p /tmp/m
g $V synth --preset small --seed 1 --out /tmp/m/small
g $V gate compare /tmp/m/small --variant exact --prompt-len 96
g $V gate chunks /tmp/m/small --variant exact --prompt-len 160 --out /tmp/m/chunks_e.json
g $V gate chunks /tmp/m/small --variant fp8 --prompt-len 160 --out /tmp/m/chunks_f.json
for b in $V $V2 $V; do
  g $b bench roofline --layers 4 --contexts 1024 --prefill 4096 --prefill-reps 1
done
g $V gate chunks synth:flash-shape,layers=4 --variant exact --prompt-len 2176 --widths 256 --out /tmp/m/chunks_flash4.json
mkdir -p $OUT/same; MEMRA=$V BASE=$M OUT=$OUT/same timeout 200 bash scripts/gpu_gates.sh same > /dev/null 2>&1
cat $OUT/same/summary.txt >> $R 2>/dev/null
echo "end t=$(( $(date +%s) - T0 ))s" >> $R
grep -hE "^## |rc=|^decode b1|^prefill|^breakdown|^end|^compare|^chunk gate|^same|rror|anic|H200" $R | cut -c1-300
# carry: ["target/device/memra","target/vMMA2/memra","target/vMMA3/memra"]; timeout_s 595
