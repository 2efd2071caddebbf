"""AlphaZero-style self-play and training of the learned recon agent (`search.recon_learned`).

One iteration (`iteration`): `games` self-play games of the variant, both sides the learned
agent, every turn of every game one jitted, vmapped function (`selfplay_turn`): belief update
after the opponent's move, the sense search (its window is played), belief update, the move
search (its request is played), belief update. Each side keeps its own exact belief; searches
see only belief samples. Gumbel noise makes the self-play choices explore, and with `explore`
> 0 that share of the moves is replaced by a uniformly random requestable move (the policy
target stays the search's; the value targets are the results of the games as played), a
remedy should self-play settle into passivity again (earlier runs, whose search squashed q,
ended with both sides requesting pawn captures onto empty squares, a pass that risks nothing,
until the ply cap); the README's run does not use it. Then `updates` Adam steps on minibatches
drawn from that iteration's examples (with `replay_iterations` K > 1, also from `replay_rows`
decisions and true boards kept of each of the K - 1 iterations before: `ReplayState`):

  policy   cross-entropy to the search's improved policy, at both phases (windows at the
           sense phase, requests at the move phase);
  value    squared error of the observation value to the game result (mover's view);
  world    squared error of the world value on the *true* board at each turn start to the
           game result mixed with the prior's value of that board (`anchored`; the
           privileged board is a training target only; at play time the world value sees
           only boards sampled from the belief);
  plus `weight_decay` x L2.

Games are played to the end, so every value target is a result. A game that reaches the ply
cap (a draw under the rules) is adjudicated by material for training (`adjudicate`): White
scores `tanh(adjudicate x its material lead)`, Black the negative. Without it (2026-11-26, a
world value started from the hand-written prior) self-play settled by iteration 55 into games
that all reached the cap: every result was 0, the value and world value learned to say 0
everywhere (their losses fell to 0.000), the searches' q lost its signal, and the policy drifted
on noise; adjudication keeps a material lead worth something in every game. With adjudication
alone the next run settled the same way by iteration 56 (every game to the cap with material
untouched, so every adjudicated result was 0 as well): the world value's target is therefore
anchored to the prior (`anchor`: half the target is the prior's own value of the board), so
the searches keep preferring a material gain whatever self-play's results say.
One iteration is one compiled function (`iteration`): the self-play turns as a scan over the
ply cap (finished games absorb; with `refill`, a finished game is replaced by a new one in its
slot, and the game the scan cuts does not train), then `updates` Adam steps as a scan, each on
a minibatch drawn with replacement from that iteration's live decisions. `ALGORITHM` puts it
behind the Algorithm contract (`mmc_jax.training.algorithm`), so `python -m mmc_jax.train
--config configs/recon.py --workdir W` runs it in the one run loop: orbax checkpoints of the
parameters and optimizer state, a bit-identical resume (keys are `fold_in(run key,
iteration)`), SIGTERM, the workdir lock, progress with an ETA, metrics and plots; `python -m
mmc_jax.export` writes its model as every learner's (`ReconAlgorithm.model_kind`), and
`mmc_jax.algorithms.open_model` reads it back.
"""

from __future__ import annotations

import functools
import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
from flax import struct

from mmc_jax import rules as R
from mmc_jax.evaluation import players
from mmc_jax.evaluation import recon_agents as A
from mmc_jax.infra import checkpoint as checkpoint_lib
from mmc_jax.infra import sharding
from mmc_jax.model import recon_net
from mmc_jax.rules import recon
from mmc_jax.search import recon_belief as RB
from mmc_jax.search import recon_learned as L
from mmc_jax.search import recon_score as S
from mmc_jax.training import learner
from mmc_jax.training import selfplay as selfplay_lib
from mmc_jax.training.algorithm import (
    ReplicatedAlgorithm,
    ReplicatedState,
    check_at_least_one,
    compile_step,
)


