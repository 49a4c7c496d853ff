#!/usr/bin/env bash
# prepared in the thirty-ninth session (not run): why L4 (next/limbs-short, docs/results/tried_session39/
# limbs.patch then limbs-short.patch on 9d5cf40) was no faster on the fp8 variant, where every chunk should take
# three limbs. T = L4 with probe-three-limbs.patch (every chunk on three limbs, the other two paths compiled out;
# ptxas 13.0: expert_down_limbs 106 registers against L4's 150, ~80 instructions a chunk; expert_gate_up_limbs
# 168 with 104 bytes of spills). If T's logits on --variant fp8 equal main's, every chunk of that run fit three
# limbs (else some did not, and L4's classes explain its time); T's launch times against L4's then say what the
# other paths' code costs (registers, instruction cache).
# Order: Nsight Compute's duration of every expert_* launch of T, L4 and M with --variant fp8; the flash shape's
# logits of 512 tokens (fp8) from T, L4 and M compared bit for bit.
set -u
mkdir -p /tmp/m
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
T=$OUT/run146.txt; T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
g() { echo "## $* (t=$(el)s)" >> $T; local t0=$(date +%s); timeout 150 "$@" >> $T 2>&1; local rc=$?; echo "rc=$rc $(( $(date +%s) - t0 ))s" >> $T; return $rc; }
bin() { [ $1 = M ] && echo target/device/memra || echo target/v$1/memra; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >> $T
for X in T L4 M; do
  echo "## ncu $X fp8 (t=$(el)s)" >> $T
  timeout 150 /usr/local/cuda/bin/ncu --clock-control none --kernel-name regex:'^expert_' \
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
for X in T L4 M; do
  rm -f /tmp/m/logits_$X.f32
  g $(bin $X) logits --model synth:flash-shape,layers=4 --tokens /tmp/m/seq512.json --out /tmp/m/logits_$X.f32 --backend gpu --variant fp8
done
for X in T L4; do
  if [ -s /tmp/m/logits_$X.f32 ] && cmp -s /tmp/m/logits_$X.f32 /tmp/m/logits_M.f32; then echo "## same $X flash4 512 fp8: identical" >> $T
  else echo "## same $X flash4 512 fp8: DIFFER" >> $T; fi
done
echo "end t=$(el)s" >> $T
grep -hE "^## |rc=|rror|anic|H100|H200|^end" $T | cut -c1-250
# build: 9d5cf40 + tried_session39/limbs.patch + limbs-short.patch -> target/vL4/memra; that + this directory's
# probe-three-limbs.patch -> target/vT/memra (stripped); main -> target/device/memra. carry:
# ["target/device/memra", "target/vL4/memra", "target/vT/memra"]; run: bash docs/results/prepared_session39/run146.sh
