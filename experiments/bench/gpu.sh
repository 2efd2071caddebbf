#!/usr/bin/env bash
# The device check of issue 50 (experiments/bench/README.md, "On one H200"), sized to one call
# of about 8 minutes of the device tool: self-play at 6x128 against pgx (bf16 in every arm) and
# alone at 16,384 games with the time split, `configs/gardner.py:full` for a few iterations in
# bf16 (its default on an accelerator) and in f32, the bf16 model exported, one outer iteration
# of `configs/joat.py:full` (filling the device), and the study's GPU pretraining preset with
# what is left.
#
#   bash experiments/bench/gpu.sh [OUT]        # into OUT (default runs/gpu)
#   PARTS="selfplay_pgx joat_full" bash experiments/bench/gpu.sh   # some parts only, in order
#
# On the lent machine, whose image lacks some wheels, run it through the shared kit, which
# installs them first (../shared/device/README.md):
#   PYTHONPATH=$(pwd) PARTS=study CAP_STUDY=470 MIN_STUDY=30 \
#     STUDY_CMD='PY=$PY bash experiments/bench/gpu.sh $OUT' bash .gpu/run.sh
#
# Every part has its own budget (BUDGETS below, seconds): a hard `timeout`, and for a benchmark
# also `--time-limit` at 60% of it, so that no new row starts when it could not finish. All
# parts share one deadline, BUDGET seconds (default 460) from the start: a part gets at most
# the time left, and one with less than MIN_PART (20) seconds left is skipped. The budgets
# come from the H200 call of 2026-11-27 (compiles included, no warm cache).
#
# Nothing finished is lost to a kill: a part's output goes to OUT/NAME.log as it runs, a
# benchmark rewrites OUT/NAME.json after every row (`--json-out`), a training run's
# metrics.jsonl is copied to OUT/NAME.metrics.jsonl when it ends (the exported model to
# OUT/gardner_full_bf16.model/), and OUT/parts.tsv gets one line per part as it ends: name,
# limit, seconds, status (ok, timed out, failed (exit N), skipped).
set -u
OUT=${1:-${OUT:-runs/gpu}}
mkdir -p "$OUT"
WORK=${WORK:-$(mktemp -d /tmp/mmc_gpu_bench.XXXXXX)}
export PYTHONUNBUFFERED=1
PY=${PY:-python3}
BUDGET=${BUDGET:-460}
MIN_PART=${MIN_PART:-20}
PARTS=${PARTS:-"selfplay_pgx selfplay16k gardner_bf16 joat_full gardner_f32 study"}
declare -A BUDGETS=(
  [selfplay_pgx]=80 [selfplay16k]=75 [gardner_bf16]=95 [gardner_f32]=70 [joat_full]=140
  [study]=300 [env]=70 [learner]=60
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

# train NAME CONFIG ITERATIONS [OVERRIDE...]: a short run of CONFIG (configs/X.py:preset)
# without evaluation, with one checkpoint at the end, without the replay rings.
train() {
  local name=$1 config=$2 iterations=$3
  shift 3
  rm -rf "${WORK:?}/$name"
  run "$name" "$PY" -m mmc_jax.train --config "$config" "$@" \
    --config.num_iterations="$iterations" --config.eval.every=0 \
    --config.checkpoint.every="$iterations" --config.checkpoint.save_replay=False \
    --workdir "$WORK/$name"
  cp "$WORK/$name/metrics.jsonl" "$OUT/$name.metrics.jsonl" 2>/dev/null
}

BENCH=("$PY" -m mmc_jax.bench)
NET=(--blocks 6 --channels 128 --simulations 32 --plies 8 --dtype bfloat16)
timeout 60 "$PY" -c "import jax; print(jax.__version__, jax.devices())"
for part in $PARTS; do
  case $part in
    selfplay_pgx)
      run selfplay_pgx "${BENCH[@]}" selfplay --vs-pgx --batch 4096 "${NET[@]}" --repeats 2 \
        --time-limit {LIMIT} --json-out "$OUT/selfplay_pgx.json"
      ;;
    selfplay16k)
      run selfplay16k "${BENCH[@]}" selfplay --batch 16384 "${NET[@]}" --repeats 2 --breakdown \
        --time-limit {LIMIT} --json-out "$OUT/selfplay16k.json"
      ;;
    gardner_bf16)
      train gardner_bf16 configs/gardner.py:full 10
      timeout 60 "$PY" -m mmc_jax.export --checkpoint "$WORK/gardner_bf16" \
        --out "$OUT/gardner_full_bf16.model" >"$OUT/export.log" 2>&1 || echo "export failed"
      ;;
    gardner_f32) train gardner_f32 configs/gardner.py:full 5 --config.network.dtype=float32 ;;
    joat_full) train joat_full configs/joat.py:full 1 ;;
    study)
      run study "$PY" experiments/adaptation/study.py --preset gpu --only pretrain \
        --workdir "$WORK/study" --pack "$OUT/pretrain.tgz"
      ;;
    env)
      run env "${BENCH[@]}" env --vs-pgx --batch-sizes 64 4096 32768 --repeats 3 \
        --time-limit {LIMIT} --json-out "$OUT/env.json"
      ;;
    learner)
      run learner "${BENCH[@]}" learner --blocks 6 --channels 128 --batch 1024 \
        --json-out "$OUT/learner.json"
      ;;
    *)
      echo "== $part: unknown part (selfplay_pgx selfplay16k gardner_bf16 gardner_f32" \
        "joat_full study env learner)"
      ;;
  esac
done
echo "== done after $SECONDS s: $OUT"
cat "$OUT/parts.tsv"
