#!/usr/bin/env bash
# Fifty-third session: prio.patch and scales-prefetch.patch (docs/results/prepared_session52/),
# each and both together, against main 14e184d (which has the weights' L2 evict-first policy).
# Builds, release on the development machine, stripped, carried:
#   target/device/memra_main    main 14e184d
#   target/device/memra_prio    prio.patch on main
#   target/device/memra_scales  scales-prefetch.patch on main
#   target/device/memra_both    both patches on main
# Three alternating rounds of the decode-1k roofline of each (main, prio, scales, both), the
# flash-shape chunk gate of both (in ab) and of scales; then, only on an H200 and while the
# call has time, the headline roofline (1k, 8k, 32k, prefill 4096) of main, one process at a time.
set -u
R=${OUT:-out}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee $R/card.txt
OUT=$R/ab ROUNDS=${ROUNDS:-3} MEMRA=target/device/memra_both \
  BASE="target/device/memra_main target/device/memra_prio target/device/memra_scales" \
  bash scripts/gpu_gates.sh ab > $R/ab_stdout.txt 2>&1
cat $R/ab/summary.txt
OUT=$R/gate_scales MEMRA=target/device/memra_scales bash scripts/gpu_gates.sh chunks_flash4 > $R/gate_scales_stdout.txt 2>&1
cat $R/gate_scales/summary.txt
echo "elapsed ${SECONDS} s"
if grep -q H200 $R/card.txt; then
  export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
  for r in 1 2 3; do
    [ $SECONDS -lt 470 ] || break
    echo "## process $r" >> $R/run173.txt
    timeout 120 target/device/memra_main bench roofline --layers 4 --contexts 1024,8192,32768 --prefill 4096 \
      --prefill-reps 1 --out $R/roofline_$r.json >> $R/run173.txt 2>&1
    echo "rc=$? elapsed ${SECONDS} s" >> $R/run173.txt
  done
  grep -E "^(## |rc=|ceilings|decode b1|prefill|breakdown|error)" $R/run173.txt | cut -c1-260
fi
