#!/usr/bin/env bash
# forty-first session, run 1: the `tensor` sums on the attention's FP8 projections too (kernels/linear_tensor.cu;
# `--sums tensor`: wq_a, wkv, wq_b, wo_a, wo_b and the routed experts). Correctness: the chunk gate (prefill ==
# decode bit for bit: one token takes linear_bf16_one, more linear_bf16_groups) on small (exact, fp8) and the
# flash shape; the teacher-forced gate against the CPU bank inside the band (small exact and fp8, flash shape),
# its fault; the flash shape's logits of both sums side by side. Then rooflines of both sums, alternating.
set -u
mkdir -p /tmp/m
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
M=target/device/memra
T=$OUT/run149.txt; T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
g() { echo "## $* (t=$(el)s)" >> $T; local t0=$(date +%s); timeout ${TO:-150} "$@" >> $T 2>&1; local rc=$?; echo "rc=$rc $(( $(date +%s) - t0 ))s" >> $T; return $rc; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >> $T
g $M synth --preset small --seed 1 --out /tmp/m/small
for V in exact fp8; do
  g $M gate chunks /tmp/m/small --variant $V --prompt-len 160 --sums tensor --out $OUT/chunks_small_${V}.json
  g $M bank --model /tmp/m/small --prompt-len 32 --n 64 --variant $V --out /tmp/m/bank_small_$V.json
  g $M gate tf /tmp/m/small /tmp/m/bank_small_$V.json $OUT/tf_small_$V --variant $V --sums tensor
done
g $M gate tf /tmp/m/small /tmp/m/bank_small_exact.json $OUT/tf_small_fault --sums tensor --inject-fault drop-shared:1
F=synth:flash-shape,layers=4
g $M gate chunks $F --variant exact --prompt-len 256 --widths 1,256 --sums tensor --out $OUT/chunks_flash4.json
python3 -c "import json; json.dump({'tokens': [(i*7919) % 120000 + 2 for i in range(256)]}, open('/tmp/m/seq_flash.json','w'))"
for S in exact tensor; do
  g $M logits --model $F --tokens /tmp/m/seq_flash.json --out /tmp/m/flash_$S.f32 --backend gpu --sums $S
done
python3 - >> $T <<'PY'
import numpy as np
a, b = (np.fromfile(f'/tmp/m/flash_{s}.f32', dtype=np.float32).reshape(-1, 129280) for s in ('exact', 'tensor'))
ia, ib = a.argmax(1), b.argmax(1)
r = np.arange(len(a))
drift = np.abs(a[r, ia] - b[r, ia]) / np.abs(a[r, ia])
print(f"## flash4 logits exact vs tensor: {len(a)} positions, argmax differs at {(ia != ib).sum()}, "
      f"max rel top-1 drift {drift.max():.3e} (median {np.median(drift):.3e}), max abs diff {np.abs(a - b).max():.3e}")
PY
for r in 1 2; do for S in exact tensor; do
  [ $(el) -lt 480 ] || continue
  TO=100 g $M bench roofline --layers 4 --contexts 1024 --prefill 4096 --prefill-reps 1 --sums $S
done; done
if [ $(el) -lt 420 ]; then
  TO=120 g $M bank --model $F --prompt-len 8 --n 12 --variant exact --out /tmp/m/bank_flash4_exact.json
  TO=90 g $M gate tf $F /tmp/m/bank_flash4_exact.json $OUT/tf_flash4 --sums tensor
fi
grep -E "^(## |rc=|decode b1|prefill|breakdown|chunk gate|tf gate|error)" $T | cut -c1-300 | tail -70