class TrainConfig(NamedTuple):
    """Everything a run needs (hashable; recorded in its checkpoint)."""

    variant: str = "recon"
    games: int = 32  # self-play games per iteration
    max_plies: int = 60
    belief_size: int = 64
    moves_per_board: int = 32
    search: L.SearchConfig = L.SearchConfig()
    updates: int = 16  # Adam steps per iteration
    minibatch: int = 256
    learning_rate: float = 1e-3
    weight_decay: float = 1e-4
    explore: float = 0.0  # share of self-play moves replaced by a random requestable move
    adjudicate: float = 0.2  # a capped game's result: tanh(this x White's material lead)
    anchor: float = 0.5  # the world value's target: this share is the prior's own value
    replay_iterations: int = 1  # K: minibatches also from what K - 1 earlier iterations kept
    replay_rows: int = 2048  # decisions (and true boards) each iteration keeps for the replay
    sampler: str = "inverse_cdf"  # how minibatch rows are drawn (learner.draw_rows)
    refill: bool = False  # a finished self-play game is replaced by a new one in its slot
    seed: int = 0
    # The learner section's other optimizer fields (`learner.OPTIMIZER_FIELDS`: a schedule, a
    # clip), as sorted (name, value) pairs; `learning_rate` and `weight_decay` are above.
    optimizer: tuple = ()


@struct.dataclass(kw_only=True)
class SelfplayGames:
    """Games with both players' beliefs (`beliefs` has a leading [2] axis: White, Black)."""

    state: recon.ReconState
    beliefs: RB.ReconBelief


class TurnRecord(NamedTuple):
    """What one turn of one game leaves for training."""

    live: jax.Array  # bool, the game was running at the start of the turn
    mover: jax.Array  # int32 colour
    sense: L.Decision
    move: L.Decision
    world: jax.Array  # float32[386] true board at the turn's start (a training target only)


def start(rules, size: int) -> SelfplayGames:
    """A new game (unbatched) with both players' start beliefs."""
    beliefs = jax.tree.map(
        lambda *xs: jnp.stack(xs), RB.initial(rules, 0, size), RB.initial(rules, 1, size)
    )
    return SelfplayGames(state=recon.init(rules), beliefs=beliefs)


def selfplay_turn(params, rules, games: SelfplayGames, key, *, config: TrainConfig):
    """One whole turn of the side to move, both sides the learned agent (unbatched)."""
    net = recon_net.make_net(config.search)
    state = games.state
    colour = state.turn
    belief = jax.tree.map(lambda x: x[colour], games.beliefs)
    keys = jax.random.split(key, 5)
    info = recon.player_info(state)
    world = L.true_world_features(rules, state)
    belief = RB.after_opponent_move(
        rules, belief, info.own_pieces, info.notification, info.ply, keys[0],
        moves_per_board=config.moves_per_board,
    )  # fmt: skip
    sense = L.sense_search(net, params, config.search, rules, state, belief, keys[1])
    state = recon.step(rules, state, sense.action)
    belief = RB.after_sense(belief, *RB.sensed_content(recon.player_info(state)), keys[2])
    move_key, explore_key, random_key = jax.random.split(keys[3], 3)
    move = L.move_search(net, params, config.search, rules, state, belief, move_key)
    request = move.action
    if config.explore > 0:
        requestable = move.mask[: recon.PASS + 1]
        random_request = jax.random.categorical(random_key, jnp.where(requestable, 0.0, -jnp.inf))
        explore = jax.random.uniform(explore_key) < config.explore
        request = jnp.where(explore, random_request, request).astype(jnp.int32)
    state = recon.step(rules, state, request)
    belief = RB.after_own_move(
        rules, belief, request, state.taken[colour], state.capture[colour], keys[4]
    )
    beliefs = jax.tree.map(
        lambda all_, one: jnp.where(
            jnp.arange(2).reshape((2,) + (1,) * one.ndim) == colour, one[None], all_
        ),
        games.beliefs, belief,
    )  # fmt: skip
    beliefs = jax.tree.map(
        lambda old, new: jnp.where(games.state.terminated, old, new), games.beliefs, beliefs
    )
    record = TurnRecord(
        live=~games.state.terminated, mover=colour, sense=sense, move=move, world=world
    )
    return SelfplayGames(state=state, beliefs=beliefs), record


