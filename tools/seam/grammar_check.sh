#!/usr/bin/env bash
# Structured output's cost on the GPU machine (issue 26's bar): llama3-8b,
# decode at batch 64, unconstrained vs a JSON schema on every request, with
# late masks deferred (the default) and waited for; plus the CPU side alone
# (`vpod bench grammar`) on that host. Optionally runs GPU tests first.
#   tools/seam/grammar_check.sh ARCHIVE OUT_DIR [CTEST_REGEX]
set -uo pipefail
archive=$(realpath "$1")
out=${2:-/tmp/grammar}
tests=${3:-}
repo=$(cd "$(dirname "$0")/../.." && pwd)
source "$repo/tools/seam/unpack_build.sh" "$archive" "$repo"
mkdir -p "$out"
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc; } | tee "$out/env.txt"
if [[ -n $tests ]]; then
  (cd "$build" && timeout 300 ctest -L gpu -R "$tests" --output-on-failure > "$out/ctest_gpu.log" 2>&1)
  echo "ctest rc=$?"; grep -E "tests passed|tests failed|\*\*\*Failed|Skipped" "$out/ctest_gpu.log" | tail -12
fi
model=/tmp/grammar-llama3-8b
schema=$repo/bench/datasets/json_schema_long_array.json
start=$(date +%s)
[[ -f $model/config.json ]] || "$vpod" make-model --out "$model" --preset llama3-8b --seed 0 \
  > "$out/make_model.log" 2>&1 || { tail -3 "$out/make_model.log"; exit 1; }
echo "make-model: $(( $(date +%s) - start )) s"
timeout 120 "$vpod" bench grammar --model "$model" --json-schema "$schema" --batch 64 --steps 256 \
  --threads 1 4 8 --json "$out/bench_grammar.json" 2>&1 | tee "$out/bench_grammar.log" | tail -7
run() {  # tag, extra flags
  timeout 150 "$vpod" bench offline --model "$model" --input-len 128 --output-len 256 \
    --num-requests 64 --max-num-seqs 64 "${@:2}" --json "$out/offline_$1.json" > "$out/offline_$1.log" 2>&1
  grep -E "Makespan|Output token throughput|Engine steps|Mean step|forward|deferred" "$out/offline_$1.log" \
    | sed "s/^/$1: /"
}
# Alternated, twice: a lease may be noisy.
for rep in 1 2; do
  run plain$rep
  run schema$rep --json-schema "$schema"
  run schema_wait$rep --json-schema "$schema" --structured-outputs-defer-late-masks off
done
date -u
