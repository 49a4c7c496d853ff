#!/usr/bin/env bash
# Fifty-sixth session, run on the development machine (cargo) before cubin_smoke.sh and run179.sh:
# commits cubin.patch (beside this script) on a scratch branch `cubin-try` from HEAD and builds there
# target/device/memra_main and the memra_tf_* builds (session54/build_tf_split.sh and
# session55/build_join.sh), then returns to the branch it started on. The same builds from main (PTX,
# the fallback if the cubin fails on the GPU) are in target/device_ptx/ when the fifty-sixth session
# left them; `build_tf_split.sh` and `build_join.sh` on main remake them.
set -eu
cd "$(git rev-parse --show-toplevel)"
git diff --quiet && git diff --cached --quiet || { echo "the tree has changes: commit or stash them first"; exit 1; }
start=$(git rev-parse --abbrev-ref HEAD)
D=docs/results
git checkout -q -B cubin-try
git apply $D/session56/cubin.patch
git commit -qam "scratch: session56/cubin.patch"
bash $D/session54/build_tf_split.sh && bash $D/session55/build_join.sh
git checkout -q "$start"
cargo build --release -q
