#!/usr/bin/env bash
# Build 025bebd (grids of two or more waves stay whole): the planner's splits
# on the calibration shapes and the 9-14-tile chunks (one pass, fp16); POD's
# 200-case sweep with the fallback; POD's named cases with FlashInfer, fp16
# and bf16.
set -uo pipefail
repo=$PWD
[[ -d .carry/fixtures ]] || tar -xzf .carry/fixtures.tar.gz -C .carry
source tools/seam/unpack_build.sh .carry/b.tar.gz $repo >/dev/null
W=$(mktemp -d)
trap 'tar -czf $OUT/all.tgz -C $W .' EXIT
{ date -u; nvidia-smi --query-gpu=name,clocks.sm,power.draw,power.limit --format=csv,noheader; $vpod info 2>&1 | grep -i commit; } | tee $W/env.txt
shapes="1x512@15872 1x256@16128 1x128@16256 1x384@8192 1x640@15744 1x768@7424 2x256@8192 4x32@16384 16x16@8192 1x1024@31744 1x1152@7040 1x1280@6912 1x1408@6784 1x1664@6528 1x1152@15232 1x1280@15104 1x1408@14976 1x1664@14720 1x1792@14592"
timeout 90 $vpod bench attention --dtype fp16 --layouts per_layer --case chunk --chunk-shape $shapes > $W/planner.txt 2>&1
echo "planner rc=$?"; grep -h "prefill items" $W/planner.txt
timeout 200 $vpod bench pod --dtype fp16 --peers none --no-named --sweep 200 --json $W/sweep200.json > $W/sweep200.txt 2>&1
echo "sweep rc=$?"; tail -3 $W/sweep200.txt
for dt in fp16 bf16; do
  timeout 100 $vpod bench pod --dtype $dt --sweep 0 --json $W/pod_$dt.json > $W/pod_$dt.txt 2>&1
  echo "pod $dt rc=$?"; grep -E "^chunk|over 4" $W/pod_$dt.txt | cut -c1-160
done
date -u
