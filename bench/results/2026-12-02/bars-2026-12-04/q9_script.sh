#!/usr/bin/env bash
# Build 025bebd: one round of long tiles, where FA3 keeps up with us. The
# warp-specialized kernel with and without K/V multicast (--no-ws-multicast),
# FA3 head to head in each run, fp16 and bf16, the two orders.
set -uo pipefail
repo=$PWD
[[ -d .carry/fixtures ]] || tar -xzf .carry/fixtures.tar.gz -C .carry
source tools/seam/unpack_build.sh .carry/b.tar.gz $repo >/dev/null
W=$(mktemp -d)
trap 'tar -czf $OUT/all.tgz -C $W .' EXIT
{ date -u; nvidia-smi --query-gpu=name,clocks.sm,power.draw,power.limit --format=csv,noheader; $vpod info 2>&1 | grep -i commit; } | tee $W/env.txt
shapes="1x384@8192 1x512@15872 1x256@7936"
run_v() { # mode dtype
  local flag=""; [[ $1 == nomc ]] && flag=--no-ws-multicast
  timeout 60 $vpod bench attention --dtype $2 --layouts per_layer fi_fa3 --ab-rounds 2 --case "chunk 1x" --chunk-shape $shapes $flag > $W/att_$2_$1.txt 2>&1
  echo "$2 $1 rc=$?"; grep -A6 "head to head" $W/att_$2_$1.txt | grep -E "^chunk"
}
for dt in fp16 bf16; do
  if [[ $dt == fp16 ]]; then run_v mc $dt; run_v nomc $dt; else run_v nomc $dt; run_v mc $dt; fi
done
date -u
