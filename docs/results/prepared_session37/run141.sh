#!/usr/bin/env bash
# prepared in the thirty-seventh session for the next (its device time ran out first): F = down-scales.patch on main
# (branch next/down-scales): expert_down_mma's wide tile loads the chunks' scales with the chunks, a step ahead.
# run140's source counters put 4.5% of its stall samples on the scale's decode waiting for its load and 3.1% more on
# the DFMA after it. ptxas 13.0: expert_down_mma 168 registers, 244 B of spill stores (none on main), its wide FP4
# loop (2 chunks a lane) 49.6 instructions a DMMA (49.2 on main); expert_gate_up_mma's SASS unchanged. This times
# F against main d8ba9a1 (target/device/memra): Nsight Compute's duration of every expert_down_mma launch, F first
# (each process JIT-compiles its kernels). Timing only: if F is faster, gate it (gpu_gates.sh quick, the flash-shape
# chunk gates exact and fp8) and take a headline before merging.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
T=$OUT/run141.txt; T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
for X in F M; do
  B=$([ $X = M ] && echo target/device/memra || echo target/v$X/memra)
  echo "## ncu $X (t=$(el)s)" >> $T
  timeout 100 /usr/local/cuda/bin/ncu --clock-control none --kernel-name regex:'^expert_down_mma' \
    --metrics gpu__time_duration.sum,launch__registers_per_thread --csv --page raw \
    $B bench roofline --layers 2 --contexts 1024 --steps 1 --prefill 4096 --prefill-reps 1 > $OUT/ncu_$X.csv 2> $OUT/ncu_$X.err
  echo "rc=$? launches $(grep -c '"expert_' $OUT/ncu_$X.csv) (t=$(el)s)" >> $T
done
cat $T
# build: next/down-scales -> target/vF/memra; main d8ba9a1 -> target/device/memra. carry: ["target/device/memra",
# "target/vF/memra"]; run: bash docs/results/prepared_session37/run141.sh; timeout_s 200.
