#!/usr/bin/env bash
# run_pod on detail::make_params / make_combine: the POD suite and the prefill
# tests that set the slack through the shared helper.
set -uo pipefail
repo=$PWD
source tools/seam/unpack_build.sh .carry/b.tar.gz $repo >/dev/null
W=$(mktemp -d)
trap 'tar -czf $OUT/all.tgz -C $W .' EXIT
{ date -u; $vpod info 2>&1 | grep -i commit; } | tee $W/env.txt
timeout 40 $build/tests/test_kernels_gpu --gtest_filter='*RisingMaxima*:*ChunkedPrefill*' > $W/tests_kernels.log 2>&1
echo "kernels tests rc=$?"; grep -E "^\[  (PASSED|FAILED) |FAILED" $W/tests_kernels.log | cut -c1-140
timeout 170 $build/tests/test_attention_gpu --gtest_filter='PodGpuTest.*' > $W/tests_pod.log 2>&1
echo "pod tests rc=$?"; grep -E "^\[  (PASSED|FAILED) |FAILED" $W/tests_pod.log | cut -c1-140
date -u
