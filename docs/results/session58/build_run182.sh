#!/usr/bin/env bash
# Fifty-eighth session: builds what run182.sh carries, on the development machine, from main
# (2c030f6 or later):
#   target/run182/memra_ts     main (the tensor sums' one-token kernels under the L2 policy)
#   target/run182/memra_main   main with kernels/moe_tensor.cu as 54eda8f had it (54eda8f's kernels
#                              but for comments; run at 2c030f6 its image key was run 180's,
#                              sm_90-2fcf9e11...; 713e5af's comment in common.cuh changes the key, not the code)
#   target/run182/memra_split  memra_main with NVRTC's --split-compile=0 (gpu/nvrtc.rs OPTIONS)
#   target/run182/memra_sa     memra_main with session57/shared-address.patch
#   target/kcache              the sm_90 images of memra_ts, memra_main and memra_sa by `memra kernels`
#                              (not memra_split's: run182.sh times its cold start)
# Needs NVRTC 13.0.88 on LD_LIBRARY_PATH (README: the nvidia-cuda-nvrtc wheel). ~5 min on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/../../.."
git diff --quiet || { echo "the work tree has changes; commit or stash them first"; exit 1; }
D=target/run182
mkdir -p $D
rm -rf target/kcache
build() { cargo build --release -q && strip -o $D/memra_$1 target/release/memra; }
keep() { XDG_CACHE_HOME=$PWD/target/kcache target/release/memra kernels; }
build ts && keep
git checkout 54eda8f -- kernels/moe_tensor.cu
build main && keep
f=crates/trunk/src/gpu/nvrtc.rs
sed -i 's/^const OPTIONS: &\[&str\] = &\["--std=c++17"\];/const OPTIONS: \&[\&str] = \&["--std=c++17", "--split-compile=0"];/' $f
grep -q split-compile $f
build split
git checkout $f
git apply docs/results/session57/shared-address.patch
build sa && keep
git checkout HEAD -- kernels/common.cuh kernels/moe_tensor.cu
cargo build --release -q
git diff --quiet
ls target/kcache/memra/kernels
du -sh $D target/kcache
