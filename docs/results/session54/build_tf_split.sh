#!/usr/bin/env bash
# Prepared in the fifty-fourth session, run on the development machine (cargo) before run178.sh:
# builds target/device/memra_tf_<kernel> for each moe.cu kernel of run 177's failing group, each with
# the trigger first (await_inputs_tf, docs/results/tried_session54/await-inputs-tf.patch) in that kernel
# only, and target/device/memra_main from main. Leaves kernels/ as it found it.
set -eu
cd "$(git rev-parse --show-toplevel)"
git diff --quiet -- kernels || { echo "kernels/ has changes: commit or stash them first"; exit 1; }
mkdir -p target/device
cargo build --release -q && strip -o target/device/memra_main target/release/memra
for k in moe_route moe_group_pairs expert_gate_up expert_down swiglu_rows; do
  git apply docs/results/tried_session54/await-inputs-tf.patch
  python3 - "$k" <<'PY'
import re, sys
k = sys.argv[1]
p = 'kernels/moe.cu'
s = open(p).read()
m = re.search(r'\b' + k + r'\(', s)
at = s.index('await_inputs();', m.start())
open(p, 'w').write(s[:at] + 'await_inputs_tf();' + s[at + len('await_inputs();'):])
PY
  [ "$(grep -c 'await_inputs_tf();' kernels/moe.cu)" = 1 ] || { echo "$k: not one switched call"; git checkout -q kernels; exit 1; }
  cargo build --release -q && strip -o target/device/memra_tf_$k target/release/memra
  git checkout -q kernels
  echo "built target/device/memra_tf_$k"
done
cargo build --release -q
