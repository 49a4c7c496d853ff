#!/usr/bin/env bash
# forty-fifth session, run 1: does the tensor sums' one-token kernels' access pattern hold them? A timing
# probe (wrong results by design): memra reads every FP4 and FP8 matrix of 16-row multiples under
# --sums tensor as if stored in tiles of 16 rows a K block (kernels/moe_tensor.cu `PROBE_TILED`: a warp's
# load is 512 contiguous bytes instead of 16 rows x 64 bytes; the same bytes, the same instructions but
# one multiply). memra_base: main e045898. Decode rooflines alternating, then Nsight Compute's time and
# load sectors of the tensor one-token kernels in both builds.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
M=target/device/memra; B=target/device/memra_base; NCU=${NCU:-/usr/local/cuda/bin/ncu}
T=$OUT/run155.txt; T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
g() { echo "## $* (t=$(el)s)" >> $T; local t0=$(date +%s); timeout ${TO:-150} "$@" >> $T 2>&1; local rc=$?; echo "rc=$rc $(( $(date +%s) - t0 ))s" >> $T; return $rc; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >> $T
first_b=160; first_m=160
for r in 1 2 3; do for X in "$B" "$M"; do
  [ $(el) -lt ${GUARD:-420} ] || continue
  to=70; [ "$X" = "$B" ] && { to=$first_b; first_b=70; }; [ "$X" = "$M" ] && { to=$first_m; first_m=70; }
  TO=$to g $X bench roofline --layers 4 --contexts 1024 --prefill 0 --sums tensor
done; done
for X in "$B" "$M"; do
  [ $(el) -lt ${GUARD:-460} ] || continue
  TO=60 g sh -c "$NCU --clock-control none --cache-control none --metrics gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum,l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum,smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio \
    --kernel-name 'regex:^(expert_gate_up_bf16|expert_down_bf16|linear_bf16_one)$' --launch-skip 20 --launch-count 12 \
    $X bench roofline --layers 4 --contexts 1024 --prefill 0 --steps 2 --sums tensor"
done
grep -E "^(## |rc=|decode b1|breakdown|error)|^  [a-z_0-9]+.*\(|gpu__time|dram__|l1tex__|long_score" $T | cut -c1-220 | tail -120
