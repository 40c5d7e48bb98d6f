#!/usr/bin/env bash
# L2->SM energy probe: main's kernel with VPOD_WS_PROBE unset (0) against =1
# (each TMA K/V block loads only its first 64-dim column block: half the
# L2->SM bytes, same math, wrong results), same binary (probe build), interleaved.
set -uo pipefail
repo=$PWD
build=$repo/.carry
tar -xzf .carry/probe.tar.gz -C $build
W=$(mktemp -d)
trap 'tar -czf $OUT/all.tgz -C $W .' EXIT
P="env LD_LIBRARY_PATH=$build/probe/lib $build/probe/vpod"
{ date -u; nvidia-smi --query-gpu=name,clocks.sm,power.draw,power.limit --format=csv,noheader; $P info 2>&1 | grep -i commit; } | tee $W/env.txt
run_v() { # mode dtype case round
  timeout 60 env VPOD_WS_PROBE=$1 $P bench attention --dtype $2 --layouts per_layer fi_fa3 --ab-rounds 2 --case $3 > $W/att_$2_$3_p$1_$4.txt 2>&1
  echo "r$4 $2 $3 p$1 rc=$?"
  grep -E "^(prefill|chunk) [0-9 @]+ +[0-9.]+ +[0-9.]+ +[0-9.]+x" $W/att_$2_$3_p$1_$4.txt | cut -c1-70
}
for r in 1 2; do
for dt in fp16 bf16; do
for c in chunk prefill; do
  if (( r % 2 == 1 )); then run_v 0 $dt $c $r; run_v 1 $dt $c $r; else run_v 1 $dt $c $r; run_v 0 $dt $c $r; fi
done
done
done
date -u
for r in 1 2; do for m in 0 1; do
  timeout 60 env VPOD_WS_PROBE=$m $P bench attention --dtype bf16 --layouts per_layer --case "prefill 16384" --min-iters 800 --max-iters 800 > $W/sus_p${m}_$r.txt 2>&1
  echo "sus p$m r$r: $(grep -E '^prefill 16384' $W/sus_p${m}_$r.txt | cut -c1-60)"
  timeout 60 env VPOD_WS_PROBE=$m $P bench attention --dtype bf16 --layouts per_layer --case "chunk 2048" --min-iters 3000 --max-iters 3000 > $W/susc_p${m}_$r.txt 2>&1
  echo "susc p$m r$r: $(grep -E '^chunk 2048' $W/susc_p${m}_$r.txt | cut -c1-60)"
done; done
date -u
