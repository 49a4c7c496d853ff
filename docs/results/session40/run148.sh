#!/usr/bin/env bash
# fortieth session, run 2: the `tensor` expert sums at flash shape: Nsight Compute's duration of every expert
# kernel of a 2-layer prefill of 4096 and a decode step (both arms), the teacher-forced gate of the flash shape
# against its CPU bank (exact; 8 + 12 positions) under the tensor sums, the fp8 variant's gates on small (chunks:
# prefill == decode; tf against the CPU bank: the quantizers amplify last-bit differences, gates.md), and three
# decode-1k / prefill-4096 rooflines of each arm, alternating.
set -u
mkdir -p /tmp/m
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
M=target/device/memra
T=$OUT/run148.txt; T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
g() { echo "## $* (t=$(el)s)" >> $T; local t0=$(date +%s); timeout ${TO:-150} "$@" >> $T 2>&1; local rc=$?; echo "rc=$rc $(( $(date +%s) - t0 ))s" >> $T; return $rc; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >> $T
for S in exact tensor; do
  echo "## ncu $S (t=$(el)s)" >> $T
  timeout 170 /usr/local/cuda/bin/ncu --clock-control none --kernel-name regex:'^(expert_|limb_)' \
    --metrics gpu__time_duration.sum --csv --page raw \
    $M bench roofline --layers 2 --contexts 1024 --steps 1 --prefill 4096 --prefill-reps 1 --expert-sums $S \
    > $OUT/ncu_$S.csv 2> $OUT/ncu_$S.err
  echo "rc=$? (t=$(el)s)" >> $T
  python3 - $OUT/ncu_$S.csv "$S" >> $T <<'PY'
import csv, io, sys
lines = open(sys.argv[1]).read().split('\n')
rows = list(csv.reader(io.StringIO('\n'.join(lines[[n for n, l in enumerate(lines) if l.startswith('"ID"')][0]:]))))
k, t = rows[0].index('Kernel Name'), rows[0].index('gpu__time_duration.sum')  # ns, with thousands' commas
sums = {}
for r in rows[2:]:
    if len(r) > t:
        sums.setdefault(r[k], []).append(float(r[t].replace(',', '')) / 1e6)
for name, v in sorted(sums.items()):
    big = [x for x in v if x > 0.5]
    small = [x for x in v if x <= 0.5]
    print(f"## {name} {sys.argv[2]}: {len(v)} launches; over 0.5 ms: {', '.join(f'{x:.2f}' for x in big)}; "
          f"the rest median {sorted(small)[len(small)//2] if small else 0:.4f} ms")
PY
done
F=synth:flash-shape,layers=4
TO=200 g $M bank --model $F --prompt-len 8 --n 12 --variant exact --out /tmp/m/bank_flash4_exact.json
g $M gate tf $F /tmp/m/bank_flash4_exact.json $OUT/tf_flash4_tensor --expert-sums tensor
g $M synth --preset small --seed 1 --out /tmp/m/small
g $M bank --model /tmp/m/small --prompt-len 32 --n 64 --variant fp8 --out /tmp/m/bank_small_fp8.json
g $M gate tf /tmp/m/small /tmp/m/bank_small_fp8.json $OUT/tf_small_fp8_tensor --variant fp8 --expert-sums tensor
for r in 1 2 3; do for S in exact tensor; do
  [ $(el) -lt 520 ] || continue
  TO=120 g $M bench roofline --layers 4 --contexts 1024 --prefill 4096 --prefill-reps 1 --expert-sums $S
done; done
grep -E "^(## |rc=|decode b1|prefill|breakdown|teacher|.*PASS|.*FAIL)" $T | cut -c1-300 | tail -70
