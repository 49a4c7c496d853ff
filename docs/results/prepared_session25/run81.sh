set -u
export PATH=/usr/local/cuda/bin:$PATH
D=docs/results/prepared_session25
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
nvcc -O2 -arch=sm_90 -o /tmp/dmma_order $D/dmma_order.cu && /tmp/dmma_order /tmp/dmma.bin
nvcc -O2 -arch=sm_90 -o /tmp/dmma_rate $D/dmma_rate.cu && /tmp/dmma_rate
cuobjdump -sass /tmp/dmma_order | grep -m3 DMMA
timeout 200 python3 $D/dmma_exact.py /tmp/dmma.bin 2000
