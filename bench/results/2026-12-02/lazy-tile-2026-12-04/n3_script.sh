#!/usr/bin/env bash
# The final build: the whole GPU suite, then the chunks against FA3 in three
# more interleaved pairs of rounds per dtype (the chunk 2048 bar's spread).
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
for r in 1 2 3; do for dt in fp16 bf16; do
  timeout 60 $vpod bench attention --dtype $dt --layouts per_layer fi_fa3 --ab-rounds 2 --case chunk > $W/chunk_${dt}_$r.txt 2>&1
  echo "r$r $dt rc=$? $(grep -E "^chunk [0-9 @]+ +[0-9.]+ +[0-9.]+ +[0-9.]+x" $W/chunk_${dt}_$r.txt | awk '{printf "%s %s %s ", $2, $3, $6}')"
done; done
date -u
