#!/usr/bin/env bash
# thirty-ninth session, run 1: L = next/down-limbs (the prefill's FP4 down product on the integer tensor cores:
# expert_down_limbs, expert_down_mma's bits) and L2 = next/down-limbs-2 (the limbs' merge adds its third pair to
# the high word) and L3 = next/limbs-both (expert_gate_up_limbs too, the stacks in registers: 168 registers, 88
# bytes of spills; the down tile unrolled four leaf pairs, 158 registers) against main's kernels
# (target/device/memra).
# ptxas 13.0: expert_down_limbs 128 registers, no spills; ~90-95 instructions a chunk of the tile (6 IMMA, 4 DADD,
# 4 DFMA) where expert_down_mma's FP4 loop takes ~115 (2 DMMA).
# Order: Nsight Compute's duration of every expert_* launch of L2, L3 and M; the flash shape's logits of 512 tokens
# (the expert groups run) from L3, M and L2, compared bit for bit (exact; fp8 for L3); the flash-shape chunk gate
# exact on L3; rooflines (prefill) L3 M L3 M while time is left. (L itself was not run.)
set -u
mkdir -p /tmp/m
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
T=$OUT/run143.txt; T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
g() { echo "## $* (t=$(el)s)" >> $T; local t0=$(date +%s); timeout 200 "$@" >> $T 2>&1; local rc=$?; echo "rc=$rc $(( $(date +%s) - t0 ))s" >> $T; return $rc; }
bin() { [ $1 = M ] && echo target/device/memra || echo target/v$1/memra; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >> $T
for X in L2 L3 M; do
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
for V in exact fp8; do
  XS="L3 M L2"; [ $V = fp8 ] && XS="L3 M"
  for X in $XS; do
    [ $(el) -lt 420 ] || continue
    rm -f /tmp/m/logits_$X.f32
    g $(bin $X) logits --model synth:flash-shape,layers=4 --tokens /tmp/m/seq512.json --out /tmp/m/logits_$X.f32 --backend gpu --variant $V
  done
  for X in $XS; do [ $X = M ] && continue
    if [ -s /tmp/m/logits_$X.f32 ] && cmp -s /tmp/m/logits_$X.f32 /tmp/m/logits_M.f32; then echo "## same $X flash4 512 $V: identical" >> $T
    else echo "## same $X flash4 512 $V: DIFFER" >> $T; fi
  done
done
[ $(el) -lt 400 ] && g $(bin L3) gate chunks synth:flash-shape,layers=4 --variant exact --prompt-len 2176 --widths 256 --out /tmp/m/chunks_flash4_L3.json
for Y in L3 M L3 M; do [ $(el) -lt 480 ] && g $(bin $Y) bench roofline --layers 4 --contexts 1024 --prefill 4096 --prefill-reps 1; done
echo "end t=$(el)s" >> $T
grep -hE "^## |rc=|^prefill|^breakdown prefill|^chunk gate|rror|anic|H200|^end" $T | cut -c1-250
# build: next/down-limbs -> target/vL/memra, next/down-limbs-2 -> target/vL2/memra, next/limbs-both ->
# target/vL3/memra (stripped); main -> target/device/memra. carry: ["target/device/memra", "target/vL/memra",
# "target/vL2/memra", "target/vL3/memra"];
# run: bash docs/results/session39/run143.sh
