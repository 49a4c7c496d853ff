#!/usr/bin/env bash
# prepared in the twenty-ninth session for the next (perf.md "The gap", item 6):
#   M = main (b7d2d75's kernels; target/device/memra),
#   H = next/gu-halves (f08609d; gu-halves.patch on main; target/vH/memra): expert_gate_up_mma by halves. Pairs 0-7
#       of the tile read only the even chunks of a row and pairs 8-15 only the odd ones, so the block stages the
#       even chunks' values of its 8 pairs as scaled f64 (8 x 2050 doubles for rows of 4096), takes pairs 0-7 of
#       4 tiles a warp, keeps each tile's level 3 of the stack in shared memory, stages the odd chunks' values and
#       finishes those tiles; then the next 4 (6 batches, 12 stagings of 128 KiB a group instead of one of f32).
#       The tile then reads its B fragments as they go in, as expert_down_mma does since b7d2d75 (run 2 of the
#       twenty-ninth session: 4 F2F.F64.F32 and 4 DMUL a DMMA, the DMULs 16% of the stall samples).
#       ptxas 13.0: 168 registers, a 272-byte frame (the group loop's closure and a few refills outside the DMMA
#       loops; none between DMMAs). Never run on a GPU: exactness first.
# Exactness (the flash-shape exact chunk gate, compare small exact and fp8, chunk gates on small), then rooflines
# H, M, H, M (prefill 4096 and decode 1k), Nsight Compute's time of H's gate/up kernel, the fp8 chunk gate.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
M=target/device/memra; H=target/vH/memra
R=$OUT/run106.txt; T0=$(date +%s)
g() { echo "## $* (t=$(( $(date +%s) - T0 ))s)" >> $R; local t0=$(date +%s); timeout 200 "$@" >> $R 2>&1; echo "rc=$? $(( $(date +%s) - t0 ))s" >> $R; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >> $R
mkdir -p /tmp/m
g $H synth --preset small --seed 1 --out /tmp/m/small
g $H gate chunks synth:flash-shape,layers=4 --variant exact --prompt-len 2176 --widths 256 --out /tmp/m/chunks_flash4.json
g $H gate compare /tmp/m/small --variant exact --prompt-len 160
g $H gate compare /tmp/m/small --variant fp8 --prompt-len 160
g $H gate chunks /tmp/m/small --variant exact --prompt-len 160 --out /tmp/m/chunks_small.json
for b in $H $M $H $M; do
  g $b bench roofline --layers 4 --contexts 1024 --prefill 4096 --prefill-reps 1
done
g /usr/local/cuda/bin/ncu --clock-control none --metrics gpu__time_duration.sum,smsp__inst_executed.sum,sm__pipe_tensor_op_dmma_cycles_active.avg.pct_of_peak_sustained_active \
  --kernel-name regex:expert_.*_mma --launch-count 2 $H bench roofline --layers 1 --contexts 1024 --steps 1 --prefill 4096 --prefill-reps 1
[ $(( $(date +%s) - T0 )) -lt 430 ] && g $H gate chunks synth:flash-shape,layers=4 --variant fp8 --prompt-len 2176 --widths 256 --out /tmp/m/chunks_flash4_fp8.json
echo "end t=$(( $(date +%s) - T0 ))s" >> $R
grep -hE "^## |rc=|^prefill|^decode|^breakdown|^end|^compare|^chunk gate|rror|anic|H200|dmma|inst_executed|duration|expert_.*_mma" $R | cut -c1-300
# build: main -> target/device/memra; next/gu-halves (or git apply docs/results/prepared_session29/gu-halves.patch on
# main) -> target/vH/memra (cargo build --release -p memra; strip -o). A headline goes in the run that lands it.
# carry: ["target/device/memra","target/vH/memra"]; run: bash docs/results/prepared_session29/run106.sh; timeout_s 595
