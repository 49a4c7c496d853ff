#!/usr/bin/env bash
# thirtieth session, run 2: where a 4096-token prefill's time goes on main (b7d2d75's kernels), kernel by kernel.
# Nsight Systems' per-kernel sums of a 2-layer flash-shape roofline where nsys is installed (one pass, the kernels
# overlapping as they do in the engine), else the twenty-eighth session's run101.sh table (Nsight Compute, each
# launch alone); then Nsight Compute on expert_down_mma (W2's pairs as f64 since b7d2d75): its pipes, stalls and
# per-instruction counts.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
M=${MEMRA:-target/device/memra}
R=$OUT/run107.txt; T0=$(date +%s); mkdir -p /tmp/m
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >> $R
NSYS=$(command -v nsys || ls /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys 2>/dev/null | head -1)
echo "nsys: ${NSYS:-none}" >> $R
if [ -n "$NSYS" ]; then
  timeout 200 $NSYS profile -o /tmp/m/pf --force-overwrite true --trace cuda \
    $M bench roofline --layers 2 --contexts 1024 --steps 1 --prefill 4096 --prefill-reps 1 >> $R 2>&1
  echo "nsys rc=$? t=$(( $(date +%s) - T0 ))s" >> $R
  timeout 120 $NSYS stats --report cuda_gpu_kern_sum --format csv -o $OUT/kern /tmp/m/pf.nsys-rep >> $R 2>&1
  echo "stats rc=$? t=$(( $(date +%s) - T0 ))s" >> $R
  timeout 120 $NSYS stats --report cuda_gpu_trace --format csv -o $OUT/trace /tmp/m/pf.nsys-rep > /dev/null 2>&1
  ls $OUT >> $R
  python3 - $OUT/trace_cuda_gpu_trace.csv >> $R <<'PY'
import csv, sys, collections
rows = list(csv.DictReader(open(sys.argv[1])))
dur = next(k for k in rows[0] if k.startswith("Duration"))
st = next(k for k in rows[0] if k.startswith("Start"))
rows = [r for r in rows if r.get("Name") and r.get(dur)]
rows.sort(key=lambda r: float(r[st]))
# the prefill is the last run of launches; its first kernel is the last embedding's
first = max(i for i, r in enumerate(rows) if r["Name"].startswith("embed"))
pre = rows[first:]
by = collections.defaultdict(lambda: [0, 0.0])
for r in pre:
    b = by[r["Name"].split("(")[0][:40]]; b[0] += 1; b[1] += float(r[dur]) / 1e6
tot = sum(b[1] for b in by.values())
span = (float(pre[-1][st]) + float(pre[-1][dur]) - float(pre[0][st])) / 1e6
print(f"prefill (2 layers) from the last embed: {len(pre)} launches, kernel time {tot:.3f} ms, span {span:.3f} ms")
print(f"{'kernel':40} {'launches':>8} {'ms':>9} {'share':>6}")
for name, b in sorted(by.items(), key=lambda kv: -kv[1][1]):
    print(f"{name:40} {b[0]:8d} {b[1]:9.3f} {100 * b[1] / tot:5.1f}%")
PY
  python3 - $OUT/kern_cuda_gpu_kern_sum.csv >> $R <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
tot = sum(float(r["Total Time (ns)"]) for r in rows)
print(f"all kernels (decode, ceilings, generation and prefill): {tot / 1e6:.3f} ms")
print(f"{'kernel':34} {'launches':>8} {'ms':>9} {'share':>6} {'med us':>9}")
for r in sorted(rows, key=lambda r: -float(r["Total Time (ns)"]))[:45]:
    t = float(r["Total Time (ns)"])
    print(f"{r['Name'][:34]:34} {int(r['Instances']):8d} {t / 1e6:9.3f} {100 * t / tot:5.1f}% {float(r['Med (ns)']) / 1e3:9.1f}")
PY
else
  MEMRA=$M bash docs/results/prepared_session28/run101.sh > /dev/null
  cat $OUT/run101.txt >> $R
fi
[ $(( $(date +%s) - T0 )) -lt 400 ] && timeout 140 /usr/local/cuda/bin/ncu --clock-control none --section SourceCounters \
  --section WarpStateStats --section InstructionStats --section ComputeWorkloadAnalysis -o /tmp/m/down \
  --kernel-name expert_down_mma --launch-count 1 \
  $M bench roofline --layers 1 --contexts 1024 --steps 1 --prefill 4096 --prefill-reps 1 >> $R 2>&1 && \
  /usr/local/cuda/bin/ncu --import /tmp/m/down.ncu-rep --page details > $OUT/expert_down_mma_details.txt 2>> $R && \
  /usr/local/cuda/bin/ncu --import /tmp/m/down.ncu-rep --page source --csv --print-source sass > $OUT/expert_down_mma_sass.csv 2>> $R
echo "end t=$(( $(date +%s) - T0 ))s" >> $R
grep -vE "^(prefill|decode|breakdown|vram|case|ceilings|==PROF==)" $R | cut -c1-200
# build: main -> target/device/memra (cargo build --release -p memra; strip -o)
# carry: ["target/device/memra"]; run: bash docs/results/prepared_session30/run107.sh; timeout_s 595
