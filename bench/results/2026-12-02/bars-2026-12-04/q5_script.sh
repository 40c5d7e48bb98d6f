#!/usr/bin/env bash
# Build 4479cc2: POD's 200-case sweep against our serial kernels, whose
# prefill splits the planner now sizes for the warp-specialized kernel: with
# the fallback (the planner's choices), then every case fused with the
# estimates in the JSON (the input of tools/attention/replay_pod_fallback.py).
set -uo pipefail
repo=$PWD
[[ -d .carry/fixtures ]] || tar -xzf .carry/fixtures.tar.gz -C .carry
source tools/seam/unpack_build.sh .carry/b.tar.gz $repo >/dev/null
W=$(mktemp -d)
trap 'tar -czf $OUT/all.tgz -C $W .' EXIT
{ date -u; nvidia-smi --query-gpu=name,clocks.sm,power.draw,power.limit --format=csv,noheader; $vpod info 2>&1 | grep -i commit; } | tee $W/env.txt
timeout 200 $vpod bench pod --dtype fp16 --peers none --no-named --sweep 200 --json $W/sweep200.json > $W/sweep200.txt 2>&1
echo "sweep rc=$?"; tail -6 $W/sweep200.txt
timeout 200 $vpod bench pod --dtype fp16 --peers none --no-named --sweep 200 --no-fallback --json $W/sweep200_nofb.json > $W/sweep200_nofb.txt 2>&1
echo "sweep nofb rc=$?"; tail -6 $W/sweep200_nofb.txt
date -u
