#!/usr/bin/env bash
# twenty-ninth session, run 4: W2's pairs staged as f64 in expert_down_mma only.
#   M  = main (2de8c44; target/device/memra),
#   W3 = next/experts-wide2 (8c28ac8; target/vW3/memra): expert_down_mma stages W2's pairs (rows up to 2048 values)
#        as scaled f64 and its stacks at constant offsets (ptxas 13.0: 158 registers, no spills);
#        expert_gate_up_mma keeps f32 pairs and blockDim.x (run 3: the constant offsets made it ~2.5 ms a layer
#        slower; its allocation still moves: 168 registers, 56/128 bytes of spills against main's 56/68).
# Exactness (the flash-shape exact chunk gate, compare small exact and fp8), rooflines W3, M, W3, Nsight Compute's
# times of W3's two expert kernels, then the fp8 flash-shape chunk gate and W3's headline while time is left.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
M=target/device/memra; W=target/vW3/memra
R=$OUT/run104.txt; T0=$(date +%s)
g() { echo "## $* (t=$(( $(date +%s) - T0 ))s)" >> $R; local t0=$(date +%s); timeout 200 "$@" >> $R 2>&1; echo "rc=$? $(( $(date +%s) - t0 ))s" >> $R; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >> $R
mkdir -p /tmp/m
g $W synth --preset small --seed 1 --out /tmp/m/small
g $W gate chunks synth:flash-shape,layers=4 --variant exact --prompt-len 2176 --widths 256 --out /tmp/m/chunks_flash4.json
g $W gate compare /tmp/m/small --variant exact --prompt-len 160
g $W gate compare /tmp/m/small --variant fp8 --prompt-len 160
for b in $W $M $W; do
  g $b bench roofline --layers 4 --contexts 1024 --prefill 4096 --prefill-reps 1
done
g /usr/local/cuda/bin/ncu --clock-control none --metrics gpu__time_duration.sum,smsp__inst_executed.sum,sm__pipe_tensor_op_dmma_cycles_active.avg.pct_of_peak_sustained_active \
  --kernel-name regex:expert_.*_mma --launch-count 2 $W bench roofline --layers 1 --contexts 1024 --steps 1 --prefill 4096 --prefill-reps 1
[ $(( $(date +%s) - T0 )) -lt 320 ] && g $W gate chunks synth:flash-shape,layers=4 --variant fp8 --prompt-len 2176 --widths 256 --out /tmp/m/chunks_flash4_fp8.json
[ $(( $(date +%s) - T0 )) -lt 400 ] && g $W bench roofline --layers 4 --contexts 1024,8192,32768 --prefill 4096 --prefill-reps 1 --out $OUT/roofline.json
echo "end t=$(( $(date +%s) - T0 ))s" >> $R
grep -hE "^## |rc=|^prefill|^decode|^breakdown|^end|^compare|^chunk gate|rror|anic|H200|dmma|inst_executed|duration|expert_.*_mma" $R | cut -c1-300
# build: main -> target/device/memra; next/experts-wide2 -> target/vW3/memra (cargo build --release -p memra; strip -o)
# carry: ["target/device/memra","target/vW3/memra"]; run: bash docs/results/prepared_session29/run104.sh; timeout_s 460
