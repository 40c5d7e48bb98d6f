#!/usr/bin/env bash
# Does the last partial round of the persistent walk cost? 32 vs 33 sequences of 128 tokens @8192
# (1024 tiles = 7.76 rounds of 132 CTAs, 1056 = 8 whole rounds), and 64 vs 66 (15.5 vs 16 rounds).
# main's kernel (old = 582b89d), fp16 and bf16, two rounds.
set -uo pipefail
repo=$PWD
source tools/seam/unpack_build.sh .carry/b.tar.gz $repo >/dev/null
tar -xzf .carry/old582.tar.gz -C $build
W=$(mktemp -d)
bundle() { tar -czf $OUT/all.tgz -C $W .; }
trap bundle EXIT
V="env LD_LIBRARY_PATH=$build/old/lib:$build/lib $build/old/vpod"
date -u | tee $W/env.txt
for r in 1 2; do
for dt in fp16 bf16; do
  timeout 60 $V bench attention --dtype $dt --layouts per_layer --case chunk --chunk-shape 32x128@8192 33x128@8192 64x128@8192 66x128@8192 > $W/q_${dt}_$r.txt 2>&1; echo "r$r $dt rc=$?"
  grep -E "^chunk .* per_layer " $W/q_${dt}_$r.txt | cut -c1-60
done
done
date -u
