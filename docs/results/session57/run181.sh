#!/usr/bin/env bash
# Fifty-seventh session: run 181 (not run in that session: no machine came). Carried: target/run181/ and
# target/kcache, built by build_run181.sh (memra_main: main, which loads NVRTC machine code kept on disk; memra_split: the same with NVRTC's --split-compile=0; tf/: session56's
# trigger-first builds of moe_group_pairs and moe_route) and target/kcache (main's sm_90 image,
# compiled on the development machine with the same NVRTC 13.0.88: the key run 180 wrote on the GPU).
# 1. On an H200 only: the headline (prepared_session52/run173.sh, three processes) with main.
# 2. --split-compile=0: its cold start (NVRTC's optimizer on the machine's 16 cores; main's took
#    62-74 s in run 180), the small compare and chunk gates exact, decode 1k alternating with main.
#    shared-address.patch (memra_sa: one shared_address, by __cvta_generic_to_shared, for cp.async and
#    store_peer; nvdisasm here: fewer instructions in 21 kernels, linear_t1_r4_fp8 3800 -> 3728, the
#    cluster attention kernels unchanged): the small compare and chunk gates exact, and decode 1k in the same rotation.
# 3. While SECONDS < GUARD: the trigger-first chunk gate past the indexer's bound for the two moe.cu
#    kernels run 180 left (run179.sh's form, 165 s each, their images compiled there).
set -u
R=${OUT:-out}
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export XDG_CACHE_HOME=$PWD/target/kcache
D=target/run181
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader | tee $R/card.txt
ls $XDG_CACHE_HOME/memra/kernels
bash docs/results/prepared_session52/run173.sh $D/memra_main
echo "headline done ${SECONDS} s"
mkdir -p /tmp/m && $D/memra_main synth --preset small --seed 1 --out /tmp/m/small > /dev/null 2>&1
timeout 120 $D/memra_split gate compare /tmp/m/small --variant exact --prompt-len 160 > $R/split_compare.txt 2>&1
echo "split compare small exact rc=$? elapsed ${SECONDS} s | $(grep uploaded $R/split_compare.txt) | $(tail -1 $R/split_compare.txt | cut -c1-300)"
timeout 60 $D/memra_split gate chunks /tmp/m/small --variant exact --prompt-len 160 > $R/split_chunks.txt 2>&1
echo "split chunks small exact rc=$? elapsed ${SECONDS} s | $(grep uploaded $R/split_chunks.txt) | $(tail -1 $R/split_chunks.txt | cut -c1-300)"
ls -l $XDG_CACHE_HOME/memra/kernels
for g in compare chunks; do
  timeout 60 $D/memra_sa gate $g /tmp/m/small --variant exact --prompt-len 160 > $R/sa_$g.txt 2>&1
  echo "sa $g small exact rc=$? elapsed ${SECONDS} s | $(grep uploaded $R/sa_$g.txt) | $(tail -1 $R/sa_$g.txt | cut -c1-300)"
done
for b in main split sa main split sa; do
  timeout 60 $D/memra_$b bench roofline --layers 4 --contexts 1024 --prefill 0 > $R/ab_$b.txt 2>&1
  echo "$b rc=$? ${SECONDS} s | $(grep -h uploaded $R/ab_$b.txt) | $(grep -h '^decode b1' $R/ab_$b.txt)"
  grep -h "^breakdown" $R/ab_$b.txt | cut -c1-400
done
for t in moe_group_pairs moe_route; do
  [ $SECONDS -lt ${GUARD:-380} ] || break
  timeout 165 $D/tf/memra_tf_$t gate chunks synth:flash-shape,layers=4 --variant exact --prompt-len 2176 \
    --widths 256 --out $R/indexer_tf_$t.json > $R/indexer_tf_$t.txt 2>&1
  echo "tf_$t rc=$? elapsed ${SECONDS} s | $(grep -h uploaded $R/indexer_tf_$t.txt) | $(grep -h 'chunk gate' $R/indexer_tf_$t.txt | cut -c1-330)"
done
