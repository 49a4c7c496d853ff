#!/usr/bin/env bash
# thirty-fifth session, run 3: which tensor-core products a-lo4 (B) and a-lo4-pairs (C, merged as b63430a) made
# faster or slower. Run 2 (run128.sh) put C's prefill at 386.95 ms mean against B's 387.66 and main cf33079's
# 390.85, but by section C's attn.q_kv (65.5) and attn.indexer (9.1) were slower than B's (64.6, 8.8) and main's
# (63.8, 8.8) while attn.out was faster (76.9 against 77.6 and 79.8). Nsight Compute's duration of every
# linear_mma and linear_mma_bf16 launch (the bf16 kernel is the same code in all three: the spread between
# processes) in one 2-layer prefill of 4096, each build in turn (a second round while time is left).
#   M = main cf33079 (target/device/memra), B = a-lo4.patch (target/vB/memra), C = b63430a (target/vC/memra).
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
T=$OUT/run129.txt; T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >> $T
for round in 1 2; do
  for X in M B C; do
    [ $X = M ] && b=target/device/memra || b=target/v$X/memra
    [ $(el) -lt 300 ] || continue
    echo "## $X round $round $b (t=$(el)s)" >> $T
    timeout 150 /usr/local/cuda/bin/ncu --clock-control none --kernel-name regex:'^linear_mma' \
      --metrics gpu__time_duration.sum,launch__grid_size,launch__registers_per_thread --csv --page raw \
      $b bench roofline --layers 2 --contexts 1024 --steps 1 --prefill 4096 --prefill-reps 1 > $OUT/ncu_${X}_$round.csv 2> $OUT/ncu_${X}_$round.err
    echo "rc=$? launches $(grep -c '"linear_mma' $OUT/ncu_${X}_$round.csv)" >> $T
  done
done
echo "end t=$(el)s" >> $T
cat $T
# carry: ["target/device/memra","target/vB/memra","target/vC/memra"]; run: bash docs/results/session35/run129.sh;
# timeout_s 450
