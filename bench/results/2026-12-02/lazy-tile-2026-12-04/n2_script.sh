#!/usr/bin/env bash
# POD with the lazy max on its prefill side against --no-lazy-max (named
# cases, FlashInfer's serial composition and POD wrapper in each run), then
# the calibration sweep: 200 random cases, every one fused (--no-fallback),
# fused and serial timed, with the planner's estimates in the JSON.
set -uo pipefail
repo=$PWD
[[ -d .carry/fixtures ]] || tar -xzf .carry/fixtures.tar.gz -C .carry
source tools/seam/unpack_build.sh .carry/b.tar.gz $repo >/dev/null
W=$(mktemp -d)
trap 'tar -czf $OUT/all.tgz -C $W .' EXIT
{ date -u; nvidia-smi --query-gpu=name,clocks.sm,power.draw,power.limit --format=csv,noheader; $vpod info 2>&1 | grep -i commit; } | tee $W/env.txt
pod_v() { # mode dtype
  local flag=""; [[ $1 == exact ]] && flag=--no-lazy-max
  timeout 90 $vpod bench pod --dtype $2 --sweep 0 $flag --json $W/pod_$2_$1.json > $W/pod_$2_$1.txt 2>&1
  echo "pod $2 $1 rc=$?"; grep -E "^chunk|^ *case|vs FI|FlashInfer" $W/pod_$2_$1.txt | cut -c1-160 | head -30
}
pod_v exact fp16; pod_v lazy fp16; pod_v lazy bf16; pod_v exact bf16
date -u
timeout 330 $vpod bench pod --dtype fp16 --peers none --no-named --sweep 200 --no-fallback --json $W/sweep200_nofb.json > $W/sweep200_nofb.txt 2>&1
echo "sweep rc=$?"; tail -8 $W/sweep200_nofb.txt
date -u