class Examples(NamedTuple):
    """One iteration's training examples, fixed-size [N] rows with `weight` 1 where live."""

    obs: jax.Array  # float32[N, 5, 5, 41]
    mask: jax.Array  # bool[N, 1242]
    target: jax.Array  # float32[N, 1242]
    result: jax.Array  # float32[N] game result for the mover
    weight: jax.Array  # float32[N] 1 for a live decision, 0 for padding
    world: jax.Array  # float32[N2, 387]
    world_result: jax.Array  # float32[N2]
    world_weight: jax.Array  # float32[N2]


def selfplay(params, rules, key, config: TrainConfig):
    """(Examples, stats) of self-play of `rules` [B] over a scan of `config.max_plies` turns,
    both sides the learned agent. Without `refill`, each slot plays one game to its end (a
    finished game absorbs, its turns are padding). With `refill`, a finished game is replaced
    by a new one in its slot at the next turn (`_selfplay_refilled`). Jittable."""
    if config.refill:
        return _selfplay_refilled(params, rules, key, config)
    games = jax.vmap(functools.partial(start, size=config.belief_size))(rules)
    turn = _turn_fn(params, rules, key, config)

    def absorbing(carry, t):
        games, rewards = carry
        games, record = turn(games, t)
        return (games, rewards + games.state.rewards), record

    rewards = jnp.zeros((config.games, 2), jnp.float32)
    (games, rewards), record = jax.lax.scan(
        absorbing, (games, rewards), jnp.arange(config.max_plies)
    )  # record: [T, B, ...]
    decisive = rewards[:, 0] != 0
    rewards = adjudicated(rewards, white_material_lead(games.state), config.adjudicate)
    live = record.live.reshape(-1).astype(jnp.float32)
    result = jnp.broadcast_to(rewards[None], record.live.shape + (2,))
    examples = _examples(record, result, live, config)
    stats = {
        "plies": games.state.ply.astype(jnp.float32).mean(),
        "white": rewards[:, 0].mean(),
        "decisive": decisive.astype(jnp.float32).mean(),
        "turns": live.sum(),
        "games": jnp.float32(config.games),
    }
    return examples, stats


def _turn_fn(params, rules, key, config: TrainConfig):
    """`turn(games, t) -> (games, TurnRecord [B])`: turn `t` of every game, vmapped."""
    one = functools.partial(selfplay_turn, config=config)

    def turn(games, t):
        keys = jax.random.split(jax.random.fold_in(key, t), games.state.turn.shape[0])
        return jax.vmap(one, in_axes=(None, 0, 0, 0))(params, rules, games, keys)

    return turn


class GameEnd(NamedTuple):
    """What a turn of refilled self-play says about the game that ended in it, per slot [B]."""

    ended: jax.Array  # bool, the slot's game ended in this turn
    result: jax.Array  # float32[2] its result (White, Black), adjudicated at the cap
    decisive: jax.Array  # bool, a king was taken (before adjudication)
    plies: jax.Array  # float32, its length


