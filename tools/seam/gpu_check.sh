#!/usr/bin/env bash
# The before/after check of issue 21 (a host-side refactor that must not change
# behaviour), in one call on the GPU machine:
#   tools/seam/gpu_check.sh BUILD_ARCHIVE OUT_DIR [STAGES]
# BUILD_ARCHIVE is what tools/seam/pack_build.sh made of /work/main/build on the
# development machine; it is unpacked at that same path (CTest's files name
# it), with /work/main linked to this checkout where the two differ.
# STAGES (comma list, default all): tests, greedy, model, offline.
#   tests:   ctest -L gpu
#   greedy:  vpod serve in each mode; fixed greedy prompts
#            (tools/seam/greedy_outputs.py), one hash per mode and pass
#   model:   vpod bench model, llama3-8b, decode batch 1 and 64
#   offline: vpod bench offline, llama3-8b, 16K prompts, P:D 100, 32 requests, each mode
# Modes (MODES, space-separated): vattn+pod vattn+serial paged+serial paged+pod.
# The llama3-8b random-weight model is made once in /tmp/seam-llama3-8b.
set -uo pipefail
archive=$(realpath "$1")
out=${2:-/tmp/seam}
stages=${3:-tests,greedy,model,offline}
repo=$(cd "$(dirname "$0")/../.." && pwd)
source "$repo/tools/seam/unpack_build.sh" "$archive" "$repo"
echo "checkout at $repo"
mkdir -p "$out"
export PYTHONUNBUFFERED=1
has() { [[ ",$stages," == *",$1,"* ]]; }
read -r -a modes <<< "${MODES:-vattn+pod vattn+serial paged+serial paged+pod}"
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader;
  git -C "$repo" rev-parse --short HEAD 2>/dev/null; } | tee "$out/env.txt"
ldd "$vpod" | grep "not found"

if has tests; then
  echo "== ctest -L gpu"
  (cd "$build" && timeout 560 ctest -L gpu ${CTEST_ARGS:-} --output-on-failure > "$out/ctest_gpu.log" 2>&1)
  echo "ctest rc=$?"; grep -E "tests passed|tests failed|Failed|\*\*\*" "$out/ctest_gpu.log" | tail -15
  # Built through ccache with base_dir set, __FILE__ is relative to the build
  # folder, and the golden tests find their data only from there.
  echo "== golden tests from the build folder"
  (cd "$build" && ./tests/test_model_gpu --gtest_filter='*Golden*' 2>&1 | tail -3)
fi

model=/tmp/seam-llama3-8b
if has greedy || has model || has offline; then
  [[ -f $model/config.json ]] || "$vpod" make-model --out "$model" --preset llama3-8b --seed 0 \
    > "$out/make_model.log" 2>&1 || { tail -3 "$out/make_model.log"; exit 1; }
fi

if has greedy; then
  echo "== greedy outputs"
  port=8311
  for mode in "${modes[@]}"; do
    "$vpod" serve --model "$model" --port $port --served-model-name m --max-model-len 8192 \
      --kv-cache "${mode%%+*}" --attention "${mode##*+}" > "$out/serve_${mode/+/-}.log" 2>&1 &
    pid=$!
    for _ in $(seq 1 120); do
      python3 -c "import urllib.request;urllib.request.urlopen('http://127.0.0.1:$port/health',timeout=2)" \
        2>/dev/null && break
      kill -0 $pid 2>/dev/null || break
      sleep 1
    done
    timeout 300 python3 "$repo/tools/seam/greedy_outputs.py" --url http://127.0.0.1:$port \
      --model m --tag "$mode" --json "$out/greedy_${mode/+/-}.json" || echo "$mode: client failed"
    kill -INT $pid; wait $pid
  done
fi

if has model; then
  echo "== bench model (batch 1 and 64)"
  timeout 200 "$vpod" bench model --model "$model" --batches 1,64 --contexts 1024,8192 \
    --prefills "" --tuning-batches "" --iters 8 --json "$out/bench_model.json" > "$out/bench_model.log" 2>&1
  echo "rc=$?"; grep -A12 "^batch" "$out/bench_model.log" | head -30
fi

if has offline; then
  echo "== bench offline (16K, P:D 100, 32 requests)"
  for mode in "${modes[@]}"; do
    timeout 150 "$vpod" bench offline --model "$model" --input-len 16384 --pd-ratio 100 \
      --num-requests 32 --kv-cache "${mode%%+*}" --attention "${mode##*+}" \
      --json "$out/offline_${mode/+/-}.json" > "$out/offline_${mode/+/-}.log" 2>&1
    python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(f\"$mode makespan {d['makespan_s']:.3f} s, {d['output_tokens_per_s']:.1f} out tok/s, {d['num_steps']} steps\")" \
      "$out/offline_${mode/+/-}.json" || tail -3 "$out/offline_${mode/+/-}.log"
  done
fi
date -u
