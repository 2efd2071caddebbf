#!/usr/bin/env bash
# The 30-minute Gardner run on a CPU (issue 3's target), reproducible with one command:
#
#   bash experiments/gardner_cpu/run.sh [WORKDIR]        # default runs/gardner_cpu
#   VARIANT=atomic bash experiments/gardner_cpu/run.sh runs/atomic_cpu   # any other variant
#   bash experiments/gardner_cpu/run.sh runs/g4x48 --config.network.num_blocks=4  # overrides
#   MMC_CPU_DEVICES=auto bash experiments/gardner_cpu/run.sh runs/g2dev  # a device per core
#
# Arguments after WORKDIR are passed to `mmc_jax.train` as config overrides.
# 1. trains `configs/gardner.py:cpu` (with `--config.variant=$VARIANT`, default gardner) for
#    MINUTES (default 30) of wall time, compilation and the
#    periodic 64-game evaluations included; the trainer is then stopped (SIGTERM, like a
#    crash: the checkpoint of the last finished iteration is kept);
# 2. evaluates that checkpoint with 400 colour-balanced games against random and against
#    greedy, 32 simulations per move (deterministic Gumbel search), JSON in the workdir;
# 3. draws the curve (score vs minutes and vs frames) into WORKDIR/curve.png and prints a
#    markdown table (experiments/gardner_cpu/curve.py).
# The machine's load average is logged every 30 s to WORKDIR/loadavg.log.
set -euo pipefail
cd "$(dirname "$0")/../.."
WORKDIR=${1:-runs/gardner_cpu}
shift || true
MINUTES=${MINUTES:-30}
GAMES=${GAMES:-400}
VARIANT=${VARIANT:-gardner}
if [ -e "$WORKDIR/metrics.jsonl" ]; then
  echo "error: $WORKDIR already holds a run; the 30-minute protocol needs a fresh workdir" >&2
  exit 2
fi
mkdir -p "$WORKDIR"
date +%s > "$WORKDIR/started_at"
(while true; do echo "$(date +%s) $(cut -d' ' -f1-3 /proc/loadavg)"; sleep 30; done) \
  > "$WORKDIR/loadavg.log" &
LOADLOG=$!
trap 'kill $LOADLOG 2>/dev/null || true' EXIT
status=0
timeout -s TERM -k 30 "${MINUTES}m" python -m mmc_jax.train --config configs/gardner.py:cpu \
  --config.variant="$VARIANT" --workdir "$WORKDIR" "$@" 2>&1 | tee "$WORKDIR/train.log" || status=$?
elapsed=$(( $(date +%s) - $(cat "$WORKDIR/started_at") ))
if [ "$status" -eq 124 ]; then
  echo "training stopped at the ${MINUTES}-minute limit ($((elapsed / 60)) min $((elapsed % 60)) s)"
else
  # It ended by itself: the config's num_iterations cap (400 in the preset) came first, or it
  # failed. Either way it trained for less than the protocol's MINUTES; say so.
  echo "training ended by itself after $((elapsed / 60)) min $((elapsed % 60)) s, before the" \
    "${MINUTES}-minute limit (exit status $status; raise --config.num_iterations for a full run)"
fi
for opponent in random greedy; do
  python -m mmc_jax.evaluate --checkpoint "$WORKDIR" --variant "$VARIANT" --opponent "$opponent" \
    --games "$GAMES" --simulations 32 --json > "$WORKDIR/final_vs_$opponent.json"
  cat "$WORKDIR/final_vs_$opponent.json"
done
python experiments/gardner_cpu/curve.py "$WORKDIR"
