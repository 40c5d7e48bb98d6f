#!/usr/bin/env bash
# The serial planner's prefill KV splits on the warp-specialized kernel: short
# chunks over long contexts (few tiles) with the splits forced to 1, 2, 3, 4, 8
# and left to the planner (0), fp16; FA3 beside the batch-1 shapes.
set -uo pipefail
repo=$PWD
[[ -d .carry/fixtures ]] || tar -xzf .carry/fixtures.tar.gz -C .carry
source tools/seam/unpack_build.sh .carry/b.tar.gz $repo >/dev/null
W=$(mktemp -d)
trap 'tar -czf $OUT/all.tgz -C $W .' EXIT
{ date -u; nvidia-smi --query-gpu=name,clocks.sm,power.draw,power.limit --format=csv,noheader; $vpod info 2>&1 | grep -i commit; } | tee $W/env.txt
shapes="1x512@15872 1x256@16128 1x128@16256 1x384@8192 1x640@15744 1x768@7424 2x256@8192 4x32@16384 16x16@8192 1x1024@31744"
for r in 1 2; do
for s in 0 1 2 3 4 8; do
  timeout 90 $vpod bench attention --dtype fp16 --layouts per_layer fi_fa3 --case chunk --prefill-splits $s --chunk-shape $shapes > $W/splits_${s}_$r.txt 2>&1
  echo "r$r splits $s rc=$?"
  grep -E "^chunk .*per_layer|prefill items" $W/splits_${s}_$r.txt | cut -c1-100
done
done
date -u
