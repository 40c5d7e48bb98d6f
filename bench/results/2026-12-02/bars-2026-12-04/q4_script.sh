#!/usr/bin/env bash
# Build 4479cc2 (the serial planner sizes prefill KV splits for the
# warp-specialized kernel): the whole GPU suite; the planner's splits (0)
# beside forced 1/2/4 on the twelve chunk shapes, fp16 and bf16, two rounds;
# FA3 head to head on the chunks; POD's named cases with FlashInfer.
set -uo pipefail
repo=$PWD
[[ -d .carry/fixtures ]] || tar -xzf .carry/fixtures.tar.gz -C .carry
source tools/seam/unpack_build.sh .carry/b.tar.gz $repo >/dev/null
W=$(mktemp -d)
trap 'tar -czf $OUT/all.tgz -C $W .' EXIT
{ date -u; nvidia-smi --query-gpu=name,clocks.sm,power.draw,power.limit --format=csv,noheader; $vpod info 2>&1 | grep -i commit; } | tee $W/env.txt
(cd $build && VPOD_FIXTURES=$repo/.carry/fixtures timeout 420 ctest -L gpu -j2 --output-on-failure --timeout 200 > $W/ctest_gpu.log 2>&1); echo "ctest rc=$?"
grep -E "tests passed|tests failed|Failed|\*\*\*|Skipped|Not Run" $W/ctest_gpu.log | head -20
date -u
shapes="1x512@15872 1x256@16128 1x128@16256 1x384@8192 1x640@15744 1x768@7424 2x256@8192 4x32@16384 16x16@8192 1x1024@31744"
for r in 1 2; do for dt in fp16 bf16; do for s in 0 1 2 4; do
  timeout 90 $vpod bench attention --dtype $dt --layouts per_layer --case chunk --prefill-splits $s --chunk-shape $shapes > $W/splits_${dt}_${s}_$r.txt 2>&1
  echo "r$r $dt splits $s rc=$?"
done; done; done
grep -h "prefill items" $W/splits_fp16_0_1.txt
for dt in fp16 bf16; do
  timeout 100 $vpod bench attention --dtype $dt --layouts per_layer fi_fa3 --ab-rounds 2 --case chunk --chunk-shape $shapes > $W/ab_$dt.txt 2>&1
  echo "ab $dt rc=$?"; grep -A14 "head to head" $W/ab_$dt.txt
done
timeout 100 $vpod bench pod --dtype fp16 --sweep 0 --json $W/pod_fp16.json > $W/pod_fp16.txt 2>&1
echo "pod rc=$?"; grep -E "^chunk|over 4" $W/pod_fp16.txt | cut -c1-160
date -u
