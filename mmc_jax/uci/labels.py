"""Action-value labels from Fairy-Stockfish (the library of `python -m mmc_jax.labels`): every
legal move of a position scored at a fixed node budget, built in resumable shards by several
processes (issue 72, ChessBench-style).

    python -m mmc_jax.labels build DIR --positions 100000 --nodes 1000 --processes 2
    python -m mmc_jax.labels status DIR

**Positions.** Shard i (seeded by (seed, i), so a shard never depends on when or where it was
made) plays `--games` games of the variant. Each game opens with 2-8 uniformly random plies (the
varied openings), then every position is labelled and the game goes on with a move drawn from
the softmax of its labels at `--temperature` centipawns; with probability `--perturb` the move
is a uniformly random legal one instead (the perturbed positions: lines a strong engine never
plays, whose labels the network must still get right). Sources are recorded per row: `engine`
(a position on the engine's own line) and `perturbed` (the position right after a random
move). The shipped models' self-play is not a source yet.

**Labels.** For every legal move m, `go nodes N searchmoves m` from the position (after
`ucinewgame`, so that no search reads another's hash): the score of m from the mover's view in
centipawns, a mate in n as +-(100,000 - n). The value target of the position is the best
move's score (`value = tanh(best / cp_scale)` when read). The rules have no castling, pawn
double step or en passant, so the file-mirrored position (files a<->e) is a position of the same
rules with the mirrored labels (`tests/rules/test_mirror.py` proves it on random positions);
each labelled position is stored with its mirror (source `mirror`), unless the two are the same
position.

**Files.** `DIR/shard-NNNNN.npz` (fen, game, source, moves as action ids padded with -1,
their scores), listed in `DIR/manifest.json` once written with the seconds it took; the
manifest fixes the settings, and a build with others is refused. A rerun makes only the
missing shards. Games are split into train and held-out by a hash of (seed, shard, game):
whole games (with their mirrors) are held out, `--holdout` of them. `load` deduplicates by
position (the first occurrence in shard order wins) and returns the split.
"""

from __future__ import annotations

import hashlib
import math
import os
import time
import zipfile
from typing import Any

import numpy as np

from mmc_jax.infra import storage

MANIFEST = "manifest.json"
MAX_MOVES = 64  # more legal moves than any 5x5 position of the rule space has
SOURCES = ("engine", "perturbed", "mirror")
ENGINE_TIMEOUTS = {"uci_timeout": 60.0, "handshake_timeout": 60.0}
MOVE_TIMEOUT = 120.0
SHARD_ATTEMPTS = 3


# ----------------------------------------------------------------------------- mirrors


def mirror_board(board: str) -> str:
    """The FEN board field with files a<->e (each rank read backwards)."""
    from mmc_jax.rules import notation

    return notation.fen_board(row[::-1] for row in notation.board_rows(board))


def mirror_fen(fen: str) -> str:
    """`fen` with files a<->e (the other fields kept: castling and en passant are always -)."""
    board, *rest = fen.split()
    return " ".join([mirror_board(board), *rest])


_FILES = str.maketrans("abcde", "edcba")


def mirror_move(move: str) -> str:
    """A UCI move with files a<->e (a promotion's piece kept)."""
    return move[:4].translate(_FILES) + move[4:]


# ----------------------------------------------------------------------------- labelling


def policy(scores: np.ndarray, temperature_cp: float) -> np.ndarray:
    """Softmax of (score - best) / temperature over the moves (mates clipped to +-2000)."""
    scores = np.clip(np.asarray(scores, np.float64), -2000.0, 2000.0)
    weights = np.exp((scores - scores.max()) / max(temperature_cp, 1e-6))
    return weights / weights.sum()


def _game_id(shard: int, game: int) -> int:
    return shard * 100_000 + game


