"""Tree reuse, A/B (issue 72 item 4): the model engine that keeps its search tree from move to
move against the same model searching every move from an empty tree, at equal nodes per move
and at equal time per move. The protocol is registered in experiments/strength/README.md
("Item 4, tree reuse") before its runs.

    python experiments/strength/reuse.py nodes [--nodes 200] [--games 400]
    python experiments/strength/reuse.py time [--movetime 500] [--games 400]
    python experiments/strength/reuse.py report

Both sides are `mmc_jax.evaluation.model_engine.ModelEngine`s of one model (`--model`, default
`gardner-h200`, `load_engine`) with the engine's tree (`--capacity`, 1024 nodes), the UCI
engine's search: `reuse_tree=True` against `reuse_tree=False`, each told `ucinewgame`
(`forget`) before a game. Games come in colour-balanced pairs: game 2k and 2k + 1 play opening
k of the arenas' random opening suite (`arena.opening_action`, `--opening-plies` 4, seeded by
`--seed`), the reusing engine White in the first. `nodes`: every searched move is a search of
`--nodes` simulations (the reusing engine's new ones: its kept visits come on top). `time`:
every searched move is the engine's timed search (`ModelEngine.grow_timed`, as `go movetime`)
of `--movetime` milliseconds, up to the capacity. The rules' ply cap (256) is a draw.

Each finished game is appended to `OUT/<match>.games.jsonl` (one line, flushed and synced),
so a killed run loses at most the game in progress and a rerun goes on from there (a file of
other settings is refused). Progress and an ETA go to stderr; the summary (W/D/L, score,
loss rate, Wilson 95% interval, Elo difference, mean nodes a move) is written to
`OUT/<match>.json` and printed. `report` prints the summaries of the matches in OUT.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "experiments" / "strength" / "reuse"
if str(ROOT) not in sys.path:  # `experiments.lab`
    sys.path.insert(0, str(ROOT))
from experiments.lab import stats  # noqa: E402

VARIANT = "gardner"
GAMES = 400
NODES = 200
MOVETIME_MS = 500


def match_name(args) -> str:
    return f"nodes{args.nodes}" if args.mode == "nodes" else f"time{args.movetime}ms"


def settings(args) -> dict:
    """What a match's games must share to be one match (checked on resume)."""
    limit = {"nodes": args.nodes} if args.mode == "nodes" else {"movetime_ms": args.movetime}
    return {
        "mode": args.mode,
        **limit,
        "model": args.model,
        "capacity": args.capacity,
        "opening_plies": args.opening_plies,
        "seed": args.seed,
        "max_plies": args.max_plies,
        "variant": VARIANT,
    }


def read_games(path: Path, wanted: dict) -> list[dict]:
    """The games already played (a torn last line, from a kill, is dropped)."""
    games = []
    if path.exists():
        for line in path.read_text().splitlines():
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue
            if record["settings"] != wanted:
                raise SystemExit(
                    f"{path} holds games of other settings ({record['settings']}); "
                    "use another --out"
                )
            games.append(record)
    return games


def engines(args):
    """(reusing engine, fresh engine): one model, one capacity, compiled up front so that the
    reusing engine reuses from its second search on (`precompile_reuse`)."""
    from mmc_jax.evaluation import model_engine

    reusing = model_engine.load_engine(
        args.model, max_plies=args.max_plies, capacity=args.capacity, reuse_tree=True
    )
    fresh = model_engine.ModelEngine(
        reusing.network,
        reusing.params,
        f"{reusing.name} (no reuse)",
        max_plies=args.max_plies,
        capacity=args.capacity,
        reuse_tree=False,
    )
    reusing.precompile(VARIANT)
    reusing.precompile_reuse(VARIANT)
    return reusing, fresh


def search(engine, position, args):
    """One move's search: `--nodes` simulations, or the timed search of `--movetime`."""
    if args.mode == "nodes":
        return engine.search(position, args.nodes)
    deadline = time.monotonic() + args.movetime / 1000
    *_, last = engine.grow_timed(position, engine.capacity, deadline)
    return last


def play_game(index: int, reusing, fresh, args) -> dict:
    """Game `index`: opening index // 2, the reusing engine White when the index is even."""
    from mmc_jax.evaluation import arena

    opening, reuse_white = index // 2, index % 2 == 0
    white, black = (reusing, fresh) if reuse_white else (fresh, reusing)
    for engine in (reusing, fresh):
        engine.forget()  # ucinewgame
    moves: list[str] = []
    searched = {"reuse": [0, 0, 0], "fresh": [0, 0, 0]}  # moves, nodes, kept visits
    started = time.monotonic()
    while True:
        mover = white if len(moves) % 2 == 0 else black
        position = mover.position(VARIANT, None, moves)
        if position.over:
            break
        if len(moves) < args.opening_plies:
            planes = position.ply.planes[0]
            action = arena.opening_action(planes, args.seed, opening, len(moves))
            move = {a: m for m, a in position.legal.items()}[action]
        else:
            result = search(mover, position, args)
            move = result.move
            side = searched["reuse" if mover is reusing else "fresh"]
            side[0] += 1
            side[1] += result.nodes
            side[2] += result.kept_visits
        moves.append(move)
    white_points = {"1-0": 1, "0-1": -1, "1/2-1/2": 0}[position.result]
    return {
        "game": index,
        "opening": opening,
        "reuse_white": reuse_white,
        "result": position.result,
        "reuse_reward": white_points if reuse_white else -white_points,
        "plies": len(moves),
        "moves": moves,
        "searched": searched,
        "seconds": round(time.monotonic() - started, 2),
        "settings": settings(args),
    }


