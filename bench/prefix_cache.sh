#!/usr/bin/env bash
# Issue 22's prefix-caching measurements, all in one run, printed as one table (Markdown,
# also written to OUT/prefix_cache.md). For each KV cache (vattn, then paged), `vpod serve`
# with prefix caching on and with --no-enable-prefix-caching runs, through `vpod bench serve`:
#   ttft  a shared 8K prefix + 64 new tokens, one request at a time: mean TTFT
#         (the test request warms the prefix first, as a server that has seen the prompt)
#   c8    64 such requests at concurrency 8: total time
#   chat  8 conversations x 10 turns, ~1K new user tokens per turn, each turn resending the
#         conversation with the server's replies: total token throughput, TTFT per turn
# then `vpod bench offline` runs the 16K / P:D 100 trace (no sharing) with caching on and off.
#
# Usage: bench/prefix_cache.sh --model DIR [--build DIR] [--out DIR] [--port N]
#   DIR: a model folder, e.g. from `vpod make-model --preset llama3-8b --out models/llama3-8b`.
# Sizes and extra flags (environment; defaults are the issue's, each run well under a minute
# on an H200 at llama3-8b): PREFIX_LEN (8192), UNIQUE_LEN (64), SHARED_OUTPUT_LEN (16),
# TTFT_PROMPTS (16), C8_PROMPTS (64), CHAT_CONVERSATIONS (8), CHAT_TURNS (10),
# CHAT_TURN_LEN (1024), CHAT_OUTPUT_LEN (64), CHAT_CONCURRENCY (8), OFFLINE_INPUT_LEN (16384),
# OFFLINE_PD_RATIO (100), OFFLINE_REQUESTS (32), OFFLINE_REPEATS (1; the table takes the
# fastest), KV_CACHES ("vattn paged"), CACHING ("off on"), MAX_MODEL_LEN (16384),
# SERVE_ARGS (vpod serve, e.g. "--device cpu"), BENCH_SERVE_ARGS, OFFLINE_ARGS,
# SECTIONS ("serve offline").
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
build="$repo/build"
out=""
model=""
port=${PORT:-8124}
while [[ $# -gt 0 ]]; do
  case "$1" in
    --model) model=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --port) port=$2; shift 2 ;;
    -h|--help) sed -n '2,23p' "$0"; exit 0 ;;
    *) echo "prefix_cache.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[[ -n "$model" && -f "$model/config.json" ]] || {
  echo "prefix_cache.sh: --model DIR (a folder with config.json) is required" >&2; exit 2; }
out=${out:-$build/results/prefix_cache}
vpod="$build/vpod"
[[ -x "$vpod" ]] || { echo "prefix_cache.sh: $vpod not found; build first (make)" >&2; exit 2; }
mkdir -p "$out/logs"
: > "$out/commands.txt"

prefix_len=${PREFIX_LEN:-8192}
unique_len=${UNIQUE_LEN:-64}
shared_output_len=${SHARED_OUTPUT_LEN:-16}
ttft_prompts=${TTFT_PROMPTS:-16}
c8_prompts=${C8_PROMPTS:-64}
chat_conversations=${CHAT_CONVERSATIONS:-8}
chat_turns=${CHAT_TURNS:-10}
chat_turn_len=${CHAT_TURN_LEN:-1024}
chat_output_len=${CHAT_OUTPUT_LEN:-64}
chat_concurrency=${CHAT_CONCURRENCY:-8}
offline_input_len=${OFFLINE_INPUT_LEN:-16384}
offline_pd_ratio=${OFFLINE_PD_RATIO:-100}
offline_requests=${OFFLINE_REQUESTS:-32}
offline_repeats=${OFFLINE_REPEATS:-1}
max_model_len=${MAX_MODEL_LEN:-16384}
read -r -a kv_caches <<< "${KV_CACHES:-vattn paged}"
read -r -a caching <<< "${CACHING:-off on}"
sections=" ${SECTIONS:-serve offline} "

# The switch comes with issue 22; without it there is nothing to compare.
# (The help is read whole first: `grep -q` closing the pipe early would fail it under pipefail.)
serve_help=$("$vpod" serve --help 2>&1 || true)
if [[ " ${caching[*]} " == *" off "* && "$serve_help" != *--no-enable-prefix-caching* ]]; then
  echo "prefix_cache.sh: $vpod has no --no-enable-prefix-caching (issue 22); CACHING=on runs" \
       "only the cached side" >&2
  exit 3
fi
caching_flag() {  # caching_flag on|off: the serve/offline flag for that side
  if [[ $1 == off ]]; then echo "--no-enable-prefix-caching"; fi
}

