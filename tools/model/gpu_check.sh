#!/usr/bin/env bash
# The model runtime's whole GPU check, in one call on the GPU machine:
#   tools/model/gpu_check.sh BUILD_DIR OUT_DIR [VPOD_BINARY]
# GPU unit tests (model + non-attention kernels), the comparison with
# transformers, then `vpod bench model` on a llama3-8b made on the spot.
# Each stage runs even if an earlier one failed; logs and JSON go to OUT_DIR.
set -uo pipefail
build=${1:-build}
out=${2:-/tmp/vpod-model-gpu}
vpod=${3:-$build/vpod}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
date -u | tee "$out/date.txt"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee -a "$out/date.txt"
ldd "$vpod" | grep "not found"

echo "== GPU tests"
timeout 150 "$build/tests/test_model_gpu" 2>&1 | tee "$out/test_model_gpu.log" | grep -E "OK|FAILED|PASSED|SKIPPED|bf16 hybrid|Failure|error" | head -40
timeout 60 "$build/tests/test_kernels_gpu" --gtest_filter='RmsNormGpu*:RopeKvAppendGpu*:CublasLtGpu*:SiluMulGpu*:GatherRowsGpu*' 2>&1 | tee "$out/test_kernels_gpu.log" | grep -E "OK \]|FAILED|PASSED|cuBLASLt from|Failure" | head -30

echo "== transformers comparison"
timeout 200 python3 tools/model/compare_hf.py --vpod "$vpod" --work /tmp/vpod-hf --json "$out/compare_hf.json" 2>&1 | grep -v Loading | tee "$out/compare_hf.log" | tail -40

echo "== bench model (llama3-8b, bf16)"
"$vpod" make-model --out /tmp/llama3-8b --preset llama3-8b --no-tokenizer 2>&1 | tail -1
timeout 200 "$vpod" bench model --model /tmp/llama3-8b --iters 5 --json "$out/bench_model.json" 2>&1 | tee "$out/bench_model.log"
