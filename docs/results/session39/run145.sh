#!/usr/bin/env bash
# thirty-ninth session, run 3 (one H100 or H200): L4 = next/limbs-short (L3 whose chunks with every pair within
# 22 bits take three limbs merged in s32; spans counted from the values' lowest set bits, so that the fp8
# variant's E4M3 values, at most 18 bits, always do) against main's kernels (target/device/memra), on the fp8
# variant, where no chunk should take the f64 tile.
# ptxas 13.0: expert_gate_up_limbs 168 registers, 96 bytes of spills; expert_down_limbs 150, none.
# Order: Nsight Compute's duration of every expert_* launch of L4 and M with --variant fp8; the flash shape's
# logits of 512 tokens from L4 and M compared bit for bit (fp8; what device time was left allowed no more).
set -u
mkdir -p /tmp/m
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
T=$OUT/run145.txt; T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
g() { echo "## $* (t=$(el)s)" >> $T; local t0=$(date +%s); timeout 150 "$@" >> $T 2>&1; local rc=$?; echo "rc=$rc $(( $(date +%s) - t0 ))s" >> $T; return $rc; }
bin() { [ $1 = M ] && echo target/device/memra || echo target/v$1/memra; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >> $T
for X in L4 M; do
  echo "## ncu $X fp8 (t=$(el)s)" >> $T
  timeout 130 /usr/local/cuda/bin/ncu --clock-control none --kernel-name regex:'^expert_' \
    --metrics gpu__time_duration.sum --csv --page raw \
    $(bin $X) bench roofline --layers 2 --contexts 1024 --steps 1 --prefill 4096 --prefill-reps 1 --variant fp8 > $OUT/ncu_$X.csv 2> $OUT/ncu_$X.err
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
for V in fp8; do
  for X in L4 M; do
    [ $(el) -lt 165 ] || continue
    rm -f /tmp/m/logits_$X.f32
    g $(bin $X) logits --model synth:flash-shape,layers=4 --tokens /tmp/m/seq512.json --out /tmp/m/logits_$X.f32 --backend gpu --variant $V
  done
  if [ -s /tmp/m/logits_L4.f32 ] && cmp -s /tmp/m/logits_L4.f32 /tmp/m/logits_M.f32; then echo "## same L4 flash4 512 $V: identical" >> $T
  else echo "## same L4 flash4 512 $V: DIFFER or not run" >> $T; fi
done
echo "end t=$(el)s" >> $T
grep -hE "^## |rc=|rror|anic|H100|H200|^end" $T | cut -c1-250
# build: next/limbs-short -> target/vL4/memra (stripped); main -> target/device/memra. carry:
# ["target/device/memra", "target/vL4/memra"]; run: bash docs/results/session39/run145.sh
