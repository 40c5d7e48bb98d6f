#!/usr/bin/env bash
# Probe (branch probe-mc-chunks, not merged): on top of the lazy max, K/V
# multicast on the chunks' head-major walk (mcH, VPOD_PROBE_MC_ALL) and on an
# item-major walk (mcI, + VPOD_PROBE_ITEM_MAJOR), against main's one CTA per
# tile head-major (one, --no-ws-multicast). Interleaved, order rotated.
set -uo pipefail
repo=$PWD
tar -xzf .carry/fixtures.tar.gz -C .carry
source tools/seam/unpack_build.sh .carry/b.tar.gz $repo >/dev/null
W=$(mktemp -d)
trap 'tar -czf $OUT/all.tgz -C $W .' EXIT
{ date -u; nvidia-smi --query-gpu=name,clocks.sm,power.draw,power.limit --format=csv,noheader; $vpod info 2>&1 | grep -i commit; } | tee $W/env.txt
VPOD_PROBE_MC_ALL=1 timeout 120 $build/tests/test_kernels_gpu --gtest_filter='*WarpSpecialized*' > $W/tests_mcall.log 2>&1
echo "tests (multicast on every walk) rc=$?"; grep -E "^\[  (PASSED|FAILED) " $W/tests_mcall.log
envs() { case $1 in one) echo "";; mcH) echo "VPOD_PROBE_MC_ALL=1";; mcI) echo "VPOD_PROBE_MC_ALL=1 VPOD_PROBE_ITEM_MAJOR=1";; esac; }
run_v() { # mode dtype round
  local flag=""; [[ $1 == one ]] && flag=--no-ws-multicast
  env $(envs $1) timeout 60 $vpod bench attention --dtype $2 --layouts per_layer fi_fa3 --ab-rounds 2 --case chunk $flag > $W/att_$2_$1_$3.txt 2>&1
  echo "r$3 $2 $1 rc=$?"
  grep -E "^(prefill|chunk) [0-9 @]+ +[0-9.]+ +[0-9.]+ +[0-9.]+x" $W/att_$2_$1_$3.txt | cut -c1-70
}
for r in 1 2; do for dt in fp16 bf16; do
  if (( r % 2 == 1 )); then order="one mcH mcI"; else order="mcI mcH one"; fi
  for m in $order; do run_v $m $dt $r; done
done; done
for r in 1 2; do for m in one mcH mcI; do
  flag=""; [[ $m == one ]] && flag=--no-ws-multicast
  f=$W/sus_${m}_$r.txt
  env $(envs $m) timeout 60 $vpod bench attention --dtype bf16 --layouts per_layer --case "chunk 2048 @16384" --min-iters 800 --max-iters 800 $flag > $f 2>&1
  echo "sus $m r$r: $(grep -E "^chunk 2048" $f | cut -c1-60)"
done; done
date -u
