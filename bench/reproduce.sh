#!/usr/bin/env bash
# Reruns the papers' experiments on the GPU machine (an H200) and writes
# docs/results.md with its plots (tools/plot_results.py):
#   1. kernels:   vpod bench attention (+ tools/bench_attention_peers.py), vpod bench pod
#                 (+ tools/bench_pod_peers.py), vpod bench model --hybrids (POD in a whole step)
#   2. allocator: vpod bench kvcache
#   3. offline:   vpod bench offline, makespan of static traces (8K/16K prompts, P:D 50/100/500)
#   4. online:    vpod serve + vpod bench serve, arXiv-like trace, TTFT/TPOT/P99 against rate
# each end-to-end one in the modes vattn+pod, vattn+serial, paged+serial and
# paged+pod (FlashInfer's own POD kernel, FA2-based, for hybrid steps), on
# random-weight models at real shapes (vpod make-model presets llama3-8b, yi-6b-200k).
#
# Usage: bench/reproduce.sh [--build DIR] [--out DIR] [--models DIR] [--docs DIR]
#                           [--sections kernels,allocator,offline,online] [--quick] [--resume]
# Every command run is appended to OUT/commands.txt; raw JSON and logs stay in OUT
# (default BUILD/results).
# --resume: keep OUT as it is and skip every run whose JSON is already there (a run
# cut off by a time limit wrote none, so it runs again); commands.txt is appended
# to. For a grid split over several calls of a time-limited GPU machine: rerun
# the same command until it has nothing left to do.
# A benchmark command that does not exist yet stops the script with its name.
# Extra flags per benchmark: ATTENTION_ARGS, POD_ARGS, KVCACHE_ARGS, OFFLINE_ARGS,
# SERVE_ARGS (vpod serve), BENCH_SERVE_ARGS, e.g. ATTENTION_ARGS="--sweep paper";
# ATTENTION_SWEEP=0 skips the attention size sweeps.
# Sizes (space-separated lists; defaults below, smaller with --quick): PRESETS,
# MODES, OFFLINE_PROMPTS, OFFLINE_RATIOS, OFFLINE_REQUESTS, ONLINE_RATES,
# ONLINE_PROMPTS, HYBRID_STEPS (the engine-shaped POD cases); e.g.
# MODES="vattn+pod paged+serial" OFFLINE_REQUESTS=32.
# LOAD_FORMAT (default dummy): the models' weights are make-model's for seed 0
# made on the GPU at load (vLLM's --load-format dummy; the same values), so
# make-model writes no weight files; safetensors writes and reads them.
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
build="$repo/build"
out=""
models="$repo/models"
docs="$repo/docs"
sections="kernels,allocator,offline,online"
quick=0
resume=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build) build=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --models) models=$2; shift 2 ;;
    --docs) docs=$2; shift 2 ;;
    --sections) sections=$2; shift 2 ;;
    --quick) quick=1; shift ;;
    --resume) resume=1; shift ;;
    -h|--help) sed -n '2,27p' "$0"; exit 0 ;;
    *) echo "reproduce.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done

out=${out:-$build/results}
vpod="$build/vpod"
[[ -x "$vpod" ]] || { echo "reproduce.sh: $vpod not found; build first (make)" >&2; exit 2; }
mkdir -p "$out"/{kernels,allocator,offline,online,logs} "$models" "$docs"
if [[ $resume == 1 ]]; then
  echo "# --resume at $(date -u '+%Y-%m-%d %H:%M UTC'): runs whose JSON exists are skipped" \
    >> "$out/commands.txt"
else
  : > "$out/commands.txt"
fi

has() { [[ ",$sections," == *",$1,"* ]]; }
# log FILE: tee, appending under --resume (a skipped run leaves its log as it was).
log() {
  if [[ $resume == 1 ]]; then tee -a "$1"; else tee "$1"; fi
}
# done_already FILE...: under --resume, whether every FILE exists and is not empty.
done_already() {
  [[ $resume == 1 ]] || return 1
  local f
  for f in "$@"; do [[ -s "$f" ]] || return 1; done
}

