set -u
export LD_LIBRARY_PATH=
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
M=/tmp/llama3-8b; export VPOD_FIXTURES=$PWD/.base/fixtures
t0=$(date +%s); build/vpod make-model --preset llama3-8b --out $M --seed 0 > /dev/null || exit 1; echo "make-model $(( $(date +%s)-t0 )) s"
run() { # side round
  bin=$([[ $1 == base ]] && echo .base/vpod || echo build/vpod)
  port=$([[ $1 == base ]] && echo 8123 || echo 8124)
  $bin --log-level info serve --model $M --port $port --max-model-len 4096 --max-num-seqs 256 >> $OUT/serve.log 2>&1 &
  pid=$!
  for i in $(seq 600); do curl -sf http://127.0.0.1:$port/health >/dev/null && break; sleep 0.2; done
  build/vpod bench serve --base-url http://127.0.0.1:$port --dataset random --input-len 512 --output-len 256 --num-prompts 768 --max-concurrency 256 --seed $2 --no-progress > /tmp/$1_$2.txt 2>&1; (echo "=== $1 round $2"; cat /tmp/$1_$2.txt) >> $OUT/bench.txt
  grep -E "Successful|duration|Output token throughput|Mean TPOT|Median TPOT|P99 TPOT|Mean ITL|P99 ITL|Mean TTFT" /tmp/$1_$2.txt | sed "s/^/$1 r$2 /"
  kill -TERM $pid; wait $pid
  sleep 2
}
run base 1; run new 1; run base 2; run new 2
