"""The Game contract: what every game of this project offers its players and learners.

A game is a set of batched pure array functions over `Rules` [B] (variants are data) and a state
pytree [B] with at least `terminated` bool [B] and `rewards` float32 [B, 2] ([White, Black]):

    game = contract.game_for("recon")             # the Game that plays a variant spec
    rules = game.batch("recon", 8)                 # Rules [8]
    state = game.init(rules)                       # State [8]
    mask = game.legal_action_mask(rules, state)    # bool [8, game.num_actions]
    state = game.step(rules, state, actions)       # actions int32 [8]
    obs = game.observe(rules, state)               # float32 [8, *game.observation_shape]
    view = game.player_view(rules, state)          # all the mover may read (a pytree)

Two implementations: `BOARD`, the 1225-action game of every variant without sensing (fog of war
included), and `RECON`, reconnaissance-blind sensing (`fog=sense:W`, 1242 actions, a sense phase
before every move). What both promise, checked by one harness over both
(`tests/rules/test_game_contract.py`, as pgx's `api_test` does for its games):

- shapes and dtypes as above, the same for every variant a game plays;
- `step` is a pure function of (rules, state, actions): the same inputs give the same state;
- a finished game absorbs: stepping it changes nothing and its rewards are zero;
- until a game ends, its legal mask has a legal action, and it is all False once it has;
- fairness: `observe` and `player_view` read only what the mover may know, so changing only what
  the mover cannot see (pieces on squares hidden by the fog of war; the opponent's true pieces
  under sensing) changes neither.

A sense phase (`has_sense_phase`) is a state where the mover's legal actions are sense windows
(`sense_phase(state)` says which games are there; `sense_action_mask(rules)` names the windows a
variant offers); the board game has none. A new game is one subclass and one entry in `GAMES`.
"""

from __future__ import annotations

import abc
import functools
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp

from mmc_jax.rules import game as board
from mmc_jax.rules import recon, variants
from mmc_jax.rules import tables as T


class Game(abc.ABC):
    """One game behind the contract (module doc). Every array method is batched over a
    leading axis B and jittable; `rules` is a `Rules` [B]."""

    name: str
    num_actions: int
    observation_shape: tuple[int, int, int]
    descriptor_size: int
    has_sense_phase: bool = False

    @abc.abstractmethod
    def plays(self, spec: str | variants.Variant) -> bool:
        """Whether this game plays the variant `spec` (a name, a composition, a Variant)."""

    def batch(self, specs: str | variants.Variant | Sequence, batch_size: int | None = None):
        """`Rules` [B] of variants this game plays (ValueError for one it does not)."""
        listed = [specs] if isinstance(specs, (str, variants.Variant)) else list(specs)
        for spec in listed:
            if not self.plays(spec):
                raise ValueError(
                    f"{variants.canonical(spec)} is not a {self.name} game; "
                    f"play it as {game_for(spec).name}"
                )
        return variants.batch(listed, batch_size)

    @abc.abstractmethod
    def init(self, rules) -> Any:
        """Start states [B] (never finished at once)."""

    @abc.abstractmethod
    def step(self, rules, state, actions: jax.Array) -> Any:
        """The states after `actions` int32 [B]; an illegal action loses for the mover."""

    @abc.abstractmethod
    def legal_action_mask(self, rules, state) -> jax.Array:
        """bool [B, num_actions]; all False for finished games."""

    @abc.abstractmethod
    def observe(self, rules, state) -> jax.Array:
        """float32 [B, *observation_shape], the mover's view, from what it may know alone."""

    @abc.abstractmethod
    def observe_waiting(self, rules, state) -> jax.Array:
        """float32 [B, *observation_shape]: the view of the player not to move, as `observe`
        would give it were its turn to begin now, from what that player may know alone (its
        own pieces, and under fog what they reach; under sensing its memory, no sense yet)."""

    @abc.abstractmethod
    def descriptor(self, rules) -> jax.Array:
        """float32 [B, descriptor_size]: what the rules are (one-hots), as the network sees it."""

    @abc.abstractmethod
    def player_view(self, rules, state) -> Any:
        """Every input a player's computation may read, as a pytree [B, ...]."""

    def sense_phase(self, state) -> jax.Array:
        """bool [B]: the mover must sense (a game without a sense phase: all False)."""
        return jnp.zeros_like(state.terminated)

    def sense_action_mask(self, rules) -> jax.Array:
        """bool [B, num_actions]: the sense windows each variant offers (none here)."""
        return jnp.zeros(rules.goal.shape + (self.num_actions,), bool)

    @staticmethod
    def terminated(state) -> jax.Array:
        """bool [B]."""
        return state.terminated

    @staticmethod
    def rewards(state) -> jax.Array:
        """float32 [B, 2]: [White, Black] reward of the transition that made `state`."""
        return state.rewards

    def __repr__(self) -> str:
        return f"Game({self.name!r}, {self.num_actions} actions)"


