"""THE player table: every kind of player, one entry each, read by every command.

`REGISTRY` holds one `Entry` per player: its `name` (the word every command line and config
uses), a one-line `description` (help texts and error messages), the `games` it plays
("board": the board variants, fog ones included; "recon": the sensing variants), what it
`needs` (nothing, a model or an engine) and `build(spec, context)`, which turns a spec string
into the player (see `Context` for what a command hands it). The games are the Game contract's
(`mmc_jax.rules.game_for(variant).name`, `game_of`), so a command picks a variant's players by
the variant, never by its name. `python -m mmc_jax.evaluate` (`--checkpoint`, `--opponent`), the
ladder's rungs, `python -m mmc_jax.play` (`--opponent`), `serve` and `engine` (`--model`)
resolve specs here (`entry_for`, `build`), and name the entries in their help and errors
(`names`, `unknown`); a player asked to play the other game is refused in one line.

Kinds of players, and what `build` returns:

  built-in policies   random, greedy, ...: a pure board policy (`policy`, below) and, for the
                      recon game, a pair of recon agent kinds (`recon_kinds`); `build` gives a
                      `Player` of the stepwise arena (board) or a `ReconAgent` (recon). The
                      jitted arena (`match.play_match(..., opponent=NAME)`) switches over them
                      with `lax.switch`, the fog arena (`pimc.FogPlayer(NAME)`) plays them from
                      their observations.
  model               a network's search (`--checkpoint RUN`, an exported or shipped model,
                      'none' for the uniform prior): a `Player` of kind "model".
  uci                 any UCI engine, `uci:COMMAND`: a `Player` of kind "engine".
  fair fog search     pimc, raw (and the omniscient upper bound): a `FogPlayer` of the fog arena.
  recon agents        random-pimc, entropy-pimc, and the learned agent of a sensing model
                      (`learned:MODEL`, or the model's path alone where the game is a sensing
                      variant's): a `ReconAgent` (sense kind, move kind of `recon_agents`, data
                      in its compiled arena, and the learned agent's parameters), which
                      `sensing_match` plays in that arena and `recon_player` puts behind the
                      reconchess callbacks.

Adding a player is one `register(Entry(...))` (here, in `REGISTRY`, or from any module, as
tests/evaluation/test_player_table.py does); a board policy is one `Builtin(...)` entry.

A policy is pure: `(key, rules [B], board State [B], legal bool [B, 1225]) -> int32 [B]`, one
legal action per game (anything where no move is legal), with `board` the position in the
mover's view and `legal` its legal moves. It consumes `key`.

Fog: the fog arena (`pimc.fog_match`) hands a policy `observed_board(observation)`, the mover's
pieces and the enemy pieces it sees, so there every policy is fair. `fair_under_fog` promises
more: the policy's move from the true board is its move from the observed board (same key, same
legal moves), so the arenas that step the true state (`match.play_match`, `arena.play_games`,
the ladder) may hand it the true state in a game under fog. They refuse an entry without the
flag there (`check_fair`); tests/evaluation/test_players.py checks the promise of every flagged
entry.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from mmc_jax import rules as R
from mmc_jax import uci
from mmc_jax.evaluation import policies
from mmc_jax.evaluation import recon_agents as A
from mmc_jax.infra import checkpoint, storage
from mmc_jax.search import belief as B

BoardPolicy = Callable[[jax.Array, R.Rules, R.State, jax.Array], jax.Array]
BOARD, SENSING = R.BOARD.name, R.RECON.name  # the Game contract's games
GAMES = (BOARD, SENSING)
GAME_TEXT = {BOARD: "board variants", SENSING: "sensing variants (fog=sense:W)"}
NEEDS = ("", "model", "engine")
NETWORK_KIND = "model"  # a `Player`'s kind for a network's search
ENGINE_KIND = "engine"  # a `Player`'s kind for a UCI engine


# ---------------------------------------------------------------------------------------------
# What `build` returns


@dataclasses.dataclass(frozen=True, eq=False)
class Player:
    """A player of the stepwise arena (`arena.play_games`) and of `play`: `kind` a built-in
    policy's name (`kinds()`: random, greedy, ...), "model" (a network with `params` and a
    search budget, or with `one_ply` its one-ply value player) or "engine" (a UCI engine with
    `limits`, run by `command` or served by the arena's engine pool of its name)."""

    name: str
    kind: str
    network: Any = None
    params: Any = None
    num_simulations: int = 0
    gumbel_scale: float = 0.0
    limits: uci.Limits | None = None
    command: tuple[str, ...] | None = None
    one_ply: bool = False  # a model: the one-ply value player instead of the search

    def __post_init__(self):
        if self.kind not in (NETWORK_KIND, ENGINE_KIND):
            builtin(self.kind, "player kind")
        if self.kind == ENGINE_KIND and self.limits is None:
            raise ValueError(f"engine player {self.name!r} needs limits")

    @property
    def is_jax(self) -> bool:
        """Whether the arena computes its moves (a built-in player or a model)."""
        return self.kind != ENGINE_KIND


@dataclasses.dataclass(frozen=True)
class FogPlayer:
    """A player of the fog arena `pimc.fog_match` (static, hashable; `pimc.fog_act` plays it).

    kind: "pimc" (fair_search, K = num_worlds, deterministic: gumbel_scale 0), "raw"
      (observation_policy), "omniscient" (UPPER BOUND: search on the true state), or a built-in
      player's kind (`kinds()`: random, greedy, ...), which plays from `observed_board` of its
      observation.
    """

    kind: str
    num_simulations: int = 0
    num_worlds: int = 1
    num_candidates: int = 32

    def __post_init__(self):
        known = (*fog_kinds(), *kinds())
        if self.kind not in known:
            raise ValueError(f"unknown player kind {self.kind!r}; known: {', '.join(known)}")

    @property
    def name(self) -> str:
        if self.kind == "pimc":
            return f"pimc K={self.num_worlds} sims={self.num_simulations}"
        if self.kind == "omniscient":
            return f"omniscient (upper bound) sims={self.num_simulations}"
        return self.kind

    @property
    def network_evaluations(self) -> int:
        """Network evaluations per move."""
        if self.kind == "pimc":
            return self.num_worlds * (self.num_simulations + 1) - (self.num_worlds - 1)
        if self.kind == "omniscient":
            return self.num_simulations + 1
        return int(self.kind == "raw")


@dataclasses.dataclass(frozen=True)
class ReconAgent:
    """A recon agent: its name and its (sense kind, move kind) of `recon_agents` (data in the
    compiled recon arena, `sensing_match`; `recon_player.BeliefPlayer` plays it behind the
    callbacks). The learned agent carries its model: `model` (the path it was opened from),
    `params` and `search` (its `recon_learned.SearchConfig`); two agents are the same player
    when their names, kinds and models are."""

    name: str
    sense_kind: int
    move_kind: int
    model: str | None = None
    params: Any = dataclasses.field(default=None, compare=False, repr=False)
    search: Any = None

    @property
    def learned(self) -> bool:
        """Whether it is the learned agent (its decisions need `params` and `search`)."""
        return self.sense_kind == A.SENSE_LEARNED or self.move_kind == A.MOVE_LEARNED

    @property
    def kinds(self) -> tuple[int, int]:
        return self.sense_kind, self.move_kind


def _no_sensing_opener(spec: str, step: int | None) -> checkpoint.Model:
    raise ValueError(
        f"{spec}: opening the learned agent's model needs every learner's model kinds: "
        "Context(open_model=mmc_jax.algorithms.open_model), as the commands pass"
    )


@dataclasses.dataclass(frozen=True)
class Context:
    """What `build` may read besides the spec: the `variant` played, the search budget
    (`simulations`: a model's simulations, an engine's `go nodes`; `worlds`: PIMC's sampled
    worlds), the checkpoint `step`, a `name` for the player (default: from the spec),
    `load_model(spec, step) -> (network, params, config)` for board models and
    `open_model(spec, step) -> checkpoint.Model` for any learner's model (the learned recon
    agent's: `mmc_jax.algorithms.open_model`, which this layer cannot import; commands pass
    them, turning a failure into their usage error)."""

    variant: str = "gardner"
    simulations: int = 32
    worlds: int = 8
    step: int | None = None
    name: str | None = None
    load_model: Callable[[str, int | None], tuple] = checkpoint.load_model
    open_model: Callable[[str, int | None], checkpoint.Model] = _no_sensing_opener

    @property
    def game(self) -> str:
        """The game of the variant (`game_of`)."""
        return game_of(self.variant)


def game_of(variant: str) -> str:
    """The game (`GAMES`) whose players play `variant`: the Game contract's that plays it
    (`SENSING` for a sensing variant, else `BOARD`)."""
    return R.game_for(variant).name


# ---------------------------------------------------------------------------------------------
# The table


@dataclasses.dataclass(frozen=True)
class Entry:
    """One player of the table (see the module docstring). `accepts(spec)` says whether a spec
    other than the bare `name` names this player (`uci:COMMAND`, a checkpoint path); `policy`
    and `fair_under_fog` make it a built-in board policy of the jitted arenas; `recon_kinds` a
    recon agent of the compiled recon arena."""

    name: str
    description: str
    games: tuple[str, ...]
    build: Callable[[str, Context], Any]
    needs: str = ""
    accepts: Callable[[str], bool] | None = None
    policy: BoardPolicy | None = None
    fair_under_fog: bool = False
    recon_kinds: tuple[int, int] | None = None

    def __post_init__(self):
        bad = [g for g in self.games if g not in GAMES]
        if not self.name or set(self.name) & set(" :/,=") or not self.games or bad:
            raise ValueError(f"entry {self.name!r}: a name without ' :/,=', games of {GAMES}")
        if not self.description or "\n" in self.description or self.needs not in NEEDS:
            raise ValueError(f"entry {self.name!r}: a one-line description, needs in {NEEDS}")

    @property
    def kind(self) -> str:  # the name the arenas use
        return self.name

    @property
    def summary(self) -> str:
        return self.description

    def plays(self, game: str) -> bool:
        return game in self.games

    def label(self) -> str:
        """How a command line names it: `uci:COMMAND`, a model's path, or its name."""
        return {
            "uci": "uci:COMMAND",
            "model": "a model (a run, exported or shipped; 'none')",
            ONE_PLY: ONE_PLY_PREFIX + "model",
            LEARNED: LEARNED_PREFIX + "model (or a sensing model's path)",
        }.get(self.name, self.name)


def random_move(key, rules, board, legal):
    """int32 [B]: a uniformly random legal move."""
    del rules, board
    return R.random_legal_action(key, legal)


def _board_player(spec: str, context: Context) -> Player:
    return Player(context.name or spec, spec)


def _builtin_build(spec: str, context: Context):
    """A built-in player: a `Player` on the board, its `ReconAgent` in a sensing variant."""
    if context.game == SENSING:
        return _recon_build(spec, context)
    return _board_player(spec, context)


def Builtin(  # noqa: N802 -- the entry kind's name, as before the one table
    kind: str, policy: BoardPolicy, fair_under_fog: bool, summary: str, **fields
) -> Entry:
    """The entry of a built-in board policy (`policy` pure, see the module docstring)."""
    games = (BOARD, SENSING) if fields.get("recon_kinds") else (BOARD,)
    return Entry(
        kind, summary, games, _builtin_build, policy=policy, fair_under_fog=fair_under_fog, **fields
    )


def is_model_spec(spec: str) -> bool:
    """Whether `spec` names a model: 'none' (the uniform prior), a shipped model, an exported
    model, a run's workdir or checkpoint folder, or a remote path."""
    return (
        spec.lower() == "none"
        or spec in checkpoint.shipped_models()
        or storage.is_remote(spec)
        or os.path.isdir(spec)
        or checkpoint.is_exported(spec)
    )


def _model_build(spec: str, context: Context) -> Player:
    """A network's search: the model at `spec` ('none': the uniform prior)."""
    if spec.lower() in ("none", "model"):
        return model_player(context.name or "uniform-prior search", None, None, context.simulations)
    network, params, _ = context.load_model(spec, context.step)
    return model_player(context.name or spec, network, params, context.simulations)


ONE_PLY = "one-ply"
ONE_PLY_PREFIX = ONE_PLY + ":"


def _one_ply_build(spec: str, context: Context) -> Player:
    """The one-ply value player of the model at `one-ply:MODEL`."""
    model = spec[len(ONE_PLY_PREFIX) :] if spec.startswith(ONE_PLY_PREFIX) else ""
    if not model or model.lower() == "none":
        raise ValueError(f"{spec!r}: the one-ply player needs a model, 'one-ply:MODEL'")
    network, params, _ = context.load_model(model, context.step)
    return model_player(context.name or spec, network, params, 0, one_ply=True)


def _engine_build(spec: str, context: Context) -> Player:
    """A UCI engine `uci:COMMAND` searching `go nodes <simulations>`."""
    command = tuple(uci.engine_command(spec) or ())
    limits = uci.Limits(nodes=max(context.simulations, 1))
    return Player(context.name or " ".join(command), ENGINE_KIND, limits=limits, command=command)


def _fog_build(spec: str, context: Context) -> FogPlayer:
    if spec == "pimc":
        return FogPlayer("pimc", context.simulations, context.worlds)
    return FogPlayer(spec, context.simulations)


def _recon_build(spec: str, context: Context) -> ReconAgent:
    return ReconAgent(context.name or spec, *entry(spec).recon_kinds)


LEARNED = "learned"
LEARNED_PREFIX = LEARNED + ":"


def _is_learned_spec(spec: str) -> bool:
    """`learned:MODEL`, or a model's path alone (the entry plays sensing variants only, so a
    path names it only there; 'none', the board's uniform prior, is no learned agent)."""
    return spec.startswith(LEARNED_PREFIX) or (spec.lower() != "none" and is_model_spec(spec))


def _learned_build(spec: str, context: Context) -> ReconAgent:
    """The learned recon agent of the sensing model at `learned:MODEL` (or `MODEL`), opened by
    `context.open_model`; a one-line ValueError for no model or a board-game model."""
    model = spec[len(LEARNED_PREFIX) :] if spec.startswith(LEARNED_PREFIX) else spec
    if not model or model == LEARNED or model.lower() == "none":
        raise ValueError(
            f"{spec!r}: the learned agent needs its model, 'learned:MODEL' (a configs/recon.py "
            "run or its export)"
        )
    opened = context.open_model(model, context.step)
    if not opened.sensing:
        raise ValueError(
            f"{model}: a board-game model; a sensing variant ({R.canonical(context.variant)}) "
            "plays a sensing model (the learned agent: a configs/recon.py run or its export)"
        )
    kinds = entry(LEARNED).recon_kinds
    return ReconAgent(
        context.name or spec, *kinds, model=model, params=opened.params, search=opened.network
    )


# The order is part of the results: the jitted arena gives built-in policy i the key
# `jax.random.split(key, n)[i]`, which does not depend on n, so new entries go at the end.
REGISTRY: tuple[Entry, ...] = (
    Builtin(
        "random",
        random_move,
        True,
        "a uniformly random legal move (recon: a random window and a random request)",
        recon_kinds=(A.SENSE_RANDOM, A.MOVE_RANDOM),
    ),
    Builtin(
        "greedy",
        policies.greedy_from_mask,
        # Every capture target of a legal move is a square the mover sees.
        True,
        "the legal move that wins the most material, ties at random",
    ),
    Entry(
        "model",
        "a network's search: --checkpoint RUN, an exported or shipped model; 'none' the "
        "uniform prior",
        (BOARD,),
        _model_build,
        needs="model",
        accepts=is_model_spec,
    ),
    Entry(
        "uci",
        "any UCI engine, 'uci:COMMAND' (Fairy-Stockfish, python -m mmc_jax.engine), go nodes N",
        (BOARD,),
        _engine_build,
        needs="engine",
        accepts=lambda spec: spec.startswith("uci:"),
    ),
    Entry(
        "pimc",
        "the fair fog search: a network's search over worlds sampled from its belief",
        (BOARD,),
        _fog_build,
        needs="model",
    ),
    Entry(
        "raw",
        "a network's raw policy on its observation (fair)",
        (BOARD,),
        _fog_build,
        needs="model",
    ),  # fmt: skip
    Entry(
        "omniscient",
        "a network's search on the true state: an UPPER BOUND under fog, never fair",
        (BOARD,),
        _fog_build,
        needs="model",
    ),
    Entry(
        "random-pimc",
        "random sensing, PIMC requests over the exact belief",
        (SENSING,),
        _recon_build,
        recon_kinds=(A.SENSE_RANDOM, A.MOVE_PIMC),
    ),
    Entry(
        "entropy-pimc",
        "information-gain sensing, PIMC requests over the exact belief",
        (SENSING,),
        _recon_build,
        recon_kinds=(A.SENSE_ENTROPY, A.MOVE_PIMC),
    ),
    Entry(
        LEARNED,
        "the learned agent's searches (a sensing model: a configs/recon.py run or its export)",
        (SENSING,),
        _learned_build,
        needs="model",
        accepts=_is_learned_spec,
        recon_kinds=(A.SENSE_LEARNED, A.MOVE_LEARNED),
    ),
    Entry(
        ONE_PLY,
        "a network's value one ply deep, 'one-ply:MODEL': the move whose next position the "
        "opponent likes least (TD(lambda)'s player)",
        (BOARD,),
        _one_ply_build,
        needs="model",
        accepts=lambda spec: spec.startswith(ONE_PLY_PREFIX),
    ),
)


def register(new: Entry) -> Entry:
    """Adds `new` at the end of `REGISTRY` (ValueError if its name is taken); returns it."""
    global REGISTRY
    if any(e.name == new.name for e in REGISTRY):
        raise ValueError(f"player {new.name!r} is already in the table")
    REGISTRY = (*REGISTRY, new)
    return new


def unregister(name: str) -> None:
    """Removes the entry `name` (tests that registered one)."""
    global REGISTRY
    REGISTRY = tuple(e for e in REGISTRY if e.name != name)


def names(game: str | None = None) -> tuple[str, ...]:
    """Every entry's name (or those playing `game`), in table order."""
    return tuple(e.name for e in REGISTRY if game is None or e.plays(game))


def listing(game: str | None = None) -> str:
    """The entries (or those playing `game`) as a command line names them, on one line."""
    return ", ".join(e.label() for e in REGISTRY if game is None or e.plays(game))


def unknown(spec: str, role: str = "player", game: str | None = None) -> ValueError:
    """The one-line error for a spec that names no entry (playing `game`)."""
    where = f" of {game}" if game else ""
    return ValueError(f"unknown {role} {spec!r}; players{where}: {listing(game)}")


def other_game(found: Entry, spec: str, role: str, game: str) -> ValueError:
    """The one-line error for a spec whose entry plays only the other game than `game`."""
    plays = " and ".join(GAME_TEXT[g] for g in found.games)
    return ValueError(
        f"{role} {spec!r} plays the {plays}, not the {GAME_TEXT[game]}; players of {game}: "
        f"{listing(game)}"
    )


def entry(name: str, role: str = "player") -> Entry:
    """The entry named `name`; `unknown` otherwise."""
    for e in REGISTRY:
        if e.name == name:
            return e
    raise unknown(name, role)


def entry_for(spec: str, game: str | None = None, role: str = "player") -> Entry:
    """The entry a spec names: by name first, else the entry whose `accepts` takes it
    (`uci:COMMAND`, a model; one playing `game` first: a model's path is the board's model
    entry and a sensing variant's learned agent); a one-line ValueError listing the table
    otherwise, or naming the game the player plays when it does not play `game`."""
    found = next((e for e in REGISTRY if e.name == spec), None)
    if found is None:
        accepting = [e for e in REGISTRY if e.accepts is not None and e.accepts(spec)]
        playing = [e for e in accepting if game is None or e.plays(game)]
        found = (playing or accepting or [None])[0]
    if found is None:
        raise unknown(spec, role, game)
    if game is not None and not found.plays(game):
        raise other_game(found, spec, role, game)
    return found


def build(spec: str, context: Context | None = None, role: str = "player"):
    """The player `spec` names, built for `context` (see the module docstring for what each
    kind of entry returns)."""
    context = Context() if context is None else context
    return entry_for(spec, context.game, role).build(spec, context)


def describe(game: str | None = None) -> str:
    """One line per entry (name, games, needs, description): for --help epilogs."""
    rows = []
    for e in REGISTRY:
        if game is None or e.plays(game):
            needs = f", needs {e.needs}" if e.needs else ""
            rows.append(f"{e.label()} ({'/'.join(e.games)}{needs}): {e.description}")
    return "; ".join(rows)


# ---------------------------------------------------------------------------------------------
# Built-in board policies (the entries with a `policy`) and recon agents


def kinds() -> tuple[str, ...]:
    """The built-in board policies' names, in table order (read at call time, never cached)."""
    return tuple(e.name for e in REGISTRY if e.policy is not None)


def fog_kinds() -> tuple[str, ...]:
    """The fog arena's network players (pimc, raw, omniscient)."""
    return tuple(e.name for e in REGISTRY if e.build is _fog_build)


def recon_agents() -> tuple[str, ...]:
    """The recon agents' names, in table order."""
    return tuple(e.name for e in REGISTRY if e.recon_kinds is not None)


def recon_kinds(name: str) -> tuple[int, int]:
    """(sense kind, move kind) of a recon agent; a one-line ValueError naming them otherwise."""
    found = next((e for e in REGISTRY if e.name == name and e.recon_kinds is not None), None)
    if found is None:
        raise ValueError(f"unknown recon agent {name!r}; recon agents: {', '.join(recon_agents())}")
    return found.recon_kinds


def builtin(kind: str, role: str = "player kind") -> Entry:
    """The built-in board policy `kind`; a one-line ValueError naming the known ones otherwise."""
    for e in REGISTRY:
        if e.name == kind and e.policy is not None:
            return e
    raise ValueError(f"unknown {role} {kind!r}; known: {', '.join(kinds())}")


def index(kind: str) -> int:
    """Position of `kind` in `kinds()` (the `lax.switch` index of `act`)."""
    return kinds().index(builtin(kind).kind)


def fair_kinds(variant: str) -> tuple[str, ...]:
    """The kinds an arena stepping the true state may play in `variant`: every kind, or under
    fog the ones flagged `fair_under_fog`."""
    fog = R.has_fog(variant)
    return tuple(e.name for e in REGISTRY if e.policy is not None and (e.fair_under_fog or not fog))


def check_fair(kind: str, variant: str) -> None:
    """ValueError (one line) unless `kind` may be handed the true state in `variant`."""
    if builtin(kind).kind not in fair_kinds(variant):
        raise ValueError(
            f"player {kind!r} is not fair under fog ({variant}): it would read hidden squares "
            "from the true state; play it from its observations (pimc.fog_match)"
        )


def act(
    kinds_present: tuple[str, ...],
    which: jax.Array,
    key: jax.Array,
    rules: R.Rules,
    board: R.State,
    legal: jax.Array,
) -> jax.Array:
    """int32 [B]: the moves of built-in kind `kinds_present[which]` (`which` int32, data, so
    one compiled program serves every kind in `kinds_present`): a `lax.switch` in which the
    built-in policy at position i of `kinds()` draws from `jax.random.split(key, n)[i]`."""
    positions = jnp.asarray([index(kind) for kind in kinds_present])
    branches = [builtin(kind).policy for kind in kinds_present]
    keys = jax.random.split(key, len(kinds()))
    return jax.lax.switch(which, branches, keys[positions[which]], rules, board, legal)


def observed_board(observation: B.Observation) -> R.State:
    """The board a side sees under fog as a `State` [B] in its view: its own pieces and the
    enemy pieces on the squares it sees (clocks, rewards and history zero)."""
    zeros = jnp.zeros_like(observation.ply)
    return R.State(
        pieces=observation.own_pieces | observation.seen,
        own=observation.own,
        turn=observation.turn,
        halfmove=zeros,
        fullmove=zeros,
        ply=observation.ply,
        terminated=observation.terminated,
        rewards=jnp.zeros(observation.ply.shape + (2,), jnp.float32),
        hash_history=jnp.zeros(observation.ply.shape + (1,), jnp.uint32),
    )


# ---------------------------------------------------------------------------------------------
# Players by hand (library callers that hold a network or limits already)


def builtin_player(kind: str, name: str | None = None) -> Player:
    """A built-in player, named after its kind unless `name` is given."""
    return Player(name or kind, builtin(kind).kind)


def random_player(name: str = "random") -> Player:
    return builtin_player("random", name)


def greedy_player(name: str = "greedy") -> Player:
    return builtin_player("greedy", name)


def model_player(
    name: str,
    network,
    params,
    num_simulations: int,
    gumbel_scale: float = 0.0,
    one_ply: bool = False,
) -> Player:
    """A network's search (`gumbel_scale` 0: deterministic evaluation search; 1: the sampled
    self-play search), or with `one_ply` its one-ply value player (`search.one_ply`).
    `network=None` is the uniform-prior search."""
    if network is None:
        network, params = policies.UniformPriorNetwork(), {}
    return Player(
        name, NETWORK_KIND, network, params, num_simulations, gumbel_scale, one_ply=one_ply
    )


def engine_player(limits: uci.Limits, name: str | None = None) -> Player:
    """A UCI engine searching with `limits` (any UCI engine: Fairy-Stockfish, a model served
    by `python -m mmc_jax.engine`, ...; its process comes from the arena's engine pools)."""
    return Player(name or f"engine:{limits.label()}", ENGINE_KIND, limits=limits)
