#!/usr/bin/env bash
# The attention kernels' check on the GPU machine (issue 23), in one call:
#   tools/attention/gpu_check.sh BUILD_ARCHIVE OUT_DIR [STAGES]
# BUILD_ARCHIVE: tools/seam/pack_build.sh's archive of /work/main/build (for
# the FA3 peer column, configured with -DVPOD_BENCH_PEERS=ON).
# STAGES (comma list, default tests,sanitize,bench,pod; also profile: ncu on one
# launch of the warp-specialized kernel):
#   tests:    ctest -L gpu -R 'Attention|Pod' (the kernels' GPU tests)
#   sanitize: compute-sanitizer memcheck and racecheck on small shapes of the
#             warp-specialized prefill (a persistent CTA walks several tiles)
#   bench:    vpod bench attention, prefill cases, fp16 and bf16: vpod's
#             warp-specialized kernel (per_layer), the one-warpgroup tile
#             (per_layer-tile), FlashInfer FA3 single prefill (fi_fa3) and
#             FA3 paged (paged16), one run each
#   pod:      vpod bench pod: the four named hybrid cases and a 100-case sweep,
#             POD (its prefill side the one-warpgroup tile) against serial
#             (the warp-specialized prefill + decode)
set -uo pipefail
archive=$(realpath "$1")
out=${2:-/tmp/attention-check}
stages=${3:-tests,sanitize,bench,pod}
repo=$(cd "$(dirname "$0")/../.." && pwd)
source "$repo/tools/seam/unpack_build.sh" "$archive" "$repo"
mkdir -p "$out"
has() { [[ ",$stages," == *",$1,"* ]]; }
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader;
  git -C "$repo" rev-parse --short HEAD 2>/dev/null; } | tee "$out/env.txt"
ldd "$vpod" | grep "not found"

if has tests; then
  echo "== ctest -L gpu -R ${CTEST_REGEX:-Attention|Pod}"
  (cd "$build" && timeout 400 ctest -L gpu -R "${CTEST_REGEX:-Attention|Pod}" --output-on-failure \
    > "$out/ctest_gpu.log" 2>&1)
  echo "ctest rc=$?"; grep -E "tests passed|tests failed|Failed|\*\*\*|Timeout" "$out/ctest_gpu.log" | tail -15
  grep -E "^\[attention\] (ws|wgmma tile|.*warp-specialized)" "$out/ctest_gpu.log" | head -40
fi

if has sanitize; then
  sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  # A 1100-token prompt: 9 query tiles x 32 heads = 288 tiles over 132
  # persistent CTAs (each walks two or three), a partial last key block.
  for tool in memcheck racecheck; do
    echo "== compute-sanitizer --tool $tool"
    timeout 240 "$sanitizer" --tool $tool --error-exitcode 9 "$vpod" bench attention \
      --prefill-shape 1100 --case "prefill 1100" --layouts per_layer --min-iters 1 --max-iters 1 \
      > "$out/sanitize_$tool.log" 2>&1
    echo "$tool rc=$?"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY|Error|hazard" "$out/sanitize_$tool.log" | head -5
  done
fi

if has bench; then
  for dtype in fp16 bf16; do
    echo "== bench attention $dtype"
    timeout 240 "$vpod" bench attention --dtype $dtype ${BENCH_CASE:+--case "$BENCH_CASE"} \
      --layouts per_layer per_layer-tile fi_fa3 paged16 ${BENCH_ARGS:-} \
      --json "$out/attention_$dtype.json" > "$out/attention_$dtype.txt" 2>&1
    echo "rc=$?"; grep -vE "^(decode)" "$out/attention_$dtype.txt" | tail -22
  done
fi

if has pod; then
  echo "== bench pod"
  timeout 300 "$vpod" bench pod --sweep ${POD_SWEEP:-100} --json "$out/pod.json" > "$out/pod.txt" 2>&1
  echo "rc=$?"; grep -E "^(named|c[0-9]|chunk|mean|median|min|max|sweep|case)|speedup|within" "$out/pod.txt" | head -20
  head -12 "$out/pod.txt"; tail -8 "$out/pod.txt"
fi

if has profile; then
  ncu_bin=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
  echo "== ncu ($ncu_bin): the warp-specialized prefill on ${PROFILE_CASE:-prefill 16384}"
  if [[ -n "$ncu_bin" ]]; then
    timeout 240 "$ncu_bin" --kernel-name regex:prefill_ws --launch-skip 2 --launch-count 1 \
      --section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats \
      --section SchedulerStats --section InstructionStats --section MemoryWorkloadAnalysis \
      "$vpod" bench attention --case "${PROFILE_CASE:-prefill 16384}" --layouts per_layer \
      --dtype bf16 --min-iters 1 --max-iters 1 > "$out/ncu.txt" 2>&1
    echo "ncu rc=$?"
    grep -E "Duration|Compute \(SM\) Throughput|Issue Slots Busy|Pipe|Stall|Warp Cycles|Eligible|Issued Warp|No Eligible|Executed Ipc|L2 Hit|DRAM Throughput|Tensor|MUFU|XU|FMA" "$out/ncu.txt" | head -60
  fi
fi
