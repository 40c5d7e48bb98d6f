#!/usr/bin/env bash
# The model runtime's whole GPU check, in one call on the GPU machine:
#   tools/model/gpu_check.sh BUILD_DIR OUT_DIR [VPOD_BINARY]
# GPU unit tests (model + non-attention kernels), `vpod bench model` on a
# llama3-8b made on the spot (GEMV and cuBLASLt-only), the comparison with
# transformers, then the engine's GPU tests (they sample through the model's
# GPU sampler). Each stage runs even if an earlier one failed; logs and JSON
# go to OUT_DIR. CONTEXTS overrides the decode contexts of the benchmark.
# The benchmark includes the decode-tuning comparison (fusions, PDL) at
# batch 1 and 4.
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
timeout 90 "$build/tests/test_model_gpu" 2>&1 | tee "$out/test_model_gpu.log" | grep -E "OK|FAILED|PASSED|SKIPPED|bf16 hybrid|step graphs|paged vs|fuse |Failure|error|differs" | head -60
timeout 60 "$build/tests/test_kernels_gpu" --gtest_filter='RmsNormGpu*:RopeKvAppendGpu*:CublasLtGpu*:GemvGpu*:GemvNormGpu*:SiluMulGpu*:GatherRowsGpu*:GpuSampler*' 2>&1 | tee "$out/test_kernels_gpu.log" | grep -E "OK \]|FAILED|PASSED|cuBLASLt from|fused GEMV|Failure|Expected|Which is|seed|differs" | head -60

echo "== bench model (llama3-8b, bf16)"
"$vpod" make-model --out /tmp/llama3-8b --preset llama3-8b --no-tokenizer 2>&1 | tail -1
timeout 150 "$vpod" bench model --model /tmp/llama3-8b --iters 5 --contexts "${CONTEXTS:-1024,8192}" --json "$out/bench_model.json" 2>&1 | tee "$out/bench_model.log"
if [ -n "${NO_GEMV:-}" ]; then
  echo "== bench model, cuBLASLt for every GEMM (--no-gemv), batch 1"
  timeout 60 "$vpod" bench model --model /tmp/llama3-8b --iters 5 --batches 1 --contexts 1024 --prefills "" --no-gemv 2>&1 | grep -A2 "^batch" | tee "$out/bench_model_nogemv.log"
fi

echo "== transformers comparison"
timeout 120 python3 tools/model/compare_hf.py --vpod "$vpod" --work /tmp/vpod-hf --json "$out/compare_hf.json" 2>&1 | grep -v Loading | tee "$out/compare_hf.log" | tail -40

if [ -x "$build/tests/test_engine_gpu" ]; then
  echo "== engine GPU tests"
  timeout 60 "$build/tests/test_engine_gpu" 2>&1 | tee "$out/test_engine_gpu.log" | grep -E "OK \]|FAILED|PASSED|SKIPPED|Failure" | head -20
fi
date -u
