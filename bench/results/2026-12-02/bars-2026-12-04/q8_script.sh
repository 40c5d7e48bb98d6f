#!/usr/bin/env bash
# Build 025bebd: POD's 200-case sweep with every case fused and the planner's
# estimates in the JSON, for tools/attention/replay_pod_fallback.py (is
# kWsPrefillSpeedup still right beside the new serial splits?).
set -uo pipefail
repo=$PWD
[[ -d .carry/fixtures ]] || tar -xzf .carry/fixtures.tar.gz -C .carry
source tools/seam/unpack_build.sh .carry/b.tar.gz $repo >/dev/null
W=$(mktemp -d)
trap 'tar -czf $OUT/all.tgz -C $W .' EXIT
{ date -u; nvidia-smi --query-gpu=name,clocks.sm,power.draw,power.limit --format=csv,noheader; $vpod info 2>&1 | grep -i commit; } | tee $W/env.txt
timeout 150 $vpod bench pod --dtype fp16 --peers none --no-named --sweep 200 --no-fallback --json $W/sweep200_nofb.json > $W/sweep200_nofb.txt 2>&1
echo "sweep nofb rc=$?"; tail -3 $W/sweep200_nofb.txt
date -u
