#!/usr/bin/env bash
# K/V multicast (0dc85fc): the attention GPU tests, memcheck on a small
# multicast walk, then multicast (mc) vs --no-ws-multicast (one) interleaved.
set -uo pipefail
repo=$PWD
tar -xzf .carry/fixtures.tar.gz -C .carry
source tools/seam/unpack_build.sh .carry/b.tar.gz $repo >/dev/null
W=$(mktemp -d)
trap 'tar -czf $OUT/all.tgz -C $W .' EXIT
{ date -u; nvidia-smi --query-gpu=name,clocks.sm,power.draw,power.limit --format=csv,noheader; $vpod info 2>&1 | grep -i commit; } | tee $W/env.txt
cd $build
echo skip-ctest
cd $repo
echo skip-memcheck
date -u
run_v() { # mode dtype case round
  local flag=""; [[ $1 == one ]] && flag=--no-ws-multicast
  timeout 60 $vpod bench attention --dtype $2 --layouts per_layer fi_fa3 --ab-rounds 2 --case $3 $flag > $W/att_$2_$3_$1_$4.txt 2>&1
  echo "r$4 $2 $3 $1 rc=$?"
  grep -E "^(prefill|chunk) [0-9 @]+ +[0-9.]+ +[0-9.]+ +[0-9.]+x" $W/att_$2_$3_$1_$4.txt | cut -c1-70
  grep -E "^(prefill|chunk) .*per_layer .*(ok|FAIL)" $W/att_$2_$3_$1_$4.txt | grep -o "FAIL.*\|ok err.*" | head -4 | tr '\n' ' '; echo
}
for r in 1 2; do
for dt in fp16 bf16; do
for c in chunk prefill; do
  if (( r % 2 == 1 )); then run_v one $dt $c $r; run_v mc $dt $c $r; else run_v mc $dt $c $r; run_v one $dt $c $r; fi
done
done
done
date -u
for r in 1 2; do for m in one mc; do
  flag=""; [[ $m == one ]] && flag=--no-ws-multicast
  timeout 60 $vpod bench attention --dtype bf16 --layouts per_layer --case "prefill 16384" --min-iters 800 --max-iters 800 $flag > $W/sus_${m}_$r.txt 2>&1
  echo "sus $m r$r: $(grep -E '^prefill 16384' $W/sus_${m}_$r.txt | cut -c1-60)"
  timeout 60 $vpod bench attention --dtype bf16 --layouts per_layer --case "chunk 2048" --min-iters 3000 --max-iters 3000 $flag > $W/susc_${m}_$r.txt 2>&1
  echo "susc $m r$r: $(grep -E '^chunk 2048' $W/susc_${m}_$r.txt | cut -c1-60)"
done; done
date -u
