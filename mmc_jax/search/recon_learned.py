"""A learned agent for reconnaissance-blind minichess: network, features and its two searches.

The agent decides both halves of a turn (sense, then move) from its own information alone
(`recon.player_info`) and its belief (`mmc_jax.search.recon_belief`), never the true board.

Network (`ReconNet`, one flax module, one parameter tree, two heads):
  `policy_value(obs [B, 5, 5, 41], mask [B, 1242])` -> (logits [B, 1242], value [B]): the
      project's pre-activation residual trunk (`mmc_jax.model.network.ResidualBlock`) over the
      34-channel recon observation plus 7 belief marginals (per square, the share of candidate
      boards with it empty / holding an opponent P..K); illegal actions get `MASKED_LOGIT`.
  `world_value(features [B, 387])` -> value [B]: the value of a *fully known* board for the
      side to move, `tanh(w x prior + mlp(features))`: the prior is the hand-written score
      PIMC plays by (`mmc_jax.search.recon_score.prior`, x `PRIOR_SCALE`: material, the most
      valuable piece attacked, pressure) with a learned weight w (1 at first), and the MLP
      (over both sides' pieces, the squares each side attacks, piece counts, per type the
      pieces each side attacks, ply, rules descriptor and the prior) is a correction whose
      output layer starts at zero, so a fresh agent's searches rank moves as PIMC's score does
      and learning starts there. This is the leaf evaluator of the searches, which only ever
      apply it to boards sampled from the belief (perfect-information sampling, PIMC).

Move search (`move_search`, a one-ply Gumbel search over sampled worlds): `worlds` boards are
drawn from the belief; the `candidates` requests of largest `gumbel + logit` (Gumbel top-k; no
noise when playing for evaluation) are each resolved with the referee's `recon.resolve` on every
world and scored: +1 if the move takes the king (or the last of a type under extinction), 0 if
it reaches the ply cap, otherwise minus the world value of the board for the opponent to move.
q(a) is the mean over worlds. As in Gumbel MuZero (mctx's completed-Q transform) the values are
min-max normalised over the evaluated requests (the network value, clipped into their range,
completes the q of requests not evaluated) and scaled by `SIGMA_SCALE`; the improved policy
`softmax(logits + sigma(q))` is the policy target, and the request is
`argmax(gumbel + logits + sigma(q))` over the candidates.

Sense search (`sense_search`, the value of information over the same kind of sample): `worlds`
boards are drawn from the belief *before* the sense and the q table `Q[k, a]` of up to
`candidates` requestable moves (a random subset when there are more; the move prior is not
defined in the sense phase) is computed as above. For window w, world k's sense result is the
window's content on k; the worlds giving the same result form its class; a player who sensed w
and saw that result would request `a*(w, k) = argmax_a mean_{k' in class} Q[k', a]` and get
`Q[k, a*(w, k)]` if k were true. The window's value `V(w) = mean_k Q[k, a*(w, k)]` is the expected
value of the next move after sensing w; a window that splits the worlds where they call for
different moves scores highest (information that does not change the move is worth nothing).
The target and the choice are those of the move search with V in place of q: target
`softmax(logits + sigma(V))` over the windows, window `argmax(gumbel + logits + sigma(V))`.

Self-play runs whose q was normalised together with the network value (when the observation
value and the world value disagree, every q lands at one end of the range and the prior alone
decides) collapsed into 60-ply shuffling draws by iteration 20, with or without a contempt for
draws (a negative draw value for both sides, which moreover breaks the negamax
`q = -world value of the opponent`: a quiet position is then good for whoever just moved).

Both searches read the belief (sampled worlds, marginals), the player's information and the key;
`tests/search/test_recon_learned.py` checks they decide the same on two true states that give the
player the same information.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from mmc_jax.rules import recon
from mmc_jax.rules import tables as T
from mmc_jax.rules.game import PLY_SCALE, attacked_squares, mirror, planes_to_mask
from mmc_jax.search import recon_belief as RB
from mmc_jax.search import recon_score as S

PRIOR_SCALE = 0.1  # the prior feature is `recon_score.prior` x this (a pawn: 0.1)
SIGMA_SCALE = 5.1  # mctx's completed-Q scale: (c_visit 50 + 1 visit) * c_scale 0.1
_SQUARES = np.arange(T.NUM_SQUARES, dtype=np.uint32)


class SearchConfig(NamedTuple):
    """Static sizes of the learned agent (hashable: a jit static argument).

    worlds: boards sampled from the belief per search (the "equal search" with PIMC's worlds).
    candidates: requests evaluated per search.
    blocks, channels: residual trunk; world_hidden: width of the world-value MLP.
    """

    worlds: int = 8
    candidates: int = 32
    blocks: int = 2
    channels: int = 32
    world_hidden: int = 128


# ----------------------------------------------------------------------------- features


def belief_marginals(belief: RB.ReconBelief):
    """float32[5, 5, 7] per square [rank, file]: the share of candidates with it empty (of
    opponent pieces) and holding an opponent P..K."""
    contents = RB.square_contents(belief)  # [K, 25]
    weights = belief.valid.astype(jnp.float32) / jnp.maximum(belief.valid.sum(), 1)
    shares = jnp.einsum("k,ksc->sc", weights, jax.nn.one_hot(contents, 7))  # [25, 7]
    return shares.reshape(5, 5, 7).transpose(1, 0, 2)  # squares are 5 * file + rank


def observation(rules, state: recon.ReconState, belief: RB.ReconBelief):
    """float32[5, 5, 41] the mover's observation (`recon.observe`) and belief marginals."""
    return jnp.concatenate([recon.observe(rules, state), belief_marginals(belief)], axis=-1)


def _bits(board):
    return ((board >> jnp.asarray(_SQUARES)) & 1).astype(jnp.float32)


def world_features(rules, pieces, own, ply):
    """float32[387] a fully known board for the side to move (`pieces` uint32[6], `own` uint32,
    its view): own and opponent P..K planes, squares attacked by each side, piece counts / 2,
    per type the own pieces the opponent attacks and the opponent's pieces it attacks (a king
    it attacks is a win on the move), ply / `PLY_SCALE`, the rules descriptor, and last the
    hand-written prior (`recon_score.prior` x `PRIOR_SCALE`) that `ReconNet.world_value` adds."""
    occ = RB.occupied(pieces)
    them = occ & ~own
    mine_planes = jnp.stack([_bits(pieces[t] & own) for t in range(6)])
    their_planes = jnp.stack([_bits(pieces[t] & them) for t in range(6)])
    their_attacks = attacked_squares(pieces, them, occ, rules.vector_allowed)
    flip = mirror(pieces)
    allowed = rules.vector_allowed
    my_attacks = mirror(attacked_squares(flip, mirror(own), RB.occupied(flip), allowed))
    counts = jnp.concatenate([mine_planes.sum(-1), their_planes.sum(-1)]) / 2.0
    hanging = jnp.stack([(mine_planes * _bits(their_attacks)).sum(-1),
                         (their_planes * _bits(my_attacks)).sum(-1)]).reshape(-1)  # fmt: skip
    return jnp.concatenate(
        [
            mine_planes.reshape(-1),
            their_planes.reshape(-1),
            _bits(my_attacks),
            _bits(their_attacks),
            counts,
            hanging,
            jnp.asarray(ply, jnp.float32)[None] / PLY_SCALE,
            recon.rules_descriptor(rules),
            PRIOR_SCALE * S.prior(rules, pieces, own)[None],
        ]
    )


def true_world_features(rules, state: recon.ReconState):
    """float32[387] `world_features` of the true board (training targets only: self-play
    records it to teach the world value; no decision reads it)."""
    return world_features(rules, state.pieces, state.own, state.ply)


# ----------------------------------------------------------------------------- search


def _world_inputs(rules, own_pieces, world, request, ply):
    """(features float32[387] of the board after `request` for the opponent to move,
    decided float32 +1 won / 0 drawn by the cap / nan otherwise) on one world."""
    own = RB.occupied(own_pieces)
    after, own_after, _, _ = recon.resolve(rules, own_pieces | world, own, request)
    them = RB.occupied(after) & ~own_after
    won = S.lost(rules, after, them) & ~S.lost(rules, after, own_after)
    capped = ply + 1 >= rules.max_plies
    decided = jnp.where(won, 1.0, jnp.where(capped, 0.0, jnp.nan))
    return world_features(rules, mirror(after), mirror(them), ply + 1), decided


def q_table(net, params, rules, own_pieces, worlds, requests, ply):
    """float32[K, M] value for the mover of each request (int32[M]) on each world
    (uint32[K, 6]): the decided result, or minus the world value for the opponent."""
    per_request = jax.vmap(_world_inputs, in_axes=(None, None, None, 0, None))
    per_world = jax.vmap(per_request, in_axes=(None, None, 0, None, None))
    features, decided = per_world(rules, own_pieces, worlds, requests, ply)
    k, m = decided.shape
    values = net.apply({"params": params}, features.reshape(k * m, -1), method="world_value")
    return jnp.where(jnp.isnan(decided), -values.reshape(k, m), decided)


def _sigma(x, q, valid):
    """`SIGMA_SCALE` x `x` min-max normalised by the range of the valid entries of `q`
    (clipped to that range; 0 when they are all equal)."""
    low = jnp.min(jnp.where(valid, q, jnp.inf))
    high = jnp.max(jnp.where(valid, q, -jnp.inf))
    return SIGMA_SCALE * jnp.clip((x - low) / jnp.maximum(high - low, 1e-6), 0.0, 1.0)


def _policy(net, params, rules, state, belief):
    """(obs float32[5, 5, 41], mask bool[1242], logits float32[1242], value float32)."""
    obs = observation(rules, state, belief)
    mask = recon.legal_action_mask(rules, state)
    logits, value = net.apply({"params": params}, obs[None], mask[None], method="policy_value")
    return obs, mask, logits[0], value[0]


class Decision(NamedTuple):
    """One search's result: the action (a recon action id), the policy target float32[1242],
    the observation float32[5, 5, 41] and legal mask bool[1242] it was made from."""

    action: jax.Array
    target: jax.Array
    obs: jax.Array
    mask: jax.Array


def _fair_view(state: recon.ReconState) -> recon.ReconState:
    """The state with the opponent's pieces removed: what the searches may read of it (its own
    pieces, phase, ply, memory, notifications; `recon.observe` and the legal mask read no more),
    so a decision cannot depend on the hidden board even by mistake."""
    return state.replace(pieces=state.pieces & state.own)


def move_search(net, params, config: SearchConfig, rules, state, belief, key, noise=True):
    """Decision of the move phase (module docstring); `noise` adds Gumbel noise (self-play)."""
    state = _fair_view(state)
    obs, mask, logits, value = _policy(net, params, rules, state, belief)
    world_key, gumbel_key = jax.random.split(key)
    gumbel = jnp.where(noise, jax.random.gumbel(gumbel_key, logits.shape), 0.0)
    scores = jnp.where(mask, gumbel + logits, -jnp.inf)
    _, requests = jax.lax.top_k(scores, config.candidates)
    valid = mask[requests]
    worlds = RB.sample(world_key, belief, config.worlds)
    q = q_table(net, params, rules, belief.own, worlds, requests, state.ply).mean(0)
    sigma = _sigma(q, q, valid)
    completed = jnp.full(logits.shape, _sigma(value, q, valid))
    completed = completed.at[requests].set(jnp.where(valid, sigma, completed[requests]))
    target = jax.nn.softmax(jnp.where(mask, logits + completed, -jnp.inf))
    choice = jnp.where(valid, gumbel[requests] + logits[requests] + sigma, -jnp.inf)
    action = requests[jnp.argmax(choice)].astype(jnp.int32)
    return Decision(action=action, target=target, obs=obs, mask=mask)


def same_window_content(rules, worlds):
    """bool[K, K, 16] whether two worlds (uint32[K, 6]) show the same content in each window."""
    bits = jnp.asarray(recon.WINDOW_BITS)[jnp.clip(rules.sense, 0, 3)]  # [16]
    differ = worlds[:, None, :] ^ worlds[None, :, :]  # [K, K, 6]
    return jnp.all((differ[..., None] & bits) == 0, axis=2)


def window_values(q, valid, same):
    """float32[16] V(w) = mean_k Q[k, a*(w, k)] (module docstring) from `q` float32[K, M],
    `valid` bool[M] and `same` bool[K, K, 16] (`same_window_content`)."""
    same = same.astype(jnp.float32)
    class_mean = jnp.einsum("kjw,jm->wkm", same, q) / same.sum(1).T[:, :, None]  # [16, K, M]
    best = jnp.argmax(jnp.where(valid, class_mean, -jnp.inf), axis=-1)  # [16, K]
    return jnp.take_along_axis(q.T[None], best[:, None, :], axis=1)[:, 0].mean(-1)


def sense_search(net, params, config: SearchConfig, rules, state, belief, key, noise=True):
    """Decision of the sense phase (module docstring); `noise` adds Gumbel noise."""
    state = _fair_view(state)
    obs, mask, logits, value = _policy(net, params, rules, state, belief)
    world_key, pick_key, gumbel_key = jax.random.split(key, 3)
    requestable = jnp.concatenate(
        [planes_to_mask(recon.requestable_planes(rules, belief.own)), jnp.ones(1, bool)]
    )
    order = jnp.where(requestable, jax.random.uniform(pick_key, requestable.shape), -1.0)
    _, requests = jax.lax.top_k(order, config.candidates)
    valid = requestable[requests]
    worlds = RB.sample(world_key, belief, config.worlds)
    q = q_table(net, params, rules, belief.own, worlds, requests, state.ply)
    windows = mask[recon.SENSE_BASE :]
    values = window_values(q, valid, same_window_content(rules, worlds))
    sigma = _sigma(values, values, windows)
    sense_logits = logits[recon.SENSE_BASE :]
    gumbel = jnp.where(noise, jax.random.gumbel(gumbel_key, sense_logits.shape), 0.0)
    target = (
        jnp.zeros_like(logits)
        .at[recon.SENSE_BASE :]
        .set(jax.nn.softmax(jnp.where(windows, sense_logits + sigma, -jnp.inf)))
    )
    window = jnp.argmax(jnp.where(windows, gumbel + sense_logits + sigma, -jnp.inf))
    return Decision(
        action=(recon.SENSE_BASE + window).astype(jnp.int32), target=target, obs=obs, mask=mask
    )
