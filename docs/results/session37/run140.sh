#!/usr/bin/env bash
# thirty-seventh session: the source counters (run137's) on main d8ba9a1 for the routed experts' two tiles, after
# run138/139 took the DMULs out of expert_gate_up_mma's B fragments (27.9 -> 24.7 ms a launch): which instructions
# its stalls now land on, and expert_down_mma's (13.5 ms a launch, the f64-staged pairs), for the next session.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
M=target/device/memra; NCU=/usr/local/cuda/bin/ncu
T=$OUT/run140.txt; T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
src() {  # name, kernel, launches to skip
  [ $(el) -lt 420 ] || return
  echo "## $1: $2 skip $3 (t=$(el)s)" >> $T
  timeout 150 $NCU --clock-control none --section SourceCounters --section WarpStateStats --import-source no \
    --kernel-name $2 --launch-skip $3 --launch-count 1 -o /tmp/$1 \
    $M bench roofline --layers 2 --contexts 1024 --steps 1 --prefill 4096 --prefill-reps 1 >> $T 2>&1
  echo "rc=$? (t=$(el)s)" >> $T
  timeout 60 $NCU --import /tmp/$1.ncu-rep --page source --print-source sass --csv > $OUT/$1_sass.csv 2>> $T
  echo "page rc=$? lines $(wc -l < $OUT/$1_sass.csv)" >> $T
  timeout 60 $NCU --import /tmp/$1.ncu-rep --page details --section WarpStateStats --section SourceCounters \
    --print-details all >> $T 2>&1
}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >> $T
src gate_up expert_gate_up_mma 0
src down expert_down_mma 0
echo "end t=$(el)s" >> $T
grep -hE "^## |rc=|Stall|Warp Cycles|Branch|Uncoalesced|^end" $T | cut -c1-200
# build: main d8ba9a1 -> target/device/memra. carry: ["target/device/memra"]; run: bash docs/results/session37/run140.sh;
# timeout_s 300. The CSVs come back under $OUT.
