#!/usr/bin/env bash
# End to end on 6fb95ef (random weights, --load-format dummy): llama3-8b 16K
# prompts P:D 100 x 32 and yi-6b-200k 4 x 131072-token prompts, vattn with
# the serial kernels and with POD.
set -uo pipefail
repo=$PWD
tar -xzf .carry/fixtures.tar.gz -C .carry
source tools/seam/unpack_build.sh .carry/b.tar.gz $repo >/dev/null
W=$(mktemp -d)
trap 'tar -czf $OUT/all.tgz -C $W .' EXIT
{ date -u; nvidia-smi --query-gpu=name,clocks.sm,power.draw,power.limit --format=csv,noheader; $vpod info 2>&1 | grep -i commit; } | tee $W/env.txt
for m in llama3-8b yi-6b-200k; do timeout 30 $vpod make-model --out /tmp/models/$m --preset $m --seed 0 --no-weights > /dev/null 2>&1 || echo "make-model $m failed"; done
off() { # tag model attention args...
  local tag=$1 model=$2 att=$3; shift 3
  timeout 110 $vpod bench offline --model /tmp/models/$model --load-format dummy --kv-cache vattn --attention $att "$@" > $W/off_${tag}_vattn-$att.txt 2>&1
  echo "$tag vattn-$att rc=$? $(grep -E 'Makespan' $W/off_${tag}_vattn-$att.txt | head -1)"
}
off l3_16k llama3-8b serial --input-len 16384 --pd-ratio 100 --num-requests 32
off yi131k yi-6b-200k serial --input-len 131072 --output-len 128 --num-requests 4
off l3_16k llama3-8b pod --input-len 16384 --pd-ratio 100 --num-requests 32
off yi131k yi-6b-200k pod --input-len 131072 --output-len 128 --num-requests 4
date -u