# run CMD...: logs the exact command (quoted so that it can be pasted back), then runs it;
# under --resume, a command whose --json output exists is skipped.
run() {
  local quoted prev="" arg
  for arg in "$@"; do
    if [[ $prev == --json ]] && done_already "$arg"; then
      echo "reproduce.sh: --resume: $arg exists, skipped" >&2
      return 0
    fi
    prev=$arg
  done
  quoted=$(printf ' %q' "$@")
  echo "${quoted# }" >> "$out/commands.txt"
  echo "+ $*" >&2
  "$@"
}

# require_bench NAME ISSUE: stop, naming what is missing, if `vpod bench NAME` does not exist.
require_bench() {
  if ! "$vpod" bench "$1" --help > /dev/null 2>&1; then
    echo "reproduce.sh: 'vpod bench $1' does not exist in $vpod (it comes with $2);" \
         "rerun with --sections without the section that needs it" >&2
    exit 3
  fi
}
require_command() {
  if ! "$vpod" "$1" --help > /dev/null 2>&1; then
    echo "reproduce.sh: 'vpod $1' does not exist in $vpod (it comes with $2)" >&2
    exit 3
  fi
}

# ----------------------------------------------------------------------------- environment
gpu=$(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null | head -1 || true)
driver=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -1 || true)
commit=$(git -C "$repo" rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
if [[ -n "$(git -C "$repo" status --porcelain --untracked-files=no 2>/dev/null)" ]]; then
  commit="$commit (with uncommitted changes)"
fi
"$vpod" info > "$out/logs/vpod_info.txt" 2>&1 || true
python3 - "$out/env.json" "$gpu" "$driver" "$commit" "$quick" "$resume" <<'EOF'
import datetime, json, os, socket, sys
path, gpu, driver, commit, quick, resume = sys.argv[1:]
now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
env = {"date": now, "gpu": gpu or "none found", "driver": driver or "unknown", "commit": commit,
       "host": socket.gethostname(), "quick": quick == "1"}
if resume == "1" and os.path.exists(path):
    # The first run's record stays; a resumed run adds its own date, GPU and commit.
    first = json.load(open(path))
    first.setdefault("resumed", []).append(env)
    env = first
json.dump(env, open(path, "w"), indent=1)
EOF

# ----------------------------------------------------------------------------- 1. kernels
hybrid_steps=${HYBRID_STEPS:-2028@0+20@16448,2028@6144+20@16448,2028@12288+20@16448}
if has kernels; then
  require_bench attention "issue 4 (attention kernels)"
  require_bench pod "issue 5 (POD-Attention)"
  # shellcheck disable=SC2086
  run "$vpod" bench attention ${ATTENTION_ARGS:-} --json "$out/kernels/attention.json" \
    | log "$out/logs/attention.txt"
  if [[ -f "$repo/tools/bench_attention_peers.py" ]]; then
    run python3 "$repo/tools/bench_attention_peers.py" --vpod-json "$out/kernels/attention.json" \
      --json "$out/kernels/attention_peers.json" \
      | log "$out/logs/attention_peers.txt"
  else
    echo "reproduce.sh: tools/bench_attention_peers.py missing; no PyTorch FA2/cuDNN comparison" >&2
  fi
  # POD: the named cases, the paper-style sweep, and the engine's hybrid-step shapes (a
  # 2048-token budget: one prefill chunk beside 20 decodes at 16K), then PyTorch's serial
  # SDPA (FA2, cuDNN) on the same cases.
  # shellcheck disable=SC2086
  run "$vpod" bench pod --cases "$hybrid_steps" ${POD_ARGS:-} --json "$out/kernels/pod.json" \
    | log "$out/logs/pod.txt"
  if [[ -f "$repo/tools/bench_pod_peers.py" ]]; then
    run python3 "$repo/tools/bench_pod_peers.py" --vpod-json "$out/kernels/pod.json" \
      --max-sweep 0 --json "$out/kernels/pod_peers.json" | log "$out/logs/pod_peers.txt"
  fi
  # Throughput against size: one-shot prefill 2K-128K, decode batch 1-256 at 16K context,
  # vpod contiguous against paged (block 16: FlashInfer 0.7.2.post1's FA3 prefill and
  # tensor-core decode), beside PyTorch FA2/cuDNN (ATTENTION_SWEEP=0 skips).
  if [[ ${ATTENTION_SWEEP:-1} == 1 ]]; then
    run "$vpod" bench attention --layouts per_layer paged16 \
      --prefill-shape 2048 8192 32768 65536 131072 --decode-shape 1x16384 4x16384 64x16384 \
      128x16384 256x16384 --json "$out/kernels/attention_sweep.json" \
      | log "$out/logs/attention_sweep.txt"
    if [[ -f "$repo/tools/bench_attention_peers.py" ]]; then
      run python3 "$repo/tools/bench_attention_peers.py" \
        --vpod-json "$out/kernels/attention_sweep.json" \
        --json "$out/kernels/attention_sweep_peers.json" | log "$out/logs/attention_sweep_peers.txt"
    fi
  fi
fi

# ----------------------------------------------------------------------------- 2. allocator
if has allocator; then
  require_bench kvcache "issue 3 (vAttention KV cache)"
  # shellcheck disable=SC2086
  run "$vpod" bench kvcache ${KVCACHE_ARGS:-} --json "$out/allocator/kvcache.json" \
    | log "$out/logs/kvcache.txt"
fi

# ----------------------------------------------------------------------------- models
model_presets=(llama3-8b yi-6b-200k)
if [[ $quick == 1 ]]; then model_presets=(llama3-8b); fi
if [[ -n "${PRESETS:-}" ]]; then read -r -a model_presets <<< "$PRESETS"; fi
load_format=${LOAD_FORMAT:-dummy}
no_weights=()
if [[ $load_format == dummy ]]; then no_weights=(--no-weights); fi
needed=()
if has offline || has online; then needed=("${model_presets[@]}"); fi
if has kernels && [[ " ${needed[*]} " != *" llama3-8b "* ]]; then needed+=(llama3-8b); fi
if [[ ${#needed[@]} -gt 0 ]]; then
  require_command make-model "issue 6 (model runtime)"
  for preset in "${needed[@]}"; do
    if [[ ! -f "$models/$preset/config.json" ]]; then
      run "$vpod" make-model --out "$models/$preset" --preset "$preset" --seed 0 "${no_weights[@]}"
    fi
  done
fi

# POD inside a whole Llama-3-8B step (all layers, GEMMs included): the same hybrid steps,
# serial attention against POD (part of the kernels section; it needs the model).
if has kernels; then
  require_bench model "issue 6 (model runtime)"
  for att in serial pod; do
    run "$vpod" bench model --model "$models/llama3-8b" --load-format "$load_format" \
      --attention "$att" --batches 1 \
      --contexts 1024 --prefills "" --tuning-batches 1 --iters 6 --hybrids "$hybrid_steps" \
      --json "$out/kernels/model_hybrid_$att.json" | log "$out/logs/model_hybrid_$att.txt"
  done
  # The same steps over FlashInfer's paged cache: where the step time goes with either cache.
  run "$vpod" bench model --model "$models/llama3-8b" --load-format "$load_format" \
    --kv-cache paged --attention serial \
    --batches 1 --contexts 1024 --prefills "" --tuning-batches 1 --iters 6 \
    --hybrids "$hybrid_steps" --json "$out/kernels/model_hybrid_paged.json" \
    | log "$out/logs/model_hybrid_paged.txt"
fi

modes=(vattn+pod vattn+serial paged+serial paged+pod)
if [[ -n "${MODES:-}" ]]; then read -r -a modes <<< "$MODES"; fi
mode_flags() {  # vattn+pod -> --kv-cache vattn --attention pod
  echo "--kv-cache ${1%%+*} --attention ${1##*+}"
}

# ----------------------------------------------------------------------------- 3. offline
if has offline; then
  require_bench offline "issue 10 (this script's) and issue 8 (engine)"
  prompts=(8192 16384)
  ratios=(50 100 500)
  num_requests=64
  if [[ $quick == 1 ]]; then prompts=(16384); ratios=(100); num_requests=16; fi
  if [[ -n "${OFFLINE_PROMPTS:-}" ]]; then read -r -a prompts <<< "$OFFLINE_PROMPTS"; fi
  if [[ -n "${OFFLINE_RATIOS:-}" ]]; then read -r -a ratios <<< "$OFFLINE_RATIOS"; fi
  num_requests=${OFFLINE_REQUESTS:-$num_requests}
  for preset in "${model_presets[@]}"; do
    for prompt in "${prompts[@]}"; do
      for pd in "${ratios[@]}"; do
        for mode in "${modes[@]}"; do
          tag="${preset}_${prompt}_pd${pd}_${mode/+/-}"
          # shellcheck disable=SC2046,SC2086
          run "$vpod" bench offline --model "$models/$preset" --load-format "$load_format" \
            --input-len "$prompt" \
            --pd-ratio "$pd" --num-requests "$num_requests" $(mode_flags "$mode") \
            ${OFFLINE_ARGS:-} --json "$out/offline/$tag.json" | log "$out/logs/offline_$tag.txt"
        done
      done
    done
  done
fi

# ----------------------------------------------------------------------------- 4. online
wait_healthy() {  # wait_healthy URL PID: until GET URL/health is 200, or the server dies
  local deadline=$((SECONDS + 900))
  while ((SECONDS < deadline)); do
    kill -0 "$2" 2> /dev/null || return 1
    if python3 -c "import sys,urllib.request; urllib.request.urlopen(sys.argv[1], timeout=2)" \
         "$1/health" 2> /dev/null; then
      return 0
    fi
    sleep 2
  done
  return 1
}

if has online; then
  require_command serve "issue 9 (server)"
  require_bench serve "issue 10 (this script's)"
  rates=(0.5 1 1.5 2 3 4)
  num_prompts=128
  if [[ $quick == 1 ]]; then rates=(1 2 4); num_prompts=48; fi
  if [[ -n "${ONLINE_RATES:-}" ]]; then read -r -a rates <<< "$ONLINE_RATES"; fi
  num_prompts=${ONLINE_PROMPTS:-$num_prompts}
  port=${PORT:-8123}
  url="http://127.0.0.1:$port"
  # Every rate starts a fresh server: the trace's prompts are the same at every rate (seed 0),
  # so a server kept across rates would serve later rates from the prefix cache that earlier
  # rates filled, and the paged pool (LRU over every block) keeps far more of it than the
  # vAttention slots do: 99.9% hits against 2% measured on 2026-12-02, a cache A/B no longer.
  for preset in "${model_presets[@]}"; do
    for mode in "${modes[@]}"; do
      tag="${preset}_${mode/+/-}"
      for rate in "${rates[@]}"; do
        json="$out/online/${tag}_r$rate.json"
        if done_already "$json"; then
          echo "reproduce.sh: --resume: online/${tag}_r$rate.json exists, no server started" >&2
          continue
        fi
        # shellcheck disable=SC2046,SC2086
        printf '%s\n' "$vpod serve --model $models/$preset --load-format $load_format --port $port \
--max-model-len 16384 $(mode_flags "$mode") ${SERVE_ARGS:-}" >> "$out/commands.txt"
        # shellcheck disable=SC2046,SC2086
        "$vpod" serve --model "$models/$preset" --load-format "$load_format" --port "$port" \
          --max-model-len 16384 $(mode_flags "$mode") ${SERVE_ARGS:-} \
          > "$out/logs/serve_${tag}_r$rate.log" 2>&1 &
        server=$!
        if ! wait_healthy "$url" "$server"; then
          echo "reproduce.sh: vpod serve ($tag) did not become healthy; see $out/logs/serve_${tag}_r$rate.log" >&2
          kill "$server" 2> /dev/null || true
          exit 4
        fi
        # shellcheck disable=SC2086
        run "$vpod" bench serve --base-url "$url" --dataset arxiv --num-prompts "$num_prompts" \
          --request-rate "$rate" --seed 0 --no-progress --metadata "model=$preset" \
          --metadata "mode=$mode" ${BENCH_SERVE_ARGS:-} \
          --json "$json" | log "$out/logs/online_${tag}_r$rate.txt"
        kill -INT "$server" 2> /dev/null || true
        wait "$server" 2> /dev/null || true
      done
    done
  done
fi

# ----------------------------------------------------------------------------- report
run python3 "$repo/tools/plot_results.py" --results "$out" --docs "$docs"
echo "reproduce.sh: raw results in $out, report in $docs/results.md"
