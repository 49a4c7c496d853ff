#!/usr/bin/env bash
# prepared in the twenty-eighth session for the next: where a 4096-token prefill's time goes, kernel by kernel.
# Nsight Compute on every launch of main's 2-layer flash-shape roofline (window + CSA layers: every kind of prefill
# kernel but HCA's compressor; decode 1k, 1 step, is profiled too and summed apart): duration and executed
# instructions a launch, as CSV, then a table by kernel name (launches, total ms, share of the prefill's kernel
# time) from the launches after the decode step's. The kernels run one at a time under the profiler, so the table
# gives each kernel's own time, not the overlap of the branches (the shared expert, the compressors). Then the
# per-instruction executed counts and sampled stalls of expert_gate_up_mma and linear_mma (CSV), for the next step
# on the experts (192 ms) and the dense products (157 ms), which run at 40-49% of the FP64 tensor pipe.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
M=${MEMRA:-target/device/memra}
R=$OUT/run101.txt; T0=$(date +%s); mkdir -p /tmp/m
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >> $R
timeout 300 /usr/local/cuda/bin/ncu --clock-control none --cache-control none --csv --print-units base \
  --metrics gpu__time_duration.sum,smsp__inst_executed.sum \
  $M bench roofline --layers 2 --contexts 1024 --steps 1 --prefill 4096 --prefill-reps 1 > $OUT/prefill_kernels.csv 2>> $R
echo "ncu rc=$? t=$(( $(date +%s) - T0 ))s" >> $R
python3 - "$OUT/prefill_kernels.csv" >> $R <<'PY'
import csv, sys, collections
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 14 and r[0].isdigit()]
launch = collections.OrderedDict()
for r in rows:
    k = launch.setdefault(int(r[0]), {"name": r[4], "grid": r[8], "ns": 0.0, "inst": 0.0})
    v = float(r[14].replace(",", "") or 0)
    if r[12] == "gpu__time_duration.sum": k["ns"] = v
    if r[12] == "smsp__inst_executed.sum": k["inst"] = v
ids = list(launch)
# the prefill is the last run of launches; its first kernel is the embedding's after the decode steps
first = max((i for i in ids if launch[i]["name"].startswith("embed")), default=ids[0])
by = collections.defaultdict(lambda: [0, 0.0, 0.0])
for i in ids:
    if i < first: continue
    k = launch[i]; b = by[k["name"]]; b[0] += 1; b[1] += k["ns"] / 1e6; b[2] += k["inst"]
total = sum(b[1] for b in by.values())
print(f"prefill launches from id {first}: {sum(b[0] for b in by.values())}, kernel time {total:.3f} ms")
print(f"{'kernel':32} {'launches':>8} {'ms':>9} {'share':>6} {'Ginst':>8}")
for name, b in sorted(by.items(), key=lambda kv: -kv[1][1]):
    print(f"{name:32} {b[0]:8d} {b[1]:9.3f} {100 * b[1] / total:5.1f}% {b[2] / 1e9:8.3f}")
PY
# then the tensor-core kernels' hot instructions: executed counts and sampled stalls of each SASS instruction of the
# routed experts' gate/up kernel and of linear_mma (their first launch of a 1-layer prefill), as CSV
i=0
for k in expert_gate_up_mma linear_mma; do
  i=$((i + 1))
  [ $(( $(date +%s) - T0 )) -lt 420 ] || break
  timeout 150 /usr/local/cuda/bin/ncu --clock-control none --section SourceCounters --section WarpStateStats \
    -o /tmp/m/k$i --kernel-name $k --launch-count 1 \
    $M bench roofline --layers 1 --contexts 1024 --steps 1 --prefill 4096 --prefill-reps 1 >> $R 2>&1 && \
  /usr/local/cuda/bin/ncu --import /tmp/m/k$i.ncu-rep --page source --csv --print-source sass > $OUT/${k}_sass.csv 2>> $R
  echo "ncu $k rc=$? t=$(( $(date +%s) - T0 ))s" >> $R
done
echo "end t=$(( $(date +%s) - T0 ))s" >> $R
grep -vE "^(prefill|decode|breakdown|vram|case|ceilings|==PROF==)" $R | cut -c1-200
# build: main -> target/device/memra (cargo build --release -p memra; strip -o)
# carry: ["target/device/memra"]; run: bash docs/results/prepared_session28/run101.sh; timeout_s 595
