#!/usr/bin/env bash
# Fifty-seventh session: builds what run181.sh carries, on the development machine, from main
# (e651612 or later with the same kernels): target/run181/memra_main (main), memra_split (main with
# NVRTC's --split-compile=0 added to gpu/nvrtc.rs OPTIONS, built and then reverted), memra_sa (main with
# shared-address.patch, its image compiled into target/kcache too), tf/ (session 56's
# trigger-first builds of moe_group_pairs and moe_route, from target/device/ if still there), and
# target/kcache (main's sm_90 image, by `memra kernels`, so the GPU machine skips the compile).
# Needs NVRTC 13.0.88 on LD_LIBRARY_PATH (README: the nvidia-cuda-nvrtc wheel).
set -euo pipefail
cd "$(dirname "$0")/../../.."
mkdir -p target/run181/tf
cargo build --release -q && strip -o target/run181/memra_main target/release/memra
rm -rf target/kcache && XDG_CACHE_HOME=$PWD/target/kcache target/release/memra kernels
f=crates/trunk/src/gpu/nvrtc.rs
sed -i 's/^const OPTIONS: &\[&str\] = &\["--std=c++17"\];/const OPTIONS: \&[\&str] = \&["--std=c++17", "--split-compile=0"];/' $f
grep -q split-compile $f
cargo build --release -q && strip -o target/run181/memra_split target/release/memra
git checkout $f
git apply docs/results/session57/shared-address.patch
cargo build --release -q && strip -o target/run181/memra_sa target/release/memra
XDG_CACHE_HOME=$PWD/target/kcache target/release/memra kernels
git checkout kernels/common.cuh && cargo build --release -q
for t in moe_group_pairs moe_route; do
  [ -f target/device/memra_tf_$t ] && cp target/device/memra_tf_$t target/run181/tf/ || echo "no target/device/memra_tf_$t"
done
du -sh target/run181 target/kcache
