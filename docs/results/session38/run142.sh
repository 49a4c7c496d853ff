#!/usr/bin/env bash
# thirty-eighth session, run 2: S = next/pairs-split (the experts' pairs past the wide rows staged split: each scaled
# f64's high word and its low word's top byte, put together by a byte permute where the tile reads them, instead of
# an f32 converted (F2F) and scaled (an exponent add) there) against main's kernels (target/device/memra).
# ptxas 13.0: expert_gate_up_mma's hot FP4 loop 52.7 instructions a DMMA (main 52.9): 256 F2F and 256 VIADD become
# 256 PRMT, 64 more LDS and ~140 more moves (a 16-byte load's words moved into the pairs' high registers); spill
# stores 292 bytes (112); expert_down_mma 156 registers (158), no spills.
# Order: Nsight Compute's duration of every expert_*_mma launch of S and M; if S's sum is the smaller, the quick
# gates (the faults must fail), the flash-shape chunk gates exact and fp8, and rooflines S M S M S.
set -u
mkdir -p /tmp/m
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
T=$OUT/run142.txt; T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
g() { echo "## $* (t=$(el)s)" >> $T; local t0=$(date +%s); timeout 200 "$@" >> $T 2>&1; local rc=$?; echo "rc=$rc $(( $(date +%s) - t0 ))s" >> $T; return $rc; }
bin() { [ $1 = M ] && echo target/device/memra || echo target/v$1/memra; }
roof() { g $(bin $1) bench roofline --layers 4 --contexts 1024,8192,32768 --prefill 4096 --prefill-reps 1; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >> $T
for X in S M; do
  echo "## ncu $X (t=$(el)s)" >> $T
  timeout 120 /usr/local/cuda/bin/ncu --clock-control none --kernel-name regex:'^expert_.*_mma' \
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
    if len(r) > t:
        sums.setdefault(r[k], []).append(float(r[t].replace(',', '')) / 1e6)
for name, v in sorted(sums.items()):
    print(f"## {name} {sys.argv[2]} {sum(v):.3f} ms ({', '.join(f'{x:.2f}' for x in v)})")
print(f"## experts sum {sys.argv[2]} {sum(map(sum, sums.values())):.3f}")
PY
done
X=$(awk '/^## experts sum/ && $5 > 0 {print $5, $4}' $T | sort -n | head -1 | cut -d' ' -f2)
echo "## fastest ${X:-none} (t=$(el)s)" >> $T
if [ -n "$X" ] && [ "$X" != M ]; then
  D=target/v$X; ok=1
  echo "## quick on $X (t=$(el)s)" >> $T
  OUT=$OUT/quick_$X MEMRA=$D/memra PLUGINS=$D timeout 200 bash scripts/gpu_gates.sh quick > $OUT/quick_$X.txt 2>&1 || ok=0
  cat $OUT/quick_$X.txt >> $T
  awk '/ rc=[0-9]+ /{match($0, / rc=[0-9]+ /); rc = substr($0, RSTART + 4, RLENGTH - 5) + 0;
    if (($0 ~ /FAULT/) != (rc != 0)) bad++} END{exit bad > 0}' $OUT/quick_$X/summary.txt || ok=0
  grep -q "equal to plain greedy True" $OUT/quick_$X.txt || ok=0
  g $D/memra gate chunks synth:flash-shape,layers=4 --variant exact --prompt-len 2176 --widths 256 --out /tmp/m/chunks_flash4_$X.json || ok=0
  g $D/memra gate chunks synth:flash-shape,layers=4 --variant fp8 --prompt-len 2176 --widths 256 --out /tmp/m/chunks_flash4_fp8_$X.json || ok=0
  echo "## gates $X ok=$ok (t=$(el)s)" >> $T
  for Y in $X M $X M $X; do [ $(el) -lt 520 ] && roof $Y; done
fi
echo "end t=$(el)s" >> $T
grep -hE "^## |rc=|^prefill|^decode|^breakdown prefill|^chunk gate|rror|anic|H200|^end" $T | cut -c1-250
# build: next/pairs-split -> target/vS/{memra,libdspark.so} (stripped); main -> target/device/memra. carry:
# ["target/device/memra", "target/vS/memra", "target/vS/libdspark.so"]; run: bash docs/results/session38/run142.sh