def _selfplay_refilled(params, rules, key, config: TrainConfig):
    """`selfplay` with every finished game replaced by a new one in its slot: the scan of
    `max_plies` turns plays as many whole games as fit (run 3's games lasted 19-29 plies of
    the 60 turns, so without refill most turns were padding). Each turn's value targets are the
    result of the game it belongs to (`training.selfplay.game_results`, AlphaZero's backward
    scan); the turns of the game still running when the scan ends have no result and weight
    0, as in pgx's batched AlphaZero. The games kept are therefore every slot's first game and
    those that fit after it: later games are shorter on average than the first (a game of the
    full cap is always a slot's first)."""
    fresh = jax.vmap(functools.partial(start, size=config.belief_size))(rules)
    turn = _turn_fn(params, rules, key, config)

    def refilled(carry, t):
        games, rewards = carry
        games, record = turn(games, t)
        rewards = rewards + games.state.rewards
        ended = games.state.terminated  # every slot's game was live at the turn's start
        lead = white_material_lead(games.state)
        end = GameEnd(
            ended=ended,
            result=adjudicated(rewards, lead, config.adjudicate),
            decisive=rewards[:, 0] != 0,
            plies=games.state.ply.astype(jnp.float32),
        )
        games = selfplay_lib.where_games(ended, fresh, games)
        return (games, jnp.where(ended[:, None], 0.0, rewards)), (record, end)

    rewards = jnp.zeros((config.games, 2), jnp.float32)
    _, (record, end) = jax.lax.scan(refilled, (fresh, rewards), jnp.arange(config.max_plies))

    result, known = selfplay_lib.game_results(end.ended, end.result)
    weight = (record.live & known).reshape(-1).astype(jnp.float32)
    examples = _examples(record, result, weight, config)
    ended = end.ended.astype(jnp.float32)
    count = jnp.maximum(ended.sum(), 1.0)
    stats = {
        "plies": (end.plies * ended).sum() / count,
        "white": (end.result[..., 0] * ended).sum() / count,
        "decisive": (end.decisive * ended).sum() / count,
        "turns": weight.sum(),
        "games": ended.sum(),
    }
    return examples, stats


def _examples(record: TurnRecord, result, weight, config: TrainConfig) -> Examples:
    """The `Examples` of a scan's records [T, B]: `result` float32[T, B, 2] the result of each
    turn's game (White, Black), `weight` float32[T x B] which turns train."""
    mover = record.mover.reshape(-1)
    result = jnp.take_along_axis(result.reshape(-1, 2), mover[:, None], axis=-1)[:, 0]

    def rows(x):
        return x.reshape((-1,) + x.shape[2:])

    sense, move = record.sense, record.move
    world = rows(record.world)
    return Examples(
        obs=jnp.concatenate([rows(sense.obs), rows(move.obs)]),
        mask=jnp.concatenate([rows(sense.mask), rows(move.mask)]),
        target=jnp.concatenate([rows(sense.target), rows(move.target)]),
        result=jnp.concatenate([result, result]),
        weight=jnp.concatenate([weight, weight]),
        world=world,
        world_result=anchored(result, world, config.anchor),
        world_weight=weight,
    )


def white_material_lead(state: recon.ReconState):
    """float32[...] White's material lead (pawn 1, knight and bishop 3, rook 5, queen 9)."""
    lead = jax.vmap(S.material)(state.pieces.reshape(-1, 6), state.own.reshape(-1))
    lead = lead.reshape(state.own.shape)
    return jnp.where(state.turn == 0, lead, -lead)


def adjudicated(rewards, white_lead, scale: float):
    """float32[B, 2] results with each game that ended undecided (the ply cap) scored by
    material, `tanh(scale x White's lead)` for White and its negative for Black: self-play
    whose capped games all score 0 lost its value signal and settled into 60-ply draws (2026-11-26,
    see the module docstring); `scale` 0 keeps them draws."""
    rewards = jnp.asarray(rewards, jnp.float32)
    undecided = (rewards[:, 0] == 0) & (rewards[:, 1] == 0)
    white = jnp.where(undecided, jnp.tanh(scale * jnp.asarray(white_lead)), rewards[:, 0])
    black = jnp.where(undecided, -white, rewards[:, 1])
    return jnp.stack([white, black], axis=1).astype(jnp.float32)


def anchored(result, world, anchor: float):
    """float32[N] the world value's targets: `(1 - anchor) x result + anchor x tanh(prior)`, the
    prior's value of each board (its last feature, `search.recon_learned.world_features`).
    Trained on results alone, a world value started from the prior forgot it once self-play
    had turned passive (module docstring); anchored, a material gain keeps its value."""
    world = jnp.asarray(world)
    return ((1 - anchor) * jnp.asarray(result) + anchor * jnp.tanh(world[:, -1])).astype(
        jnp.float32
    )


