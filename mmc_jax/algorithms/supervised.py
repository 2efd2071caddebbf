"""Supervised pretraining from an engine's play (SigmaZero-style), on the Algorithm contract.

Two phases, one command (`python -m mmc_jax.train --config configs/supervised.py --workdir W`):

1. **Data** (host side, in `setup`): Fairy-Stockfish (the project's UCI client) plays games of
   `config.variant` against itself in `data.processes` worker processes. Each game opens with
   `data.random_plies` uniformly random legal moves (varied openings); from then on every
   position is analysed with MultiPV `data.multipv` at `data.nodes` nodes, and labelled:
     policy  softmax over the analysed moves of (score - best score) / `data.temperature_cp`
             (centipawns; 0 on the moves the engine did not rank), the engine's choice made soft
             so that near-equal moves share the mass;
     value   `data.value_mix` x the game's result + (1 - `data.value_mix`) x
             tanh(score / `data.cp_scale`), both from the mover's view. The result is unbiased
             but noisy (one game); the engine's score is far less noisy but on the engine's own
             scale: half of each by default.
   The move played is drawn from the same softmax (more varied games than always the best).
   Games go into shards of `data.shard_games` games (`W/dataset/shard-NNNNN.npz`: FENs, the
   analysed moves as action ids, their probabilities, the value targets), each listed in
   `W/dataset/manifest.json` once written; a re-run reads the shards already listed and plays
   only the missing ones (shard i is seeded by (seed, i), so the dataset does not depend on how
   often it was resumed). Progress: shards done, positions, ETA.
2. **Learning** (the run loop): each iteration takes `learner.steps_per_iteration` AlphaZero
   learner steps (`training.learner.train_step`: the same loss and optimizer as self-play
   training) on minibatches drawn from the whole dataset, handed in from the host between
   compiled iterations (`host_data`: the draws are seeded by the iteration, so a resumed run is
   bit-identical). With `data.holdout_shards` k > 0 the last k shards (whole games, never
   drawn for a step) are the held-out set: every iteration ends with the loss on up to
   `VALID_ROWS` of their positions, `valid/policy_loss` and `valid/value_loss` beside the
   training losses in the metrics and their plots (where memorising the games shows as the
   two curves parting). With `data.labels` (a folder of `python -m mmc_jax.labels build`) phase
   1 is skipped: every legal move's engine score is the policy target's softmax and the best
   score the value (`load_labels`), on the folder's first `data.positions` training positions,
   its held-out games the valid/ losses (issue 72's data curve). The network is
   `configs/gardner.py`'s, so the result starts AlphaZero
   (`--init_from` of adapt, or `runloop.run(..., init_params=...)`) without conversion.
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import time
import zipfile
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from mmc_jax import rules as R
from mmc_jax import uci
from mmc_jax.evaluation import match
from mmc_jax.infra import sharding, storage
from mmc_jax.model import network as network_lib
from mmc_jax.training import learner
from mmc_jax.training.algorithm import (
    ReplicatedAlgorithm,
    ReplicatedState,
    check_at_least_one,
    check_ranges,
    compile_step,
)
from mmc_jax.uci import workers as processes_lib

MANIFEST = "manifest.json"
DATASET = "dataset"
VALID_ROWS = 4096  # held-out positions scored each iteration (the first ones of the held-out set)


# ----------------------------------------------------------------------------- labels


def policy_from_scores(scores: np.ndarray, temperature_cp: float) -> np.ndarray:
    """float32 probabilities of analysed moves from their centipawn scores (mover's view):
    softmax of (score - best) / temperature_cp (mate scores clipped to +-2000 first)."""
    scores = np.clip(np.asarray(scores, np.float64), -2000.0, 2000.0)
    logits = (scores - scores.max()) / max(temperature_cp, 1e-6)
    weights = np.exp(logits)
    return (weights / weights.sum()).astype(np.float32)


def value_target(result: float, score_cp: float, mix: float, cp_scale: float) -> float:
    """The value target of a position (mover's view): `mix` x result + (1 - mix) x
    tanh(score / cp_scale)."""
    score = float(np.clip(score_cp, -20 * cp_scale, 20 * cp_scale))
    return float(mix * result + (1.0 - mix) * math.tanh(score / cp_scale))


# ----------------------------------------------------------------------------- data


def _settings(config) -> dict[str, Any]:
    """What the dataset depends on (a manifest written with other settings is refused)."""
    data = config.data
    return {
        "variant": str(config.variant),
        "seed": int(config.seed),
        "shard_games": int(data.shard_games),
        "nodes": int(data.nodes),
        "multipv": int(data.multipv),
        "temperature_cp": float(data.temperature_cp),
        "random_plies": int(data.random_plies),
        "max_plies": int(data.max_plies),
        "value_mix": float(data.value_mix),
        "cp_scale": float(data.cp_scale),
    }


# The dataset workers' engine start-up: the first `uciok` and the other start-up answers may
# take many seconds on a loaded machine (10 s timed out beside a test suite, 2026-11-28).
WORKER_ENGINE_TIMEOUTS = {"uci_timeout": 60.0, "handshake_timeout": 60.0}
# And one 100-node analysis gave no answer in 30 s beside a test suite at nice 19 (2026-11-28,
# shard 51 of 96): a worker waits longer per move, and a shard whose engine times out or dies is
# played again from its start with a fresh engine (the same seed: the same shard), up to
# SHARD_ATTEMPTS times in all.
WORKER_MOVE_TIMEOUT = 120.0
SHARD_ATTEMPTS = 3


def play_shard(settings: dict[str, Any], index: int, engine: str | None = None) -> dict:
    """The arrays of shard `index`: `shard_games` engine games (module doc), in numpy."""
    variant = settings["variant"]
    rng = np.random.default_rng([settings["seed"], index])
    limits = uci.Limits(nodes=settings["nodes"])
    k = settings["multipv"]
    fens, actions, probs, values = [], [], [], []
    # A worker among others on a busy machine: the first `uciok` may take seconds there (the
    # first wait is the shorter of the two timeouts, so both are raised).
    with uci.UciEngine(variant, engine, probe=False, **WORKER_ENGINE_TIMEOUTS) as player:
        for _ in range(settings["shard_games"]):
            start = R.start_fen(variant)
            fen, moves, positions = start, [], []  # positions: (fen, ids, probs, score, turn)
            outcome = None
            for ply in range(settings["max_plies"]):
                outcome = R.result(variant, fen)
                if outcome is not None:
                    break
                legal = R.legal_moves(variant, fen)
                if ply < settings["random_plies"]:
                    move = legal[int(rng.integers(len(legal)))]
                else:
                    analysed = player.analyse(start, moves, limits, k, WORKER_MOVE_TIMEOUT)
                    analysed = [(m, s) for m, s in analysed if m in legal]
                    if not analysed:  # the engine had nothing legal to say: a random move
                        analysed = [(legal[int(rng.integers(len(legal)))], 0.0)]
                    p = policy_from_scores([s for _, s in analysed], settings["temperature_cp"])
                    ids = [R.uci_to_action(variant, fen, m) for m, _ in analysed]
                    turn = 0 if fen.split()[1] == "w" else 1
                    positions.append((fen, ids, p, analysed[0][1], turn))
                    move = analysed[int(rng.choice(len(analysed), p=p))][0]
                moves.append(move)
                fen = R.apply_move(variant, fen, move)
            outcome = R.result(variant, fen) if outcome is None else outcome
            white = {"1-0": 1.0, "0-1": -1.0}.get(outcome or "1/2-1/2", 0.0)
            for position_fen, ids, p, score, turn in positions:
                result = white if turn == 0 else -white
                padded = np.full(k, -1, np.int32)
                padded[: len(ids)] = ids
                weights = np.zeros(k, np.float32)
                weights[: len(p)] = p
                fens.append(position_fen)
                actions.append(padded)
                probs.append(weights)
                values.append(
                    value_target(result, score, settings["value_mix"], settings["cp_scale"])
                )
    return {
        "fen": np.asarray(fens, dtype=str),
        "actions": np.asarray(actions, np.int32).reshape(-1, k),
        "probs": np.asarray(probs, np.float32).reshape(-1, k),
        "value": np.asarray(values, np.float32),
    }


def play_shard_retrying(settings: dict[str, Any], index: int, engine: str | None = None) -> dict:
    """`play_shard`, played again from its start (fresh engine, same shard) when the engine
    times out or dies, up to SHARD_ATTEMPTS times in all; the last failure is raised."""
    for _ in range(SHARD_ATTEMPTS - 1):
        try:
            return play_shard(settings, index, engine)
        except (uci.EngineTimeout, uci.EngineCrashed):
            pass
    return play_shard(settings, index, engine)


def _shard_job(job):
    settings, index, path, engine = job
    arrays = play_shard_retrying(settings, index, engine)
    tmp = path + ".tmp.npz"
    np.savez_compressed(tmp, **arrays)
    os.replace(tmp, path)
    return index, int(len(arrays["value"]))


def _read_manifest(folder: str) -> dict | None:
    return storage.read_json(os.path.join(folder, MANIFEST), "move it aside to regenerate")


def _write_manifest(folder: str, manifest: dict) -> None:
    storage.write_json(os.path.join(folder, MANIFEST), manifest)


def _adopt_unlisted(folder: str, manifest: dict, total: int, log) -> None:
    """Shard files a killed run wrote but did not list (each is written whole, then renamed
    into place, and a shard depends on its index alone): listed now, not played again."""
    listed = {shard["index"] for shard in manifest["shards"]}
    for index in range(total):
        name = f"shard-{index:05d}.npz"
        path = os.path.join(folder, name)
        if index in listed or not os.path.exists(path):
            continue
        try:
            with np.load(path) as arrays:
                positions = int(len(arrays["value"]))
        except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile):
            os.remove(path)  # (cannot happen to a renamed file; a copy cut short, say)
            continue
        manifest["shards"].append({"index": index, "file": name, "positions": positions})
        log(f"data: {name} was written but not listed (a killed run): adopted")
    manifest["shards"].sort(key=lambda shard: shard["index"])
    _write_manifest(folder, manifest)


@contextlib.contextmanager
def _stopped_note(folder: str, manifest: dict, total: int, log):
    """On Ctrl-C or SIGTERM while the dataset is made: say what is kept, then stop."""
    try:
        yield
    except KeyboardInterrupt as stop:
        name = "SIGTERM" if isinstance(stop, processes_lib.Terminated) else "Ctrl-C"
        log(
            f"{name}: stopped making the dataset; {len(manifest['shards'])} of {total} shards "
            f"kept in {folder}: the same command plays the rest"
        )
        raise


def generate(config, workdir: str, log=print, engine: str | None = None) -> dict:
    """Make (or finish) the dataset of `config` in `<workdir>/dataset/`; returns its manifest.
    Shards already in the manifest are kept; the rest are played in `data.processes`
    processes, each listed as soon as it is written."""
    folder = os.path.join(os.fspath(workdir), DATASET)
    os.makedirs(folder, exist_ok=True)
    settings = _settings(config)
    manifest = storage.open_manifest(
        os.path.join(folder, MANIFEST),
        settings,
        "move it aside to regenerate",
        made="a dataset",
        elsewhere="another --workdir",
    )
    total = math.ceil(int(config.data.games) / settings["shard_games"])
    _adopt_unlisted(folder, manifest, total, log)
    done = {shard["index"] for shard in manifest["shards"]}
    todo = [i for i in range(total) if i not in done]
    if todo:
        log(
            f"data: {len(todo)} of {total} shards of {settings['shard_games']} engine games to "
            f"play ({config.data.processes} processes, {settings['nodes']} nodes, MultiPV "
            f"{settings['multipv']}), into {folder}"
        )
    started = time.time()
    jobs = [(settings, i, os.path.join(folder, f"shard-{i:05d}.npz"), engine) for i in todo]
    processes = min(int(config.data.processes), max(len(jobs), 1))
    with (
        processes_lib.sigterm_as_interrupt(),
        _stopped_note(folder, manifest, total, log),
        processes_lib.worker_pool(processes)
        if processes > 1 and len(jobs) > 1
        else _Serial() as pool,
    ):
        for finished, (index, positions) in enumerate(pool.imap_unordered(_shard_job, jobs), 1):
            manifest["shards"].append(
                {"index": index, "file": f"shard-{index:05d}.npz", "positions": positions}
            )
            manifest["shards"].sort(key=lambda shard: shard["index"])
            _write_manifest(folder, manifest)
            elapsed = time.time() - started
            eta = elapsed / finished * (len(jobs) - finished)
            log(
                f"data: shard {len(manifest['shards'])}/{total} ({positions} positions) | "
                f"{sum(s['positions'] for s in manifest['shards'])} positions | "
                f"ETA {eta:.0f}s"
            )
    _write_manifest(folder, manifest)
    return manifest


class _Serial:
    """A stand-in for a process pool: the jobs in this process, in order."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    @staticmethod
    def imap_unordered(fn, jobs):
        return map(fn, jobs)


@functools.cache
def _observe_fn():
    def observe(rules, states):
        return R.observe(rules, states), R.legal_action_mask(rules, states)

    return jax.jit(observe)


def load_dataset(config, workdir: str, chunk: int = 512) -> dict[str, np.ndarray]:
    """The whole dataset as host arrays: packed-free observations [N, 5, 5, C], legal masks
    [N, A], dense policy targets are made per minibatch from (actions, probs) [N, K];
    `train_rows`: the rows before the held-out shards' (all N without `data.holdout_shards`)."""
    folder = os.path.join(os.fspath(workdir), DATASET)
    manifest = _read_manifest(folder)
    if manifest is None or not manifest["shards"]:
        raise ValueError(f"{folder}: no dataset (the run makes it first)")
    parts = []
    for shard in manifest["shards"]:
        path = os.path.join(folder, shard["file"])
        try:
            with np.load(path) as arrays:
                parts.append({name: arrays[name] for name in ("fen", "actions", "probs", "value")})
        except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as error:
            raise ValueError(
                f"{path} is damaged ({type(error).__name__}); delete it and its manifest entry "
                "to play it again"
            ) from None
    data = {name: np.concatenate([p[name] for p in parts]) for name in parts[0]}
    held_out = min(int(config.data.get("holdout_shards", 0)), len(parts) - 1)
    data["train_rows"] = np.asarray(sum(len(p["value"]) for p in parts[: len(parts) - held_out]))
    data["obs"], data["mask"] = _observations(str(config.variant), data["fen"], chunk)
    return data


def _observations(variant: str, fens: np.ndarray, chunk: int = 512):
    """Observations [N, 5, 5, C] and legal masks [N, A] of FENs, in chunks of one shape."""
    obs, masks = [], []
    for begin in range(0, len(fens), chunk):
        part = list(fens[begin : begin + chunk])
        states = R.from_fens(part, variant)
        rules = R.batch(variant, len(part))
        o, m = jax.device_get(_observe_fn()(rules, states))
        obs.append(o)
        masks.append(m)
    return np.concatenate(obs), np.concatenate(masks)


def load_labels(config, chunk: int = 512) -> dict[str, np.ndarray]:
    """The dataset of an action-value label folder (`config.data.labels`, made by `python -m
    mmc_jax.labels build`): its first `data.positions` training positions (0: all; in shard
    order, so a larger row contains a smaller one) and then every held-out position (whole
    games). Policy target: the softmax of every legal move's score at `data.temperature_cp`;
    value target: tanh(best score / `data.cp_scale`)."""
    from mmc_jax.uci import labels as labels_lib

    folder = str(config.data.labels)
    manifest = labels_lib.read_manifest(folder)
    if manifest is None:
        raise ValueError(
            f"config.data.labels={folder!r} has no label manifest: build it with "
            f"python -m mmc_jax.labels build {folder}"
        )
    if manifest["settings"]["variant"] != str(config.variant):
        raise ValueError(
            f"config.data.labels={folder!r} labels {manifest['settings']['variant']}, not "
            f"config.variant={config.variant}"
        )
    rows = labels_lib.load(folder)
    train = np.flatnonzero(~rows["held_out"])
    wanted = int(config.data.positions) or len(train)
    if wanted > len(train):
        raise ValueError(
            f"config.data.positions={wanted:,}: {folder} has {len(train):,} training positions; "
            f"build more with python -m mmc_jax.labels build {folder} --positions N"
        )
    order = np.concatenate([train[:wanted], np.flatnonzero(rows["held_out"])])
    actions = rows["actions"][order]
    scores = np.where(actions >= 0, rows["scores"][order], np.nan)
    clipped = np.clip(scores, -2000.0, 2000.0)
    logits = (clipped - np.nanmax(clipped, axis=1, keepdims=True)) / float(
        config.data.temperature_cp
    )
    weights = np.where(actions >= 0, np.exp(np.nan_to_num(logits, nan=-np.inf)), 0.0)
    data = {
        "fen": rows["fen"][order],
        "actions": actions,
        "probs": (weights / weights.sum(axis=1, keepdims=True)).astype(np.float32),
        "value": np.tanh(
            np.clip(rows["value"][order], -2000.0, 2000.0) / float(config.data.cp_scale)
        ).astype(np.float32),
        "train_rows": np.asarray(wanted),
    }
    data["obs"], data["mask"] = _observations(str(config.variant), data["fen"], chunk)
    return data


def labelled_batch(data: dict[str, np.ndarray], rows: np.ndarray) -> learner.Batch:
    """The learner's `Batch` of dataset rows `rows` (any shape): the dense policy target from
    the analysed moves' (actions, probs)."""
    num_actions = data["mask"].shape[-1]
    policy = np.zeros((*rows.shape, num_actions), np.float32)
    actions, probs = data["actions"][rows], data["probs"][rows]
    where = np.nonzero(actions >= 0)
    policy[(*where[:-1], actions[where])] = probs[where]
    return learner.Batch(
        obs=data["obs"][rows],
        legal_action_mask=data["mask"][rows],
        policy_target=policy,
        value_target=data["value"][rows],
        value_mask=np.ones(rows.shape, bool),
    )


# ----------------------------------------------------------------------------- the algorithm


def _network(config):
    return network_lib.make_network(config.network)


def _optimizer(config):
    return learner.make_optimizer(config.learner)


def _compile_key(config: ml_collections.ConfigDict) -> ml_collections.FrozenConfigDict:
    """The part of the config that shapes the compiled iteration (a hashable cache key)."""
    return ml_collections.FrozenConfigDict({"network": config.network, "learner": config.learner})


def iteration(state: ReplicatedState, batches, valid, *, config):
    """`learner.steps_per_iteration` steps on the host's `batches` (stacked), then the held-out
    losses of the new parameters on `valid` (None: none held out). (state, metrics)."""
    network, optimizer = _network(config), _optimizer(config)

    def one(carry, batch):
        params, opt_state = carry
        params, opt_state, metrics = learner.train_step(
            params, opt_state, batch, network, optimizer, config.learner
        )
        return (params, opt_state), metrics

    (params, opt_state), metrics = jax.lax.scan(one, (state.params, state.opt_state), batches)
    metrics = jax.tree.map(jnp.mean, metrics)
    if valid is not None:  # the held-out loss of the parameters after the steps
        _, scores = learner.loss_fn(params, network, valid, config.learner)
        metrics["valid_policy_loss"] = scores["policy_loss"]
        metrics["valid_value_loss"] = scores["value_loss"]
    return ReplicatedState(params=params, opt_state=opt_state), metrics


def prepare_config(config: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
    """A validated, locked copy of a supervised run config (ValueError naming the field)."""
    config = ml_collections.ConfigDict(config.to_dict())
    config.variant = R.check_variant(config.variant)
    if not uci.supported_by_fairy_stockfish(config.variant):
        raise ValueError(
            f"config.variant={config.variant!r}: Fairy-Stockfish does not play it, so it has "
            "no engine games to learn from"
        )
    check_at_least_one(config, ("num_iterations", "data.games", "data.shard_games",
                                "data.processes", "data.nodes", "data.multipv", "data.max_plies",
                                "learner.batch_size", "learner.steps_per_iteration",
                                "checkpoint.every"))  # fmt: skip
    ranges = (
        ("data.value_mix", 0.0, 1.0),
        ("data.temperature_cp", 1e-3, 1e6),
        ("data.cp_scale", 1.0, 1e6),
        ("learner.learning_rate", 1e-9, 10.0),
    )
    check_ranges(config, ranges)
    if int(config.data.random_plies) < 0:
        raise ValueError("config.data.random_plies must be >= 0")
    positions = config.data.get("positions", 0)
    if isinstance(positions, bool) or not isinstance(positions, int) or positions < 0:
        raise ValueError(f"config.data.positions must be an integer >= 0, got {positions!r}")
    shards = math.ceil(int(config.data.games) / int(config.data.shard_games))
    held_out = config.data.get("holdout_shards", 0)
    if isinstance(held_out, bool) or not isinstance(held_out, int) or not 0 <= held_out < shards:
        raise ValueError(
            f"config.data.holdout_shards must be an integer from 0 to {shards - 1} (the dataset "
            f"has {shards} shards of {config.data.shard_games} games), got {held_out!r}"
        )
    config.lock()
    return config


class Supervised(ReplicatedAlgorithm):
    """Supervised learning from Fairy-Stockfish's games (configs/supervised.py)."""

    def setup(self, config, mesh):
        del config, mesh  # the data lives in the workdir: `load_data`
        return None

    def load_data(self, config, mesh, workdir, log):
        """Makes or finishes the dataset in `workdir` and loads it (host arrays)."""
        del mesh
        if config.data.get("labels", ""):
            data = load_labels(config)
            held = len(data["value"]) - int(data["train_rows"])
            log(
                f"data: {int(data['train_rows']):,} training positions and {held:,} held out "
                f"from the action-value labels in {config.data.labels}"
            )
            return data
        generate(config, os.fspath(workdir), log)
        data = load_dataset(config, workdir)
        log(f"data: {len(data['value']):,} labelled positions loaded")
        return data

    def host_data(self, config, mesh, data, iteration):
        rng = np.random.default_rng([int(config.seed), iteration])
        steps, size = int(config.learner.steps_per_iteration), int(config.learner.batch_size)
        rows = rng.integers(0, int(data["train_rows"]), (steps, size))
        return sharding.put_replicated(labelled_batch(data, rows), mesh)

    def fresh_state(self, config, key):
        params = network_lib.init_params(_network(config), key, R.OBS_SHAPE)
        return ReplicatedState(params=params, opt_state=_optimizer(config).init(params))

    def describe(self, config, mesh, state):
        data = config.data
        source = (
            f"action-value labels from {data.labels} ({data.positions or 'all'} positions)"
            if data.get("labels", "")
            else f"{data.games} Fairy-Stockfish games at {data.nodes} nodes (MultiPV "
            f"{data.multipv}"
            + (f", the last {data.holdout_shards} shards held out" if data.holdout_shards else "")
            + ")"
        )
        return (
            f"supervised ({config.variant}): {mesh.size} device(s) "
            f"({jax.devices()[0].platform}), {source}, {config.learner.steps_per_iteration} "
            f"steps of {config.learner.batch_size} per iteration, net "
            f"{config.network.num_blocks}x{config.network.channels} "
            f"({network_lib.num_params(state.params):,} params)"
        )

    def compile(self, config, mesh, state, data, start):
        first = self.host_data(config, mesh, data, start)
        held_out = np.arange(int(data["train_rows"]), len(data["value"]))[:VALID_ROWS]
        valid = (
            sharding.put_replicated(labelled_batch(data, held_out), mesh) if len(held_out) else None
        )
        steps, size = int(config.learner.steps_per_iteration), int(config.learner.batch_size)

        def to_record(metrics):
            record = {
                "selfplay/frames": steps * size,
                "train/policy_loss": metrics["policy_loss"],
                "train/value_loss": metrics["value_loss"],
                "train/policy_entropy": metrics["policy_entropy"],
                "train/grad_norm": metrics["grad_norm"],
            }
            if valid is not None:
                record["valid/policy_loss"] = metrics["valid_policy_loss"]
                record["valid/value_loss"] = metrics["valid_value_loss"]
            return record

        return compile_step(
            iteration,
            _compile_key(config),
            state,
            first,
            to_record,
            arguments=lambda state, batches, key: (state, batches, valid),
        )

    def progress_fields(self, record):
        fields = [f"entropy {record['train/policy_entropy']:.2f}"]
        if "valid/value_loss" in record:
            fields.append(
                f"held-out pol {record['valid/policy_loss']:.3f} "
                f"val {record['valid/value_loss']:.3f}"
            )
        return fields

    def evaluate(self, config, params, key):
        return match.evaluate_run_params(config, params, key)

    def next_command(self, config, workdir):
        return (
            f"python -m mmc_jax.evaluate --checkpoint {workdir} --variant {config.variant} "
            "--opponent greedy --games 400"
        )


ALGORITHM = Supervised(
    "supervised", batch_field="learner.batch_size", prepare=prepare_config, section="data"
)
