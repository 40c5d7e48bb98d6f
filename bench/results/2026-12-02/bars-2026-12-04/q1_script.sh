#!/usr/bin/env bash
# The closing build: the whole GPU suite; the decode bar (vpod against
# FlashInfer's paged tensor-core decode and cuDNN) with the four POD cases'
# decode parts alone; the HBM read ceiling with no compute (sm_stream).
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
timeout 30 .carry/sm_stream > $W/sm_stream.txt 2>&1; echo "sm_stream rc=$?"; cat $W/sm_stream.txt | head -30
for dt in fp16 bf16; do
  timeout 120 $vpod bench attention --dtype $dt --case decode --decode-shape 64x4096 32x8192 128x2048 64x12288 --layouts per_layer paged16 --json $W/decode_$dt.json > $W/decode_$dt.txt 2>&1; echo "decode $dt rc=$?"
  grep -E "^decode" $W/decode_$dt.txt | cut -c1-110
done
timeout 200 python3 tools/bench_attention_peers.py --vpod-json $W/decode_fp16.json --case decode --json $W/decode_peers.json > $W/decode_peers.txt 2>&1; echo "peers rc=$?"
tail -12 $W/decode_peers.txt | cut -c1-200
date -u
