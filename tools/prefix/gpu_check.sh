#!/usr/bin/env bash
# Issue 22's GPU checks, in as few device calls as possible:
#   tools/prefix/gpu_check.sh BUILD_ARCHIVE OUT_DIR STAGES
# BUILD_ARCHIVE is what tools/seam/pack_build.sh made of /work/main/build (unpacked at
# that path, with /work/main linked to this checkout). STAGES, a comma list:
#   identity: vpod serve with prefix caching on and off (IDENTITY_MODES, default vattn+pod and
#             paged+serial, with IDENTITY_ARGS, e.g. "--dtype fp32");
#             tools/prefix/identity.py: shared-prefix prompts, greedy, one at a time;
#             the two digests of a mode must be equal, and `on` must report cached tokens
#   serve-vattn, serve-paged: bench/prefix_cache.sh's serve section for that KV cache
#   offline:  bench/prefix_cache.sh's offline section (16K, P:D 100, caching off and on)
# The llama3-8b random-weight model is made once in /tmp/seam-llama3-8b.
set -uo pipefail
archive=$(realpath "$1")
out=${2:-/tmp/prefix}
stages=${3:-identity}
repo=$(cd "$(dirname "$0")/../.." && pwd)
source "$repo/tools/seam/unpack_build.sh" "$archive" "$repo"
mkdir -p "$out"
export PYTHONUNBUFFERED=1
has() { [[ ",$stages," == *",$1,"* ]]; }
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } | tee -a "$out/env.txt"
model=/tmp/seam-llama3-8b
[[ -f $model/config.json ]] || "$vpod" make-model --out "$model" --preset llama3-8b --seed 0 \
  > "$out/make_model.log" 2>&1 || { tail -3 "$out/make_model.log"; exit 1; }

if has identity; then
  echo "== outputs with prefix caching on and off"
  port=8321
  for mode in ${IDENTITY_MODES:-vattn+pod paged+serial}; do
    for caching in on off; do
      flag=""; [[ $caching == off ]] && flag=--no-enable-prefix-caching
      "$vpod" serve --model "$model" --port $port --served-model-name m --max-model-len 8192 \
        --kv-cache "${mode%%+*}" --attention "${mode##*+}" $flag ${IDENTITY_ARGS:-} \
        > "$out/serve_${mode/+/-}_$caching.log" 2>&1 &
      pid=$!
      for _ in $(seq 1 120); do
        python3 -c "import urllib.request;urllib.request.urlopen('http://127.0.0.1:$port/health',timeout=2)" \
          2>/dev/null && break
        kill -0 $pid 2>/dev/null || break
        sleep 1
      done
      timeout 200 python3 "$repo/tools/prefix/identity.py" --url http://127.0.0.1:$port --model m \
        --tag "$mode caching-$caching" --json "$out/identity_${mode/+/-}_$caching.json" ||
        echo "$mode $caching: client failed"
      kill -INT $pid; wait $pid
    done
  done
fi

for kv in vattn paged; do
  if has "serve-$kv"; then
    echo "== bench/prefix_cache.sh serve, $kv"
    KV_CACHES=$kv SECTIONS=serve timeout 560 bash "$repo/bench/prefix_cache.sh" --model "$model" \
      --build "$build" --out "$out/serve-$kv" > "$out/prefix_cache_serve_$kv.log" 2>&1
    echo "rc=$?"; tail -40 "$out/prefix_cache_serve_$kv.log"
  fi
done
if has offline; then
  echo "== bench/prefix_cache.sh offline"
  SECTIONS=offline timeout 400 bash "$repo/bench/prefix_cache.sh" --model "$model" \
    --build "$build" --out "$out/offline" > "$out/prefix_cache_offline.log" 2>&1
  echo "rc=$?"; tail -20 "$out/prefix_cache_offline.log"
fi
date -u
