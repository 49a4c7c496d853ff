#!/usr/bin/env bash
# thirty-third session, run 122 (H200). Builds:
#   M = main e9ccb99 (hc_post, then hc_site_rows with eight tokens a block; target/device/memra),
#   P = next/post4 (M + hc_post with four elements a thread as float4s, every stream's and slot's load in
#       flight at once; target/vP4/memra),
#   X = next/post4mma (P + hc_site_rows' mixes on the FP64 tensor cores, tried_session32/hc-mma.patch rebased;
#       target/vPM/memra).
# Exactness of X (compare small exact and fp8 against the CPU, chunk gates small and six streams, the flash-shape
# exact chunk gate), Nsight Compute's times of X's hc kernels; B = X if its hc_site_rows beats M's 0.82 ms
# (Nsight Compute, run 119 of this session), else P (then P's flash-shape exact chunk gate); rooflines B, M, B, M;
# then B's headline (three processes at 1k, 8k, 32k) and its fp8 flash-shape chunk gate as time allows.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
M=target/device/memra; P=target/vP4/memra; X=target/vPM/memra
R=$OUT/run122.txt; T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
g() { echo "## $* (t=$(el)s)" >> $R; local t0=$(date +%s); timeout 200 "$@" >> $R 2>&1; echo "rc=$? $(( $(date +%s) - t0 ))s" >> $R; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >> $R
mkdir -p /tmp/m
g $X synth --preset small --seed 1 --out /tmp/m/small
g $X gate compare /tmp/m/small --variant exact --prompt-len 160
g $X gate compare /tmp/m/small --variant fp8 --prompt-len 160
g $X gate chunks /tmp/m/small --variant exact --prompt-len 160 --out /tmp/m/chunks_small.json
g $X gate chunks synth:small,hc=6 --variant exact --prompt-len 160 --out /tmp/m/chunks_small_hc6.json
g $X gate chunks synth:flash-shape,layers=4 --variant exact --prompt-len 2176 --widths 256 --out /tmp/m/chunks_flash4.json
echo "## ncu X (t=$(el)s)" >> $R
timeout 120 /usr/local/cuda/bin/ncu --clock-control none --metrics gpu__time_duration.sum \
  --kernel-name regex:"hc_site_rows|hc_collapse_rows|hc_post" $X bench roofline --layers 2 --contexts 1024 --steps 1 \
  --prefill 4096 --prefill-reps 1 > $OUT/ncu_x.txt 2>&1
echo "rc=$?" >> $R
sumk='/^  [a-z_0-9]+ \(/ {k=$1; gr=$2} /^ +gpu__time_duration.sum/ {v=$NF; if ($2=="us") v/=1000; if ($2=="ns") v/=1e6; s[k" "gr]+=v; c[k" "gr]++} END {for (k in s) printf "%-36s %4d launches %8.3f ms, mean %6.3f\n", k, c[k], s[k], s[k]/c[k]}'
awk "$sumk" $OUT/ncu_x.txt | sort >> $R
rows=$(awk '/^  hc_site_rows \(32768/ {f=1} f && /^ +gpu__time_duration.sum/ {v=$NF; if ($2=="us") v/=1000; s+=v; c++; f=0} END {if (c) printf "%.0f", 1000*s/c; else print 9999}' $OUT/ncu_x.txt)
if [ "$rows" -lt 800 ]; then B=$X; else B=$P; fi
echo "## X hc_site_rows mean ${rows} us -> B=$B (t=$(el)s)" >> $R
[ "$B" = "$P" ] && g $P gate chunks synth:flash-shape,layers=4 --variant exact --prompt-len 2176 --widths 256 --out /tmp/m/chunks_flash4_p.json
for b in $B $M $B $M; do
  [ $(el) -lt 480 ] && g $b bench roofline --layers 4 --contexts 1024 --prefill 4096 --prefill-reps 1
done
for i in 1 2 3; do
  [ $(el) -lt 540 ] && g $B bench roofline --layers 4 --contexts 1024,8192,32768 --prefill 4096 --prefill-reps 1 --out $OUT/headline_$i.json
done
[ $(el) -lt 525 ] && g $B gate chunks synth:flash-shape,layers=4 --variant fp8 --prompt-len 2176 --widths 256 --out /tmp/m/chunks_flash4_fp8.json
echo "end t=$(el)s" >> $R
grep -hE "^## |rc=|^prefill|^decode|^breakdown|^end|^compare|^chunk gate|rror|anic|H200| launches " $R | cut -c1-300
# build: main -> target/device/memra; next/post4 -> target/vP4/memra; next/post4mma -> target/vPM/memra
# (cargo build --release -p memra; strip -o).
# carry: ["target/device/memra","target/vP4/memra","target/vPM/memra"]; run: bash docs/results/session33/run122.sh;
# timeout_s 595
