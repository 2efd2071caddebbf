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
drawn from that iteration's examples:

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
Keys are `fold_in(seed key, iteration)`, and the minibatch draws are seeded by the iteration:
a run resumed from a checkpoint continues exactly as the unbroken run (tested).

`train` is the loop: resume from `<workdir>/checkpoint.pkl` if there is one, iterate until the
iteration count or the wall-clock budget is reached, print a progress line with an ETA, and
checkpoint (a pickle of numpy arrays: params, optimizer state, iteration, config) every
`checkpoint_every` iterations and at the end.
"""

from __future__ import annotations

import functools
import pickle
import time
from pathlib import Path
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import struct

from mmc_jax import rules as R
from mmc_jax.model import recon_net
from mmc_jax.rules import recon
from mmc_jax.search import recon_belief as RB
from mmc_jax.search import recon_learned as L
from mmc_jax.search import recon_score as S

CHECKPOINT = "checkpoint.pkl"


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
    seed: int = 0


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


@functools.partial(jax.jit, static_argnames=("config",))
def _turns(params, rules, games, key, *, config: TrainConfig):
    keys = jax.random.split(key, games.state.turn.shape[0])
    one = functools.partial(selfplay_turn, config=config)
    return jax.vmap(one, in_axes=(None, 0, 0, 0))(params, rules, games, keys)


class Examples(NamedTuple):
    """Training examples of one iteration (numpy): decisions and true-board values."""

    obs: np.ndarray  # float32[N, 5, 5, 41]
    mask: np.ndarray  # bool[N, 1242]
    target: np.ndarray  # float32[N, 1242]
    result: np.ndarray  # float32[N] game result for the mover
    world: np.ndarray  # float32[N2, 386]
    world_result: np.ndarray  # float32[N2]


def selfplay(params, key, config: TrainConfig):
    """(Examples, stats dict) of `config.games` self-play games played to the end."""
    rules = R.stack([R.get(config.variant, max_plies=config.max_plies)] * config.games)
    games = jax.vmap(functools.partial(start, size=config.belief_size))(rules)
    rewards = np.zeros((config.games, 2), np.float32)
    records = []
    for t in range(config.max_plies):
        games, record = _turns(params, rules, games, jax.random.fold_in(key, t), config=config)
        rewards += np.asarray(games.state.rewards)
        records.append(jax.device_get(record))
        if bool(np.all(np.asarray(games.state.terminated))):
            break
    decisive = rewards[:, 0] != 0
    rewards = adjudicated(rewards, np.asarray(white_material_lead(games.state)), config.adjudicate)
    record = jax.tree.map(lambda *xs: np.stack(xs), *records)  # [T, B, ...]
    live = record.live
    result = np.take_along_axis(rewards[None], record.mover[..., None], axis=-1)[..., 0]
    result = np.broadcast_to(result, live.shape)

    def rows(decision):
        return decision.obs[live], decision.mask[live], decision.target[live]

    sense, move = rows(record.sense), rows(record.move)
    examples = Examples(
        obs=np.concatenate([sense[0], move[0]]),
        mask=np.concatenate([sense[1], move[1]]),
        target=np.concatenate([sense[2], move[2]]),
        result=np.concatenate([result[live], result[live]]),
        world=record.world[live],
        world_result=anchored(result[live], record.world[live], config.anchor),
    )
    stats = {
        "plies": float(np.asarray(games.state.ply).mean()),
        "white": float(rewards[:, 0].mean()),
        "decisive": float(decisive.mean()),
    }
    return examples, stats


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
    undecided = (rewards[:, 0] == 0) & (rewards[:, 1] == 0)
    white = np.where(undecided, np.tanh(scale * white_lead), rewards[:, 0])
    return np.stack([white, np.where(undecided, -white, rewards[:, 1])], axis=1).astype(np.float32)


def anchored(result, world, anchor: float):
    """float32[N] the world value's targets: `(1 - anchor) x result + anchor x tanh(prior)`, the
    prior's value of each board (its last feature, `search.recon_learned.world_features`).
    Trained on results alone, a world value started from the prior forgot it once self-play
    had turned passive (module docstring); anchored, a material gain keeps its value."""
    return ((1 - anchor) * result + anchor * np.tanh(world[:, -1])).astype(np.float32)


def make_optimizer(config: TrainConfig):
    """Adam with decoupled L2 on every parameter."""
    return optax.adamw(config.learning_rate, weight_decay=config.weight_decay)


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


@functools.partial(jax.jit, static_argnames=("config",))
def update(params, opt_state, batch, *, config: TrainConfig):
    """One Adam step: (params, opt_state, (loss, policy, value, world))."""
    (loss, parts), grads = jax.value_and_grad(loss_fn, has_aux=True)(params, batch, config)
    updates, opt_state = make_optimizer(config).update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, (loss, *parts)


def minibatch(examples: Examples, rng: np.random.Generator, size: int) -> dict:
    """A minibatch drawn with replacement (fixed shape, whatever the number of examples)."""
    i = rng.integers(0, len(examples.result), size)
    j = rng.integers(0, len(examples.world_result), size)
    return {
        "obs": examples.obs[i], "mask": examples.mask[i], "target": examples.target[i],
        "result": examples.result[i], "world": examples.world[j],
        "world_result": examples.world_result[j],
    }  # fmt: skip


class TrainState(NamedTuple):
    params: dict
    opt_state: tuple
    iteration: int


def init_train_state(config: TrainConfig) -> TrainState:
    """Fresh parameters (key `fold_in(seed, -1)` is never an iteration's) and optimizer."""
    params = recon_net.init_params(
        config.search, jax.random.fold_in(jax.random.key(config.seed), 2**30)
    )
    return TrainState(params, make_optimizer(config).init(params), 0)


def iteration(train_state: TrainState, config: TrainConfig):
    """One self-play + learning iteration: (TrainState, metrics dict)."""
    key = jax.random.fold_in(jax.random.key(config.seed), train_state.iteration)
    examples, stats = selfplay(train_state.params, key, config)
    rng = np.random.default_rng([config.seed, train_state.iteration])
    params, opt_state = train_state.params, train_state.opt_state
    losses = []
    for _ in range(config.updates):
        batch = minibatch(examples, rng, config.minibatch)
        params, opt_state, parts = update(params, opt_state, batch, config=config)
        losses.append(jax.device_get(parts))
    loss, policy, value, world = np.mean(losses, axis=0)
    metrics = dict(stats, examples=len(examples.result), loss=float(loss), policy=float(policy),
                   value=float(value), world=float(world))  # fmt: skip
    return TrainState(params, opt_state, train_state.iteration + 1), metrics


def save(path, train_state: TrainState, config: TrainConfig) -> None:
    """Write a checkpoint (atomically: a temporary file renamed)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    blob = {"train_state": jax.device_get(train_state), "config": config._asdict()}
    blob["config"]["search"] = config.search._asdict()
    tmp = path.with_suffix(".tmp")
    tmp.write_bytes(pickle.dumps(blob))
    tmp.replace(path)


def load(path) -> tuple[TrainState, TrainConfig]:
    """(TrainState, TrainConfig) of a checkpoint written by `save`."""
    blob = pickle.loads(Path(path).read_bytes())
    fields = dict(blob["config"])
    fields["search"] = L.SearchConfig(**fields["search"])
    train_state = jax.tree.map(jnp.asarray, blob["train_state"])
    return TrainState(*train_state[:2], int(blob["train_state"].iteration)), TrainConfig(**fields)


def export_params(checkpoint, path) -> None:
    """Write a play-only copy of a checkpoint (no optimizer state; a third of the size):
    `load_params` reads it, `train` cannot resume from it."""
    train_state, config = load(checkpoint)
    save(path, TrainState(train_state.params, None, train_state.iteration), config)


def load_params(path) -> tuple[dict, L.SearchConfig]:
    """(params, SearchConfig) of a checkpoint, for play."""
    train_state, config = load(path)
    return train_state.params, config.search


def train(config: TrainConfig, workdir, *, iterations=None, budget_minutes=None,
          checkpoint_every: int = 5, keep_every: int = 0, log=print) -> TrainState:  # fmt: skip
    """Train until `iterations` (total, counting resumed ones) or `budget_minutes` of wall
    clock in this call, whichever comes first; resume from `workdir`'s checkpoint if any (its
    config must equal `config`). With `keep_every` > 0 the parameters of every `keep_every`-th
    iteration are also kept, as `params-<iteration>.pkl` (play-only, as `export_params`)."""
    path = Path(workdir) / CHECKPOINT
    if path.exists():
        train_state, saved = load(path)
        if saved != config:
            raise ValueError(f"{path} was written with another config: {saved}")
        log(f"resumed from {path} at iteration {train_state.iteration}")
    else:
        train_state = init_train_state(config)
    began = time.time()
    done = 0
    while iterations is None or train_state.iteration < iterations:
        elapsed = time.time() - began
        if budget_minutes is not None and elapsed >= 60 * budget_minutes:
            break
        train_state, metrics = iteration(train_state, config)
        done += 1
        elapsed = time.time() - began
        per = elapsed / done
        left = []
        if iterations is not None:
            left.append(per * (iterations - train_state.iteration))
        if budget_minutes is not None:
            left.append(max(60 * budget_minutes - elapsed, 0.0))
        eta = min(left) if left else float("nan")
        log(
            f"iter {train_state.iteration} loss {metrics['loss']:.3f} (policy "
            f"{metrics['policy']:.3f} value {metrics['value']:.3f} world {metrics['world']:.3f}) "
            f"examples {metrics['examples']} plies {metrics['plies']:.1f} "
            f"decisive {metrics['decisive']:.2f} white {metrics['white']:+.2f} "
            f"{per:.0f}s/iter elapsed {elapsed / 60:.1f}m eta {eta / 60:.1f}m"
        )
        if train_state.iteration % checkpoint_every == 0:
            save(path, train_state, config)
        if keep_every and train_state.iteration % keep_every == 0:
            snapshot = Path(workdir) / f"params-{train_state.iteration:05d}.pkl"
            save(snapshot, TrainState(train_state.params, None, train_state.iteration), config)
    save(path, train_state, config)
    return train_state