# run CMD...: logs the exact command (quoted so that it can be pasted back), then runs it.
run() {
  local quoted
  quoted=$(printf ' %q' "$@")
  echo "${quoted# }" >> "$out/commands.txt"
  echo "+ $*" >&2
  "$@"
}

wait_healthy() {  # wait_healthy URL PID: until GET URL/health is 200, or the server dies
  local deadline=$((SECONDS + 900))
  while ((SECONDS < deadline)); do
    kill -0 "$2" 2> /dev/null || return 1
    if python3 -c "import sys,urllib.request; urllib.request.urlopen(sys.argv[1], timeout=2)" \
         "$1/health" 2> /dev/null; then
      return 0
    fi
    sleep 1
  done
  return 1
}

url="http://127.0.0.1:$port"
server=""
stop_server() {
  if [[ -n "$server" ]]; then
    kill -INT "$server" 2> /dev/null || true
    wait "$server" 2> /dev/null || true
    server=""
  fi
}
trap stop_server EXIT

bench_serve() {  # bench_serve TAG ARGS...: one `vpod bench serve` run into OUT/TAG.json
  local tag=$1
  shift
  # shellcheck disable=SC2086
  run "$vpod" bench serve --base-url "$url" --seed 0 --no-progress ${BENCH_SERVE_ARGS:-} "$@" \
    --json "$out/$tag.json" | tee "$out/logs/$tag.txt"
}

if [[ $sections == *" serve "* ]]; then
  for kv in "${kv_caches[@]}"; do
    for c in "${caching[@]}"; do
      tag="${kv}_$c"
      # shellcheck disable=SC2046,SC2086
      printf '%s\n' "$vpod serve --model $model --port $port --max-model-len $max_model_len \
--kv-cache $kv $(caching_flag "$c") ${SERVE_ARGS:-}" >> "$out/commands.txt"
      # shellcheck disable=SC2046,SC2086
      "$vpod" serve --model "$model" --port "$port" --max-model-len "$max_model_len" \
        --kv-cache "$kv" $(caching_flag "$c") ${SERVE_ARGS:-} > "$out/logs/serve_$tag.log" 2>&1 &
      server=$!
      if ! wait_healthy "$url" "$server"; then
        echo "prefix_cache.sh: vpod serve ($tag) did not become healthy; see" \
             "$out/logs/serve_$tag.log" >&2
        exit 4
      fi
      shared=(--dataset shared-prefix --prefix-len "$prefix_len" --unique-len "$unique_len"
              --output-len "$shared_output_len")
      bench_serve "${tag}_ttft" "${shared[@]}" --num-prompts "$ttft_prompts" --max-concurrency 1
      bench_serve "${tag}_c8" "${shared[@]}" --num-prompts "$c8_prompts" --max-concurrency 8
      bench_serve "${tag}_chat" --dataset multi-turn --num-conversations "$chat_conversations" \
        --num-turns "$chat_turns" --turn-len "$chat_turn_len" --output-len "$chat_output_len" \
        --max-concurrency "$chat_concurrency"
      stop_server
    done
  done
fi

if [[ $sections == *" offline "* ]]; then
  for ((i = 1; i <= offline_repeats; i++)); do
    for c in "${caching[@]}"; do  # alternating, so a drift in the card's clocks hits both
      # shellcheck disable=SC2046,SC2086
      run "$vpod" bench offline --model "$model" --input-len "$offline_input_len" \
        --pd-ratio "$offline_pd_ratio" --num-requests "$offline_requests" $(caching_flag "$c") \
        ${OFFLINE_ARGS:-} --json "$out/offline_${c}_$i.json" | tee "$out/logs/offline_${c}_$i.txt"
    done
  done
fi

python3 - "$out" <<'EOF' | tee "$out/prefix_cache.md"
# The table: every figure, and the sizes in the labels, read from the runs' JSON; a run that
# is missing shows as "-".
import glob, json, os, sys

out = sys.argv[1]

def load(name):
    path = os.path.join(out, name + ".json")
    return json.load(open(path)) if os.path.exists(path) else None

def get(tag, key):
    j = load(tag)
    return j.get(key) if j else None

def first(suffix, key):  # a size from whichever run of `suffix` exists
    for kv in ("vattn", "paged"):
        for c in ("on", "off"):
            v = get(f"{kv}_{c}_{suffix}", key)
            if v is not None:
                return v
    return "?"

def tokens(n):
    return f"{n // 1024}K" if isinstance(n, int) and n >= 1024 and n % 1024 == 0 else str(n)

def fmt(v, spec):
    return "-" if v is None else format(v, spec)

def ratio(a, b):
    return None if a is None or b is None or b == 0 else a / b