class BoardGame(Game):
    """Every variant without sensing: `mmc_jax.rules.game`, 1225 actions. Under the fog of war
    (`fog=on`) the observation hides what the mover's pieces cannot reach; the legal moves are
    the mover's own knowledge (they are what decides what it sees).

    Its methods are the one batched implementation of the board game: `mmc_jax.rules.init`,
    `step`, `legal_action_mask`, `observe`, ... are these methods. Beyond the contract it
    offers the move generation as data (`legal_planes`, uint32 [B, 49]: legal from-squares per
    action plane) so that a caller that steps and observes the same position generates moves
    once (`step_with_planes`, `observe(..., planes)`), and the start split around it
    (`start_position`, `end_if_stuck`)."""

    name = "board"
    num_actions = T.NUM_ACTIONS
    observation_shape = board.OBS_SHAPE
    descriptor_size = board.DESCRIPTOR_CHANNELS

    def plays(self, spec) -> bool:
        return not variants.is_sense(spec)

    def init(self, rules):
        """Start positions: Rules [B] -> State [B] (a sensing variant's game is finished at
        once: no 1225-action player plays it on the true board)."""
        return jax.vmap(board.init)(rules)

    def start_position(self, rules):
        """Start positions before their move generation (see game.start_position): Rules [B]
        -> State [B]."""
        return jax.vmap(board.start_position)(rules)

    def end_if_stuck(self, state, planes):
        """Start positions given their legal planes (see game.end_if_stuck): (State [B],
        planes [B, 49]) -> State [B]."""
        return jax.vmap(board.end_if_stuck)(state, planes)

    def step(self, rules, state, actions):
        """Play actions int32 [B]: (Rules [B], State [B], actions) -> State [B]."""
        return jax.vmap(board.step)(rules, state, actions)

    def step_with_planes(self, rules, state, actions, planes):
        """(Rules [B], State [B], actions [B], legal_planes [B, 49]) -> (State [B], next planes
        [B, 49]): `step` that reuses and hands on the move generation (game.step_with_planes)."""
        return jax.vmap(board.step_with_planes)(rules, state, actions, planes)

    def legal_planes(self, rules, state):
        """(Rules [B], State [B]) -> uint32 [B, 49] legal from-squares per plane."""
        return jax.vmap(board.legal_planes)(rules, state)

    def legal_action_mask(self, rules, state):
        """(Rules [B], State [B]) -> bool [B, 1225] legal actions (all False for finished
        games)."""
        return self.planes_to_mask(self.legal_planes(rules, state))

    @staticmethod
    def planes_to_mask(planes):
        """uint32 [..., 49] legal planes -> bool [..., 1225] legal action mask."""
        return board.planes_to_mask(planes)

    def observe(self, rules, state, planes=None):
        """(Rules [B], State [B]) -> float32 [B, 5, 5, C] observations from the mover's view.

        The fog of war needs the legal moves: pass `planes` (`legal_planes` [B, 49]) if you
        have them; otherwise a batch without fog games skips the move generation."""
        if planes is not None:
            return jax.vmap(lambda r, s, p: board.observe(r, s, True, p))(rules, state, planes)
        with_fog = jax.vmap(functools.partial(board.observe, fog=True))
        without_fog = jax.vmap(functools.partial(board.observe, fog=False))
        return jax.lax.cond(jnp.any(rules.fog), with_fog, without_fog, rules, state)

    def observe_waiting(self, rules, state):
        def one(r, s):
            occupied = s.pieces[0] | s.pieces[1] | s.pieces[2] | s.pieces[3] | s.pieces[4]
            occupied = occupied | s.pieces[5]
            other = s.replace(
                pieces=board.mirror(s.pieces),
                own=board.mirror(occupied & ~s.own),
                turn=1 - s.turn,
            )
            return board.observe(r, other, True, board.legal_planes(r, other))

        return jax.vmap(one)(rules, state)

    def descriptor(self, rules):
        return jax.vmap(board.rules_descriptor)(rules)

    def player_view(self, rules, state):
        planes = self.legal_planes(rules, state)
        return {
            "observation": self.observe(rules, state, planes),
            "legal_action_mask": self.planes_to_mask(planes),
        }


