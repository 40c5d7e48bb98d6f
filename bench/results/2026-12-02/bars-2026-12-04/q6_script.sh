#!/usr/bin/env bash
# Build 4479cc2: chunks of 9-14 tiles (288-448 CTAs, 2-3.4 rounds on 132 SMs),
# where kWsPrefillCosts splits some in two: the planner (0) beside forced 1 and
# 2, fp16, three rounds, in one call.
set -uo pipefail
repo=$PWD
[[ -d .carry/fixtures ]] || tar -xzf .carry/fixtures.tar.gz -C .carry
source tools/seam/unpack_build.sh .carry/b.tar.gz $repo >/dev/null
W=$(mktemp -d)
trap 'tar -czf $OUT/all.tgz -C $W .' EXIT
{ date -u; nvidia-smi --query-gpu=name,clocks.sm,power.draw,power.limit --format=csv,noheader; $vpod info 2>&1 | grep -i commit; } | tee $W/env.txt
shapes="1x1152@7040 1x1280@6912 1x1408@6784 1x1664@6528 1x1152@15232 1x1280@15104 1x1408@14976 1x1664@14720 1x1792@14592"
for r in 1 2 3; do for s in 0 1 2; do
  timeout 90 $vpod bench attention --dtype fp16 --layouts per_layer --case "chunk 1x" --prefill-splits $s --chunk-shape $shapes > $W/splits_${s}_$r.txt 2>&1
  echo "r$r splits $s rc=$?"
done; done
grep -h "prefill items" $W/splits_0_1.txt
date -u
