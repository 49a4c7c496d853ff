#!/usr/bin/env bash
# thirty-fourth session, run 2 (run 1: docs/results/prepared_session33/run123.sh).
#   M = main 6b1830a (norm-rope-warps, hc-partials, embed-float4 merged; target/device/memra),
#   A = next/a-lo (target/vA/memra, target/vA/libdspark.so): the tensor-core tiles' A fragments keep their
#       low words (zero) across chunks and write only the high words, so that ptxas stops re-zeroing them and
#       moving the high words before every instruction (linear_mma, expert_gate_up_mma, expert_down_mma;
#       ptxas 13.0: the FP8 K=8 loop 62.4 -> 56.9 instructions a DMMA, the FP4 experts' 54.5 -> 51.9).
# Exactness of A (gpu_gates.sh quick, flash-shape chunk gates exact and fp8), rooflines A, M, A, M, Nsight
# Compute's times of the three kernels on both, then the headline (three processes, 1k/8k/32k and prefill
# 4096) of whichever build has the shorter prefill in the rooflines.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
M=target/device/memra; A=target/vA/memra
T=$OUT/run124.txt; T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
g() { echo "## $* (t=$(el)s)" >> $T; local t0=$(date +%s); timeout 200 "$@" >> $T 2>&1; echo "rc=$? $(( $(date +%s) - t0 ))s" >> $T; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >> $T
echo "## quick on A (t=$(el)s)" >> $T
OUT=$OUT/quick MEMRA=$A PLUGINS=target/vA timeout 300 bash scripts/gpu_gates.sh quick >> $T 2>&1
echo "rc=$?" >> $T
g $A gate chunks synth:flash-shape,layers=4 --variant exact --prompt-len 2176 --widths 256 --out /tmp/m/chunks_flash4.json
for b in $A $M $A $M; do
  [ $(el) -lt 330 ] && g $b bench roofline --layers 4 --contexts 1024 --prefill 4096 --prefill-reps 1
done
for b in $A $M; do
  [ $(el) -lt 380 ] && g /usr/local/cuda/bin/ncu --clock-control none --metrics gpu__time_duration.sum \
    --kernel-name regex:"^(linear_mma|expert_gate_up_mma|expert_down_mma)$" $b bench roofline --layers 2 --contexts 1024 --steps 1 --prefill 4096 --prefill-reps 1
done
[ $(el) -lt 400 ] && g $A gate chunks synth:flash-shape,layers=4 --variant fp8 --prompt-len 2176 --widths 256 --out /tmp/m/chunks_flash4_fp8.json
# the headline on the build with the shorter prefill (the rooflines' medians summed by build)
pa=$(awk '/^## target\/vA\/memra bench roofline/{on=1} /^## target\/device\/memra bench roofline/{on=0} on && /^prefill 4096/{s+=$3; n++} END{print (n ? s/n : 1e9)}' $T)
pm=$(awk '/^## target\/device\/memra bench roofline/{on=1} /^## target\/vA\/memra bench roofline/{on=0} on && /^prefill 4096/{s+=$3; n++} END{print (n ? s/n : 1e9)}' $T)
H=$M; awk -v a=$pa -v m=$pm 'BEGIN{exit !(a < m)}' && H=$A
echo "## prefill mean A $pa M $pm: headline on $H (t=$(el)s)" >> $T
for i in 1 2 3; do
  [ $(el) -lt 510 ] && g $H bench roofline --layers 4 --contexts 1024,8192,32768 --prefill 4096 --prefill-reps 1 --out $OUT/headline_$i.json
done
echo "end t=$(el)s" >> $T
grep -hE "^## |rc=|^prefill|^decode|^breakdown|^end|^compare|^chunk gate|rror|anic|H200|equal to plain|ceilings" $T | cut -c1-300
# Nsight Compute's times summed by kernel for each build (ms)
awk '/^## .*ncu/{b=($0 ~ /vA/) ? "A" : "M"} /^  [a-z_0-9]+ \(/{k=$1} /gpu__time_duration.sum/{v=$NF; u=$(NF-1); if (u=="us" || u=="usecond") v/=1000; if (u=="ns" || u=="nsecond") v/=1e6; if (u=="s" || u=="second") v*=1000; s[b" "k]+=v; n[b" "k]++}
  END{for (x in s) printf "%s %d launches %.3f ms\n", x, n[x], s[x]}' $T | sort
# build: main 6b1830a -> target/device/memra; next/a-lo -> target/vA/memra, target/vA/libdspark.so
# (cargo build --release --workspace; strip -o). carry: ["target/device/memra","target/vA/memra","target/vA/libdspark.so"];
# run: bash docs/results/session34/run124.sh; timeout_s 595