class ReconGame(Game):
    """Reconnaissance-blind sensing (`fog=sense:W`): `mmc_jax.rules.recon`, 1242 actions, each
    turn a sense then a move request; the mover's information is `recon.player_info`."""

    name = "recon"
    num_actions = recon.NUM_ACTIONS
    observation_shape = (5, 5, recon.RECON_OBS_CHANNELS)
    descriptor_size = recon.RECON_DESCRIPTOR_CHANNELS
    has_sense_phase = True

    def plays(self, spec) -> bool:
        return variants.is_sense(spec)

    def init(self, rules):
        """Start of sensing games: Rules [B] -> ReconState [B] (sense phase)."""
        return jax.vmap(recon.init)(rules)

    def step(self, rules, state, actions):
        """(Rules [B], ReconState [B], actions int32 [B] in [0, 1242)) -> ReconState [B]: a
        sense or a move request per game (see rules.recon.step)."""
        return jax.vmap(recon.step)(rules, state, actions)

    def legal_action_mask(self, rules, state):
        """(Rules [B], ReconState [B]) -> bool [B, 1242]."""
        return jax.vmap(recon.legal_action_mask)(rules, state)

    def observe(self, rules, state):
        """(Rules [B], ReconState [B]) -> float32 [B, 5, 5, 34]: each mover's observation,
        built from what it may use alone (rules.recon.player_info)."""
        return jax.vmap(recon.observe)(rules, state)

    def observe_waiting(self, rules, state):
        def one(r, s):
            other = 1 - s.turn
            info = recon.PlayerInfo(
                own_pieces=board.mirror(s.pieces & ~s.own),  # exact: it moves them itself
                known=s.known[other],
                seen_ply=s.seen_ply[other],
                sensed=jnp.uint32(0),
                notification=jnp.int32(recon.NO_SQUARE),
                taken=s.taken[other],
                capture=s.capture[other],
                turn=other,
                phase=jnp.int32(recon.SENSE),
                ply=s.ply,
            )
            return recon.observe_info(r, info)

        return jax.vmap(one)(rules, state)

    def descriptor(self, rules):
        return jax.vmap(recon.rules_descriptor)(rules)

    def player_view(self, rules, state):
        return {
            "info": jax.vmap(recon.player_info)(state),
            "observation": self.observe(rules, state),
            "legal_action_mask": self.legal_action_mask(rules, state),
        }

    def sense_phase(self, state):
        return (state.phase == recon.SENSE) & ~state.terminated

    def sense_action_mask(self, rules):
        windows = jnp.arange(recon.MAX_WINDOWS) < jax.vmap(recon.num_windows)(rules)[:, None]
        moves = jnp.zeros(windows.shape[:1] + (recon.SENSE_BASE,), bool)
        return jnp.concatenate([moves, windows], axis=-1)


BOARD = BoardGame()
RECON = ReconGame()
GAMES: dict[str, Game] = {game.name: game for game in (BOARD, RECON)}


def game_for(spec: str | variants.Variant) -> Game:
    """The Game that plays the variant `spec` (ValueError, from the rule space, for a bad one)."""
    for game in GAMES.values():
        if game.plays(spec):
            return game
    raise ValueError(f"no game plays {variants.canonical(spec)}")  # unreachable today
