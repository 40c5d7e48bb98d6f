#!/usr/bin/env bash
# PodParams without decode_tiles: the POD GPU suite, the model-level POD and
# graph tests, and the small batch under memcheck.
set -uo pipefail
repo=$PWD
[[ -d .carry/fixtures ]] || tar -xzf .carry/fixtures.tar.gz -C .carry
source tools/seam/unpack_build.sh .carry/b.tar.gz $repo >/dev/null
W=$(mktemp -d)
trap 'tar -czf $OUT/all.tgz -C $W .' EXIT
{ date -u; nvidia-smi --query-gpu=name,clocks.sm,power.draw,power.limit --format=csv,noheader; $vpod info 2>&1 | grep -i commit; } | tee $W/env.txt
timeout 200 $build/tests/test_attention_gpu --gtest_filter='PodGpuTest.*' > $W/tests_pod.log 2>&1
echo "pod tests rc=$?"; grep -E "^\[  (PASSED|FAILED) |FAILED" $W/tests_pod.log | cut -c1-140
(cd $build && VPOD_FIXTURES=$repo/.carry/fixtures timeout 200 ctest -L gpu -R "CudaBackend|Golden|Graph|Engine" -j2 --timeout 150 > $W/ctest_subset.log 2>&1); echo "ctest subset rc=$?"
grep -E "tests passed|tests failed|Failed" $W/ctest_subset.log | head
timeout 100 compute-sanitizer --tool memcheck $build/tests/test_attention_gpu --gtest_filter=PodGpuTest.SmallBatchForSanitizer > $W/memcheck.log 2>&1; echo "memcheck rc=$? $(grep "ERROR SUMMARY" $W/memcheck.log)"
date -u
