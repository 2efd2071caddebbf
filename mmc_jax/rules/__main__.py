"""Engine demo: `python -m mmc_jax.rules --variant atomic --games 3`.

Plays uniformly random games with the jitted batched engine (all games in one `lax.scan`) and
prints each one as a sequence of Unicode boards with the moves in UCI and the result.
"""

from __future__ import annotations

import argparse
import sys

import jax
import jax.numpy as jnp
import numpy as np

from mmc_jax import rules as R
from mmc_jax.rules import notation


def play_random_games(variant: str, games: int, max_plies: int, seed: int):
    """Random games as (moves [games][...] UCI, final FENs, rewards [games, 2])."""
    rules = R.batch(R.get(variant, max_plies=max_plies), games)

    def body(carry, key):
        state, returns = carry
        mask = R.legal_action_mask(rules, state)
        action = R.random_legal_action(key, mask)
        new = R.step(rules, state, action)
        # Rewards arrive on the terminal transition only: sum them over the game.
        return (new, returns + new.rewards), (state, action, state.terminated)

    @jax.jit
    def run(key):
        carry = (R.init(rules), jnp.zeros((games, 2), jnp.float32))
        return jax.lax.scan(body, carry, jax.random.split(key, max_plies))

    (final, returns), (states, actions, was_over) = jax.device_get(run(jax.random.key(seed)))
    rifle = R.parse(variant).capture == "rifle"
    records = []
    for g in range(games):
        moves, fens = [], []
        for ply in range(max_plies):
            if was_over[ply, g]:
                break
            s = jax.tree.map(lambda x, ply=ply, g=g: x[ply, g], states)
            fens.append(R.to_fen(s))
            moves.append(
                notation.action_to_uci(int(actions[ply, g]), int(s.turn), s.pieces, s.own, rifle)
            )
        last = jax.tree.map(lambda x, g=g: x[g], final)
        fens.append(R.to_fen(last))
        records.append((moves, fens, np.asarray(returns[g])))
    return records


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m mmc_jax.rules",
        description="Play random games of a minichess variant with the jitted engine and "
        "print them as Unicode boards.",
    )
    parser.add_argument(
        "--variant",
        default="gardner",
        help=f"a variant spec: one of {', '.join(R.VARIANTS)}, optionally with overrides, or "
        "overrides alone (e.g. 'dark,capture=atomic', 'start=shuffle:17,colour=other')",
    )
    parser.add_argument("--games", type=int, default=3, help="number of games (default 3)")
    parser.add_argument("--max-plies", type=int, default=256, help="ply cap (draw by rule)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--every", type=int, default=1, help="print every N-th board")
    parser.add_argument("--quiet", action="store_true", help="print only moves and results")
    args = parser.parse_args(argv)
    try:
        args.variant = R.check_variant(args.variant)
    except ValueError as e:
        parser.error(str(e))
    if args.games < 1 or args.max_plies < 1 or args.every < 1:
        parser.error("--games, --max-plies and --every must be positive")

    print(f"Playing {args.games} random {args.variant} game(s) (jit-compiling first)...")
    records = play_random_games(args.variant, args.games, args.max_plies, args.seed)
    for g, (moves, fens, rewards) in enumerate(records):
        print(f"\n=== game {g + 1}: {args.variant}, {len(moves)} plies ===")
        if not args.quiet:
            for ply, fen in enumerate(fens):
                if ply % args.every and ply != len(fens) - 1:
                    continue
                fog = R.has_fog(args.variant)
                shown = R.fog_fen(args.variant, fen) if fog else fen
                header = "start" if ply == 0 else f"after {ply}. {moves[ply - 1]}"
                print(f"\n{header}   {fen}")
                print(R.render(shown))
        print("moves:", " ".join(moves))
        white = rewards[0]
        result = "1-0" if white > 0 else "0-1" if white < 0 else "1/2-1/2"
        print(f"result: {result}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
