#!/usr/bin/env bash
# prepared in the thirty-ninth session (not run): why L4 (docs/results/tried_session39/limbs.patch then
# limbs-short.patch on 9d5cf40) was no faster on the fp8 variant, where every chunk should take three limbs, and
# whether the limb tiles pay once their loops are small.
# N = L4 with limbs-outline.patch: the f64 fallback out of line (a __noinline__ function taking and returning the
#     sums by value). ptxas 13.0: expert_gate_up_limbs 168 registers and no spills (L4: 96 bytes), its 4-chunk
#     loop 5284 instructions (L4 10246; L3's no-fallback probe, 29.0 ms a launch, 2875); expert_down_limbs 142
#     registers, its 2-chunk loop 1455 (L4 2431; the probe 854). Same bits as L4 and L3 (the same arithmetic).
# T = L4 with probe-three-limbs.patch: every chunk on three limbs, the other paths compiled out (down 106
#     registers, loop 666; gate/up 168 with 104 bytes of spills, loop 2195). If T's fp8 logits equal main's, every
#     chunk of that run fit three limbs.
# Order: Nsight Compute's duration of every expert_* launch of N, T and M with --variant fp8, then of N and M on
# exact; the flash shape's logits of 512 tokens from N, T and M (fp8) and N and M (exact), compared bit for bit.
set -u
mkdir -p /tmp/m
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
T=$OUT/run146.txt; T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
g() { echo "## $* (t=$(el)s)" >> $T; local t0=$(date +%s); timeout 150 "$@" >> $T 2>&1; local rc=$?; echo "rc=$rc $(( $(date +%s) - t0 ))s" >> $T; return $rc; }
bin() { [ $1 = M ] && echo target/device/memra || echo target/v$1/memra; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >> $T
for V in fp8 exact; do XS="N T M"; [ $V = exact ] && XS="N M"; for X in $XS; do
  [ $(el) -lt 400 ] || continue
  echo "## ncu $X $V (t=$(el)s)" >> $T
  timeout 150 /usr/local/cuda/bin/ncu --clock-control none --kernel-name regex:'^expert_' \
    --metrics gpu__time_duration.sum --csv --page raw \
    $(bin $X) bench roofline --layers 2 --contexts 1024 --steps 1 --prefill 4096 --prefill-reps 1 --variant $V > $OUT/ncu_${X}_$V.csv 2> $OUT/ncu_${X}_$V.err
  echo "rc=$? launches $(grep -c '"expert_' $OUT/ncu_${X}_$V.csv) (t=$(el)s)" >> $T
  python3 - $OUT/ncu_${X}_$V.csv "$X $V" >> $T <<'PY'
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
done
python3 -c "import json; json.dump({'tokens': [(i*7919) % 120000 + 2 for i in range(512)]}, open('/tmp/m/seq512.json','w'))"
for V in fp8 exact; do
  XS="N T M"; [ $V = exact ] && XS="N M"
  for X in $XS; do
    [ $(el) -lt 540 ] || continue
    rm -f /tmp/m/logits_$X.f32
    g $(bin $X) logits --model synth:flash-shape,layers=4 --tokens /tmp/m/seq512.json --out /tmp/m/logits_$X.f32 --backend gpu --variant $V
  done
  for X in $XS; do [ $X = M ] && continue
    if [ -s /tmp/m/logits_$X.f32 ] && cmp -s /tmp/m/logits_$X.f32 /tmp/m/logits_M.f32; then echo "## same $X flash4 512 $V: identical" >> $T
    else echo "## same $X flash4 512 $V: DIFFER or not run" >> $T; fi
  done
done
echo "end t=$(el)s" >> $T
grep -hE "^## |rc=|rror|anic|H100|H200|^end" $T | cut -c1-250
# build: 9d5cf40 + tried_session39/limbs.patch + limbs-short.patch, then + this directory's limbs-outline.patch ->
# target/vN/memra, or + probe-three-limbs.patch -> target/vT/memra (stripped); main -> target/device/memra. carry:
# ["target/device/memra", "target/vN/memra", "target/vT/memra"]; run: bash docs/results/prepared_session39/run146.sh
