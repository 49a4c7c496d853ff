#!/usr/bin/env bash
# fortieth session, run 1: the `tensor` expert sums (kernels/moe_tensor.cu, --expert-sums tensor) for correctness:
# the chunk gate (prefill == decode bit for bit; widths 1, 7, 32 take the one-token kernels, 64 the groups) on the
# small model (exact and fp8) and at flash shape (1, 256), the teacher-forced gate against the CPU bank inside the
# tensor arm's band (small exact, 64 positions), and the flash shape's logits of both arms side by side (the
# relative top-1 drift). Then the prefill and decode times of both arms (one roofline each, 4 layers).
set -u
mkdir -p /tmp/m
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
M=target/device/memra
T=$OUT/run147.txt; T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
g() { echo "## $* (t=$(el)s)" >> $T; local t0=$(date +%s); timeout ${TO:-150} "$@" >> $T 2>&1; local rc=$?; echo "rc=$rc $(( $(date +%s) - t0 ))s" >> $T; return $rc; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >> $T
g $M synth --preset small --seed 1 --out /tmp/m/small
for V in exact fp8; do
  g $M gate chunks /tmp/m/small --variant $V --prompt-len 160 --expert-sums tensor --out $OUT/chunks_small_${V}_tensor.json
done
g $M bank --model /tmp/m/small --prompt-len 32 --n 64 --variant exact --out /tmp/m/bank_small_exact.json
g $M gate tf /tmp/m/small /tmp/m/bank_small_exact.json $OUT/tf_small_tensor --expert-sums tensor
g $M gate tf /tmp/m/small /tmp/m/bank_small_exact.json $OUT/tf_small_tensor_perexpert --expert-sums tensor --moe per-expert
g $M gate tf /tmp/m/small /tmp/m/bank_small_exact.json $OUT/tf_small_tensor_fault --expert-sums tensor --inject-fault drop-shared:1
g $M gate chunks synth:flash-shape,layers=4 --variant exact --prompt-len 256 --widths 1,256 --expert-sums tensor \
  --out $OUT/chunks_flash4_tensor.json
python3 -c "import json; json.dump({'tokens': [(i*7919) % 120000 + 2 for i in range(256)]}, open('/tmp/m/seq_flash.json','w'))"
for S in exact tensor; do
  g $M logits --model synth:flash-shape,layers=4 --tokens /tmp/m/seq_flash.json --out /tmp/m/flash_$S.f32 --backend gpu --expert-sums $S
done
python3 - >> $T <<'PY'
import numpy as np
a, b = (np.fromfile(f'/tmp/m/flash_{s}.f32', dtype=np.float32).reshape(-1, 129280) for s in ('exact', 'tensor'))
ia, ib = a.argmax(1), b.argmax(1)
r = np.arange(len(a))
drift = np.abs(a[r, ia] - b[r, ia]) / np.abs(a[r, ia])
print(f"## flash4 logits exact vs tensor: {len(a)} positions, argmax differs at {(ia != ib).sum()}, "
      f"max rel top-1 drift {drift.max():.3e} (median {np.median(drift):.3e}), max abs diff {np.abs(a - b).max():.3e}, "
      f"top-1 logit range {np.abs(a[r, ia]).min():.3f} .. {np.abs(a[r, ia]).max():.3f}")
PY
for S in exact tensor; do
  TO=240 g $M bench roofline --layers 4 --contexts 1024 --prefill 4096 --prefill-reps 1 --expert-sums $S
done
grep -E "^(## |rc=|decode b1|prefill|breakdown|tf |chunks|teacher|.*PASS|.*FAIL)" $T | cut -c1-300 | tail -60
