#!/usr/bin/env bash
# The GPU battery, run on the H200 machine from the repository root with a
# release `memra` built elsewhere (target/release/memra carried along).
#   bash scripts/gpu_gates.sh [sections...]
# sections: quick ab same gates flash hostcache fixtures park perf prefill prefill_kernels kernels spec dspark split deep boundary peer
# (default: gates); split, deep and boundary need two GPUs (nvidia-h200-x2).
# MEMRA (the binary) and PLUGINS (the drafter libraries' directory) default
# to ./target/release.
# Writes a summary (summary.txt) and everything else packed in results.tgz
# under $OUT (or ./out).
set -u
OUT=${OUT:-out}
mkdir -p "$OUT" /tmp/m
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
M=${MEMRA:-./target/release/memra}
P=${PLUGINS:-./target/release}
LOG="$OUT/gates.log"
SUMMARY="$OUT/summary.txt"
: > "$LOG"; : > "$SUMMARY"
step() { # name, command...
  local name=$1; shift
  local t0=$(date +%s%N)
  "$@" >> "$LOG" 2>&1
  local rc=$?
  local ms=$(( ($(date +%s%N) - t0) / 1000000 ))
  printf '%-40s rc=%d %6dms | %s\n' "$name" $rc "$ms" "$(tail -1 "$LOG" | cut -c1-400)" | tee -a "$SUMMARY"
}
pack() { # at most 8 files come back: pack everything but the summary
  (cd "$OUT" && tar czf results.tgz --exclude=results.tgz --exclude=summary.txt . 2>/dev/null)
  find "$OUT" -mindepth 1 -not -name results.tgz -not -name summary.txt -delete 2>/dev/null
}
trap pack EXIT
models() {
  [ -d /tmp/m/tiny ] || step "synth tiny" $M synth --preset tiny --seed 0 --out /tmp/m/tiny
  [ -d /tmp/m/small ] || step "synth small" $M synth --preset small --seed 1 --out /tmp/m/small
}
gates() {
  models
  for model in tiny small; do
    for v in exact fp8; do
      step "compare $model $v" $M gate compare /tmp/m/$model --variant $v --prompt-len 160
    done
  done
  step "compare small exact bf16" $M gate compare /tmp/m/small --variant exact --experts bf16 --prompt-len 160
  for model in tiny small; do
    for v in exact fp8; do
      step "chunks $model $v" $M gate chunks /tmp/m/$model --variant $v --prompt-len 160 --out $OUT/chunks_${model}_$v.json
    done
  done
  step "chunks small exact 0,0" $M gate chunks /tmp/m/small --variant exact --prompt-len 160 --devices 0,0
  for model in tiny small; do
    for v in exact fp8; do
      step "bank $model $v" $M bank --model /tmp/m/$model --prompt-len 32 --n 160 --variant $v --out /tmp/m/bank_${model}_$v.json
      cp /tmp/m/bank_${model}_$v.json $OUT/ 2>/dev/null
    done
  done
  for model in tiny small; do
    for v in exact fp8; do
      for e in native bf16; do
        for d in 0 0,0; do
          step "tf $model $v $e dev $d" $M gate tf /tmp/m/$model /tmp/m/bank_${model}_$v.json $OUT/tf_${model}_${v}_${e}_${d/,/_} --experts $e --devices $d
        done
      done
    done
  done
  step "tf tiny exact FAULT drop-shared" $M gate tf /tmp/m/tiny /tmp/m/bank_tiny_exact.json $OUT/tf_fault1 --inject-fault drop-shared:2
  step "tf small exact FAULT shift-rope" $M gate tf /tmp/m/small /tmp/m/bank_small_exact.json $OUT/tf_fault2 --inject-fault shift-rope:1
  step "tf small exact per-expert" $M gate tf /tmp/m/small /tmp/m/bank_small_exact.json $OUT/tf_small_perexpert --moe per-expert
  python3 -c "import json; b=json.load(open('/tmp/m/bank_small_exact.json')); json.dump({'tokens': b['prompt']+b['tokens']}, open('/tmp/m/seq.json','w'))"
  step "logits small gpu" $M logits --model /tmp/m/small --tokens /tmp/m/seq.json --out /tmp/m/small_gpu.f32 --backend gpu
  step "transformers vs gpu small" python3 scripts/check_transformers_load.py /tmp/m/small /tmp/m/seq.json /tmp/m/small_gpu.f32
  step "generate tiny gpu" $M generate --model /tmp/m/tiny --backend gpu --max-tokens 64 --json --no-stop
}
flash() { # the teacher-forced gate at DSV4-Flash widths (4 layers, generated in memory): the kernels' large-shape paths
  local F=synth:flash-shape,layers=4
  for v in exact fp8; do
    step "bank flash4 $v" $M bank --model $F --prompt-len 8 --n 12 --variant $v --out /tmp/m/bank_flash4_$v.json
    step "tf flash4 $v" $M gate tf $F /tmp/m/bank_flash4_$v.json $OUT/tf_flash4_$v
  done
  step "tf flash4 exact per-expert" $M gate tf $F /tmp/m/bank_flash4_exact.json $OUT/tf_flash4_perexpert --moe per-expert
  # past the indexer's bound (index_topk 512 x CSA ratio 4): chunks ending by position 2050 skip the indexer, the last
  # chunk, the one-chunk prefill and the decode steps from position 2051 run it, each against the others bit for bit
  step "chunks flash4 exact past the indexer's bound" $M gate chunks $F --variant exact --prompt-len 2176 --widths 256 \
    --out $OUT/chunks_flash4_indexer.json
}
hostcache() {
  models
  python3 -c "import json,random; random.seed(5); json.dump([random.randrange(2,320) for _ in range(100)], open('/tmp/m/ids_tiny.json','w')); json.dump([random.randrange(2,32000) for _ in range(100)], open('/tmp/m/ids_small.json','w'))"
  for model in tiny small; do
    for v in exact fp8; do
      for d in 0 0,0; do
        mkdir -p $OUT/hc_${model}_${v}_${d/,/_}
        step "host-cache $model $v dev $d" $M gate host-cache /tmp/m/$model /tmp/m/ids_$model.json --variant $v --devices $d --out-dir $OUT/hc_${model}_${v}_${d/,/_}
      done
    done
  done
  step "host-cache small exact cpu" $M gate host-cache /tmp/m/small /tmp/m/ids_small.json --backend cpu --out-dir /tmp/m
}
fixtures() {
  mkdir -p $OUT/fixtures
  step "codepoints fixture" python3 scripts/make_codepoints.py $OUT/fixtures/codepoints.json
  step "transformers tiny fixture" python3 scripts/make_reference.py $OUT/fixtures/hf_tiny
}
quick() { # the short check after a kernel change (~2 min): exactness on the small models, faults,
  # speculative == plain, DSpark GPU == CPU, and decode times (against BASE, another memra, if set)
  models
  for v in exact fp8; do
    step "compare small $v" $M gate compare /tmp/m/small --variant $v --prompt-len 160
    step "chunks small $v" $M gate chunks /tmp/m/small --variant $v --prompt-len 160 --out $OUT/chunks_small_$v.json
  done
  step "chunks tiny exact 0,0" $M gate chunks /tmp/m/tiny --variant exact --prompt-len 160 --devices 0,0
  step "chunks small exact FAULT stale-step" $M gate chunks /tmp/m/small --variant exact --prompt-len 160 --inject-fault stale-step
  step "bank tiny exact" $M bank --model /tmp/m/tiny --prompt-len 32 --n 160 --variant exact --out /tmp/m/bank_tiny_exact.json
  step "tf tiny exact" $M gate tf /tmp/m/tiny /tmp/m/bank_tiny_exact.json $OUT/tf_tiny_exact
  step "tf tiny exact FAULT drop-shared" $M gate tf /tmp/m/tiny /tmp/m/bank_tiny_exact.json $OUT/tf_fault1 --inject-fault drop-shared:2
  [ -d /tmp/m/tiny_ds ] || step "synth tiny --dspark" $M synth --preset tiny --seed 4 --out /tmp/m/tiny_ds --dspark
  step "drafters tiny exact gpu vs cpu" $M gate drafters /tmp/m/tiny_ds --drafter $P/libdspark.so --variant exact --steps 32 --reference '{"realization":"cpu"}' --candidate '{"realization":"gpu"}' --out $OUT/drafters_tiny.json
  step "plain tiny" gen_to $OUT/q_plain.json --model /tmp/m/tiny_ds --backend gpu --max-tokens 96 --no-stop --json
  step "spec tiny dspark" gen_to $OUT/q_dspark.json --model /tmp/m/tiny_ds --backend gpu --max-tokens 96 --no-stop --json --drafter $P/libdspark.so
  python3 -c "import json,sys; a,b=(json.load(open(f))['tokens'] for f in sys.argv[1:]); print('spec tiny dspark tokens equal to plain greedy', a==b, len(a))" $OUT/q_plain.json $OUT/q_dspark.json | tee -a "$SUMMARY"
  roofline_runs "roofline 4 layers 1k,32k" "^decode b1" 2 --layers 4 --contexts 1024,32768 --prefill 0
}
roofline_runs() { # label, log lines to show (pattern, count), roofline args...: BASE (if set), then MEMRA
  local label=$1 pattern=$2 lines=$3; shift 3
  for b in ${BASE:-} $M; do
    step "$label ($b)" $b bench roofline "$@"
    grep -E "$pattern" "$LOG" | tail -"$lines" | tee -a "$SUMMARY"
  done
}
park() {
  models
  step "park bench small 32k" $M bench park /tmp/m/small --capacity 32768 --out $OUT/park_small_32k.json
}
kernels() { # per-kernel times of one decode step at 1k under Nsight Compute (it runs the kernels
  # one at a time, so without the launch overlap; caches not flushed): the totals by kernel go to
  # the summary, every launch to kernels_1k.txt
  local NCU=${NCU:-/usr/local/cuda/bin/ncu}
  step "ncu one decode step 1k" sh -c "$NCU --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv --launch-skip 300 --launch-count 300 $M bench roofline --layers 4 --contexts 1024 --prefill 0 --steps 3 > $OUT/ncu_1k.csv"
  awk -v launches=$OUT/kernels_1k.txt -f scripts/ncu_step.awk $OUT/ncu_1k.csv | tee -a "$SUMMARY"
}
prefill_kernels() { # Nsight Compute on the prefill's group kernels (layer 0 of a one-layer flash-shape
  # prefill of 4096; the expert groups' first launches, then linear_groups' first): throughputs,
  # occupancy and the warps' stall reasons
  local NCU=${NCU:-/usr/local/cuda/bin/ncu}
  for k in "expert_gate_up_groups|expert_down_groups 2" "linear_groups 1"; do
    set -- $k
    step "ncu prefill $1" sh -c "$NCU --clock-control none --section SpeedOfLight --section Occupancy \
      --section LaunchStats --section WarpStateStats \
      --metrics 'regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio' \
      --kernel-name 'regex:$1' --launch-count $2 \
      $M bench roofline --layers 1 --contexts 1024 --steps 2 --prefill 4096 --prefill-reps 1 >> $OUT/ncu_prefill_groups.txt"
  done
  grep -E '^  [a-z_]+.*\(|Duration|Registers Per|Achieved Occupancy|Warp Cycles Per Issued|stalled_(short|long)_scoreboard|L1/TEX Cache Throughput|DRAM Throughput' \
    $OUT/ncu_prefill_groups.txt | tee -a "$SUMMARY"
}
chunks_flash4() { # the chunk gate at flash shape with a width whose products and experts take the prefill kernels
  step "chunks flash4 exact 1,256" $M gate chunks synth:flash-shape,layers=4 --variant exact --prompt-len 256 \
    --widths 1,256 --out $OUT/chunks_flash4.json
}
prefill() { # prefill 4096 at flash shape (4 layers), against BASE (another memra) if set, and the
  # chunk gate at flash shape (chunks_flash4)
  roofline_runs "roofline prefill 4096" "^(decode b1|prefill|breakdown prefill)" 3 \
    --layers 4 --contexts 1024 --prefill 4096 --prefill-reps 1
  chunks_flash4
}
ab() { # MEMRA against BASE at decode 1k, ROUNDS (default 3) rooflines of each, alternating: one
  # build's rooflines spread by up to ~0.03 ms between processes, so a change is judged on several
  # pairs and on its breakdown lines; then the flash-shape chunk gate (decode == prefill, bit for bit)
  [ -n "${BASE:-}" ] || { echo "ab: set BASE to the memra to compare against" | tee -a "$SUMMARY"; return; }
  for r in $(seq "${ROUNDS:-3}"); do
    roofline_runs "roofline 1k round $r" "^(decode b1|breakdown decode)" 2 --layers 4 --contexts 1024 --prefill 0
  done
  chunks_flash4
}
same() { # MEMRA's logits of every position against BASE's, bit for bit (cmp): small exact and fp8
  # (96 tokens) and the flash shape (4 layers, 40 tokens); for a change meant to keep every bit
  # (SUMS=tensor: both on the tensor sums)
  [ -n "${BASE:-}" ] || { echo "same: set BASE to the memra to compare against" | tee -a "$SUMMARY"; return; }
  models
  python3 -c "import json; json.dump({'tokens': [(i*7919) % 31000 + 2 for i in range(96)]}, open('/tmp/m/seq_small.json','w'))"
  python3 -c "import json; json.dump({'tokens': [(i*7919) % 120000 + 2 for i in range(40)]}, open('/tmp/m/seq_flash.json','w'))"
  for c in "small exact /tmp/m/small seq_small" "small fp8 /tmp/m/small seq_small" \
           "flash4 exact synth:flash-shape,layers=4 seq_flash"; do
    set -- $c
    rm -f /tmp/m/same_memra.f32 /tmp/m/same_base.f32  # a failed run leaves no file to compare equal
    step "logits $1 $2 (MEMRA)" $M logits --model $3 --tokens /tmp/m/$4.json --out /tmp/m/same_memra.f32 --backend gpu --variant $2 ${SUMS:+--sums $SUMS}
    step "logits $1 $2 (BASE)" $BASE logits --model $3 --tokens /tmp/m/$4.json --out /tmp/m/same_base.f32 --backend gpu --variant $2 ${SUMS:+--sums $SUMS}
    if cmp -s /tmp/m/same_memra.f32 /tmp/m/same_base.f32; then
      echo "same $1 $2: logits identical" | tee -a "$SUMMARY"
    else
      echo "same $1 $2: logits DIFFER" | tee -a "$SUMMARY"
    fi
  done
}
perf() {
  step "roofline flash-shape 4 layers" $M bench roofline --layers 4 --out $OUT/roofline.json
  grep -E "^(ceilings|case|decode|prefill|breakdown)" "$LOG" | tee -a "$SUMMARY"
}
gen_to() { # file, generate args...
  local f=$1; shift
  timeout 300 $M generate "$@" > "$f"
}
spec() {
  [ -d /tmp/m/tiny_ds ] || step "synth tiny --dspark" $M synth --preset tiny --seed 4 --out /tmp/m/tiny_ds --dspark
  [ -d /tmp/m/small_ds ] || step "synth small --dspark" $M synth --preset small --seed 1 --out /tmp/m/small_ds --dspark
  for model in tiny small; do
    local m=/tmp/m/${model}_ds base="$OUT/spec_${model}"
    for moe in fused per-expert; do
      step "plain $model $moe" gen_to ${base}_plain_$moe.json --model $m --backend gpu --moe $moe --max-tokens 96 --no-stop --json
      step "spec $model ngram $moe" gen_to ${base}_ngram_$moe.json --model $m --backend gpu --moe $moe --max-tokens 96 --no-stop --json --drafter $P/libngram_drafter.so
      step "spec $model replay $moe" gen_to ${base}_replay_$moe.json --model $m --backend gpu --moe $moe --max-tokens 96 --no-stop --json --drafter $P/libreplay_drafter.so --drafter-options @${base}_plain_fused.json --schedule fixed
      step "spec $model dspark $moe" gen_to ${base}_dspark_$moe.json --model $m --backend gpu --moe $moe --max-tokens 96 --no-stop --json --drafter $P/libdspark.so --drafter-options "{\"moe\":\"$moe\"}"
    done
    mkdir -p $OUT/hc_${model}_dspark
    python3 -c "import json,random; random.seed(5); json.dump([random.randrange(2,320) for _ in range(100)], open('/tmp/m/ids_ds.json','w'))"
    step "host-cache $model + dspark" $M gate host-cache $m /tmp/m/ids_ds.json --drafter $P/libdspark.so --out-dir $OUT/hc_${model}_dspark
  done
  python3 - "$OUT" <<'PY' | tee -a "$SUMMARY"
import json, sys, glob, os
out = sys.argv[1]
for model in ("tiny", "small"):
    plain = json.load(open(f"{out}/spec_{model}_plain_fused.json"))
    for f in sorted(glob.glob(f"{out}/spec_{model}_*.json")):
        try:
            r = json.load(open(f))
        except ValueError:
            print(f"spec {model:5} {os.path.basename(f)}: no result (see gates.log)")
            continue
        name = os.path.basename(f)[len(f"spec_{model}_"):-5]
        same = r["tokens"] == plain["tokens"]
        acc = r.get("mean_accepted")
        print(f"spec {model:5} {name:18} tokens {len(r['tokens'])} equal to plain greedy {same} "
              f"tokens/s {r['tokens_per_s']:8.1f} mean accepted {acc if acc is None else round(acc, 3)} "
              f"by position {[round(x, 3) for x in r.get('acceptance_by_position', [])]}")
PY
}
dspark() { # DSpark's GPU realization against its CPU reference, proposal by proposal
  [ -d /tmp/m/tiny_ds ] || step "synth tiny --dspark" $M synth --preset tiny --seed 4 --out /tmp/m/tiny_ds --dspark
  [ -d /tmp/m/small_ds ] || step "synth small --dspark" $M synth --preset small --seed 1 --out /tmp/m/small_ds --dspark
  for model in tiny small; do
    for v in exact fp8; do
      for moe in fused per-expert; do
        local o="\"variant\":\"$v\",\"moe\":\"$moe\""
        step "drafters $model $v $moe gpu vs cpu" $M gate drafters /tmp/m/${model}_ds --drafter $P/libdspark.so --variant $v --steps 32 --reference "{\"realization\":\"cpu\",$o}" --candidate "{\"realization\":\"gpu\",$o}" --out $OUT/drafters_${model}_${v}_$moe.json
      done
    done
  done
  step "drafters flash-shape 4l gpu vs cpu" timeout 300 $M gate drafters synth:flash-shape,layers=4,dspark --drafter $P/libdspark.so --steps 3 --prompt-len 8 --out $OUT/drafters_flash4.json
  step "drafters tiny FAULT fp8 candidate" $M gate drafters /tmp/m/tiny_ds --drafter $P/libdspark.so --candidate '{"realization":"gpu","variant":"fp8"}' --out $OUT/drafters_fault.json
}
split() { # the layer split on two real GPUs: same criteria as one GPU, same logits streams as 0,0
  models
  python3 -c "import json,random; random.seed(5); json.dump([random.randrange(2,320) for _ in range(100)], open('/tmp/m/ids_tiny.json','w')); json.dump([random.randrange(2,32000) for _ in range(100)], open('/tmp/m/ids_small.json','w'))"
  for model in tiny small; do
    for v in exact fp8; do
      [ -f /tmp/m/bank_${model}_$v.json ] || step "bank $model $v" $M bank --model /tmp/m/$model --prompt-len 32 --n 160 --variant $v --out /tmp/m/bank_${model}_$v.json
      for d in 0,0 0,1; do
        step "tf $model $v dev $d" $M gate tf /tmp/m/$model /tmp/m/bank_${model}_$v.json $OUT/tf_${model}_${v}_${d/,/_} --devices $d
      done
      mkdir -p $OUT/hc_${model}_${v}_0_1
      step "host-cache $model $v dev 0,1" $M gate host-cache /tmp/m/$model /tmp/m/ids_$model.json --variant $v --devices 0,1 --out-dir $OUT/hc_${model}_${v}_0_1
    done
  done
  step "tf small exact FAULT drop-shared:6 dev 0,1" $M gate tf /tmp/m/small /tmp/m/bank_small_exact.json $OUT/tf_fault_0_1 --devices 0,1 --inject-fault drop-shared:6
  python3 - "$OUT" <<'PY' | tee -a "$SUMMARY"
import json, sys
out = sys.argv[1]
for model in ("tiny", "small"):
    for v in ("exact", "fp8"):
        a = json.load(open(f"{out}/tf_{model}_{v}_0_0/tf_gate.json"))["stream_sha256"]
        b = json.load(open(f"{out}/tf_{model}_{v}_0_1/tf_gate.json"))["stream_sha256"]
        print(f"split {model:5} {v:5}: logits stream sha256 0,1 {b[0][:16]} == 0,0 {a[0][:16]}: {a == b}")
PY
}
deep() { # full-depth DSV4-Flash shape (43 layers, published schedule) over two GPUs
  local D=synth:flash-shape,layers=43,shared-quantized
  step "roofline flash-shape 43 layers dev 0,1" timeout 400 $M bench roofline --model $D --devices 0,1 --contexts 1024,32768 --steps 10 --prefill 4096 --prefill-reps 1 --out $OUT/roofline_43l_0_1.json
  grep -E "^(vram|stage|ceilings|case|decode|prefill|breakdown)" "$LOG" | tail -12 | tee -a "$SUMMARY"
  step "replay 43 layers dev 0,1" gen_to $OUT/replay_43l.json --model $D --backend gpu --devices 0,1 --max-tokens 64 --no-stop --json --drafter $P/libreplay_drafter.so --drafter-options @baseline --baseline --schedule fixed
  step "dspark 43 layers dev 0,1" gen_to $OUT/dspark_43l.json --model $D,dspark --backend gpu --devices 0,1 --max-tokens 64 --no-stop --json --drafter $P/libdspark.so --baseline
  for f in replay_43l dspark_43l; do
    python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print(sys.argv[2], 'plain', round(r['baseline_tokens_per_s'],1), 'tok/s, speculative', round(r['tokens_per_s'],1), 'tok/s, equal', r['equal_to_baseline'], 'steps', r['steps'], 'mean accepted', round(r['mean_accepted'],3))" $OUT/$f.json $f | tee -a "$SUMMARY"
  done
}
boundary() { # the cost of crossing devices: 4 flash-shape layers on one GPU and split over two
  for d in 0 0,1; do
    step "roofline 4 layers dev $d" $M bench roofline --layers 4 --devices $d --contexts 1024 --steps 30 --prefill 0 --out $OUT/roofline_4l_${d/,/_}.json
    grep -E "^(boundary|case|decode b1|breakdown)" "$LOG" | tail -4 | tee -a "$SUMMARY"
  done
}
peer() { # transformers 5.17 on the same 4-layer flash-shape weights (bf16), batch-1 decode at 1k
  [ -d /tmp/m/flash4 ] || step "synth flash-shape 4 layers" $M synth --preset flash-shape --layers 4 --seed 0 --out /tmp/m/flash4
  step "transformers peer decode ctx 1k" timeout 420 python3 scripts/peer_transformers.py /tmp/m/flash4 --context 1024 --steps 16 --out $OUT/peer_transformers.json
  step "memra decode ctx 1k same weights" $M bench roofline --model /tmp/m/flash4 --contexts 1024 --steps 30 --prefill 0 --out $OUT/roofline_flash4_dir.json
  grep -E "^(case|decode b1)" "$LOG" | tail -2 | tee -a "$SUMMARY"
}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee -a "$SUMMARY"
for s in "${@:-gates}"; do $s; done
