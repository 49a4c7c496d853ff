#!/usr/bin/env bash
# Fifty-sixth session, run on the development machine (cargo) before cubin_smoke.sh and run179.sh:
# commits cubin.patch (beside this script) on a scratch branch `cubin-try` from HEAD and builds there
# target/device/memra_main and the memra_tf_* builds (session54/build_tf_split.sh and
# session55/build_join.sh), then returns to the branch it started on. The PTX builds it replaces go
# to target/device_ptx/.
set -eu
cd "$(git rev-parse --show-toplevel)"
git diff --quiet && git diff --cached --quiet || { echo "the tree has changes: commit or stash them first"; exit 1; }
start=$(git rev-parse --abbrev-ref HEAD)
D=docs/results
mkdir -p target/device target/device_ptx
cp -a target/device/. target/device_ptx/
git checkout -q -B cubin-try
git apply $D/session56/cubin.patch
git commit -qam "scratch: session56/cubin.patch"
bash $D/session54/build_tf_split.sh && bash $D/session55/build_join.sh
git checkout -q "$start"
cargo build --release -q