def held_out(seed: int, game: int, share: float) -> bool:
    """Whether game `game` (its id) is in the held-out split: a hash of (seed, game) below
    `share` (whole games, so no held-out position has its game's neighbours in training)."""
    digest = hashlib.sha256(f"{seed}:{game}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < share


def label_shard(settings: dict[str, Any], index: int, engine: str | None = None) -> dict:
    """Shard `index`'s rows (module doc) as numpy arrays."""
    from mmc_jax import rules as R
    from mmc_jax import uci

    variant = settings["variant"]
    rng = np.random.default_rng([settings["seed"], index])
    rows: dict[str, list] = {k: [] for k in ("fen", "game", "source", "actions", "scores")}

    def add(fen, game, source, moves, scores):
        ids = np.full(MAX_MOVES, -1, np.int32)
        ids[: len(moves)] = [R.uci_to_action(variant, fen, m) for m in moves]
        padded = np.full(MAX_MOVES, np.nan, np.float32)
        padded[: len(scores)] = scores
        rows["fen"].append(fen)
        rows["game"].append(game)
        rows["source"].append(SOURCES.index(source))
        rows["actions"].append(ids)
        rows["scores"].append(padded)

    limits = uci.Limits(nodes=settings["nodes"])
    with uci.UciEngine(variant, engine, probe=False, **ENGINE_TIMEOUTS) as player:
        for g in range(settings["games"]):
            game = _game_id(index, g)
            fen, perturbed = R.start_fen(variant), False
            opening = int(rng.integers(2, 9))
            for ply in range(settings["max_plies"]):
                if R.result(variant, fen) is not None:
                    break
                legal = R.legal_moves(variant, fen)
                if ply < opening:
                    fen = R.apply_move(variant, fen, legal[int(rng.integers(len(legal)))])
                    continue
                scores = [player.score_move(fen, m, limits, MOVE_TIMEOUT) for m in legal]
                add(fen, game, "perturbed" if perturbed else "engine", legal, scores)
                mirrored = mirror_fen(fen)
                if mirrored != fen:
                    add(mirrored, game, "mirror", [mirror_move(m) for m in legal], scores)
                perturbed = bool(rng.random() < settings["perturb"])
                if perturbed:  # the next position is off the engine's line: labelled as such
                    move = legal[int(rng.integers(len(legal)))]
                else:
                    p = policy(np.asarray(scores), settings["temperature_cp"])
                    move = legal[int(rng.choice(len(legal), p=p))]
                fen = R.apply_move(variant, fen, move)
    return {
        "fen": np.asarray(rows["fen"], dtype=str),
        "game": np.asarray(rows["game"], np.int64),
        "source": np.asarray(rows["source"], np.int8),
        "actions": np.asarray(rows["actions"], np.int32).reshape(-1, MAX_MOVES),
        "scores": np.asarray(rows["scores"], np.float32).reshape(-1, MAX_MOVES),
    }


def _shard_job(job):
    settings, index, path, engine = job
    from mmc_jax import uci

    started = time.time()
    for attempt in range(SHARD_ATTEMPTS):
        try:
            arrays = label_shard(settings, index, engine)
            break
        # (EngineNotUci: an engine that missed its `uciok` deadline on a loaded machine is
        # started again; a program that is no engine fails the same way every time.)
        except (uci.EngineTimeout, uci.EngineCrashed, uci.EngineNotUci):
            if attempt == SHARD_ATTEMPTS - 1:
                raise
    tmp = path + ".tmp.npz"
    np.savez_compressed(tmp, **arrays)
    os.replace(tmp, path)
    return index, int(len(arrays["fen"])), time.time() - started


# ----------------------------------------------------------------------------- the build


def read_manifest(folder: str) -> dict | None:
    return storage.read_json(os.path.join(folder, MANIFEST), "move it aside to rebuild")


def _write_manifest(folder: str, manifest: dict) -> None:
    storage.write_json(os.path.join(folder, MANIFEST), manifest)


def _adopt_unlisted(folder: str, manifest: dict, log) -> None:
    """Shard files a killed build wrote but did not list (written whole, then renamed into
    place; a shard depends on its index alone): listed now, their seconds unknown."""
    listed = {s["index"] for s in manifest["shards"]}
    for name in sorted(os.listdir(folder)):
        if not (name.startswith("shard-") and name.endswith(".npz")) or ".tmp" in name:
            continue
        index = int(name[len("shard-") : -len(".npz")])
        if index in listed:
            continue
        try:
            with np.load(os.path.join(folder, name)) as data:
                rows = int(len(data["fen"]))
        except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile):
            continue  # (a renamed shard is whole; anything else is not ours to list)
        manifest["shards"].append({"index": index, "file": name, "positions": rows})
        log(f"labels: {name} was written but not listed (a killed build): adopted")
    manifest["shards"].sort(key=lambda s: s["index"])
    _write_manifest(folder, manifest)


