#!/usr/bin/env bash
# Fifty-sixth session: the cubin change in ~40 s of a machine (for a call with little budget left):
# the small model's compare gate (exact, GPU against the CPU oracle) from a bare machine, whose
# "uploaded to devices" line is the cold start (NVRTC to sm_XY machine code, no driver JIT), then a
# second process's load (the image read back from ~/.cache/memra/kernels).
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
R=${OUT:-out}
M=target/device/memra_main
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
mkdir -p /tmp/m
$M synth --preset small --seed 1 --out /tmp/m/small > /dev/null 2>&1
echo "synth ${SECONDS} s"
timeout 32 $M gate compare /tmp/m/small --variant exact --prompt-len 160 > $R/compare.txt 2>&1
echo "compare rc=$? ${SECONDS} s"
cut -c1-300 $R/compare.txt
timeout 8 $M gate compare /tmp/m/small --variant exact --prompt-len 16 2>&1 | grep uploaded
ls -l ~/.cache/memra/kernels
