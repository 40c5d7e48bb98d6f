#!/usr/bin/env bash
# The lazy max in the wgmma tile (POD's prefill side) and the mma.sync tile:
# their GPU tests and POD's, then the serial kernels lazy vs exact
# (ws, tile, FA3 in each run), then POD lazy vs exact on the named cases.
set -uo pipefail
repo=$PWD
tar -xzf .carry/fixtures.tar.gz -C .carry
source tools/seam/unpack_build.sh .carry/b.tar.gz $repo >/dev/null
W=$(mktemp -d)
trap 'tar -czf $OUT/all.tgz -C $W .' EXIT
{ date -u; nvidia-smi --query-gpu=name,clocks.sm,power.draw,power.limit --format=csv,noheader; $vpod info 2>&1 | grep -i commit; } | tee $W/env.txt
timeout 120 $build/tests/test_kernels_gpu --gtest_filter='*RisingMaxima*:*WarpSpecialized*:*ChunkedPrefill*' > $W/tests_kernels.log 2>&1
echo "kernels tests rc=$?"; grep -E "^\[  (PASSED|FAILED) |FAILED" $W/tests_kernels.log | cut -c1-140
timeout 150 $build/tests/test_attention_gpu --gtest_filter='PodGpuTest.*' > $W/tests_pod.log 2>&1
echo "pod tests rc=$?"; grep -E "^\[  (PASSED|FAILED) |FAILED" $W/tests_pod.log | cut -c1-140
run_v() { # mode dtype case round
  local flag=""; [[ $1 == exact ]] && flag=--no-lazy-max
  timeout 60 $vpod bench attention --dtype $2 --layouts per_layer per_layer-tile fi_fa3 --ab-rounds 2 --case $3 $flag > $W/att_$2_$3_$1_$4.txt 2>&1
  echo "r$4 $2 $3 $1 rc=$?"
  grep -E "^(prefill|chunk) " $W/att_$2_$3_$1_$4.txt | cut -c1-130
}
for r in 1 2; do
for dt in fp16 bf16; do for c in chunk prefill; do
  if (( r % 2 == 1 )); then run_v exact $dt $c $r; run_v lazy $dt $c $r; else run_v lazy $dt $c $r; run_v exact $dt $c $r; fi
done; done
done
date -u