rows = []
def serve_row(label, suffix, key, spec, better, target):
    # better: "lower" (on vs off = off / on) or "higher" (= on / off)
    cells = [label]
    for kv in ("vattn", "paged"):
        off, on = get(f"{kv}_off_{suffix}", key), get(f"{kv}_on_{suffix}", key)
        gain = ratio(off, on) if better == "lower" else ratio(on, off)
        cells += [fmt(off, spec), fmt(on, spec), "-" if gain is None else f"{gain:.2f}x"]
    cells.append(target)
    rows.append(cells)

def hit_row(label, suffix):
    cells = [label]
    for kv in ("vattn", "paged"):
        cells += [fmt(get(f"{kv}_{c}_{suffix}", "prefix_cache_hit_rate"), ".1%")
                  for c in ("off", "on")] + [""]
    cells.append("")
    rows.append(cells)

shared = f"shared {tokens(first('ttft', 'prefix_len'))} prefix + {first('ttft', 'unique_len')}"
serve_row(f"{shared}, concurrency 1: mean TTFT (ms)", "ttft", "mean_ttft_ms", ".1f", "lower",
          "on <= 25 ms")
serve_row(f"{shared}, concurrency 1: P99 TTFT (ms)", "ttft", "p99_ttft_ms", ".1f", "lower", "")
hit_row(f"{shared}, concurrency 1: hit rate", "ttft")
c8 = (f"{first('c8', 'num_prompts')} x shared {tokens(first('c8', 'prefix_len'))} prefix + "
      f"{first('c8', 'unique_len')}")
serve_row(f"{c8}, concurrency 8: total time (s)", "c8", "duration", ".2f", "lower", ">= 4x")
hit_row(f"{c8}, concurrency 8: hit rate", "c8")
chat = (f"chat {first('chat', 'num_conversations')} x {first('chat', 'num_turns')} turns, "
        f"+{tokens(first('chat', 'turn_len'))} tokens/turn")
serve_row(f"{chat}: total tok/s", "chat", "total_token_throughput", ".0f", "higher", ">= 2x")
serve_row(f"{chat}: mean TTFT (ms)", "chat", "mean_ttft_ms", ".1f", "lower", "")
hit_row(f"{chat}: hit rate", "chat")

runs = {c: [json.load(open(p)) for p in sorted(glob.glob(os.path.join(out, f"offline_{c}_*.json")))]
        for c in ("off", "on")}
makespan = {c: min((r["makespan_s"] for r in runs[c]), default=None) for c in runs}
hit = {c: runs[c][0].get("prefix_cache_hit_rate") if runs[c] else None for c in runs}
any_run = (runs["on"] or runs["off"] or [{}])[0]
pd = any_run.get("pd_ratio")
offline = (f"offline {tokens(any_run.get('input_len', '?'))} "
           f"P:D {format(pd, 'g') if isinstance(pd, (int, float)) else '?'}")
slow = ratio(makespan["on"], makespan["off"])
rows.append([f"{offline} (no sharing): makespan (s)", fmt(makespan["off"], ".2f"),
             fmt(makespan["on"], ".2f"), "-" if slow is None else f"{(slow - 1) * 100:+.2f}%",
             "", "", "", "on <= +1%"])
rows.append([f"{offline}: hit rate", fmt(hit["off"], ".1%"), fmt(hit["on"], ".1%"), "", "", "",
             "", ""])

header = ["measurement", "vattn off", "vattn on", "on vs off", "paged off", "paged on",
          "on vs off", "issue 22 (vattn)"]
print("| " + " | ".join(header) + " |")
print("|" + "|".join(" --- " for _ in header) + "|")
for r in rows:
    print("| " + " | ".join(r) + " |")
# Per-turn TTFT of the chat trace, where both sides ran.
for kv in ("vattn", "paged"):
    on, off = load(f"{kv}_on_chat"), load(f"{kv}_off_chat")
    if not on or not off or "turns" not in on or "turns" not in off:
        continue
    print(f"\n{kv} chat, per turn: mean TTFT off / on (ms), mean cached tokens on")
    print("| turn | prompt tokens | TTFT off | TTFT on | cached on |")
    print("| --- | --- | --- | --- | --- |")
    for a, b in zip(off["turns"], on["turns"]):
        print(f"| {b['turn']} | {b['mean_input_tokens']:.0f} | {a['mean_ttft_ms']:.1f} | "
              f"{b['mean_ttft_ms']:.1f} | {fmt(b.get('mean_cached_tokens'), '.0f')} |")
EOF
echo "prefix_cache.sh: raw results in $out, table in $out/prefix_cache.md" >&2
