#!/usr/bin/env bash
# One machine, three arms of the real run loop, alternated: what a training iteration of
# `configs/gardner.py:cpu` costs with a checkpoint every iteration (the preset), with one every
# 50 (here: only the last), and with XLA's Eigen kernels single-threaded. Then
# `bench iteration` on the same machine, to set the benchmark beside the run loop.
#
#   bash experiments/bench/iteration_ab.sh [WORKDIR] [ROUNDS]     # default runs/iteration_ab 2
#
# Each arm trains 12 iterations without evaluation; a line per run gives the median (and range)
# of `perf/iteration_seconds` over iterations 2-12 (the time of the jitted iteration, with any
# asynchronous checkpoint of the previous iteration running beside it). About 3 minutes per run
# on a 2-core CPU, plus 8 for `bench iteration`.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=${1:-runs/iteration_ab}
ROUNDS=${2:-2}
mkdir -p "$ROOT"
for round in $(seq "$ROUNDS"); do
  for arm in checkpoint_every_1 checkpoint_every_50 eigen_single_thread; do
    every=1
    flags=""
    if [ "$arm" = checkpoint_every_50 ]; then every=50; fi
    if [ "$arm" = eigen_single_thread ]; then
      flags="--xla_cpu_multi_thread_eigen=false"  # mmc_jax.infra.startup adds the project's flags
    fi
    workdir="$ROOT/${arm}_$round"
    rm -rf "$workdir"
    XLA_FLAGS="$flags" python -m mmc_jax.train --config configs/gardner.py:cpu \
      --config.num_iterations=12 --config.eval.every=0 --config.checkpoint.every=$every \
      --workdir "$workdir" > "$workdir.log" 2>&1
    python - "$workdir" "$arm" "$round" <<'PY'
import json, statistics, sys
workdir, arm, round_ = sys.argv[1:]
with open(f"{workdir}/metrics.jsonl") as f:
    seconds = [json.loads(line)["perf/iteration_seconds"] for line in f][1:]
print(f"{arm:>20} round {round_}: {statistics.median(seconds):.2f} s per iteration "
      f"(range {min(seconds):.2f}-{max(seconds):.2f}, iterations 2-{len(seconds) + 1})",
      flush=True)
PY
  done
done
python -m mmc_jax.bench iteration --configs gardner:cpu --repeats 2
