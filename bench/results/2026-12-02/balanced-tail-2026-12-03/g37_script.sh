#!/usr/bin/env bash
# The balanced tail (ws-balanced-tail 9afcbff): its GPU test + memcheck, A/B balanced vs --no-ws-balance (3 rounds), batched chunks, ctest -L gpu.
# A/B balanced vs --no-ws-balance (same binary, interleaved, order flipped), then ctest -L gpu.
set -uo pipefail
repo=$PWD
tar -xzf .carry/fixtures.tar.gz -C .carry
source tools/seam/unpack_build.sh .carry/b.tar.gz $repo >/dev/null
W=$(mktemp -d)
bundle() { tar -czf $OUT/all.tgz -C $W .; }
trap bundle EXIT
{ date -u; nvidia-smi --query-gpu=name,clocks.sm,power.draw --format=csv,noheader; $vpod info 2>&1 | grep -i commit; } | tee $W/env.txt
T=$build/tests/test_kernels_gpu
timeout 120 $T --gtest_filter='AttentionGpuTest.WarpSpecializedBalancedTailMatchesTheRounds' > $W/tail_test.txt 2>&1; echo "tail test rc=$?"
grep -E "^\[attention\]|OK|FAILED|Failure" $W/tail_test.txt | cut -c1-130 | head -24
timeout 150 compute-sanitizer --tool memcheck --error-exitcode 9 $T --gtest_filter='AttentionGpuTest.WarpSpecializedBalancedTailMatchesTheRounds' > $W/tail_memcheck.txt 2>&1; echo "memcheck rc=$?"
grep -E "ERROR SUMMARY|PASSED|FAILED" $W/tail_memcheck.txt | head -3
date -u
run_v() { # variant dtype case round
  if [[ $1 == off ]]; then X=--no-ws-balance; else X=; fi
  timeout 40 $vpod bench attention --dtype $2 --layouts per_layer fi_fa3 --ab-rounds 2 --case $3 $X > $W/att_$2_$3_$1_$4.txt 2>&1
  echo "r$4 $2 $3 $1 rc=$?"
  grep -E "^(prefill|chunk) [0-9 @]+ +[0-9.]+ +[0-9.]+ +[0-9.]+x" $W/att_$2_$3_$1_$4.txt | cut -c1-70
}
for r in 1 2 3; do
for dt in fp16 bf16; do
for c in chunk prefill; do
  if (( r % 2 == 1 )); then run_v off $dt $c $r; run_v tail $dt $c $r; else run_v tail $dt $c $r; run_v off $dt $c $r; fi
done
done
done
date -u
for X in "" --no-ws-balance; do
  timeout 60 $vpod bench attention --dtype bf16 --layouts per_layer --case chunk --chunk-shape 32x128@8192 33x128@8192 $X > $W/q_bf16${X}.txt 2>&1; echo "batched chunks ${X:-tail} rc=$?"
  grep -E "^chunk .* per_layer " $W/q_bf16${X}.txt | cut -c1-60
done
date -u
cd $build
timeout 300 ctest -L gpu -j2 --output-on-failure --timeout 200 > $W/ctest_gpu.log 2>&1; echo "ctest rc=$?"
grep -E "tests passed|tests failed|\*\*\*Failed|Failed  |Timeout|Total Test|Skipped" $W/ctest_gpu.log | tail -8 | cut -c1-150
date -u
