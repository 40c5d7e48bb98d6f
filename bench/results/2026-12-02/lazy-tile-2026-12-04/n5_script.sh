#!/usr/bin/env bash
# POD without the virtual decode tiles (one DecodeTile per decode CTA, the
# decode tile's named barriers gone): the whole GPU suite, compute-sanitizer on
# the small POD batch, then POD and decode timings to compare with n2 / n4.
set -uo pipefail
repo=$PWD
[[ -d .carry/fixtures ]] || tar -xzf .carry/fixtures.tar.gz -C .carry
source tools/seam/unpack_build.sh .carry/b.tar.gz $repo >/dev/null
W=$(mktemp -d)
trap 'tar -czf $OUT/all.tgz -C $W .' EXIT
{ date -u; nvidia-smi --query-gpu=name,clocks.sm,power.draw,power.limit --format=csv,noheader; $vpod info 2>&1 | grep -i commit; } | tee $W/env.txt
(cd $build && VPOD_FIXTURES=$repo/.carry/fixtures timeout 400 ctest -L gpu -j2 --output-on-failure --timeout 200 > $W/ctest_gpu.log 2>&1); echo "ctest rc=$?"
grep -E "tests passed|tests failed|Failed|\*\*\*|Skipped|Not Run" $W/ctest_gpu.log | head -20
date -u
for tool in memcheck racecheck; do
  timeout 150 compute-sanitizer --tool $tool $build/tests/test_attention_gpu --gtest_filter=PodGpuTest.SmallBatchForSanitizer > $W/sanitizer_$tool.log 2>&1
  echo "$tool rc=$? $(grep -E "ERROR SUMMARY|RACECHECK SUMMARY|Hazard" $W/sanitizer_$tool.log | head -3 | tr '\n' ' ')"
done
date -u
for dt in fp16 bf16; do
  timeout 90 $vpod bench pod --dtype $dt --sweep 0 --json $W/pod_$dt.json > $W/pod_$dt.txt 2>&1; echo "pod $dt rc=$?"
  grep -E "^chunk|over 4 cases" $W/pod_$dt.txt | cut -c1-150
done
timeout 120 $vpod bench pod --dtype fp16 --peers none --no-named --sweep 200 > $W/sweep200.txt 2>&1; echo "sweep rc=$?"; tail -2 $W/sweep200.txt
timeout 60 $vpod bench attention --case decode --layouts per_layer > $W/decode.txt 2>&1; echo "decode rc=$?"; grep -E "^decode" $W/decode.txt | cut -c1-80
date -u