def make_optimizer(config: TrainConfig):
    """The learner's optimizer (`learner.make_optimizer`): by default AdamW with decoupled
    decay on every parameter, as recon's runs were trained; a schedule or clip of the config's
    `learner` section (`TrainConfig.optimizer`) applies."""
    defaults = {"optimizer": "adamw", "weight_decay_mask": "all"}
    fields = {**dict(config.optimizer), "learning_rate": config.learning_rate}
    fields["weight_decay"] = config.weight_decay
    return learner.make_optimizer(learner.optimizer_config(fields, defaults))


def loss_fn(params, batch, config: TrainConfig):
    """(total loss, (policy, value, world)) of a minibatch (dict of Examples' fields)."""
    net = recon_net.make_net(config.search)
    (logits, value), world_value = net.apply(
        {"params": params}, batch["obs"], batch["mask"], batch["world"]
    )
    log_policy = jax.nn.log_softmax(logits)
    policy = -jnp.sum(batch["target"] * log_policy, axis=-1).mean()
    value_loss = jnp.mean((value - batch["result"]) ** 2)
    world_loss = jnp.mean((world_value - batch["world_result"]) ** 2)
    return policy + value_loss + world_loss, (policy, value_loss, world_loss)


def minibatch(examples: Examples, key, size: int, sampler: str = "inverse_cdf") -> dict:
    """`size` live decisions and `size` live true boards, drawn uniformly with replacement."""
    decision_key, world_key = jax.random.split(key)
    i = learner.draw_rows(decision_key, examples.weight, size, sampler)
    j = learner.draw_rows(world_key, examples.world_weight, size, sampler)
    return {
        "obs": examples.obs[i], "mask": examples.mask[i], "target": examples.target[i],
        "result": examples.result[i], "world": examples.world[j],
        "world_result": examples.world_result[j],
    }  # fmt: skip


@struct.dataclass(kw_only=True)
class ReplayState:
    """The state of a run with replay across iterations (`replay_iterations` K > 1): the
    parameters, Adam's state and `replay`, the rows kept of the last K - 1 iterations
    (`Examples` with leading axes [K - 1, rows], the newest first; a slot not filled yet has
    weight 0). The replay is learner state: every checkpoint holds it, so a resume is exact."""

    params: Any
    opt_state: Any
    replay: Examples


def kept_rows(config: TrainConfig) -> tuple[int, int]:
    """(decision rows, true-board rows) an iteration keeps for the replay: `replay_rows`, at
    most what one iteration has (2 x games x max_plies decisions, games x max_plies boards)."""
    turns = config.games * config.max_plies
    return min(config.replay_rows, 2 * turns), min(config.replay_rows, turns)


def empty_replay(config: TrainConfig) -> Examples:
    """The replay of a fresh run: K - 1 slots of zeros, every weight 0 (nothing drawn)."""
    decisions, boards = kept_rows(config)
    slots = config.replay_iterations - 1
    actions = recon.NUM_ACTIONS
    return Examples(
        obs=jnp.zeros((slots, decisions, 5, 5, recon_net.OBS_CHANNELS), jnp.float32),
        mask=jnp.zeros((slots, decisions, actions), bool),
        target=jnp.zeros((slots, decisions, actions), jnp.float32),
        result=jnp.zeros((slots, decisions), jnp.float32),
        weight=jnp.zeros((slots, decisions), jnp.float32),
        world=jnp.zeros((slots, boards, recon_net.WORLD_FEATURES), jnp.float32),
        world_result=jnp.zeros((slots, boards), jnp.float32),
        world_weight=jnp.zeros((slots, boards), jnp.float32),
    )


def keep(examples: Examples, key, config: TrainConfig) -> Examples:
    """`kept_rows` live decisions and live true boards of one iteration, drawn without
    replacement (Gumbel top-k over the live rows; where fewer are live, the rest are padding
    rows and keep their weight 0)."""
    decisions, boards = kept_rows(config)
    decision_key, board_key = jax.random.split(key)

    def draw(key, weight, count):
        noise = jax.random.gumbel(key, weight.shape)
        return jax.lax.top_k(noise + jnp.log(weight), count)[1]

    i = draw(decision_key, examples.weight, decisions)
    j = draw(board_key, examples.world_weight, boards)
    return Examples(
        obs=examples.obs[i], mask=examples.mask[i], target=examples.target[i],
        result=examples.result[i], weight=examples.weight[i], world=examples.world[j],
        world_result=examples.world_result[j], world_weight=examples.world_weight[j],
    )  # fmt: skip


