#!/usr/bin/env bash
# prepared in the forty-third session for the next device run: the checks ba3aa0f (main) did not get in run150.
# memra: main's build; memra_base: 34ce2c2's (before the one-token kernels' reordered loads and the FP4 tables
# built once a device). First the teacher-forced gate against the CPU bank under --sums tensor (the band sees a
# wrong table entry, the chunk gate cannot: decode and prefill read the same tables), with its fault; then the
# prefill of 4096 under the tensor sums (the group kernels now copy the tables), alternating the two builds.
# Each binary's first GPU command compiles its kernels (NVRTC, up to ~70 s): the first roofline of each gets 150 s.
set -u
mkdir -p /tmp/m
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
M=target/device/memra; B=target/device/memra_base
T=$OUT/run151.txt; T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
g() { echo "## $* (t=$(el)s)" >> $T; local t0=$(date +%s); timeout ${TO:-150} "$@" >> $T 2>&1; local rc=$?; echo "rc=$rc $(( $(date +%s) - t0 ))s" >> $T; return $rc; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >> $T
g $M synth --preset small --seed 1 --out /tmp/m/small
g $M bank --model /tmp/m/small --prompt-len 32 --n 64 --variant exact --out /tmp/m/bank_small_exact.json
g $M gate tf /tmp/m/small /tmp/m/bank_small_exact.json $OUT/tf_small_exact --variant exact --sums tensor
g $M gate tf /tmp/m/small /tmp/m/bank_small_exact.json $OUT/tf_small_fault --sums tensor --inject-fault drop-shared:1
F=synth:flash-shape,layers=4
TO=120 g $M bank --model $F --prompt-len 8 --n 12 --variant exact --out /tmp/m/bank_flash4_exact.json
TO=90 g $M gate tf $F /tmp/m/bank_flash4_exact.json $OUT/tf_flash4 --sums tensor
first_b=150
for r in 1 2; do for X in "$B" "$M"; do
  [ $(el) -lt ${GUARD:-420} ] || continue
  to=100; [ "$X" = "$B" ] && { to=$first_b; first_b=100; }
  TO=$to g $X bench roofline --layers 4 --contexts 1024 --prefill 4096 --prefill-reps 1 --sums tensor
done; done
grep -E "^(## |rc=|decode b1|prefill|breakdown|chunk gate|tf gate|error)" $T | cut -c1-300 | tail -70
