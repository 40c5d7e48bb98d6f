#!/usr/bin/env bash
# The server's GPU check (issue #9): what `make run MODEL=<llama3-8b preset
# folder>` runs (vpod info; vpod serve --model DIR --port 8000 $SERVE_ARGS),
# then the openai-client e2e suite against it (VPOD_E2E_URL). Logs in $OUT.
#
#   OUT=/tmp/out VPOD_BIN=build/vpod TOKENIZER_DIR=<llama3 tokenizer folder> \
#     bash tools/server/gpu_client_check.sh
#
# Python packages missing on the GPU machine (openai, pydantic, ...) may be
# carried as wheels in .whl/ (installed into /tmp/site); SKIP_PIP=1 skips.
# PRESET=tiny runs the same check on a CPU machine in seconds.
set -u
cd "$(dirname "$0")/../.."
: "${OUT:?set OUT to a folder for the logs}"
[ -n "${SKIP_PIP:-}" ] || [ ! -d .whl ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl > $OUT/pip.log 2>&1 || { cat $OUT/pip.log; exit 1; }
[ -n "${SKIP_PIP:-}" ] || [ ! -d .whl ] || export PYTHONPATH=/tmp/site
B=${VPOD_BIN:-build/vpod}
date -u | tee $OUT/date.txt
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $OUT/gpu.txt
python3 -c "import openai, pydantic, httpx, prometheus_client, pytest; print('openai', openai.__version__, 'pydantic', pydantic.VERSION, 'pytest', pytest.__version__)"
t0=$(date +%s)
$B make-model --out /tmp/vpod-e2e-model --preset ${PRESET:-llama3-8b} ${TOKENIZER_DIR:+--tokenizer $TOKENIZER_DIR} > $OUT/make_model.log 2>&1 || { tail -5 $OUT/make_model.log; exit 1; }
tail -1 $OUT/make_model.log; echo "make-model took $(( $(date +%s) - t0 )) s"
SERVE_ARGS="--served-model-name llama3-8b --max-model-len 512"
$B info > $OUT/info.txt 2>&1; grep -i "backend" $OUT/info.txt
setsid $B serve --model /tmp/vpod-e2e-model --port 8000 $SERVE_ARGS > $OUT/serve.stdout 2> $OUT/serve.log < /dev/null &
pid=$!
ok=0
for i in $(seq 1 200); do
  if python3 -c "import httpx,sys; sys.exit(httpx.get('http://127.0.0.1:8000/health', timeout=2).status_code != 200)" 2>/dev/null; then ok=1; break; fi
  kill -0 $pid 2>/dev/null || break
  sleep 1
done
echo "ready=$ok after $(( $(date +%s) - t0 )) s"; cat $OUT/serve.stdout; grep -E "loaded in|error|Error" $OUT/serve.log | head -5
if [ $ok = 1 ]; then
  VPOD_E2E_URL=http://127.0.0.1:8000 VPOD_E2E_MODEL=llama3-8b VPOD_E2E_MAX_MODEL_LEN=512 \
    timeout 200 python3 -m pytest -v -p no:cacheprovider --durations=5 tests/e2e/test_openai_client.py > $OUT/pytest.log 2>&1
  echo "pytest rc=$?"; cat $OUT/pytest.log | tail -60
  python3 -c "import httpx; print('\n'.join(l for l in httpx.get('http://127.0.0.1:8000/metrics').text.splitlines() if l.startswith(('vllm:num_requests','vllm:kv_cache','vllm:generation_tokens','vpod_steps_total','vpod_step_phase','vllm:time_to_first_token_seconds_sum','vllm:time_to_first_token_seconds_count','vllm:request_time_per_output_token_seconds_sum','vllm:request_time_per_output_token_seconds_count'))))" | tee $OUT/metrics_after.txt
fi
kill -TERM $pid 2>/dev/null
for i in $(seq 1 60); do kill -0 $pid 2>/dev/null || break; sleep 0.5; done
wait $pid; echo "serve exit code: $?"
tail -5 $OUT/serve.log