def with_replay(examples: Examples, replay: Examples) -> Examples:
    """This iteration's examples followed by every replay slot's rows (one pool to draw from)."""
    return jax.tree.map(
        lambda new, old: jnp.concatenate([new, old.reshape((-1,) + old.shape[2:])]),
        examples,
        replay,
    )


def pushed(replay: Examples, kept: Examples) -> Examples:
    """The replay with `kept` as its newest slot and its oldest slot dropped."""
    return jax.tree.map(lambda old, new: jnp.concatenate([new[None], old[:-1]]), replay, kept)


def init_train_state(config: TrainConfig) -> ReplicatedState | ReplayState:
    """Fresh parameters (key `fold_in(seed, 2**30)` is never an iteration's) and optimizer;
    with replay across iterations (K > 1), an empty replay too."""
    params = recon_net.init_params(
        config.search, jax.random.fold_in(jax.random.key(config.seed), 2**30)
    )
    opt_state = make_optimizer(config).init(params)
    if config.replay_iterations > 1:
        return ReplayState(params=params, opt_state=opt_state, replay=empty_replay(config))
    return ReplicatedState(params=params, opt_state=opt_state)


def iteration(state: ReplicatedState | ReplayState, rules, key, config: TrainConfig):
    """One self-play + learning iteration (jittable): (state, metrics of float32 scalars)."""
    play_key, _ = jax.random.split(key)
    examples, stats = selfplay(state.params, rules, play_key, config)
    state, metrics = learn(state, examples, key, config)
    return state, dict(stats, **metrics)


def learn(state: ReplicatedState | ReplayState, examples: Examples, key, config: TrainConfig):
    """The learner half of `iteration` (jittable; `key` the iteration's own): `updates` Adam
    steps on minibatches from this iteration's examples (and the replay's rows), then the
    replay keeps this iteration's rows. (state, metrics)."""
    _, learn_key = jax.random.split(key)
    optimizer = make_optimizer(config)
    replay = config.replay_iterations > 1
    pool = with_replay(examples, state.replay) if replay else examples

    def update(carry, key):
        params, opt_state = carry
        batch = minibatch(pool, key, config.minibatch, config.sampler)
        (loss, parts), grads = jax.value_and_grad(loss_fn, has_aux=True)(params, batch, config)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return (optax.apply_updates(params, updates), opt_state), jnp.stack([loss, *parts])

    (params, opt_state), losses = jax.lax.scan(
        update, (state.params, state.opt_state), jax.random.split(learn_key, config.updates)
    )
    loss, policy, value, world = losses.mean(axis=0)
    metrics = dict(loss=loss, policy=policy, value=value, world=world)
    if replay:  # this iteration keeps its rows (a key no other draw uses)
        metrics["pool"] = pool.weight.sum()
        kept = keep(examples, jax.random.fold_in(key, 2**30), config)
        replay_state = pushed(state.replay, kept)
        return ReplayState(params=params, opt_state=opt_state, replay=replay_state), metrics
    return ReplicatedState(params=params, opt_state=opt_state), metrics


# ----------------------------------------------------------------------------- config


# The learned agent's observation (`recon_learned.observation`): recon.observe's planes and the
# belief marginals; an exported model's card records it.
MODEL_LAYOUT = f"recon_learned;planes={recon_net.OBS_CHANNELS}"


def search_config(config: ml_collections.ConfigDict) -> L.SearchConfig:
    """The learned agent's static sizes of a run config (its `search` and `network` sections).

    Raises:
      ValueError: a field is missing (the config is not a recon run's).
    """
    try:
        return L.SearchConfig(
            **{name: int(config.search[name]) for name in ("worlds", "candidates")},
            **{name: int(config.network[name]) for name in ("blocks", "channels", "world_hidden")},
        )
    except (KeyError, AttributeError) as error:
        raise ValueError(f"its config has no recon search size {error}") from None


