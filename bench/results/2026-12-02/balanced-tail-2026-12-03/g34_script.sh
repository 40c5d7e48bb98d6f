#!/usr/bin/env bash
# Q in registers (ws-q-regs f6d6c6e, the build) against main's kernel (582b89d, dir old), interleaved with
# the order flipped each round, 3 rounds; then the whole ctest -L gpu on the RS build.
set -uo pipefail
repo=$PWD
tar -xzf .carry/fixtures.tar.gz -C .carry
source tools/seam/unpack_build.sh .carry/b.tar.gz $repo >/dev/null
tar -xzf .carry/old582.tar.gz -C $build
W=$(mktemp -d)
bundle() { tar -czf $OUT/all.tgz -C $W .; }
trap bundle EXIT
{ date -u; nvidia-smi --query-gpu=name,clocks.sm,power.draw --format=csv,noheader; env LD_LIBRARY_PATH=$build/old/lib:$build/lib $build/old/vpod info 2>&1 | grep -i commit; $vpod info 2>&1 | grep -i commit; } | tee $W/env.txt
run_v() { # variant dtype case round
  if [[ $1 == main ]]; then
    timeout 40 env LD_LIBRARY_PATH=$build/old/lib:$build/lib $build/old/vpod bench attention --dtype $2 --layouts per_layer fi_fa3 --ab-rounds 2 --case $3 > $W/att_$2_$3_$1_$4.txt 2>&1
  else
    timeout 40 $vpod bench attention --dtype $2 --layouts per_layer fi_fa3 --ab-rounds 2 --case $3 > $W/att_$2_$3_$1_$4.txt 2>&1
  fi
  echo "r$4 $2 $3 $1 rc=$?"
  grep -E "^(prefill|chunk) [0-9 @]+ +[0-9.]+ +[0-9.]+ +[0-9.]+x" $W/att_$2_$3_$1_$4.txt | cut -c1-70
}
for r in 1 2 3; do
for dt in fp16 bf16; do
for c in chunk prefill; do
  if (( r % 2 == 1 )); then run_v main $dt $c $r; run_v rs $dt $c $r; else run_v rs $dt $c $r; run_v main $dt $c $r; fi
done
done
done
date -u
cd $build
timeout 330 ctest -L gpu -j2 --output-on-failure --timeout 200 > $W/ctest_gpu.log 2>&1; echo "ctest rc=$?"
grep -E "tests passed|tests failed|\*\*\*Failed|Failed  |Timeout|Total Test|Skipped" $W/ctest_gpu.log | tail -8 | cut -c1-150
date -u
