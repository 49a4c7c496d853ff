#!/usr/bin/env bash
# Fifty-fifth session, run on the development machine (cargo) before run178.sh: two builds that test
# whether the trigger-first failure of run 177 is the launch after `branch_join` (the MoE's shared
# expert on the branch stream, joined before hc_post): join-no-pdl.patch launches the first kernel on
# the main stream after a join without the programmatic attribute.
#   target/device/memra_tf_moe_join          trigger first in moe.cu and moe_tensor.cu, + join-no-pdl
#   target/device/memra_tf_expert_down_join  trigger first in expert_down only, + join-no-pdl
# Leaves the tree as it found it.
set -eu
cd "$(git rev-parse --show-toplevel)"
git diff --quiet || { echo "the tree has changes: commit or stash them first"; exit 1; }
D=docs/results
build() {
  cargo build --release -q && strip -o target/device/$1 target/release/memra
  git checkout -q kernels crates
  echo "built target/device/$1"
}
git apply $D/tried_session54/await-inputs-tf.patch $D/session55/join-no-pdl.patch
sed -i 's/await_inputs();/await_inputs_tf();/' kernels/moe.cu kernels/moe_tensor.cu
build memra_tf_moe_join
git apply $D/tried_session54/await-inputs-tf.patch $D/session55/join-no-pdl.patch
python3 - <<'PY'
p = 'kernels/moe.cu'
s = open(p).read()
at = s.index('await_inputs();', s.index('void expert_down('))
open(p, 'w').write(s[:at] + 'await_inputs_tf();' + s[at + len('await_inputs();'):])
PY
build memra_tf_expert_down_join
cargo build --release -q
