#!/usr/bin/env bash
# K/V multicast on item-major walks (main candidate): A/B mc vs --no-ws-multicast,
# sustained bf16 prefill 16384, then the whole ctest -L gpu.
set -uo pipefail
repo=$PWD
tar -xzf .carry/fixtures.tar.gz -C .carry
source tools/seam/unpack_build.sh .carry/b.tar.gz $repo >/dev/null
W=$(mktemp -d)
trap 'tar -czf $OUT/all.tgz -C $W .' EXIT
{ date -u; nvidia-smi --query-gpu=name,clocks.sm,power.draw,power.limit --format=csv,noheader; $vpod info 2>&1 | grep -i commit; } | tee $W/env.txt
run_v() { # mode dtype case round
  local flag=""; [[ $1 == one ]] && flag=--no-ws-multicast
  timeout 60 $vpod bench attention --dtype $2 --layouts per_layer fi_fa3 --ab-rounds 2 --case $3 $flag > $W/att_$2_$3_$1_$4.txt 2>&1
  echo "r$4 $2 $3 $1 rc=$?"
  grep -E "^(prefill|chunk) [0-9 @]+ +[0-9.]+ +[0-9.]+ +[0-9.]+x" $W/att_$2_$3_$1_$4.txt | cut -c1-70
}
for r in 1 2; do
for dt in fp16 bf16; do
  if (( r % 2 == 1 )); then run_v one $dt prefill $r; run_v mc $dt prefill $r; else run_v mc $dt prefill $r; run_v one $dt prefill $r; fi
done
done
run_v mc fp16 chunk 1; run_v mc bf16 chunk 1
for r in 1 2; do for m in one mc; do
  flag=""; [[ $m == one ]] && flag=--no-ws-multicast
  timeout 60 $vpod bench attention --dtype bf16 --layouts per_layer --case "prefill 16384" --min-iters 800 --max-iters 800 $flag > $W/sus_${m}_$r.txt 2>&1
  echo "sus $m r$r: $(grep -E '^prefill 16384' $W/sus_${m}_$r.txt | cut -c1-60)"
done; done
date -u
cd $build
timeout 330 ctest -L gpu -j2 --output-on-failure --timeout 200 > $W/ctest_gpu.log 2>&1; echo "ctest rc=$?"
grep -E "tests passed|tests failed|\*\*\*Failed|Failed  |Timeout|Total Test|Skipped|multicast clusters" $W/ctest_gpu.log | tail -12 | cut -c1-150
date -u
