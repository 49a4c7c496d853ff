#!/usr/bin/env bash
# One variant of the overlap probe on the device: NAME.patch (beside this script) applied to the
# forty-seventh session's overlap.cu, built with nvcc and run; its output in $OUT/NAME.txt and on stdout.
#   bash docs/results/session54/overlap_probe.sh NAME [seconds allowed, default 60]
set -u
n=$1 R=${OUT:-out}
patch -s -o /tmp/$n.cu docs/results/prepared_session47/overlap.cu docs/results/session54/$n.patch
PATH=/usr/local/cuda/bin:$PATH nvcc -O2 -arch=sm_90 -o /tmp/$n /tmp/$n.cu > $R/$n.txt 2>&1 \
  && timeout ${2:-60} /tmp/$n >> $R/$n.txt 2>&1
echo "$n rc=$? elapsed ${SECONDS} s"; cat $R/$n.txt