def summary(games: list[dict], wanted: dict) -> dict:
    """The match from the reusing engine's side: W/D/L, score, loss rate, Wilson 95%."""
    rewards = [g["reuse_reward"] for g in games]
    n = len(rewards)
    wins, draws, losses = rewards.count(1), rewards.count(0), rewards.count(-1)
    score = (wins + 0.5 * draws) / n
    totals = {
        side: [sum(g["searched"][side][i] for g in games) for i in range(3)]
        for side in ("reuse", "fresh")
    }
    return {
        "settings": wanted,
        "games": n,
        "wins": wins,
        "draws": draws,
        "losses": losses,
        "score": score,
        "loss_rate": losses / n,
        "score_ci95_wilson": list(stats.wilson_interval(score, n)),
        "elo": stats.elo_difference(score),
        "as_white": [g["reuse_reward"] for g in games if g["reuse_white"]].count(1),
        "as_black": [g["reuse_reward"] for g in games if not g["reuse_white"]].count(1),
        "mean_plies": sum(g["plies"] for g in games) / n,
        # New simulations a searched move, and (reusing side) the root visits it kept.
        "reuse_nodes_per_move": totals["reuse"][1] / max(totals["reuse"][0], 1),
        "reuse_kept_visits_per_move": totals["reuse"][2] / max(totals["reuse"][0], 1),
        "fresh_nodes_per_move": totals["fresh"][1] / max(totals["fresh"][0], 1),
    }


def describe(result: dict) -> str:
    low, high = result["score_ci95_wilson"]
    return (
        f"{result['games']} games: +{result['wins']} ={result['draws']} -{result['losses']}, "
        f"score {result['score']:.3f} [{low:.3f}, {high:.3f}], loss rate "
        f"{result['loss_rate']:.3f}; nodes a move {result['reuse_nodes_per_move']:.0f} "
        f"(+{result['reuse_kept_visits_per_move']:.0f} kept) against "
        f"{result['fresh_nodes_per_move']:.0f}"
    )


def run(args) -> dict:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    name, wanted = match_name(args), settings(args)
    games_path = out / f"{name}.games.jsonl"
    games = read_games(games_path, wanted)
    done = {g["game"] for g in games}
    todo = [i for i in range(args.games) if i not in done]
    print(f"{name}: {len(done)} of {args.games} games played; {len(todo)} to go", file=sys.stderr)
    if todo:
        reusing, fresh = engines(args)
        started = time.monotonic()
        for count, index in enumerate(todo, start=1):
            record = play_game(index, reusing, fresh, args)
            with open(games_path, "a", encoding="utf-8") as f:
                f.write(json.dumps(record) + "\n")
                f.flush()
                os.fsync(f.fileno())
            games.append(record)
            per_game = (time.monotonic() - started) / count
            eta = per_game * (len(todo) - count) / 60
            print(
                f"[{name} game {index + 1}/{args.games}] {record['result']} (reuse "
                f"{'White' if record['reuse_white'] else 'Black'}, {record['plies']} plies, "
                f"{record['seconds']:.0f} s); {describe(summary(games, wanted))}; "
                f"ETA {eta:.0f} min",
                file=sys.stderr,
                flush=True,
            )
    result = summary(games, wanted)
    (out / f"{name}.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return result


def report(out: Path) -> str:
    lines = []
    for path in sorted(Path(out).glob("*.json")):
        result = json.loads(path.read_text())
        lines.append(f"{path.stem}: {describe(result)}")
    return "\n".join(lines) or f"no match in {out} yet"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description="Tree reuse A/B: the engine that keeps its tree against the same model "
        "without (experiments/strength/README.md, 'Item 4, tree reuse').",
    )
    commands = parser.add_subparsers(dest="mode", required=True)
    modes = {
        "nodes": "equal nodes: every searched move is a search of --nodes new simulations",
        "time": "equal time: every searched move is the engine's timed search of --movetime",
    }
    for mode, text in modes.items():
        sub = commands.add_parser(mode, help=text, description=text)
        sub.add_argument("--games", type=int, default=GAMES, help=f"even (default {GAMES})")
        if mode == "nodes":
            sub.add_argument("--nodes", type=int, default=NODES, help=f"default {NODES}")
        else:
            sub.add_argument(
                "--movetime", type=int, default=MOVETIME_MS, help=f"ms (default {MOVETIME_MS})"
            )
        sub.add_argument("--model", default="gardner-h200", help="default gardner-h200")
        sub.add_argument("--capacity", type=int, default=1024, help="tree nodes (1024)")
        sub.add_argument("--opening-plies", type=int, default=4, help="random plies (4)")
        sub.add_argument("--seed", type=int, default=0, help="of the opening suite (0)")
        sub.add_argument("--max-plies", type=int, default=None, help="ply cap, a draw (256)")
        sub.add_argument("--out", default=str(OUT), help=f"default {OUT.relative_to(ROOT)}")
    sub = commands.add_parser("report", help="the summaries of the matches played")
    sub.add_argument("--out", default=str(OUT))
    args = parser.parse_args(argv)
    if args.mode == "report":
        print(report(Path(args.out)))
        return 0
    if args.games < 2 or args.games % 2:
        parser.error("--games must be even: colour-balanced pairs")
    from mmc_jax.infra import startup

    startup.start()
    run(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
