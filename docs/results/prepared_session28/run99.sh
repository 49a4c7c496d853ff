#!/usr/bin/env bash
# twenty-eighth session, run 4: M = main 31b4070 (hc_site_rows trees landed; target/device/memra),
# H = next/hc-early (hc_site_rows: fn's first rows staged by cp.async before the wait for the inputs, while the post
# loads; target/vE/memra).
# Exactness first (the flash-shape chunk gates exact and fp8: prefill chunks on hc_site_rows against decode's
# hc_site bit for bit; compare small exact and fp8; chunks small exact), then prefill 4096 rooflines H, M, H,
# then H's headline (decode 1k, 8k, 32k and prefill 4096) where it is the faster, then Nsight Compute on H's hc_site_rows.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
M=target/device/memra; H=target/vE/memra
R=$OUT/run99.txt; T0=$(date +%s)
g() { echo "## $* (t=$(( $(date +%s) - T0 ))s)" >> $R; local t0=$(date +%s); timeout 200 "$@" >> $R 2>&1; echo "rc=$? $(( $(date +%s) - t0 ))s" >> $R; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >> $R
mkdir -p /tmp/m
g $H gate chunks synth:flash-shape,layers=4 --variant exact --prompt-len 2176 --widths 256 --out /tmp/m/chunks_flash4.json
g $H synth --preset small --seed 1 --out /tmp/m/small
for v in exact fp8; do g $H gate compare /tmp/m/small --variant $v --prompt-len 160; done
g $H gate chunks /tmp/m/small --variant exact --prompt-len 160 --out /tmp/m/chunks_small.json
i=0
for b in $H $M $H; do
  i=$((i + 1)); g $b bench roofline --layers 4 --contexts 1024 --prefill 4096 --prefill-reps 1
  grep "^prefill 4096" $R | tail -1 | awk '{print $3}' > /tmp/m/p$i
done
g $H gate chunks synth:flash-shape,layers=4 --variant fp8 --prompt-len 2176 --widths 256 --out /tmp/m/chunks_flash4_fp8.json
# the headline (H's) where both of H's rooflines beat M's; M's is run 3's
awk -v a=$(cat /tmp/m/p1) -v m=$(cat /tmp/m/p2) -v b=$(cat /tmp/m/p3) 'BEGIN { exit !(a < m && b < m) }' && \
  g $H bench roofline --layers 4 --contexts 1024,8192,32768 --prefill 4096 --prefill-reps 1 --out $OUT/roofline_headline.json
NCU="/usr/local/cuda/bin/ncu --clock-control none --cache-control none --metrics regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,regex:sm__pipe_(alu|fma|fp64|shared)_cycles_active\.avg\.pct_of_peak_sustained_active,smsp__inst_executed.sum,smsp__issue_active.avg.pct_of_peak_sustained_active,gpu__time_duration.sum,l1tex__t_sector_hit_rate.pct,lts__t_sector_hit_rate.pct"
[ $(( $(date +%s) - T0 )) -lt 470 ] && g $NCU --kernel-name hc_site_rows --launch-skip 1 --launch-count 1 \
    $H bench roofline --layers 1 --contexts 1024 --prefill 4096 --prefill-reps 1 --steps 3
echo "end t=$(( $(date +%s) - T0 ))s" >> $R
grep -hE "^## |rc=|^prefill|^decode|^breakdown|^end|^compare|^chunk gate|rror|anic|H200|stalled|pipe_|inst_executed|issue_active|duration|hit_rate|^  [a-z_]+ \(" $R | cut -c1-300
# build: main -> target/device/memra; next/hc-early -> target/vE/memra (cargo build --release -p memra; strip -o)
# carry: ["target/device/memra","target/vE/memra"]; run: bash docs/results/prepared_session28/run99.sh; timeout_s 595
