#!/usr/bin/env bash
# GPU numbers of experiments/bench/README.md ("On one H100"): env and self-play against pgx,
# the learner against its limit, and training throughput of the gardner cpu and full presets.
#
#   bash experiments/bench/gpu.sh [OUT]        # logs into OUT (default runs/gpu)
#
# Each part runs under a time limit (LIMIT seconds, default 150) so a slow part cannot eat
# the others' time; its log keeps whatever it printed.
set -u
OUT=${1:-${OUT:-runs/gpu}}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
PY=${PY:-python3}
run() {
  local name=$1
  shift
  echo "== $name: $*"
  local started=$SECONDS
  timeout "${LIMIT:-150}" "$@" >"$OUT/$name.log" 2>&1
  echo "   exit $? after $((SECONDS - started)) s"
  grep -v "^W[0-9]\|^I[0-9]" "$OUT/$name.log" | tail -n 25
}
$PY -c "import jax; print(jax.__version__, jax.devices())"
run env $PY -m mmc_jax.bench env --vs-pgx --batch-sizes 64 4096 32768 --json
run selfplay $PY -m mmc_jax.bench selfplay --vs-pgx --batch 64 --memory-batch 8192 --json
run selfplay1024 $PY -m mmc_jax.bench selfplay --vs-pgx --batch 1024 --json
run learner $PY -m mmc_jax.bench learner --json
run train_cpu $PY -m mmc_jax.train --config configs/gardner.py:cpu --config.num_iterations=6 \
  --config.eval.every=0 --workdir /tmp/gpu_train_cpu
LIMIT=${LIMIT_FULL:-200} run train_full $PY -m mmc_jax.train --config configs/gardner.py:full \
  --config.num_iterations=2 --config.eval.every=0 --workdir /tmp/gpu_train_full
