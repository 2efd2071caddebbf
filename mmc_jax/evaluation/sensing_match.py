"""Matches of sensing variants (`fog=sense:W`): the player table's sensing players in the
compiled recon arena.

    agent = players.build("entropy-pimc", players.Context(variant="recon"))
    opponent = players.build("random", players.Context(variant="recon"))
    result = sensing_match.play_match("recon", agent, opponent, 8, jax.random.key(0))

The players are `players.ReconAgent`s (random, random-pimc, entropy-pimc, the learned agent of
a sensing model); their kinds are data of one compiled program (`recon_agents.play_games`), so
every pairing and every game of a schedule play in one batch. `play_schedule` plays given
pairings (what `experiments/recon/run.py` plays: every pair of several agents); `play_match`
plays one colour-balanced match, the agent White in the first half of the games, and reports
what `python -m mmc_jax.evaluate` reports for a board match (`elo.match_statistics`: W/D/L
overall and per colour, the score with its 95% intervals, the Elo difference).

The arena holds one learned model per batch (its parameters are shared by the games): a
schedule with the learned agents of two different models is refused in one line.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import numpy as np

from mmc_jax import rules as R
from mmc_jax.evaluation import elo
from mmc_jax.evaluation import players as players_lib
from mmc_jax.evaluation import recon_agents as A
from mmc_jax.search import recon_belief as RB

DEFAULT_WORLDS = A.DEFAULT_WORLDS  # boards drawn from the belief per searching decision


def learned_model(agents: Sequence[players_lib.ReconAgent]) -> tuple[Any, Any]:
    """(params, search config) of the one learned model among `agents` (None, None without a
    learned agent); ValueError (one line) for two different models or a learned agent built
    without its model."""
    learned = {agent.model: agent for agent in agents if agent.learned}
    if len(learned) > 1:
        raise ValueError(
            "the learned agents of two models "
            f"({', '.join(str(model) for model in learned)}): the recon arena holds one "
            "learned model per match"
        )
    if not learned:
        return None, None
    (agent,) = learned.values()
    if agent.params is None or agent.search is None:
        raise ValueError(f"{agent.name!r}: the learned agent needs its model, 'learned:MODEL'")
    return agent.params, agent.search


def play_schedule(
    variant: str,
    white: Sequence[players_lib.ReconAgent],
    black: Sequence[players_lib.ReconAgent],
    key,
    *,
    max_plies: int | None = None,
    size: int = RB.DEFAULT_SIZE,
    moves_per_board: int = RB.DEFAULT_MOVES_PER_BOARD,
    worlds: int = DEFAULT_WORLDS,
):
    """Games `g` of `white[g]` against `black[g]` in `variant` (a sensing variant; `max_plies`
    its ply cap, default the variant's), all in one batch of the compiled recon arena with
    belief pads of `size`, `moves_per_board` and `worlds` belief samples per searching
    decision (PIMC's and the learned agent's). Returns `recon_agents.play_games`'s (rewards
    float32 [B, 2] of White and Black, plies int32 [B], TurnStats [turns, B])."""
    variant = R.check_variant(variant, sensing=True)
    if not R.is_sense(variant):
        raise ValueError(f"{variant} is not a sensing variant (fog=sense:W)")
    if len(white) != len(black) or not white:
        raise ValueError(f"one or more games, as many White as Black: {len(white)}, {len(black)}")
    params, search = learned_model([*white, *black])
    # Host copies: loaded parameters sit committed on a device, and the arena's first turn
    # (fresh, uncommitted games) would then compile again for its committed later turns.
    params = None if params is None else jax.tree.map(np.asarray, params)
    agents = np.array(
        [[w.kinds, b.kinds] for w, b in zip(white, black, strict=True)], np.int32
    )  # [B, 2 colours, (sense kind, move kind)]
    kwargs = {} if max_plies is None else {"max_plies": max_plies}
    rules = R.stack([R.get(variant, **kwargs)] * len(white))
    return A.play_games(
        rules, agents, key, size=size, moves_per_board=moves_per_board, worlds=worlds,
        params=params, learned=search,
    )  # fmt: skip


def colour_balanced(first, second, games: int) -> tuple[list, list]:
    """(White, Black) of `games` (even) games: `first` White in the first half, Black after."""
    if games < 2 or games % 2:
        raise ValueError(f"games must be a positive even number, got {games}")
    half = games // 2
    return [first] * half + [second] * half, [second] * half + [first] * half


def first_rewards(rewards: np.ndarray) -> np.ndarray:
    """float32 [N]: the results (+1 / 0 / -1) of the side White in the first half of a
    `colour_balanced` schedule's games (rewards [N, 2] of White and Black)."""
    rewards = np.asarray(rewards)
    half = len(rewards) // 2
    return np.concatenate([rewards[:half, 0], rewards[half:, 1]])


def play_match(
    variant: str,
    agent: players_lib.ReconAgent,
    opponent: players_lib.ReconAgent,
    games: int,
    key,
    *,
    max_plies: int | None = None,
    size: int = RB.DEFAULT_SIZE,
    moves_per_board: int = RB.DEFAULT_MOVES_PER_BOARD,
    worlds: int = DEFAULT_WORLDS,
) -> dict[str, Any]:
    """A colour-balanced match of `agent` against `opponent` (`agent` White in the first half):
    `elo.match_statistics` of `agent`'s results, with the match's settings (variant, ply cap,
    belief size, moves per board, worlds) and both players' names."""
    white, black = colour_balanced(agent, opponent, games)
    rewards, plies, _ = play_schedule(
        variant, white, black, key, max_plies=max_plies, size=size,
        moves_per_board=moves_per_board, worlds=worlds,
    )  # fmt: skip
    result = elo.match_statistics(first_rewards(rewards), plies)
    variant = R.canonical(variant)
    result.update(
        variant=variant,
        model=agent.name,
        opponent=opponent.name,
        max_plies=int(R.get(variant).max_plies) if max_plies is None else max_plies,
        belief_size=size,
        moves_per_board=moves_per_board,
        worlds=worlds,
    )
    return result
