#!/usr/bin/env bash
# GPU numbers of experiments/bench/README.md ("On one H100"): env and self-play against pgx,
# the learner against its limit, and training throughput of the gardner cpu and full presets,
# all in one 8-minute call of the device tool.
#
#   bash experiments/bench/gpu.sh [OUT]        # into OUT (default runs/gpu)
#   PARTS="env selfplay64" bash experiments/bench/gpu.sh   # some parts only, in that order
#
# Every part has its own budget (BUDGETS below, seconds; they add up to 435): a hard `timeout`,
# and for a benchmark also `--time-limit` at 60% of it, so that no new row (a batch size, the
# memory analysis) starts when it could not finish. All parts share one deadline, BUDGET
# seconds (default 450) from the start: a part gets at most the time left, and one with less
# than MIN_PART (20) seconds left is skipped. Start-up (the device check) adds about 10 s.
#
# Nothing finished is lost to a kill: a part's output goes to OUT/NAME.log as it runs, a
# benchmark rewrites OUT/NAME.json after every row (`--json-out`), a training run's
# metrics.jsonl is copied to OUT/NAME.metrics.jsonl when it ends (its workdir, with the
# checkpoint, stays under WORK), and OUT/parts.tsv gets one line per part as it ends: name,
# limit, seconds, status (ok, timed out, failed (exit N), skipped).
set -u
OUT=${1:-${OUT:-runs/gpu}}
mkdir -p "$OUT"
WORK=${WORK:-$(mktemp -d /tmp/mmc_gpu_bench.XXXXXX)}
export PYTHONUNBUFFERED=1
PY=${PY:-python3}
BUDGET=${BUDGET:-450}
MIN_PART=${MIN_PART:-20}
PARTS=${PARTS:-"env selfplay64 selfplay1024 learner train_cpu train_full"}
declare -A BUDGETS=(
  [env]=70 [selfplay64]=65 [selfplay1024]=70 [learner]=50 [train_cpu]=50 [train_full]=130
)
DEADLINE=$((SECONDS + BUDGET))
printf 'part\tlimit_s\tseconds\tstatus\n' >"$OUT/parts.tsv"

# run NAME CMD...: CMD under the part's limit, its output in OUT/NAME.log; `{LIMIT}` in CMD
# becomes the benchmark's --time-limit (60% of the part's limit).
run() {
  local name=$1 cap=${BUDGETS[$1]} left=$((DEADLINE - SECONDS)) started=$SECONDS rc status
  shift
  if [ "$left" -lt "$MIN_PART" ]; then
    echo "== $name: skipped ($left s left before the deadline)"
    printf '%s\t0\t0\tskipped\n' "$name" >>"$OUT/parts.tsv"
    return 0
  fi
  [ "$cap" -gt "$left" ] && cap=$left
  local args=("${@//\{LIMIT\}/$((cap * 6 / 10))}")
  echo "== $name (limit $cap s): ${args[*]}"
  timeout -k 10 "$cap" "${args[@]}" >"$OUT/$name.log" 2>&1
  rc=$?
  case $rc in
    0) status=ok ;;
    124 | 137) status="timed out" ;;
    *) status="failed (exit $rc)" ;;
  esac
  printf '%s\t%s\t%s\t%s\n' "$name" "$cap" "$((SECONDS - started))" "$status" >>"$OUT/parts.tsv"
  echo "   $status after $((SECONDS - started)) s"
  grep -v "^W[0-9]\|^I[0-9]\|^{" "$OUT/$name.log" | tail -n 25
}

# train NAME PRESET ITERATIONS: a short run of configs/gardner.py:PRESET without evaluation and
# with one checkpoint at the end, without the replay ring (the full preset's is 2.2 GiB).
train() {
  local name=$1 preset=$2 iterations=$3
  rm -rf "${WORK:?}/$name"
  run "$name" "$PY" -m mmc_jax.train --config "configs/gardner.py:$preset" \
    --config.num_iterations="$iterations" --config.eval.every=0 \
    --config.checkpoint.every="$iterations" --config.checkpoint.save_replay=False \
    --workdir "$WORK/$name"
  cp "$WORK/$name/metrics.jsonl" "$OUT/$name.metrics.jsonl" 2>/dev/null
}

BENCH=("$PY" -m mmc_jax.bench)
timeout 60 "$PY" -c "import jax; print(jax.__version__, jax.devices())"
for part in $PARTS; do
  case $part in
    env)
      run env "${BENCH[@]}" env --vs-pgx --batch-sizes 64 4096 32768 --repeats 3 \
        --time-limit {LIMIT} --json-out "$OUT/env.json"
      ;;
    selfplay64)
      run selfplay64 "${BENCH[@]}" selfplay --vs-pgx --batch 64 --repeats 3 \
        --memory-batch 8192 --time-limit {LIMIT} --json-out "$OUT/selfplay64.json"
      ;;
    selfplay1024)
      run selfplay1024 "${BENCH[@]}" selfplay --vs-pgx --batch 1024 --repeats 3 \
        --time-limit {LIMIT} --json-out "$OUT/selfplay1024.json"
      ;;
    learner)
      run learner "${BENCH[@]}" learner --json-out "$OUT/learner.json"
      ;;
    train_cpu) train train_cpu cpu 6 ;;
    train_full) train train_full full 5 ;;
    *) echo "== $part: unknown part (env selfplay64 selfplay1024 learner train_cpu train_full)" ;;
  esac
done
echo "== done after $SECONDS s: $OUT"
cat "$OUT/parts.tsv"