def build(
    folder: str,
    settings: dict[str, Any],
    positions: int,
    processes: int = 1,
    engine: str | None = None,
    log=print,
) -> dict:
    """Shards in `folder` until the manifest holds at least `positions` rows (mirrors
    included); returns the manifest. Shards already listed are kept."""
    import contextlib

    os.makedirs(folder, exist_ok=True)
    manifest = storage.open_manifest(
        os.path.join(folder, MANIFEST),
        settings,
        "move it aside to rebuild",
        made="labels",
        elsewhere="another folder",
    )
    from mmc_jax.uci import workers as processes_lib

    _adopt_unlisted(folder, manifest, log)
    started, made = time.time(), 0
    with (
        processes_lib.sigterm_as_interrupt(),
        processes_lib.worker_pool(processes) if processes > 1 else contextlib.nullcontext() as pool,
    ):
        while (have := sum(s["positions"] for s in manifest["shards"])) < positions:
            done = {s["index"] for s in manifest["shards"]}
            todo = [i for i in range(len(done) + processes) if i not in done][:processes]
            jobs = [(settings, i, os.path.join(folder, f"shard-{i:05d}.npz"), engine) for i in todo]
            results = pool.imap_unordered(_shard_job, jobs) if pool else map(_shard_job, jobs)
            for index, rows, seconds in results:
                manifest["shards"].append(
                    {
                        "index": index,
                        "file": f"shard-{index:05d}.npz",
                        "positions": rows,
                        "seconds": round(seconds, 1),
                    }
                )
                manifest["shards"].sort(key=lambda s: s["index"])
                _write_manifest(folder, manifest)
                made += rows
                have = sum(s["positions"] for s in manifest["shards"])
                rate = made / max(time.time() - started, 1e-9)
                eta = max(positions - have, 0) / max(rate, 1e-9)
                log(
                    f"labels: shard {index} ({rows} positions, {seconds:.0f} s) | {have:,} of "
                    f"{positions:,} | {rate:.1f} positions/s | ETA {eta / 60:.0f} min"
                )
    return manifest


def load(folder: str) -> dict[str, np.ndarray]:
    """Every listed shard, deduplicated by position (the first occurrence in shard order), with
    a boolean `held_out` per row (whole games) and `value` (the best move's score)."""
    manifest = read_manifest(folder)
    if manifest is None:
        raise ValueError(f"{folder} has no {MANIFEST}: build labels there first")
    settings = manifest["settings"]
    parts = []
    for shard in manifest["shards"]:
        path = os.path.join(folder, shard["file"])
        try:
            with np.load(path) as data:
                parts.append({k: data[k] for k in data.files})
        except (OSError, ValueError, EOFError, zipfile.BadZipFile) as error:
            raise ValueError(
                f"label shard {path} is damaged ({type(error).__name__}); delete it and remove "
                "its entry from the manifest, then rerun the build to remake it"
            ) from None
    data = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]} if parts else {}
    if not data:
        return {"fen": np.zeros(0, str), "held_out": np.zeros(0, bool)}
    keys = np.asarray([" ".join(f.split()[:2]) for f in data["fen"]])
    _, first = np.unique(keys, return_index=True)
    keep = np.sort(first)
    out = {k: v[keep] for k, v in data.items()}
    out["held_out"] = np.asarray(
        [held_out(settings["seed"], int(g), settings["holdout"]) for g in out["game"]]
    )
    out["value"] = np.nanmax(out["scores"], axis=1)
    out["duplicates"] = np.asarray(len(keys) - len(keep))
    return out


def status(folder: str) -> str:
    manifest = read_manifest(folder)
    if manifest is None:
        return f"{folder}: no labels yet"
    shards = manifest["shards"]
    rows = sum(s["positions"] for s in shards)
    timed = [s for s in shards if s.get("seconds") is not None]
    seconds = sum(s["seconds"] for s in timed)
    data = load(folder)
    unique = len(data["fen"])
    held = int(np.sum(data["held_out"]))
    sources = {
        name: int(np.sum(data.get("source", np.zeros(0)) == i)) for i, name in enumerate(SOURCES)
    }
    timed_rows = sum(s["positions"] for s in timed)
    per = seconds / timed_rows if timed_rows else math.nan
    return "\n".join(
        [
            f"{folder}: {len(shards)} shards, {rows:,} rows, {unique:,} unique positions "
            f"({held:,} held out), sources {sources}",
            f"settings {manifest['settings']}",
            f"cost: {per * 1000:.1f} ms of one process per row "
            f"({seconds / 3600:.2f} process-hours)",
        ]
    )
