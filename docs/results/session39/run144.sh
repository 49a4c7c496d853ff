#!/usr/bin/env bash
# thirty-ninth session, run 2 (one H100; run 1, run143.sh, ran on one H100 too): L3 = next/limbs-both with
# expert_gate_up_limbs opted in to the tiles' shared memory (run 1's L3 launched it with the default 48 KiB:
# CUDA_ERROR_INVALID_VALUE), and L3p = next/probe-limbs-no-fallback (timing only, wrong bits by design: the limb
# kernels never take the f64 tile, so L3 - L3p is what the chunks past LIMB_SPAN cost).
# Order: Nsight Compute's duration of every expert_* launch of L3, L3p and M; the flash shape's logits of 512
# tokens from L3 and M compared bit for bit (exact).
set -u
mkdir -p /tmp/m
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
T=$OUT/run144.txt; T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
g() { echo "## $* (t=$(el)s)" >> $T; local t0=$(date +%s); timeout 200 "$@" >> $T 2>&1; local rc=$?; echo "rc=$rc $(( $(date +%s) - t0 ))s" >> $T; return $rc; }
bin() { [ $1 = M ] && echo target/device/memra || echo target/v$1/memra; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >> $T
for X in L3 L3p M; do
  [ $(el) -lt 330 ] || continue
  echo "## ncu $X (t=$(el)s)" >> $T
  timeout 150 /usr/local/cuda/bin/ncu --clock-control none --kernel-name regex:'^expert_' \
    --metrics gpu__time_duration.sum,launch__registers_per_thread --csv --page raw \
    $(bin $X) bench roofline --layers 2 --contexts 1024 --steps 1 --prefill 4096 --prefill-reps 1 > $OUT/ncu_$X.csv 2> $OUT/ncu_$X.err
  echo "rc=$? launches $(grep -c '"expert_' $OUT/ncu_$X.csv) (t=$(el)s)" >> $T
  python3 - $OUT/ncu_$X.csv $X >> $T <<'PY'
import csv, io, sys
lines = open(sys.argv[1]).read().split('\n')
rows = list(csv.reader(io.StringIO('\n'.join(lines[[n for n, l in enumerate(lines) if l.startswith('"ID"')][0]:]))))
k, t = rows[0].index('Kernel Name'), rows[0].index('gpu__time_duration.sum')  # ns, with thousands' commas
sums = {}
for r in rows[2:]:
    if len(r) > t and float(r[t].replace(',', '')) > 1e6:
        sums.setdefault(r[k], []).append(float(r[t].replace(',', '')) / 1e6)
for name, v in sorted(sums.items()):
    print(f"## {name} {sys.argv[2]} {sum(v):.3f} ms ({', '.join(f'{x:.2f}' for x in v)})")
PY
done
python3 -c "import json; json.dump({'tokens': [(i*7919) % 120000 + 2 for i in range(512)]}, open('/tmp/m/seq512.json','w'))"
for X in L3 M; do
  [ $(el) -lt 480 ] || continue
  rm -f /tmp/m/logits_$X.f32
  g $(bin $X) logits --model synth:flash-shape,layers=4 --tokens /tmp/m/seq512.json --out /tmp/m/logits_$X.f32 --backend gpu --variant exact
done
if [ -s /tmp/m/logits_L3.f32 ] && cmp -s /tmp/m/logits_L3.f32 /tmp/m/logits_M.f32; then echo "## same L3 flash4 512 exact: identical" >> $T
else echo "## same L3 flash4 512 exact: DIFFER" >> $T; fi
echo "end t=$(el)s" >> $T
grep -hE "^## |rc=|rror|anic|H100|H200|^end" $T | cut -c1-250
# build: next/limbs-both -> target/vL3/memra, next/probe-limbs-no-fallback -> target/vL3p/memra (stripped); main ->
# target/device/memra. carry: ["target/device/memra", "target/vL3/memra", "target/vL3p/memra"];
# run: bash docs/results/session39/run144.sh
