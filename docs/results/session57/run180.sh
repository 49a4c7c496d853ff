#!/usr/bin/env bash
# Fifty-seventh session: run 180, session56's two prepared calls in one command. Carried: target/run180/
# (memra_main and memra_tf_* but swiglu_rows, 64 MiB, built on session56/cubin.patch; memra_main_ptx built from main 6400ea1).
# 1. cubin_smoke: the cubin build's cold start (flash roofline at 1k; "uploaded to devices" is NVRTC to
#    sm_XY machine code, where main's PTX path spends 64-77 s in the driver's JIT), decode 1k against
#    main's spread, and the small model's compare and chunk gates, exact, loading the kept image.
# 2. On an H200 only: the headline (prepared_session52/run173.sh, three processes) with the cubin build
#    if step 1's gates passed, else with main's PTX build.
# 3. If step 1 passed: the join question (session56/run179.sh's gates), the three that answer it first.
set -u
R=${OUT:-out}
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
D=target/run180
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader | tee $R/card.txt
timeout 100 $D/memra_main bench roofline --layers 4 --contexts 1024 --prefill 0 > $R/roofline_cold.txt 2>&1
echo "roofline rc=$? elapsed ${SECONDS} s"
grep -E "^(flash|uploaded|ceilings|decode b1|error)" $R/roofline_cold.txt | cut -c1-240
mkdir -p /tmp/m && $D/memra_main synth --preset small --seed 1 --out /tmp/m/small > /dev/null 2>&1
timeout 60 $D/memra_main gate compare /tmp/m/small --variant exact --prompt-len 160 > $R/compare.txt 2>&1
c=$?; echo "compare small exact rc=$c elapsed ${SECONDS} s | $(tail -1 $R/compare.txt | cut -c1-300)"
grep -h "uploaded to devices" $R/compare.txt; ls -l ~/.cache/memra/kernels
timeout 60 $D/memra_main gate chunks /tmp/m/small --variant exact --prompt-len 160 > $R/chunks.txt 2>&1
k=$?; echo "chunks small exact rc=$k elapsed ${SECONDS} s | $(tail -1 $R/chunks.txt | cut -c1-300)"
B=$D/memra_main; ok=1
if [ $c -ne 0 ] || [ $k -ne 0 ]; then B=$D/memra_main_ptx; ok=0; fi
echo "headline binary: $B"
bash docs/results/prepared_session52/run173.sh $B
[ $ok -eq 1 ] || exit 0
for t in moe_join expert_down expert_down_join expert_gate_up moe_group_pairs moe_route; do
  [ $SECONDS -lt ${GUARD:-430} ] || break
  timeout 165 $D/memra_tf_$t gate chunks synth:flash-shape,layers=4 --variant exact --prompt-len 2176 \
    --widths 256 --out $R/indexer_tf_$t.json > $R/indexer_tf_$t.txt 2>&1
  echo "tf_$t rc=$? elapsed ${SECONDS} s | $(grep uploaded $R/indexer_tf_$t.txt | cut -c1-80) | $(tail -2 $R/indexer_tf_$t.txt | head -1 | cut -c1-330)"
done
