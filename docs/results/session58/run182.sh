#!/usr/bin/env bash
# Fifty-eighth session: run 182 (run181.sh's questions and the tensor sums' L2 policy). Carried:
# target/run182/ and target/kcache, built by build_run182.sh. Each step runs only while the
# command's seconds leave room for it before LIMIT (default 540), in this order:
# 1. On an H200 only: the headline (prepared_session52/run173.sh, three processes) with memra_main.
# 2. shared-address.patch (memra_sa): the small compare and chunk gates, exact.
# 3. decode 1k, alternating: memra_main and memra_sa on the exact sums; memra_main and memra_ts
#    on `--sums tensor` (memra_ts: the one-token tensor kernels' weight codes under the L2
#    evict-first policy). Two rounds. The flash-shape weights are written to disk once
#    (`memra synth`, seed 0) and each bench maps them (`--model`) instead of generating them
#    in memory (~20 s a process on the GPU machine; on the development machine, 2 cores, one
#    layer: 28.8 s generated against 3.7 s mapped from the page cache). Without the room for
#    the synth, or if it fails, each bench generates them (`--layers 4`).
# 4. --split-compile=0 (memra_split): its cold start (its image is not carried) and the small
#    compare and chunk gates, exact.
set -u
R=${OUT:-out}
LIMIT=${LIMIT:-540}
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export XDG_CACHE_HOME=$PWD/target/kcache
D=target/run182
room() { [ $((SECONDS + $1)) -lt $LIMIT ] || { echo "skipped (${SECONDS} s): $2"; return 1; }; }
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader | tee $R/card.txt
ls $XDG_CACHE_HOME/memra/kernels
bash docs/results/prepared_session52/run173.sh $D/memra_main
echo "headline done ${SECONDS} s"
mkdir -p /tmp/m && $D/memra_main synth --preset small --seed 1 --out /tmp/m/small > /dev/null 2>&1
for g in compare chunks; do
  timeout 60 $D/memra_sa gate $g /tmp/m/small --variant exact --prompt-len 160 > $R/sa_$g.txt 2>&1
  echo "sa $g small exact rc=$? ${SECONDS} s | $(grep uploaded $R/sa_$g.txt) | $(tail -1 $R/sa_$g.txt | cut -c1-300)"
done
M="--layers 4"
if room 100 "flash-shape synth to disk"; then
  timeout 90 $D/memra_main synth --preset flash-shape --layers 4 --seed 0 --out /tmp/m/flash > $R/synth.txt 2>&1 \
    && M="--model /tmp/m/flash"
  echo "synth rc=$? ${SECONDS} s | $(tail -1 $R/synth.txt | cut -c1-200) | benches: $M"
fi
for round in 1 2; do
  for arm in main:exact sa:exact main:tensor ts:tensor; do
    b=${arm%:*} s=${arm#*:}
    room 40 "$b $s round $round" || continue
    timeout 60 $D/memra_$b bench roofline $M --contexts 1024 --prefill 0 --sums $s > $R/ab_${b}_${s}_$round.txt 2>&1
    echo "$b $s rc=$? ${SECONDS} s | $(grep -h 'weights ready\|uploaded' $R/ab_${b}_${s}_$round.txt | tr '\n' ' ') | $(grep -h '^decode b1' $R/ab_${b}_${s}_$round.txt)"
    grep -h "^breakdown" $R/ab_${b}_${s}_$round.txt | cut -c1-400
  done
done
if room 110 "split cold start and gates"; then
  timeout 100 $D/memra_split gate compare /tmp/m/small --variant exact --prompt-len 160 > $R/split_compare.txt 2>&1
  echo "split compare small exact rc=$? ${SECONDS} s | $(grep uploaded $R/split_compare.txt) | $(tail -1 $R/split_compare.txt | cut -c1-300)"
  timeout 30 $D/memra_split gate chunks /tmp/m/small --variant exact --prompt-len 160 > $R/split_chunks.txt 2>&1
  echo "split chunks small exact rc=$? ${SECONDS} s | $(grep uploaded $R/split_chunks.txt) | $(tail -1 $R/split_chunks.txt | cut -c1-300)"
fi
echo "done ${SECONDS} s"
