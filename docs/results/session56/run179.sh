#!/usr/bin/env bash
# Fifty-sixth session: run 179, session55/run178.sh's join question again with room for the driver's JIT.
# In run 178 (H100) every gate timed out at 110 s with no output: a build whose PTX the machine has not
# seen spends ~80 s in the driver's JIT before the gate's own ~55 s (run 176: a first process 110-114 s,
# later ones 30-36 s). Here each gate gets 170 s. Carried: target/device/memra_main and the memra_tf_*
# builds of session54/build_tf_split.sh and session55/build_join.sh, built on the fifty-sixth session's
# cubin change (NVRTC compiles the kernels to sm_90 machine code, so no driver JIT: a gate's elapsed
# time says what that saves).
# 1. On an H200 only: main's headline (run173.sh, three processes).
# 2. The chunk gate past the indexer's bound (flash shape, exact, 2176 positions, width 256) for
#    trigger-first in moe.cu + moe_tensor.cu with join-no-pdl, then expert_down alone without and with
#    join-no-pdl, then the other moe.cu kernels alone, while a gate can still finish.
set -u
R=${OUT:-out}
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader | tee $R/card.txt
bash docs/results/prepared_session52/run173.sh target/device/memra_main  # only on an H200
for k in moe_join expert_down expert_down_join expert_gate_up moe_group_pairs moe_route swiglu_rows; do
  [ $SECONDS -lt ${GUARD:-420} ] || break
  timeout 170 target/device/memra_tf_$k gate chunks synth:flash-shape,layers=4 --variant exact --prompt-len 2176 \
    --widths 256 --out $R/indexer_tf_$k.json > $R/indexer_tf_$k.txt 2>&1
  echo "tf_$k rc=$? elapsed ${SECONDS} s | $(tail -2 $R/indexer_tf_$k.txt | head -1 | cut -c1-330)"
done
