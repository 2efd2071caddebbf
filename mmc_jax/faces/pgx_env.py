"""Every variant as a pgx environment: `make(spec)` returns a `pgx.Env`.

    import jax
    from mmc_jax.faces import pgx_env as E

    env = E.make("capture=atomic,goal=king")    # any variant spec of the rule space
    state = env.init(jax.random.key(0))          # pgx's State fields and meanings
    state = env.step(state, action)              # action: int32 in [0, env.num_actions)
    init, step = jax.jit(jax.vmap(env.init)), jax.jit(jax.vmap(env.step))   # batched

The object is a subclass of `pgx.Env`. It runs pgx's own `api_test` (tests/rules/test_env.py),
and pgx's step gives it pgx's conventions:
- an illegal action ends the game at once, with -1 for the mover and +1 for the other player;
- stepping a finished state returns it with zero rewards;
- `legal_action_mask` is all True once the game has ended.

The game underneath is the project's Game contract (`mmc_jax.rules.contract`): the same `init`,
`step`, `legal_action_mask` and `observe` that self-play, search and the arenas call.

The State fields, as in pgx:
- `current_player` int32: the player id of the side to move. At `init` the key decides which
  player id plays White (`_player_order`: the ids of White and Black), as in pgx's games.
- `observation` float32 [5, 5, C]: the contract's observation, from the mover's view. Under
  fog it shows only what the mover may see. `env.observe(state, player_id)` (deprecated in pgx,
  kept here) gives the other player's view as its turn would begin now, from what that player
  may know alone (`Game.observe_waiting`): never what the mover sees.
- `rewards` float32 [2]: by player id.
- `terminated` bool: checkmate, stalemate, a king or a kind of piece gone by the variant's goal,
  the 50-move rule, threefold repetition and the ply cap.
- `truncated` bool: always False. The rules end every game by themselves.
- `legal_action_mask` bool [num_actions].

**Sensing variants** (`fog=sense:W`, reconnaissance-blind). A turn is two steps by the same
player: a sense step, whose legal actions are the variant's sense windows (actions 1225 and
up), then a move step (board moves, or the pass). `current_player` stays the same across both
steps, and `env.sense_phase(state)` says which step it is. The observation is the contract's
recon observation: what the mover knows.

A variant whose start position has no legal move (`monochromatic`) has no first step: `make`
refuses it. `env.id` is the canonical spec; `env.version` is the rules' version.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from mmc_jax.rules import contract, notation, variants

try:
    import pgx.core as _pgx
    from flax import struct
except ImportError as error:  # pragma: no cover (an optional extra)
    raise ImportError(
        f"mmc_jax.faces.pgx_env needs pgx ({error}); pip install 'mmc_jax[pgx]'"
    ) from None

VERSION = "v1"


@struct.dataclass
class State(_pgx.State):
    """pgx's State for a variant (module doc); the project's game state is `_game`."""

    current_player: jax.Array
    observation: jax.Array
    rewards: jax.Array
    terminated: jax.Array
    truncated: jax.Array
    legal_action_mask: jax.Array
    _step_count: jax.Array
    _player_order: jax.Array  # player ids of White and Black
    _game: object  # the contract's state [1]
    _spec: str = struct.field(pytree_node=False)

    @property
    def env_id(self) -> str:
        return self._spec

    def to_svg(self, *, color_theme=None, scale=None) -> str:
        """The boards as SVG (a batch side by side), pieces as letters."""
        return board_svg(self, scale=scale or 1.0)

    def save_svg(self, filename, *, color_theme=None, scale=None) -> None:
        with open(filename, "w", encoding="utf-8") as handle:
            handle.write(self.to_svg(scale=scale))


def _one(tree):
    return jax.tree.map(lambda x: x[None], tree)


def _first(tree):
    return jax.tree.map(lambda x: x[0], tree)


class Env(_pgx.Env):
    """One variant as a pgx Env (module doc)."""

    def __init__(self, spec: str):
        super().__init__()
        self._spec = variants.canonical(spec)
        self._game = contract.game_for(self._spec)
        self._rules = self._game.batch(self._spec, 1)  # Rules [1], a constant of the env

    # pgx's abstract methods ---------------------------------------------------------------

    def _init(self, key) -> State:
        game = self._game.init(self._rules)
        white = jax.random.bernoulli(key).astype(jnp.int32)  # which player id plays White
        order = jnp.stack([white, 1 - white])
        return self._wrap(game, order, jnp.int32(0))

    def _step(self, state: State, action, key) -> State:
        game = self._game.step(self._rules, state._game, jnp.asarray(action, jnp.int32)[None])
        return self._wrap(game, state._player_order, state._step_count)

    def _observe(self, state: State, player_id) -> jax.Array:
        # One view computed, not both (pgx observes the mover at every init and step); under
        # jax.vmap the cond becomes a select, as jnp.where would be.
        return jax.lax.cond(
            player_id == state.current_player,
            lambda game: self._game.observe(self._rules, game)[0],
            lambda game: self._game.observe_waiting(self._rules, game)[0],
            state._game,
        )

    @property
    def id(self) -> str:
        return self._spec

    @property
    def version(self) -> str:
        return VERSION

    @property
    def num_players(self) -> int:
        return 2

    # the project's own -----------------------------------------------------------------------

    @property
    def game(self) -> contract.Game:
        """The Game contract underneath (BOARD or RECON)."""
        return self._game

    @property
    def rules(self):
        """The variant's `Rules` [1], as the Game contract's functions take them."""
        return self._rules

    def sense_phase(self, state: State) -> jax.Array:
        """bool: the mover's next action is a sense (sensing variants; False otherwise)."""
        return self._game.sense_phase(_one(state._game))[0]

    def _wrap(self, game, order, step_count) -> State:
        """The pgx State of the contract's state `game` [1]."""
        inner = _first(game)
        white_reward, black_reward = inner.rewards[0], inner.rewards[1]
        rewards = (
            jnp.zeros(2, jnp.float32).at[order[0]].set(white_reward).at[order[1]].set(black_reward)
        )
        return State(
            current_player=order[inner.turn].astype(jnp.int32),
            observation=jnp.zeros(self._game.observation_shape, jnp.float32),  # set by init/step
            rewards=rewards,
            terminated=inner.terminated,
            truncated=jnp.bool_(False),
            legal_action_mask=self._game.legal_action_mask(self._rules, game)[0],
            _step_count=step_count,
            _player_order=order,
            _game=game,
            _spec=self._spec,
        )


