#!/usr/bin/env bash
# A/B: the same bench client against the old (cpp-httplib) and new (Beast) server, tiny model, CPU.
set -u
model=/tmp/ab/tiny
[[ -d $model ]] || /work/main/build/vpod make-model --preset tiny --out $model --seed 1 >/dev/null
client=/work/main/build/vpod
for round in 1 2 3; do
for side in base new; do
  bin=/work/$([[ $side == base ]] && echo base || echo main)/build/vpod
  port=$([[ $side == base ]] && echo 8311 || echo 8312)
  $bin --log-level warn serve --model $model --device cpu --port $port --max-model-len 512 --max-num-seqs 64 --cpu-threads 2 > /tmp/ab/serve_$side.out 2>/tmp/ab/serve_$side.err &
  pid=$!
  for i in $(seq 100); do curl -sf http://127.0.0.1:$port/health >/dev/null && break; sleep 0.2; done
  $client bench serve --base-url http://127.0.0.1:$port --dataset random --input-len 32 --output-len 32 --num-prompts 128 --max-concurrency 32 --seed $round --no-progress --json /tmp/ab/${side}_$round.json > /tmp/ab/${side}_$round.txt 2>&1
  kill -TERM $pid; wait $pid
done
done
