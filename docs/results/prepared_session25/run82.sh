set -u
export PATH=/usr/local/cuda/bin:$PATH
D=docs/results/prepared_session25
nvcc -O2 -arch=sm_90 -o /tmp/dmma_shapes $D/dmma_shapes.cu && /tmp/dmma_shapes
cuobjdump -sass /tmp/dmma_shapes | grep -oE "DMMA[.0-9x]+" | sort | uniq -c