def make(spec: str) -> Env:
    """The pgx Env of the variant `spec` (any spelling of the rule space, `rules.md`).
    ValueError, in one line, for a misspelt spec or a variant without a first move."""
    canonical = variants.canonical(spec)  # (a misspelt spec: its did-you-mean ValueError)
    if not variants.is_sense(canonical):
        from mmc_jax import rules as R

        if not R.is_playable(canonical):
            raise ValueError(f"{canonical} has no legal move in its start position: no env")
    return Env(canonical)


def board_svg(state: State, scale: float = 1.0) -> str:
    """SVG of the state's board(s) from their FENs: a batch side by side, White's pieces upper
    case, Black's lower case, rank 5 on top."""
    from mmc_jax import rules as R

    game = jax.device_get(state._game)
    sense = variants.is_sense(state._spec)
    batch = np.ndim(game.turn)  # leading axes: the env's own [1] and any vmap's
    flat = jax.tree.map(lambda x: np.asarray(x).reshape((-1,) + np.shape(x)[batch:]), game)
    count = len(flat.turn)
    cell, pad = 40 * scale, 10 * scale
    width = count * (5 * cell + pad) + pad
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" '
        f'height="{5 * cell + 2 * pad:.0f}">'
    ]
    for b in range(count):
        one = jax.tree.map(lambda x, b=b: x[b], flat)
        board = (R.recon_to_fen(one) if sense else R.to_fen(one)).split()[0]
        rows = notation.board_rows(board)
        x0 = pad + b * (5 * cell + pad)
        for row, text in enumerate(rows):
            for file, glyph in enumerate(text):
                x, y = x0 + file * cell, pad + row * cell
                shade = "#f0d9b5" if (file + row) % 2 == 0 else "#b58863"
                out.append(
                    f'<rect x="{x:.1f}" y="{y:.1f}" width="{cell:.1f}" height="{cell:.1f}" '
                    f'fill="{shade}"/>'
                )
                if glyph != ".":
                    out.append(
                        f'<text x="{x + cell / 2:.1f}" y="{y + cell * 0.7:.1f}" '
                        f'font-size="{cell * 0.6:.1f}" text-anchor="middle">{glyph}</text>'
                    )
    out.append("</svg>")
    return "".join(out)
