#!/usr/bin/env bash
# twenty-sixth session: the tensor-core tile with 16 tokens a block (two instructions sharing each decoded
# weight fragment), the tokens' values staged a leaf at a time as f64 (cp.async), the leaves' stack in shared memory.
#   M = main 8f29471 (target/vMMAE/memra), V = the 16-token tile (target/v16/memra)
# Exactness first (compare small exact and fp8; the chunk gates; the flash-shape chunk gate; `same` against M),
# then prefill 4096 rooflines V, M, V, then Nsight Compute on V's expert kernels.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
M=target/vMMAE/memra; V=target/v16/memra
R=$OUT/run88.txt; T0=$(date +%s)
g() { echo "## $* (t=$(( $(date +%s) - T0 ))s)" >> $R; local t0=$(date +%s); timeout 200 "$@" >> $R 2>&1; echo "rc=$? $(( $(date +%s) - t0 ))s" >> $R; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >> $R
mkdir -p /tmp/m
g $V synth --preset small --seed 1 --out /tmp/m/small
for v in exact fp8; do
  g $V gate compare /tmp/m/small --variant $v --prompt-len 160
  g $V gate chunks /tmp/m/small --variant $v --prompt-len 160 --out /tmp/m/chunks_$v.json
done
g $V gate chunks synth:flash-shape,layers=4 --variant exact --prompt-len 2176 --widths 256 --out /tmp/m/chunks_flash4.json
for b in $V $M $V; do
  g $b bench roofline --layers 4 --contexts 1024 --prefill 4096 --prefill-reps 1
done
mkdir -p $OUT/same; MEMRA=$V BASE=$M OUT=$OUT/same timeout 200 bash scripts/gpu_gates.sh same > /dev/null 2>&1
cat $OUT/same/summary.txt >> $R 2>/dev/null
[ $(( $(date +%s) - T0 )) -lt 430 ] && g /usr/local/cuda/bin/ncu --clock-control none --cache-control none \
  --kernel-name regex:"_mma" --launch-skip 0 --launch-count 3 --section SpeedOfLight --section WarpStateStats \
  --section SchedulerStats --section Occupancy $V bench roofline --layers 1 --contexts 1024 --prefill 512 --prefill-reps 1 --steps 3
echo "end t=$(( $(date +%s) - T0 ))s" >> $R
grep -hE "^## |rc=|^decode b1|^prefill|^breakdown|^end|^compare|^chunk gate|^same|rror|anic|H200|Stall|Issue|Warp Cycles|Eligible|Active Warps|Occupancy|Duration|Throughput|  [a-z_]+_mma" $R | cut -c1-300
# build: main -> target/vMMAE/memra; this branch -> target/v16/memra (cargo build --release -p memra; strip -o)
# carry: ["target/vMMAE/memra","target/v16/memra"]; run: bash docs/results/prepared_session26/run88.sh; timeout_s 595
