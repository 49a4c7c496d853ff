#!/usr/bin/env bash
# prepared in the thirty-seventh session for the next (its device time ran out first): F = down-scales.patch on main
# (branch next/down-scales): expert_down_mma's wide tile loads the chunks' scales with the chunks, a step ahead.
# run140's source counters put 4.5% of its stall samples on the scale's decode waiting for its load and 3.1% more on
# the DFMA after it. ptxas 13.0: expert_down_mma 168 registers, 244 B of spill stores (none on main), its wide FP4
# loop (2 chunks a lane) 49.6 instructions a DMMA (49.2 on main); expert_gate_up_mma's SASS unchanged.
# Order: Nsight Compute's duration of every expert_down_mma launch of F and main (each process also JIT-compiles
# its kernels); if F's sum is the smaller, the quick gates on F (the faults must fail), the flash-shape chunk gates
# exact and fp8 on F, then rooflines F M F M F (1k, 8k, 32k, prefill 4096: F's three are its headline if merged).
set -u
mkdir -p /tmp/m
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
T=$OUT/run141.txt; T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
g() { echo "## $* (t=$(el)s)" >> $T; local t0=$(date +%s); timeout 200 "$@" >> $T 2>&1; local rc=$?; echo "rc=$rc $(( $(date +%s) - t0 ))s" >> $T; return $rc; }
bin() { [ $1 = M ] && echo target/device/memra || echo target/v$1/memra; }
roof() { g $(bin $1) bench roofline --layers 4 --contexts 1024,8192,32768 --prefill 4096 --prefill-reps 1; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >> $T
for X in F M; do
  echo "## ncu $X (t=$(el)s)" >> $T
  timeout 120 /usr/local/cuda/bin/ncu --clock-control none --kernel-name regex:'^expert_down_mma' \
    --metrics gpu__time_duration.sum,launch__registers_per_thread --csv --page raw \
    $(bin $X) bench roofline --layers 2 --contexts 1024 --steps 1 --prefill 4096 --prefill-reps 1 > $OUT/ncu_$X.csv 2> $OUT/ncu_$X.err
  echo "rc=$? launches $(grep -c '"expert_' $OUT/ncu_$X.csv) (t=$(el)s)" >> $T
  python3 - $OUT/ncu_$X.csv $X >> $T <<'PY'
import csv, io, sys
lines = open(sys.argv[1]).read().split('\n')
rows = list(csv.reader(io.StringIO('\n'.join(lines[[n for n, l in enumerate(lines) if l.startswith('"ID"')][0]:]))))
k, t = rows[0].index('Kernel Name'), rows[0].index('gpu__time_duration.sum')  # ns, with thousands' commas
v = [float(r[t].replace(',', '')) / 1e6 for r in rows[2:] if len(r) > t and r[k] == 'expert_down_mma']
print(f"## down sum {sys.argv[2]} {sum(v):.3f} ms ({len(v)} launches: {', '.join(f'{x:.2f}' for x in v)})")
PY
done
f=$(awk '/^## down sum F/{print $5}' $T); m=$(awk '/^## down sum M/{print $5}' $T)
if awk -v f="$f" -v m="$m" 'BEGIN{exit !(f > 0 && f < m)}'; then
  D=target/vF; ok=1
  echo "## quick on F (t=$(el)s)" >> $T
  OUT=$OUT/quick_F MEMRA=$D/memra PLUGINS=$D timeout 200 bash scripts/gpu_gates.sh quick > $OUT/quick_F.txt 2>&1 || ok=0
  cat $OUT/quick_F.txt >> $T
  awk '/ rc=[0-9]+ /{match($0, / rc=[0-9]+ /); rc = substr($0, RSTART + 4, RLENGTH - 5) + 0;
    if (($0 ~ /FAULT/) != (rc != 0)) bad++} END{exit bad > 0}' $OUT/quick_F/summary.txt || ok=0
  grep -q "equal to plain greedy True" $OUT/quick_F.txt || ok=0
  g $D/memra gate chunks synth:flash-shape,layers=4 --variant exact --prompt-len 2176 --widths 256 --out /tmp/m/chunks_flash4_F.json || ok=0
  g $D/memra gate chunks synth:flash-shape,layers=4 --variant fp8 --prompt-len 2176 --widths 256 --out /tmp/m/chunks_flash4_fp8_F.json || ok=0
  echo "## gates F ok=$ok (t=$(el)s)" >> $T
  for X in F M F M F; do [ $(el) -lt 520 ] && roof $X; done
fi
echo "end t=$(el)s" >> $T
grep -hE "^## |rc=|^prefill|^decode|^breakdown prefill|^chunk gate|rror|anic|H200|^end" $T | cut -c1-250
# build: down-scales.patch on main -> target/vF/memra (+ target/vF/libdspark.so, stripped); main -> target/device/memra.
# carry: ["target/device/memra", "target/vF/memra", "target/vF/libdspark.so"]; run: bash
# docs/results/prepared_session37/run141.sh; timeout_s 600.