def train_config(config: ml_collections.ConfigDict) -> TrainConfig:
    """The static `TrainConfig` of a run config (configs/recon.py)."""

    def read(cast, section: str, *names: str) -> dict:
        return {name: cast(config[section][name]) for name in names}

    return TrainConfig(
        variant=str(config.variant),
        seed=int(config.seed),
        search=search_config(config),
        **read(int, "selfplay", "games", "max_plies", "belief_size", "moves_per_board"),
        **read(float, "selfplay", "explore", "adjudicate"),
        # Runs before refill existed recorded no `selfplay.refill`: theirs played one game a slot.
        refill=bool(config.selfplay.get("refill", False)),
        **read(int, "learner", "updates", "minibatch"),
        **read(float, "learner", "learning_rate", "weight_decay", "anchor"),
        # Runs before replay existed recorded no `replay` section: theirs was 1 iteration.
        replay_iterations=int(config.get("replay", {}).get("iterations", 1)),
        replay_rows=int(config.get("replay", {}).get("rows", 2048)),
        sampler=learner.configured_sampler(config.learner),
        optimizer=tuple(
            sorted(
                (name, config.learner[name])
                for name in learner.OPTIMIZER_FIELDS
                if name in config.learner and name not in ("learning_rate", "weight_decay")
            )
        ),
    )


def _check(condition: bool, message: str) -> None:
    if not condition:
        raise ValueError(message)


