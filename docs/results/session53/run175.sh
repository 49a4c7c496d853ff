#!/usr/bin/env bash
# Fifty-third session, second call. Builds carried: target/device/memra_main (main 14e184d) and
# target/device/memra_fold (main with common.cuh's cvta.to.shared line in one helper,
# shared_address: ptxas schedules linear_mma_bf16, a prefill kernel, differently).
# On an H200: the headline (three processes of main's roofline at 1k, 8k, 32k and the 4096-token
# prefill). On any card: the prefill of 4096 of main and fold, alternating while the call has time,
# then the flash-shape chunk gate of fold.
set -u
R=${OUT:-out}
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee $R/card.txt
run() { # label, binary, args...
  local label=$1 b=$2; shift 2
  echo "## $label $b $* (t=${SECONDS}s)" >> $R/log.txt
  timeout 150 $b bench roofline "$@" >> $R/log.txt 2>&1
  echo "rc=$? t=${SECONDS}s" >> $R/log.txt
}
if grep -q H200 $R/card.txt; then
  for r in 1 2 3; do
    run "headline $r" target/device/memra_main --layers 4 --contexts 1024,8192,32768 --prefill 4096 \
      --prefill-reps 1 --out $R/roofline_$r.json
  done
else
  run "prefill main 1" target/device/memra_main --layers 4 --contexts 1024 --prefill 4096 --prefill-reps 1
fi
run "prefill fold 1" target/device/memra_fold --layers 4 --contexts 1024 --prefill 4096 --prefill-reps 1
for r in 2 3; do
  [ $SECONDS -lt 380 ] || break
  run "prefill main $r" target/device/memra_main --layers 4 --contexts 1024 --prefill 4096 --prefill-reps 1
  run "prefill fold $r" target/device/memra_fold --layers 4 --contexts 1024 --prefill 4096 --prefill-reps 1
done
if [ $SECONDS -lt 500 ]; then
  OUT=$R/gate_fold MEMRA=target/device/memra_fold bash scripts/gpu_gates.sh chunks_flash4 > $R/gate_fold_stdout.txt 2>&1
  cat $R/gate_fold/summary.txt
fi
grep -E "^(## |rc=|ceilings|decode b1|prefill|breakdown|error)" $R/log.txt | cut -c1-260
