#!/usr/bin/env bash
# forty-seventh session, run 1: the heads' norm and rotation taken into the decode attention's blocks.
# memra: attention_rows_pair_normed (each warp normalizes and rotates its head's query in registers with
# rms_norm_rope_warps' sums, norm.cu `norm_rope_lane`) and rms_norm_f32_key_rope (the key's row in the
# query latent's norm launch), so rms_norm_rope_warps leaves one token's path; with it every attention_rows*
# kernel takes its output's first inverse rotation before the wait. memra_p1: that second change alone
# (the host keeps rms_norm_rope_warps). memra_base: main 1f4f62c. Checks: the logits of every position
# against main's (prefill: small exact and fp8, flash shape 4 layers), the chunk gates of memra (decode,
# which takes the new kernels at flash shape, against prefill, bit for bit; one past 2048 positions), then
# decode 1k rooflines alternating base, p1, memra (predicted: ~3-5 us a layer less on attn.q_kv's path,
# less what the norm adds to attn.core). Time left: the exact and tensor sums' decode (session45/run157).
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
M=target/device/memra; B=target/device/memra_base; P=target/device/memra_p1
T=$OUT/run161.txt; T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
g() { echo "## $* (t=$(el)s)" >> $T; local t0=$(date +%s); timeout ${TO:-150} "$@" >> $T 2>&1; local rc=$?; echo "rc=$rc $(( $(date +%s) - t0 ))s" >> $T; return $rc; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >> $T
# p1's kernels compiled by the driver beside the checks (its first process), so its rooflines start warm
mkdir -p /tmp/m; $P synth --preset tiny --seed 0 --out /tmp/m/tiny_p1 > /dev/null 2>&1
( $P gate chunks /tmp/m/tiny_p1 --variant exact --prompt-len 40 --out $OUT/chunks_tiny_p1.json > $OUT/warm_p1.txt 2>&1 & )
TO=300 g env MEMRA=$M BASE=$B OUT=$OUT/same bash scripts/gpu_gates.sh same
cat $OUT/same/summary.txt >> $T
TO=90 g $M gate chunks /tmp/m/small --variant exact --prompt-len 160 --out $OUT/chunks_small_exact.json
TO=90 g $M gate chunks synth:flash-shape,layers=4 --variant exact --prompt-len 256 --widths 1,256 --out $OUT/chunks_flash4.json
TO=90 g $M gate chunks synth:flash-shape,layers=4 --variant fp8 --prompt-len 256 --widths 1,256 --out $OUT/chunks_flash4_fp8.json
TO=120 g $M gate chunks synth:flash-shape,layers=4 --variant exact --prompt-len 2112 --widths 1,1056 --out $OUT/chunks_flash4_2112.json
for r in 1 2 3; do for X in "$B" "$P" "$M"; do
  [ $(el) -lt ${GUARD:-500} ] || continue
  TO=70 g $X bench roofline --layers 4 --contexts 1024 --prefill 0
done; done
for S in exact tensor; do
  [ $(el) -lt ${GUARD:-500} ] || continue
  TO=60 g $M bench roofline --layers 4 --contexts 1024 --prefill 0 --sums $S
done
grep -E "^(## |rc=|decode b1|breakdown|chunk gate|same |error)" $T | cut -c1-260 | tail -70