def prepare_config(config: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
    """A validated, locked copy of a recon run config (ValueError naming the bad field)."""
    config = ml_collections.ConfigDict(config.to_dict())
    try:
        R.canonical(config.variant)
    except ValueError as error:
        raise ValueError(f"config.variant: {error}") from None
    _check(R.is_sense(config.variant), f"config.variant={config.variant!r} has no sensing "
           "(fog=sense:2 or sense:3): train it with configs/gardner.py")  # fmt: skip
    check_at_least_one(config, ("selfplay.games", "selfplay.max_plies", "selfplay.belief_size",
                                "selfplay.moves_per_board", "search.worlds", "search.candidates",
                                "network.channels", "network.world_hidden", "learner.updates",
                                "learner.minibatch", "num_iterations"))  # fmt: skip
    if "replay" in config:
        check_at_least_one(config, ("replay.iterations", "replay.rows"))
    learner.configured_sampler(config.learner)
    _check(int(config.network.blocks) >= 0, "config.network.blocks must be >= 0")
    finite = {
        "learner.learning_rate": (0.0, 10.0),
        "learner.weight_decay": (0.0, 1.0),
        "learner.anchor": (0.0, 1.0),
        "selfplay.explore": (0.0, 1.0),
        "selfplay.adjudicate": (0.0, 100.0),
    }
    for field, (low, high) in finite.items():
        section, name = field.split(".")
        value = float(config[section][name])
        _check(
            math.isfinite(value)
            and low <= value <= high
            and (name != "learning_rate" or value > 0),
            f"config.{field}={value} must be a finite number in "
            f"{'(' if name == 'learning_rate' else '['}{low}, {high}]",
        )
    config.lock()
    return config


# ----------------------------------------------------------------------------- algorithm


class ReconAlgorithm(ReplicatedAlgorithm):
    """The learned recon agent's self-play training (configs/recon.py), on the run loop."""

    def setup(self, config, mesh):
        rules = R.stack([R.get(config.variant, max_plies=int(config.selfplay.max_plies))])
        games = int(config.selfplay.games)
        rules = jax.tree.map(lambda x: np.repeat(np.asarray(x), games, axis=0), rules)
        return sharding.put_replicated(rules, mesh)

    def fresh_state(self, config, key):
        del key  # the seed's own key: the parameters of TrainConfig's seed
        return init_train_state(train_config(config))

    def checkpoint_contents(self, state, save_replay: bool) -> dict:
        """`params` and `opt_state`, and the replay of a run with replay across iterations
        (learner state: saved whatever `checkpoint.save_replay` says, so a resume is exact)."""
        saved = super().checkpoint_contents(state, save_replay)
        if isinstance(state, ReplayState):
            saved["replay"] = state.replay
        return saved

    def describe(self, config, mesh, state):
        search = train_config(config).search
        size = sum(int(np.prod(x.shape)) for x in jax.tree.leaves(state.params))
        return (
            f"recon ({config.variant}): {mesh.size} device(s) ({jax.devices()[0].platform}), "
            f"{config.selfplay.games} self-play games x up to {config.selfplay.max_plies} plies "
            f"per iteration, {search.worlds} belief worlds x {search.candidates} candidates per "
            f"search, net {search.blocks}x{search.channels} ({size:,} params; ReconNet), "
            f"{config.learner.updates} Adam steps of {config.learner.minibatch}"
        )

    def compile(self, config, mesh, state, data, start):
        del start

        def to_record(metrics):
            record = {
                "selfplay/frames": int(round(metrics["turns"])),
                "selfplay/games": int(round(metrics["games"])),
                "selfplay/mean_game_length": metrics["plies"],
                "selfplay/white_score": metrics["white"],
                "selfplay/decisive": metrics["decisive"],
                "train/loss": metrics["loss"],
                "train/policy_loss": metrics["policy"],
                "train/value_loss": metrics["value"],
                "train/world_loss": metrics["world"],
            }
            if "pool" in metrics:  # the live decisions the minibatches were drawn from
                record["replay/decisions"] = int(round(metrics["pool"]))
            return record

        return compile_step(iteration, train_config(config), state, data, to_record)

    def next_command(self, config, workdir):
        return (
            f"python -m mmc_jax.evaluate --variant {config.variant} --checkpoint {workdir} "
            "--opponent entropy-pimc --games 100"
        )

    def progress_fields(self, record):
        plies = record["selfplay/mean_game_length"]
        decisive, white = record["selfplay/decisive"], record["selfplay/white_score"]
        return [f"plies {plies:.1f} decisive {decisive:.2f} white {white:+.2f}"]

    def model_kind(self, config):
        """The learned agent's parameters (`recon_net`) for the search sizes of `config` (its
        `search` and `network` sections: all an exported model's card needs); the model's
        `network` is that `SearchConfig`, what the learned recon players take."""
        search = search_config(config)
        template = jax.eval_shape(lambda: recon_net.init_params(search, jax.random.key(0)))
        return checkpoint_lib.ModelKind(search, template, MODEL_LAYOUT, sensing=True)

    def describe_model(self, config, step):
        search = search_config(config)
        return f"{config.variant}: ReconNet {search.blocks}x{search.channels}, step {step}"

    def evaluate(self, config, params, key):
        """`eval/<opponent>` scores of the learned agent in `eval.num_games` colour-balanced
        games against each of `eval.opponents` (recon agents), with the same belief sizes."""
        static = train_config(config)
        games = int(config.eval.num_games)
        rules = R.stack([R.get(config.variant, max_plies=static.max_plies)] * games)
        out = {}
        for opponent in config.eval.opponents:
            learned, other = players.recon_kinds("learned"), players.recon_kinds(opponent)
            agents = np.asarray([[learned, other] if g % 2 == 0 else [other, learned]
                                 for g in range(games)], np.int32)  # fmt: skip
            rewards, _, _ = A.play_games(
                rules, agents, jax.random.fold_in(key, len(out)), size=static.belief_size,
                moves_per_board=static.moves_per_board, worlds=static.search.worlds,
                params=params, learned=static.search,
            )  # fmt: skip
            mine = np.where(np.arange(games) % 2 == 0, rewards[:, 0], rewards[:, 1])
            out[f"eval/{opponent}"] = float(np.mean((mine + 1) / 2))
        return out


ALGORITHM = ReconAlgorithm(
    "recon", batch_field="selfplay.games", prepare=prepare_config, section="search"
)
