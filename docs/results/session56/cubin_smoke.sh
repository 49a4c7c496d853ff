#!/usr/bin/env bash
# Fifty-sixth session: the cubin change on a GPU in the least time. target/device/memra_main is the
# cubin branch's build (NVRTC compiles the kernels to sm_XY machine code; main before it loaded PTX,
# which the driver compiled on a build's first start: 64-77 s in "uploaded to devices", 4-8 s after).
# 1. The flash-shape roofline at 1k (its "uploaded to devices" line is the cold start; decode 1k as
#    main's on the same card). 2. The small model's compare and chunk gates, exact; their "uploaded to
#    devices" lines are starts with the machine code kept on disk by the first process.
set -u
R=${OUT:-out}
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
M=target/device/memra_main
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R/card.txt
timeout 100 $M bench roofline --layers 4 --contexts 1024 --prefill 0 > $R/roofline.txt 2>&1
echo "roofline rc=$? elapsed ${SECONDS} s"
grep -E "^(flash|uploaded|ceilings|decode b1|breakdown|error)" $R/roofline.txt | cut -c1-240
mkdir -p /tmp/m && $M synth --preset small --seed 1 --out /tmp/m/small > /dev/null 2>&1
timeout 60 $M gate compare /tmp/m/small --variant exact --prompt-len 160 > $R/compare.txt 2>&1
echo "compare small exact rc=$? elapsed ${SECONDS} s | $(tail -1 $R/compare.txt | cut -c1-300)"
grep -h "uploaded to devices" $R/compare.txt; ls -l ~/.cache/memra/kernels
timeout 60 $M gate chunks /tmp/m/small --variant exact --prompt-len 160 > $R/chunks.txt 2>&1
echo "chunks small exact rc=$? elapsed ${SECONDS} s | $(tail -1 $R/chunks.txt | cut -c1-300)"
